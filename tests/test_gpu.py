"""The GPU tier (``pytest -m gpu``): what only a CUDA device can show. Skipped where none is visible;
`.ci/gpu run` runs it on a GPU machine beside the default suite.

Every stage in bf16 on the GPU (pre-training MLM and ELECTRA, GLUE, SQuAD, fine-pruning), the
options that only act there (fused AdamW, pinned batches, the SDPA kernels, compiled steps, DDP),
a killed GPU run resuming, a diverged one caught, the lightweight convolution's GPU form, and
pre-training and fine-tuning steps that never wait for the device between logging steps."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import warnings

import pytest
import torch
from helpers import TINY, convexp, kill_between_checkpoints, run_dirs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible"),
]

GPU = ["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"]
QUIET = {"WANDB_MODE": "disabled"}


def metrics(run) -> dict:
    return json.loads((run / "metrics.json").read_text())


def finished(res, outputs, stage="pretrain"):
    assert res.returncode == 0, res.stderr[-4000:]
    [run] = sorted((outputs / "runs" / stage).glob("*"))
    m = metrics(run)
    values = [v for d in (m, m.get("metrics", {})) for v in d.values() if isinstance(v, float)]
    assert values and all(v == v for v in values), m  # no NaN
    return run, m


# ----------------------------------------------------------------------------- every stage on the GPU


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_bf16_pretraining_on_the_gpu(tmp_path, objective):
    res = convexp("pretrain", *TINY, *GPU, f"objective={objective}", "trainer.max_steps=12",
                  "trainer.val_every_n_steps=6", outputs=tmp_path, env=QUIET)  # fmt: skip
    _, m = finished(res, tmp_path)
    assert m["steps"] == 12 and m["val_loss"] > 0 and m["tokens_per_s"] > 0


def test_glue_finetuning_and_fine_pruning_on_the_gpu(tmp_path, pretrained):
    fast = ["scale=smoke", "glue.synthetic_size=160", "epochs=2", "batch_size=16", "task.max_len=48"]
    res = convexp("finetune", "glue", "task=sst2", f"init={pretrained}", *fast, *GPU, outputs=tmp_path / "a",
                  env=QUIET)  # fmt: skip
    _, m = finished(res, tmp_path / "a", "finetune")
    assert m["eval_device"].startswith("cuda")  # the test split too, not on the host after teardown
    res = convexp("finetune", "glue", "task=sst2", f"init={pretrained}", *fast, *GPU, "pruning=movement",
                  outputs=tmp_path / "b", env=QUIET)  # fmt: skip
    _, m = finished(res, tmp_path / "b", "finetune")
    assert m["remaining_weights"] < 50


def test_squad_on_the_gpu(tmp_path, pretrained):
    args = ["finetune", "squad", "task=squad1", f"init={pretrained}", "scale=smoke", "squad.synthetic_size=200",
            "epochs=1", "squad.max_len=96", *GPU]  # fmt: skip
    res = convexp(*args, outputs=tmp_path, env=QUIET)
    _, m = finished(res, tmp_path, "finetune")
    assert m["eval_device"].startswith("cuda")  # Lightning's teardown moves the model to the CPU


def test_ddp_strategy_on_one_gpu(tmp_path):
    res = convexp("pretrain", *TINY, *GPU, "trainer.max_steps=6", "trainer.val_every_n_steps=6",
                  "trainer.strategy=ddp", "trainer.devices=1", outputs=tmp_path, env=QUIET)  # fmt: skip
    _, m = finished(res, tmp_path)
    assert m["steps"] == 6


@pytest.mark.parametrize("mode", ["blocks", "graphs"])
def test_compiled_pretraining_on_the_gpu(tmp_path, mode):
    res = convexp("pretrain", *TINY, *GPU, "objective=electra", "model=convbert_small", f"trainer.compile={mode}",
                  "trainer.max_steps=12", "trainer.val_every_n_steps=6", outputs=tmp_path, env=QUIET)  # fmt: skip
    _, m = finished(res, tmp_path)
    assert m["steps"] == 12


# ----------------------------------------------------------------------------- reliability


def test_a_killed_gpu_run_resumes_to_the_same_metrics(tmp_path):
    """GPU kernels (atomics in some backward passes) are not bitwise deterministic: the resumed run
    matches the uninterrupted one to a tolerance, not exactly as on the CPU."""
    # killed after the first checkpoint (step 20), hundreds of steps before the end: a GPU is fast
    steps = [*TINY, *GPU, "trainer.max_steps=600", "trainer.checkpoint_every_n_steps=20", "trainer.val_every_n_steps=300"]
    ref = convexp("pretrain", *steps, outputs=tmp_path / "ref", env=QUIET)
    _, a = finished(ref, tmp_path / "ref")
    kill_between_checkpoints(["pretrain", *steps], tmp_path / "killed", tmp_path / "hold")
    [run] = run_dirs(tmp_path / "killed")
    assert not (run / "metrics.json").exists(), "the run finished before it could be killed"
    res = convexp("pretrain", *steps, outputs=tmp_path / "killed", env=QUIET)
    _, b = finished(res, tmp_path / "killed")
    assert b["steps"] == 600
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=2e-2)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=2e-2)


def test_a_diverged_gpu_run_is_caught_and_never_checkpointed(tmp_path):
    """The check stays on the device between reads (every log_every_n_steps = 5 here) and is read
    before every checkpoint (every 3 steps): the run is diverged, and the last checkpoint is finite."""
    res = convexp("pretrain", *TINY, *GPU, "optim.lr=1e6", "trainer.max_steps=40", "trainer.checkpoint_every_n_steps=3",
                  outputs=tmp_path, env=QUIET)  # fmt: skip
    assert res.returncode != 0 and "diverged" in res.stderr and "Traceback" not in res.stderr, res.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "diverged" and not (run / "metrics.json").exists()
    last = run / "checkpoints" / "last.ckpt"
    if last.exists():
        ckpt = torch.load(last, map_location="cpu", weights_only=False)
        assert ckpt["global_step"] < status["diverged"]["step"]
        assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


# ----------------------------------------------------------------------------- what each option turns on


def _module(*over):
    from convexp.config.compose import compose_stage, to_model_config
    from convexp.tasks.pretraining.objectives import TokenInfo
    from convexp.tasks.pretraining.stage import PretrainModule

    cfg = compose_stage("pretrain", [*TINY, *GPU, *over])
    info = TokenInfo(vocab_size=400, mask_id=4, special_ids=(0, 1, 2, 3, 4))
    model_cfg = dataclasses.replace(to_model_config(cfg.model), vocab_size=400, pad_token_id=0)
    return cfg, PretrainModule(model_cfg, cfg, info, 100)


def _batch(module, B=8, L=32, padded=False, seed=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 400, (B, L), generator=g)
    ids[:, 0] = 2
    am = torch.ones_like(ids)
    if padded:
        ids[0, L // 2 :], am[0, L // 2 :] = 0, 0
    batch = module.mask({"input_ids": ids, "attention_mask": am, "token_type_ids": torch.zeros_like(ids)}, seed)
    return {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def test_fused_adamw_on_cuda():
    _, module = _module()
    module.cuda()
    opt = module.configure_optimizers()["optimizer"]
    assert opt.defaults["fused"] is True


def test_pinned_batches_on_cuda():
    from torch.utils.data import DataLoader

    from convexp.train.accel import on_cuda, pin_memory

    cfg, module = _module()
    assert pin_memory(cfg.trainer, on_cuda(cfg.trainer))
    rows = [{"input_ids": torch.arange(32), "attention_mask": torch.ones(32, dtype=torch.long)} for _ in range(16)]
    batch = next(iter(DataLoader(rows, batch_size=8, pin_memory=True)))
    assert batch["input_ids"].is_pinned()


@pytest.mark.parametrize("padded", [False, True])
def test_attention_reaches_flash_unpadded_and_memory_efficient_with_a_mask(padded):
    """Restricted to one SDPA backend, the attention must still run: flash for an unpadded batch
    (no mask), memory-efficient with the padding mask."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from convexp.models.attention import attend

    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    keep = torch.ones(2, 64, dtype=torch.bool, device="cuda")
    keep[1, 40:] = False
    backend = SDPBackend.EFFICIENT_ATTENTION if padded else SDPBackend.FLASH_ATTENTION
    with sdpa_kernel(backend):
        out = attend(q, k, v, keep if padded else None, None, 0.1)
    assert out.shape == q.shape and torch.isfinite(out).all()


def test_band_conv_on_the_gpu_equals_the_shifted_sum():
    from convexp.models.conv import _LightweightConv, lightweight_conv

    torch.manual_seed(0)
    v = torch.randn(8, 128, 2, 64, device="cuda", requires_grad=True)
    kernel = torch.randn(8, 128, 2, 9, device="cuda").softmax(-1).requires_grad_()
    exact = _LightweightConv.apply(v.double(), kernel.double())
    fp32 = lightweight_conv(v, kernel)  # TF32 may be on: matrix-unit precision
    assert ((fp32.double() - exact).norm() / exact.norm()) < 1e-3
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bf16 = lightweight_conv(v.bfloat16(), kernel)
    assert ((bf16.double() - exact).norm() / exact.norm()) < 1e-2
    g = torch.randn_like(fp32)
    got = torch.autograd.grad(fp32, (v, kernel), g)
    want = torch.autograd.grad(exact, (v, kernel), g.double())  # through the casts: fp64 gradients
    for a, b in zip(got, want):
        assert ((a.double() - b.double()).norm() / b.norm()) < 1e-3


@pytest.mark.parametrize("objective", ["mlm", "electra"])
@pytest.mark.parametrize("padded", [False, True])
def test_the_pretraining_step_never_waits_for_the_device(objective, padded):
    """Forward, backward, the divergence check's device side, clipping and fused AdamW under
    CUDA's sync debug mode "error": any read of a device value back to the host raises."""
    from convexp.train.health import Health

    cfg, module = _module(f"objective={objective}", "model=convbert_small")
    module.cuda().train()
    opt = module.configure_optimizers()["optimizer"]
    batch = _batch(module, padded=padded)
    health = Health(check_every=1000)
    trainer = type("T", (), {"global_step": 0, "max_steps": 10_000, "precision_plugin": None})()
    params = [p for p in module.parameters() if p.requires_grad]
    for step in range(3):  # the first step allocates (cuBLAS handles, the optimizer state)
        torch.cuda.set_sync_debug_mode("error" if step else "default")
        try:
            torch.manual_seed(batch["seed"])
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = module.train_objective(batch)
            health.on_before_backward(trainer, module, out.loss)
            out.loss.backward()
            health.on_before_optimizer_step(trainer, module, opt)
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
            opt.step()
            opt.zero_grad(set_to_none=True)
            trainer.global_step += 1
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out.loss).item()


@contextlib.contextmanager
def _watching(seen: dict[int, int]):
    """Inside: every Lightning Trainer made gets :func:`_sync_watch`'s callback."""
    import pytorch_lightning as pl

    original = pl.Trainer.__init__

    def with_watch(self, *args, **kwargs):
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), _sync_watch(seen)]
        original(self, *args, **kwargs)

    pl.Trainer.__init__ = with_watch
    try:
        yield
    finally:
        pl.Trainer.__init__ = original


def _sync_watch(seen: dict[int, int]):
    """A Lightning callback counting, per training step, the CUDA calls that synchronise with the
    host (sync debug mode "warn")."""
    import pytorch_lightning as pl

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self._w = warnings.catch_warnings(record=True)
            self._caught = self._w.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            torch.cuda.set_sync_debug_mode("default")
            self._w.__exit__(None, None, None)
            seen[trainer.global_step] = sum("synchroniz" in str(w.message) for w in self._caught)

    return Watch()


@pytest.mark.parametrize("kind", ["glue", "squad"])
def test_the_finetuning_stage_reads_the_device_only_at_logging_steps(tmp_path, monkeypatch, pretrained, kind):
    """A fine-tuning step on the GPU queues without waiting for the device: whether a batch is
    padded, its seed and position come from the host (the collate), the loss is logged and the
    divergence check read every log_every_n_steps."""
    monkeypatch.setenv("WANDB_MODE", "disabled")  # in-process: no W&B service left in this worker
    from convexp.config.compose import compose_stage

    seen: dict[int, int] = {}
    common = [f"init={pretrained}", "scale=smoke", *GPU, "epochs=1", "batch_size=8", "seeds=[42]",
              "trainer.log_every_n_steps=5", f"outputs={tmp_path}"]  # fmt: skip
    with _watching(seen):
        from convexp.tasks import Invocation, command
        if kind == "glue":
            over = ["task=sst2", "glue.synthetic_size=96", "task.max_len=48", *common]
            glue = command("glue")
            glue.run(glue.compose(over, compose_stage("finetune", over)), summary=False)
        else:
            over = ["task=squad1", "squad.synthetic_size=96", "squad.max_len=96", *common]
            command("squad").run(Invocation(compose_stage("finetune", over), {}))
    # read by design: the logging steps (5, 10), the first steps (allocation) and the last (the final check)
    quiet = {step: n for step, n in seen.items() if step % 5 not in (0, 1) and 2 < step < max(seen)}
    assert quiet and not any(quiet.values()), seen


def test_the_pretraining_stage_reads_the_device_only_at_logging_steps(tmp_path, monkeypatch):
    """The whole Lightning loop: between logging steps no synchronising CUDA call is made."""
    monkeypatch.setenv("WANDB_MODE", "disabled")  # in-process: no W&B service left in this worker
    from convexp.config.compose import compose_stage
    from convexp.tasks.pretraining import stage as pretrain
    from convexp.tasks.pretraining.runs import pretrain_run

    seen: dict[int, int] = {}
    cfg = compose_stage("pretrain", [*TINY, *GPU, "objective=electra", "model=convbert_small", "trainer.max_steps=12",
                                     "trainer.log_every_n_steps=5", "trainer.val_every_n_steps=100",
                                     f"outputs={tmp_path}"])  # fmt: skip
    with _watching(seen):
        pretrain.run_pretrain(cfg, pretrain_run(cfg))
    # read by design: the logging steps (5, 10), the first steps (allocation) and the last (the final check)
    quiet = {step: n for step, n in seen.items() if step % 5 not in (0, 1) and 2 < step < 12}
    assert quiet and not any(quiet.values()), seen
