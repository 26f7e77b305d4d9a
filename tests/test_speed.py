"""The speed machinery: the pre-training data pipeline (off the training thread, same batches),
the GPU options' dispatch (checked on a CPU), torch.compile without graph breaks, gradient
checkpointing with identical results."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from helpers import TINY

from convexp.config.compose import compose_stage
from convexp.models import MaskedLM, ModelConfig
from convexp.models import attention as attention_module
from convexp.models.conv import depthwise_conv, lightweight_conv
from convexp.models.dropout import dropout
from convexp.models.encoder import Block, init_weights
from convexp.models.heads import cross_entropy
from convexp.train.accel import fused_adamw, on_cuda, pin_memory, prepare_encoders, set_tf32
from convexp.tasks.pretraining.batches import Masker, PositionBatches, Prefetched, StreamBatches, ValBatches
from convexp.train.common import step_seed
from convexp.tasks.pretraining.objectives import TokenInfo, mask_tokens, prediction_slots
from convexp.train.streams import PermutedStream, StreamSampler
from convexp.tasks.pretraining.chunks import COMPACT_COLUMNS

# Every token mixer of the papers, at toy size.
MIXERS = {
    "bert": dict(),
    "chang_composite": dict(fixed_conv=True, dynamic_conv=True),
    "chang_everything": dict(fixed_conv=True, dynamic_conv=True, key_conv=True, depthwise_conv=True, conv_qkv="qkv"),
    "chang_conv_only": dict(content_attention=False, fixed_conv=True, dynamic_conv=True),
    "convbert_sdconv": dict(mixer="mixed", conv_type="sdconv"),
    "convbert_dynamic": dict(mixer="mixed", conv_type="dynamic"),
    "convbert_conventional": dict(mixer="mixed", conv_type="conventional"),
    "convbert_bnk": dict(mixer="mixed", conv_type="none"),
}


def tiny_cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=60, hidden_size=32, num_heads=4, intermediate_size=64, num_layers=2,
                max_position_embeddings=64, kernel_size=5, pad_token_id=0)
    return ModelConfig(**{**base, **kw})


def make_block(name: str) -> Block:
    block = Block(tiny_cfg(**MIXERS[name]))
    block.apply(init_weights)  # a Block alone: the Encoder would initialise it
    return block


def keep_mask(B: int = 2, L: int = 16) -> torch.Tensor:
    keep = torch.ones(B, L, dtype=torch.bool)
    keep[1, 11:] = False
    return keep


# ----------------------------------------------------------------------------- data pipeline

INFO = TokenInfo(vocab_size=60, mask_id=4, special_ids=(0, 1, 2, 3, 4))
MASKING = dict(mask_prob=0.15, replace_mask=0.8, replace_random=0.1, whole_word=False,
               exact_count=False, max_predictions=None)


def rows(n: int = 50, L: int = 12) -> list[dict]:
    """Compact rows (``chunks.py``): ids padded with 0, a real length, no segment B."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        length = L - int(torch.randint(0, 4, (), generator=g))
        ids = torch.randint(5, 60, (L,), generator=g) * (torch.arange(L) < length)
        out.append({"input_ids": ids.to(torch.int32), "length": torch.tensor(length), "b_start": torch.tensor(L)})
    return out


def test_pipeline_batches_equal_the_stream_masked_in_the_step():
    """Batch k of the pipeline = the stream's rows at its positions, masked by the generator the
    step used to seed (step_seed of the first position): a resumed run sees the same batches."""
    data, cols, B, seed = rows(), COMPACT_COLUMNS, 8, 7
    masker = Masker(INFO, **MASKING)
    stream = PermutedStream(data, seed, cols)
    batches = StreamBatches(stream, masker, seed)
    positions = PositionBatches(StreamSampler(start=16), B)  # resumed at step 2
    got = [batches[p] for p, _ in zip(positions, range(10))]  # 10 batches: crosses an epoch (n=50)
    for k, batch in enumerate(got):
        start = 16 + k * B
        expect = [stream[p] for p in range(start, start + B)]
        ids = torch.stack([e["input_ids"] for e in expect]).long()
        assert torch.equal(batch["input_ids"], ids)
        assert batch["attention_mask"].sum(1).tolist() == [int(e["length"]) for e in expect]
        assert batch["position"].tolist() == list(range(start, start + B))
        g = torch.Generator().manual_seed(step_seed(seed, start))
        masked, labels = mask_tokens(ids, INFO, g, 0.15, 0.8, 0.1, attention_mask=batch["attention_mask"])
        assert torch.equal(batch["masked"], masked) and torch.equal(batch["labels"], labels)
        assert batch["seed"] == step_seed(seed, start)  # the step's own draws: a host int, no device read
        assert batch["num_tokens"] == int(batch["attention_mask"].sum())
        assert batch["padded"] == bool((batch["attention_mask"] == 0).any())
        positions, slot_labels = prediction_slots(labels)
        assert torch.equal(batch["mlm_positions"], positions) and torch.equal(batch["mlm_labels"], slot_labels)


def test_validation_batches_have_fixed_masks():
    data, cols = rows(20), COMPACT_COLUMNS
    val = ValBatches(data, cols, 8, Masker(INFO, **MASKING), seed=3)
    assert len(val) == 3 and val[2]["input_ids"].shape == (4, 12)
    g = torch.Generator().manual_seed(step_seed(3, -1 - 1))
    masked, _ = mask_tokens(val[1]["input_ids"], INFO, g, 0.15, 0.8, 0.1, attention_mask=val[1]["attention_mask"])
    assert torch.equal(val[1]["masked"], masked) and torch.equal(val[1]["masked"], val[1]["masked"])


def test_prefetched_keeps_order_and_raises_the_producers_error():
    assert list(Prefetched(range(100), depth=3)) == list(range(100))

    def broken():
        yield 1
        raise ValueError("bad row")

    it = iter(Prefetched(broken()))
    assert next(it) == 1
    with pytest.raises(ValueError, match="bad row"):
        next(it)


def test_prefetched_thread_stops_when_the_consumer_stops():
    import threading

    it = iter(Prefetched(iter(int, 1), depth=2))  # an endless source
    assert next(it) == 0
    it.close()
    for _ in range(50):
        if not any(t.name == "convexp-prefetch" for t in threading.enumerate()):
            break
        threading.Event().wait(0.05)
    assert not any(t.name == "convexp-prefetch" for t in threading.enumerate())


def test_prefetched_close_stops_a_thread_whose_consumer_never_closed():
    """Lightning leaves the endless train stream's iterator open; close() (the data module's
    teardown) must still stop the producer before the interpreter exits."""
    import threading
    import time

    def slow_endless():
        n = 0
        while True:
            time.sleep(0.02)  # a batch being made when close() comes
            yield n
            n += 1

    pre = Prefetched(slow_endless(), depth=2)
    it = iter(pre)
    assert next(it) == 0  # consumer stops here without closing
    pre.close(timeout=5)
    assert not any(t.name == "convexp-prefetch" and t.is_alive() for t in threading.enumerate())


def test_pretrain_data_reads_ahead_in_a_thread_only_when_asked_and_teardown_stops_it():
    import threading

    from convexp.tasks.pretraining.stage import PretrainData

    def prefetching():
        return any(t.name == "convexp-prefetch" and t.is_alive() for t in threading.enumerate())

    data = PretrainData(None, None, 0, 2, 0, ("input_ids",), masker=None, background=True)  # a GPU run
    it = iter(data._prefetched(iter(int, 1)))
    next(it)
    assert prefetching()
    data.teardown("fit")
    assert not prefetching()
    inline = PretrainData(None, None, 0, 2, 0, ("input_ids",), masker=None, background=False)  # a CPU run
    source = iter(range(3))
    assert inline._prefetched(source) is source and not prefetching()


# ----------------------------------------------------------------------------- GPU options, on a CPU


def pretrain_cfg(*extra: str):
    return compose_stage("pretrain", [*TINY, *extra])


def test_fine_tuning_follows_the_fused_adamw_setting():
    from convexp.train.task_module import TaskModule

    hp = {"lr": 1e-4, "layerwise_lr_decay": None, "warmup_fraction": 0.1, "adam_betas": [0.9, 0.999],
          "adam_epsilon": 1e-8, "weight_decay": 0.0}  # fmt: skip

    def optimizer(setting):
        module = TaskModule(hp, 10, 0, fused_adamw=setting)
        module.model = torch.nn.Linear(4, 2)
        return module.configure_optimizers()["optimizer"]

    assert optimizer("auto").defaults["fused"] is True and not optimizer(False).defaults["fused"]


def _fit_tiny(precision: str, fused: bool, clip: float | None, callbacks=()):
    """Three AdamW steps of a small regression through Lightning with convexp's OptimizerStep."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from convexp.train.common import OptimizerStep

    class Tiny(OptimizerStep, pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def training_step(self, batch, i):
            x, y = batch
            return F.mse_loss(self.net(x).float().squeeze(-1), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=0.05, fused=fused or None)

    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 8, generator=g) * torch.tensor([1.0, 10.0, 0.1]).repeat_interleave(4)[:, None]
    data = DataLoader(TensorDataset(x, torch.randn(12, generator=g)), batch_size=4)
    module = Tiny()
    trainer = pl.Trainer(
        max_steps=3, precision=precision, gradient_clip_val=clip, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", callbacks=list(callbacks),
    )  # fmt: skip
    trainer.fit(module, data)
    return module


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fused_adamw_clips_like_the_unfused_one_and_gradients_are_freed_after_the_step(precision):
    fused = _fit_tiny(precision, True, 0.5)
    unfused = _fit_tiny(precision, False, 0.5)
    unclipped = _fit_tiny(precision, True, None)
    for a, b, c in zip(fused.parameters(), unfused.parameters(), unclipped.parameters()):
        assert torch.allclose(a, b, atol=1e-6)  # Lightning refuses this clipping; convexp does it
    assert any(not torch.allclose(a, c, atol=1e-4) for a, c in zip(fused.parameters(), unclipped.parameters()))
    assert all(p.grad is None for p in fused.parameters())  # not held until the next forward


def test_clipping_reuses_the_divergence_checks_gradient_norm_to_the_bit(monkeypatch):
    from convexp.train.health import Health

    alone = _fit_tiny("32-true", True, 0.5)  # no check: clip_grad_norm_ computes its own norm
    computed = []
    get_total_norm = torch.nn.utils.get_total_norm
    monkeypatch.setattr(torch.nn.utils, "get_total_norm", lambda *a, **k: computed.append(1) or get_total_norm(*a, **k))
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: pytest.fail("the norm was computed twice"))
    checked = _fit_tiny("32-true", True, 0.5, [Health()])
    assert len(computed) == 3  # once a step, by the check
    assert all(torch.equal(a, b) for a, b in zip(alone.parameters(), checked.parameters()))


def test_the_gradient_norm_and_clipping_work_on_a_torch_without_their_split(monkeypatch):
    from convexp.train.grad_norm import clip_with_norm, total_norm

    def clipped():  # the same gradients each call, clipped to norm 1: (their norm before, the params)
        g = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n, generator=g)) for n in (5, 300, 7)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g) * 3
        norm = total_norm([p.grad for p in params])
        clip_with_norm(params, 1.0, norm)
        return norm, params

    new_norm, new = clipped()
    monkeypatch.delattr(torch.nn.utils, "get_total_norm")  # torch < 2.6
    monkeypatch.delattr(torch.nn.utils, "clip_grads_with_norm_")
    old_norm, old = clipped()
    assert new_norm > 1.0 and torch.allclose(old_norm, new_norm, rtol=1e-6)
    assert all(torch.allclose(a.grad, b.grad, rtol=1e-6) for a, b in zip(old, new))
    assert torch.allclose(total_norm([p.grad for p in old]), torch.tensor(1.0), rtol=1e-5)


def test_heap_mmap_threshold_is_set_while_fine_tuning_and_left_at_glibcs_ceiling(monkeypatch):
    from convexp.train import accel

    calls = []
    monkeypatch.setattr(accel, "_glibc", lambda: type("libc", (), {"mallopt": lambda _, k, v: calls.append((k, v))})())
    with accel.heap_mmap_threshold(1):
        assert calls == [(accel.M_MMAP_THRESHOLD, 2**20)]
    assert calls[-1] == (accel.M_MMAP_THRESHOLD, 32 * 2**20)
    calls.clear()
    with accel.heap_mmap_threshold(None):  # null: glibc's own, untouched
        pass
    assert calls == []
    assert accel._glibc() is None or hasattr(accel._glibc(), "mallopt")  # the real one loads here


def test_the_heap_is_glibcs_own_unless_a_run_gives_mib():
    rte = compose_stage("finetune", ["task=rte", "init=none", "model=bert_small"])
    squad = compose_stage("finetune", ["task=squad1", "init=none", "model=bert_small"])
    assert rte.malloc_mmap_threshold_mib is None and squad.malloc_mmap_threshold_mib is None
    two = compose_stage("finetune", ["task=rte", "init=none", "model=bert_small", "malloc_mmap_threshold_mib=2"])
    assert two.malloc_mmap_threshold_mib == 2


def test_bad_mmap_threshold_is_refused():
    from convexp.config.compose import ConfigError

    for bad in ("64", "0", "fast", "auto"):
        with pytest.raises(ConfigError, match=f"malloc_mmap_threshold_mib={bad}: give MiB"):
            compose_stage("finetune", ["task=rte", "init=none", "model=bert_small", f"malloc_mmap_threshold_mib={bad}"])


def test_gpu_run_gets_fused_adamw_pinned_batches_and_tf32():
    from convexp.tasks.pretraining.stage import PretrainModule

    gpu = pretrain_cfg("trainer.accelerator=gpu").trainer
    cpu = pretrain_cfg("trainer.accelerator=cpu").trainer
    assert on_cuda(gpu) and not on_cuda(cpu)
    assert pin_memory(gpu, True) and not pin_memory(cpu, False)
    # the fused AdamW kernel wherever PyTorch has one (CUDA and CPU), not elsewhere unless forced
    assert fused_adamw("auto", "cuda") and fused_adamw("auto", "cpu") and not fused_adamw("auto", "mps")
    forced = pretrain_cfg("trainer.accelerator=cpu", "trainer.fused_adamw=false", "trainer.pin_memory=false").trainer
    assert not fused_adamw(forced.fused_adamw, "cpu") and not pin_memory(forced, True)
    assert fused_adamw(True, "mps")

    opt = PretrainModule(tiny_cfg(), pretrain_cfg(), INFO, 10).configure_optimizers()["optimizer"]
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["fused"] is True
    off = pretrain_cfg("trainer.fused_adamw=false")
    assert not PretrainModule(tiny_cfg(), off, INFO, 10).configure_optimizers()["optimizer"].defaults["fused"]

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        set_tf32(cpu, cuda=False)  # a CPU run leaves the flags alone
        assert not torch.backends.cuda.matmul.allow_tf32
        set_tf32(gpu, cuda=True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        set_tf32(pretrain_cfg("trainer.tf32=false").trainer, cuda=True)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_bad_speed_option_is_one_line():
    from convexp.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.fused_adamw"):
        compose_stage("pretrain", [*TINY, "trainer.fused_adamw=sometimes"])


@pytest.mark.parametrize(
    "name, padded, expect",
    [
        ("bert", False, None),  # no mask: the flash kernel on CUDA
        ("bert", True, torch.bool),  # a padding mask only: memory-efficient kernel
        ("convbert_sdconv", False, None),
        ("convbert_sdconv", True, torch.bool),
        ("chang_composite", False, torch.float32),  # additive convolution terms
        ("chang_conv_only", False, "unfused"),  # no q kᵀ term: not an attention SDPA can compute
    ],
)
def test_attention_dispatch(monkeypatch, name, padded, expect):
    calls = []
    sdpa = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **kw):
        calls.append(None if attn_mask is None else attn_mask.dtype)
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", recording)
    block = make_block(name).eval()
    block(torch.randn(2, 16, 32), keep_mask() if padded else None)
    assert calls == ([] if expect == "unfused" else [expect])


def test_unpadded_attention_runs_on_the_flash_kernel():
    """What CUDA would pick for an unpadded BERT / ConvBERT batch: the flash backend alone
    accepts the call (its CPU implementation here)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name in ("bert", "convbert_sdconv"):
        block = make_block(name).eval()
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), torch.inference_mode():
            block(torch.randn(2, 16, 32), None)


def test_every_mixer_works_under_bf16_autocast():
    for name, kw in MIXERS.items():
        model = MaskedLM(tiny_cfg(**kw))
        ids = torch.randint(5, 60, (2, 16))
        labels = torch.where(torch.rand(2, 16) < 0.3, ids, torch.full_like(ids, -100))
        labels[0, 0] = ids[0, 0]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(ids, keep_mask().long(), labels=labels).loss
        loss.backward()
        assert torch.isfinite(loss), name


# ----------------------------------------------------------------------------- CPU kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_dropout_keeps_one_minus_p_scaled_and_its_gradient_is_the_mask(dtype):
    x = torch.ones(1_000_000, dtype=dtype, requires_grad=True)
    torch.manual_seed(0)
    y = dropout(x, 0.1)
    scale = torch.tensor(1 / 0.9, dtype=dtype)
    assert set(y.detach().unique().tolist()) == {0.0, scale.item()}
    kept = (y != 0).double().mean().item()
    assert abs(kept - 0.9) < 0.002  # binomial sd 0.0003
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 0.1), y), "the masks are a function of torch's seed"
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0) is x
    assert not dropout(x, 1.0).any()


def test_training_attention_on_cpu_is_the_same_attention_with_cheaper_masks(monkeypatch):
    """In training on CPU, attention runs unfused with :func:`dropout`'s masks (torch's CPU
    kernel would run unfused too, with ``bernoulli_``); without the masks it equals eval."""
    monkeypatch.setattr(attention_module, "apply_dropout", lambda x, p: x)
    calls, sdpa = [], F.scaled_dot_product_attention
    recording = lambda *a, **k: calls.append(1) or sdpa(*a, **k)  # noqa: E731
    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", recording)
    for name in MIXERS:
        block = make_block(name)
        block.dropout.p = 0.0  # hidden dropout off; attention dropout on (p = 0.1)
        x = torch.randn(2, 16, 32)
        calls.clear()
        trained = block.train()(x, keep_mask())
        assert calls == [], name
        torch.testing.assert_close(trained, block.eval()(x, keep_mask()), msg=name)


@pytest.mark.parametrize("bias", [False, True])
def test_depthwise_conv_matches_conv1d_in_fp32_and_under_bf16_autocast(bias):
    """A channels-last conv2d over x's own memory; on CPU in fp32 even under autocast."""
    x = torch.randn(3, 20, 16, requires_grad=True)
    w = torch.randn(16, 5, requires_grad=True)
    b = torch.randn(16, requires_grad=True) if bias else None
    ref = F.conv1d(x.transpose(1, 2), w.unsqueeze(1), b, padding=2, groups=16).transpose(1, 2)
    ref_grads = torch.autograd.grad(ref.square().sum(), [x, w])
    y = depthwise_conv(x, w, b)
    torch.testing.assert_close(y, ref)
    for got, want in zip(torch.autograd.grad(y.square().sum(), [x, w]), ref_grads):
        torch.testing.assert_close(got, want)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y16 = depthwise_conv(x.bfloat16(), w, b)
    assert y16.dtype == torch.bfloat16
    torch.testing.assert_close(y16, depthwise_conv(x.bfloat16().float(), w, b).bfloat16())


def test_lightweight_conv_backward_is_the_gradient():
    """SDConv's hand-written backward against numerical gradients, and mixed dtypes as under
    bf16 autocast (bf16 values, fp32 softmax kernel): computed in fp32, gradients in each dtype."""
    v = torch.randn(2, 7, 3, 4, dtype=torch.float64, requires_grad=True)
    kernel = torch.randn(2, 7, 3, 5, dtype=torch.float64).softmax(-1).requires_grad_()
    assert torch.autograd.gradcheck(lightweight_conv, (v, kernel))
    v16 = v.detach().bfloat16().requires_grad_()
    k32 = kernel.detach().float().requires_grad_()
    out = lightweight_conv(v16, k32)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert v16.grad.dtype == torch.bfloat16 and k32.grad.dtype == torch.float32
    torch.testing.assert_close(out, lightweight_conv(v16.detach().float(), k32.detach()))


def test_masked_lm_cross_entropy_equals_torchs_and_its_gradient():
    labels = torch.randint(0, 11, (5,))
    logits = torch.randn(5, 11, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: cross_entropy(x, labels), (logits,))
    x16 = (logits.detach() * 4).bfloat16().requires_grad_()  # the head's logits under bf16 autocast
    ours, theirs = cross_entropy(x16, labels), F.cross_entropy(x16.float(), labels)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(*(torch.autograd.grad(loss, x16)[0] for loss in (ours, theirs)))


# ----------------------------------------------------------------------------- torch.compile


@pytest.mark.slow  # torch.compile of every mixer: ~90 s of the default tier's 2 cores
@pytest.mark.parametrize("name", list(MIXERS))
def test_every_mixer_block_compiles_without_graph_breaks(name):
    """fullgraph=True fails on any graph break; aot_eager traces the backward too."""
    torch._dynamo.reset()
    block = make_block(name).train()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    for keep in (None, keep_mask()):
        x = torch.randn(2, 16, 32, requires_grad=True)
        compiled(x, keep).sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.slow  # torch.compile of whole objectives
@pytest.mark.parametrize("objective,mixer", [("electra", "convbert_sdconv"), ("electra", "bert"),
                                             ("mlm", "chang_composite")])  # fmt: skip
def test_whole_pretraining_objective_compiles_without_graph_breaks(objective, mixer):
    """trainer.compile=step|graphs compiles the objective's forward whole (generator, sampling,
    discriminator, losses, metrics): nothing in it may read the device back or break the graph,
    padded batches or not."""
    from convexp.tasks.pretraining.objectives import ElectraObjective, MLMObjective

    torch._dynamo.reset()
    cfg = tiny_cfg(**MIXERS[mixer])
    obj = ElectraObjective(cfg, 0.5) if objective == "electra" else MLMObjective(cfg)
    masker = Masker(INFO, **{**MASKING, "exact_count": True, "max_predictions": 4})
    compiled = torch.compile(obj, fullgraph=True, dynamic=False, backend="aot_eager")
    for padded in (False, True):
        ids = torch.randint(5, 60, (2, 16))
        am = torch.ones_like(ids)
        if padded:
            ids[1, 12:], am[1, 12:] = 0, 0
        batch = masker({"input_ids": ids, "attention_mask": am, "token_type_ids": torch.zeros_like(ids)}, 5)
        assert batch["padded"] == padded
        out = compiled({k: v for k, v in batch.items() if isinstance(v, torch.Tensor) or k == "padded"})
        out.loss.backward()
        assert torch.isfinite(out.loss) and all(torch.isfinite(v) for v in out.metrics.values())


@pytest.mark.slow
def test_compiled_blocks_of_an_electra_objective_stay_compiled_in_every_variant():
    """ELECTRA's generator and discriminator blocks share one compiled Block.forward, in variants
    by width, input dtype, padding and grad mode: 16 here (on a GPU under autocast the first
    block's bf16 input and the others' fp32 ones make 16 in training alone), past dynamo's
    default limit of 8, after which it runs eager. trainer.compile=blocks keeps them all compiled."""
    from convexp.models.encoder import Block
    from convexp.tasks.pretraining.objectives import ElectraObjective

    torch._dynamo.reset()
    cfg = tiny_cfg(**MIXERS["convbert_sdconv"], num_layers=3)
    obj = ElectraObjective(cfg, 0.5)
    prepare_encoders(obj, pretrain_cfg("trainer.compile=blocks").trainer, backend="aot_eager")
    masker = Masker(INFO, **{**MASKING, "exact_count": True, "max_predictions": 4})
    for training, padded, bf16 in itertools.product((True, False), repeat=3):
        obj.train(training)
        ids = torch.randint(5, 60, (2, 16))
        am = torch.ones_like(ids)
        if padded:
            ids[1, 12:], am[1, 12:] = 0, 0
        batch = masker({"input_ids": ids, "attention_mask": am, "token_type_ids": torch.zeros_like(ids)}, 5)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), torch.set_grad_enabled(training):
            obj(batch)
    entries = len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(Block.forward.__code__))
    assert 8 < entries < torch._dynamo.config.recompile_limit  # every variant compiled, none run eager
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("pruning", ["none", "topk"])
def test_fine_tuning_compiles_its_blocks_and_checkpoints_them_with_the_same_gradients(pruning):
    """Fine-tuning honours trainer.compile (its blocks, for step and graphs too: its batches change
    shape) and trainer.gradient_checkpointing, movement pruning's masks included: the same loss
    and gradients as eager."""
    from convexp.models import SequenceClassifier
    from convexp import pruning as pruner

    torch._dynamo.reset()
    cfg = tiny_cfg(**MIXERS["convbert_sdconv"], hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    models = [SequenceClassifier(cfg, 3), SequenceClassifier(cfg, 3)]
    models[1].load_state_dict(models[0].state_dict())
    if pruning != "none":
        for m in models:
            pruner.prune(m, pruning, threshold=0.5)
    trainer = pretrain_cfg("trainer.compile=graphs", "trainer.gradient_checkpointing=true").trainer
    prepare_encoders(models[1], trainer, backend="aot_eager", whole_step=False)
    assert models[1].encoder.gradient_checkpointing
    ids, labels = torch.randint(5, 60, (2, 16)), torch.tensor([0, 2])
    losses = []
    for m in models:
        m.train()
        loss = m(ids, keep_mask().long(), labels=labels).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
    for (n, a), b in zip(models[0].named_parameters(), models[1].parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)
    from convexp.models.encoder import Block

    assert torch._C._dynamo.eval_frame._debug_get_cache_entry_list(Block.forward.__code__)  # compiled
    torch._dynamo.reset()


def test_a_cpu_runs_checkpoints_hold_when_cuda_comes_up_inside_a_block(monkeypatch):
    """On a GPU host dynamo brings CUDA up as it compiles a block inside a checkpoint (seen on an
    H200); a CPU run's gradient checkpointing keeps the CPU's random state and does not mind."""
    import torch.utils.checkpoint
    from convexp.models import SequenceClassifier
    from convexp.models.encoder import Block

    monkeypatch.setattr(torch.utils.checkpoint.DefaultDeviceType, "_default_device_type", "cuda")
    cfg = tiny_cfg(**MIXERS["convbert_sdconv"])
    model = SequenceClassifier(cfg, 3)
    prepare_encoders(model, pretrain_cfg("trainer.gradient_checkpointing=true").trainer)
    forward = Block.forward

    def cuda_comes_up(self, *args):
        monkeypatch.setattr(torch.cuda, "_initialized", True)
        return forward(self, *args)

    monkeypatch.setattr(Block, "forward", cuda_comes_up)
    model.train()
    model(torch.randint(5, 60, (2, 16)), keep_mask().long(), labels=torch.tensor([0, 2])).loss.backward()
    assert all(p.grad is not None for p in model.encoder.layers.parameters())


@pytest.mark.parametrize("K", [3, 9, 17])
def test_band_form_of_the_lightweight_conv_equals_the_shifted_sum(K):
    """The GPU form (banded matrix, one batched product) computes the CPU form's sum and gradients
    at every length, kernels longer than the sequence included."""
    from convexp.models.conv import _LightweightConv, band_conv

    for L in (1, 5, 16, 40):
        v = torch.randn(2, L, 3, 4, dtype=torch.float64, requires_grad=True)
        kernel = torch.randn(2, L, 3, K, dtype=torch.float64).softmax(-1).requires_grad_()
        a, b = band_conv(v, kernel), _LightweightConv.apply(v, kernel)
        torch.testing.assert_close(a, b)
        g = torch.randn_like(a)
        for ga, gb in zip(torch.autograd.grad(a, (v, kernel), g), torch.autograd.grad(b, (v, kernel), g)):
            torch.testing.assert_close(ga, gb)


def test_band_form_under_bf16_autocast_is_the_fp32_sum_to_bf16_tolerance():
    from convexp.models.conv import _LightweightConv, band_conv

    torch.manual_seed(0)
    v, kernel = torch.randn(4, 128, 2, 64), torch.randn(4, 128, 2, 9).softmax(-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = band_conv(v.bfloat16(), kernel)
    exact = _LightweightConv.apply(v, kernel)
    assert fast.dtype == torch.bfloat16
    assert ((fast.float() - exact).norm() / exact.norm()) < 1e-2


def test_masked_lm_cross_entropy_leaves_out_unused_slots():
    torch.manual_seed(0)
    logits = torch.randn(12, 50, requires_grad=True)
    labels = torch.randint(0, 50, (12,))
    labels[[2, 5, 11]] = -100
    ours = cross_entropy(logits, labels)
    (g_ours,) = torch.autograd.grad(ours, logits)
    ref = F.cross_entropy(logits, labels)
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)
    none = torch.full((12,), -100)
    assert cross_entropy(logits, none).item() == 0.0  # no labelled row: 0, not NaN


@pytest.mark.slow
def test_compiled_training_step_matches_eager():
    """trainer.compile=true (inductor) on ConvBERT SDConv: the same loss and gradients."""
    cfg = tiny_cfg(**MIXERS["convbert_sdconv"], hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    eager = MaskedLM(cfg)
    compiled = MaskedLM(cfg)
    compiled.load_state_dict(eager.state_dict())
    prepare_encoders(compiled, pretrain_cfg("trainer.compile=true").trainer)
    ids = torch.randint(5, 60, (2, 16))
    labels = torch.where(torch.rand(2, 16) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 0] = ids[0, 0]
    losses = []
    for model in (eager, compiled):
        loss = model(ids, keep_mask().long(), labels=labels).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
    for (n, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)
    assert set(eager.state_dict()) == set(compiled.state_dict())  # checkpoints keep their keys


# ----------------------------------------------------------------------------- gradient checkpointing


@pytest.mark.parametrize("name", ["bert", "chang_composite", "convbert_sdconv"])
def test_gradient_checkpointing_gives_identical_outputs_and_gradients(name):
    """Dropout on: the recomputation replays the RNG state, so the results are bit-identical."""
    cfg = tiny_cfg(**MIXERS[name], hidden_dropout=0.1, attention_dropout=0.1)
    torch.manual_seed(0)
    plain = MaskedLM(cfg).train()
    ckpt = MaskedLM(cfg).train()
    ckpt.load_state_dict(plain.state_dict())
    prepare_encoders(ckpt, pretrain_cfg("trainer.gradient_checkpointing=true").trainer)
    assert ckpt.encoder.gradient_checkpointing and not plain.encoder.gradient_checkpointing
    ids = torch.randint(5, 60, (2, 16))
    labels = torch.where(torch.rand(2, 16) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 0] = ids[0, 0]
    out = []
    for model in (plain, ckpt):
        torch.manual_seed(1)
        res = model(ids, keep_mask().long(), labels=labels)
        res.loss.backward()
        out.append(res)
    assert torch.equal(out[0].logits, out[1].logits) and torch.equal(out[0].loss, out[1].loss)
    for (n, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        assert torch.equal(a.grad, b.grad), n


def test_the_word_gradient_is_kept_on_one_cpu_process_only():
    from convexp.train.accel import kept_word_grad

    assert kept_word_grad("cpu", 1)
    assert not kept_word_grad("cuda", 1)  # the caching allocator reuses the memory
    assert not kept_word_grad("cpu", 2)  # DDP reduces its own buckets


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_kept_word_gradient_trains_like_a_fresh_one_each_step(monkeypatch, accumulate):
    """A few GLUE steps with the word embedding's gradient kept in one buffer (a CPU run's default)
    and with a fresh dense one each step: the same weights, so the rows each window wrote are zeroed
    before the next (the batches look up different tokens); the buffer is the same tensor at every
    step and is let go after the fit."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    from convexp.tasks.classification.registry import get_task
    from convexp.models import ModelConfig
    from convexp.train import task_module
    from convexp.tasks.classification.stage import FinetuneModule

    hp = {"lr": 1e-3, "layerwise_lr_decay": None, "warmup_fraction": 0.0, "adam_betas": [0.9, 0.999],
          "adam_epsilon": 1e-8, "weight_decay": 0.01, "batch_size": 4}  # fmt: skip
    cfg = ModelConfig(vocab_size=60, hidden_size=16, num_heads=2, intermediate_size=32, num_layers=2)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(2, 60, (16, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[8:, 5:] = 0
    batches = [
        {"input_ids": ids[i : i + 4], "attention_mask": mask[i : i + 4], "token_type_ids": 0 * ids[i : i + 4],
         "labels": torch.arange(i, i + 4) % 2, "first_position": torch.tensor(i)}  # fmt: skip
        for i in range(0, 16, 4)
    ]

    class Watch(pl.Callback):
        def __init__(self):
            self.grads = []

        def on_before_optimizer_step(self, trainer, module, optimizer):
            g = module.model.encoder.embeddings.word.weight.grad
            self.grads.append((g.data_ptr(), g.layout, float(g.norm())))

    def fit(kept: bool):
        monkeypatch.setattr(task_module, "kept_word_grad", lambda *a: kept)
        torch.manual_seed(0)
        module = FinetuneModule(cfg, get_task("sst2"), hp, 4, 0)
        watch = Watch()
        trainer = pl.Trainer(
            max_steps=4 // accumulate, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, accelerator="cpu", callbacks=[watch], gradient_clip_val=1.0,
            accumulate_grad_batches=accumulate,
        )  # fmt: skip
        trainer.fit(module, DataLoader(batches, batch_size=None))
        return module, watch.grads

    kept, kept_grads = fit(True)
    fresh, fresh_grads = fit(False)
    assert len({ptr for ptr, _, _ in kept_grads}) == 1  # one buffer for every step
    assert all(layout == torch.strided for _, layout, _ in kept_grads)  # dense for clipping and AdamW
    assert [n for *_, n in kept_grads] == pytest.approx([n for *_, n in fresh_grads], rel=1e-5)
    for (name, a), b in zip(kept.named_parameters(), fresh.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
    word = kept.model.encoder.embeddings.word
    assert not word.sparse and word.weight.grad is None and kept._word_grad is None
    assert not word.weight._backward_hooks and not kept._word_rows

    class Stop(pl.Callback):  # a fit that raises (as a diverged one does) never reaches on_fit_end
        def on_train_batch_end(self, *args):
            raise RuntimeError("stop")

    def fit_once(callbacks):
        pl.Trainer(
            max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, accelerator="cpu", callbacks=callbacks,
        ).fit(kept, DataLoader(batches, batch_size=None))  # fmt: skip

    monkeypatch.setattr(task_module, "kept_word_grad", lambda *a: True)
    with pytest.raises(RuntimeError, match="stop"):
        fit_once([Stop()])
    assert len(word.weight._backward_hooks) == 1  # still held after the raise
    fit_once([])  # the next fit on the same module takes it over
    assert not word.sparse and not word.weight._backward_hooks and kept._word_grad is None


@pytest.mark.slow
def test_bench_pretrain_profiles_the_stage_step_by_phase(tmp_path, monkeypatch):
    """`bench pretrain --profile --no-bare`: the stage alone, its steps timed by Lightning hook (every
    phase present, adding up to about the step) and one window under torch.profiler."""
    from convexp.bench.pretrain import bench_pretrain
    from convexp.bench.stage_profile import PHASE_STEPS, PHASES

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "out"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    record = bench_pretrain([*TINY, "trainer.max_steps=45"], steps=2, record_dir=tmp_path, profile=True, bare=False)
    assert record["bare_steps_per_s"] is None and record["ratio"] is None and record["stage_steps_per_s"] > 0
    prof = record["stage_profile"]
    assert prof["steps"] == PHASE_STEPS and list(prof["phases_ms"]) == list(PHASES)
    assert all(ms is not None and ms >= 0 for ms in prof["phases_ms"].values())
    assert 0.5 * prof["step_ms"] < sum(prof["phases_ms"].values()) < 1.5 * prof["step_ms"]
    assert prof["top_host_ops"] and "kernels_per_step" not in prof  # no device kernels on a CPU


def _stage(tmp_path, name: str, *extra: str):
    from convexp.tasks.pretraining.runs import pretrain_run
    from convexp.tasks.pretraining.stage import run_pretrain

    cfg = compose_stage(
        "pretrain", [*TINY, "objective=electra", "trainer.max_steps=12", "trainer.val_every_n_steps=6",
                     "logger.mode=disabled", f"outputs={tmp_path / name}", *extra],
    )  # fmt: skip
    return run_pretrain(cfg, pretrain_run(cfg))


@pytest.mark.slow
def test_whole_step_path_trains_as_lightnings_own_loop(tmp_path, monkeypatch):
    """The captured step's path (trainer.compile=whole on one GPU: captured.WholeStep, AdamW and the
    schedule stepped by the module under Lightning's manual optimisation), run eagerly on a CPU,
    gives what Lightning's automatic loop gives: the same losses, steps and weights (ELECTRA,
    clipping at 1.0, the linear schedule with warm-up)."""
    import json

    from safetensors.torch import load_file

    import convexp.tasks.pretraining.stage as stage

    auto = _stage(tmp_path, "auto")
    monkeypatch.setattr(stage, "whole_step_applies", lambda trainer_cfg, cuda: True)
    calls = []
    step = stage.WholeStep.__call__
    monkeypatch.setattr(stage.WholeStep, "__call__", lambda self, batch: calls.append(1) or step(self, batch))
    whole = _stage(tmp_path, "whole")
    assert len(calls) == 12
    a, w = (json.loads((r.dir / "metrics.json").read_text()) for r in (auto, whole))
    assert a["steps"] == w["steps"] == 12
    for key in ("final_train_loss", "val_loss", "val_mlm_loss"):
        assert w[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key
    wa, ww = (load_file(next(r.model_dir.glob("*.safetensors"))) for r in (auto, whole))
    assert wa.keys() == ww.keys()
    for k in wa:
        torch.testing.assert_close(ww[k], wa[k], rtol=1e-4, atol=1e-6, msg=k)


@pytest.mark.slow
def test_whole_step_path_still_catches_divergence(tmp_path, monkeypatch):
    """Under the captured step's path a non-finite step is still caught and never finished."""
    import convexp.tasks.pretraining.stage as stage
    from convexp.store.runs import RunDiverged

    monkeypatch.setattr(stage, "whole_step_applies", lambda trainer_cfg, cuda: True)
    with pytest.raises(RunDiverged, match="non-finite"):
        _stage(tmp_path, "nan", "optim.lr=1e6")
    assert not list((tmp_path / "nan").rglob("metrics.json"))


def test_the_whole_step_is_captured_only_where_the_capture_is_valid():
    """trainer.compile=whole captures on one CUDA device without accumulation or fp16 scaling;
    elsewhere it is graphs (and graphs itself never changes path)."""
    from convexp.train.captured import whole_step_applies

    def applies(*extra, cuda=True):
        return whole_step_applies(pretrain_cfg("trainer.compile=whole", *extra).trainer, cuda)

    assert applies() and applies("trainer.precision=bf16-mixed")
    assert not applies(cuda=False)
    assert not applies("trainer.devices=2") and not applies("trainer.num_nodes=2")
    assert not applies("trainer.accumulate_grad_batches=2") and not applies("trainer.precision=16-mixed")
    assert not whole_step_applies(pretrain_cfg("trainer.compile=graphs").trainer, True)
