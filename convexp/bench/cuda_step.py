"""``convexp bench`` on a CUDA GPU: the masked-LM training step against Hugging Face, with MFU.

For each model (ConvBERT-small and ELECTRA-small at the recipe's batch 128 x 128, ConvBERT-base at
32 x 512), one full training step — forward, backward, fused AdamW, bf16 autocast, TF32 on —
of each contender, taking turns every round:

* ``convexp``: ``MaskedLM`` on the pre-training stage's inputs (the batch's prediction slots, no
  padding, nothing read back from the device), eager;
* ``convexp compile=MODE``: the same, compiled whole (``--compile step,graphs``: ``graphs`` is
  ``reduce-overhead``, the step replayed as CUDA graphs); the compile time is reported;
* ``HF``: ``transformers``' ``ConvBertForMaskedLM`` / ``ElectraForMaskedLM`` of the same shape
  with the same fused AdamW (a Trainer's ``optim="adamw_torch_fused"``, ``bf16=True``).

Times are CUDA-event times of ``per_round`` steps queued back to back after a synchronisation
(host launch gaps included), medians over the rounds. MFU = the step's useful FLOPs
(:func:`convexp.models.stats.training_step_flops`: 3 x forward, encoder on every token, MLM
head on the predicted ones) / step time / the bf16 matrix rate measured here at the start
(an 8192³ product), so the ratio is to what this card actually sustains.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from ..config.compose import model_config
from ..models import MaskedLM
from .shapes import STEP_SHAPES
from ..models.stats import training_step_flops
from ..tasks.pretraining.objectives import prediction_slots



def matmul_tflops(n: int = 8192, repeats: int = 10) -> float:
    """Measured bf16 matrix-product rate of this GPU (TFLOP/s), random operands."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    end.synchronize()
    return 2 * n**3 * repeats / (start.elapsed_time(end) / 1e3) / 1e12


def time_cuda(steps: dict[str, Callable[[], None]], rounds: int, per_round: int = 5, warmup: int = 3) -> dict:
    """Median milliseconds of one step of each contender: ``per_round`` steps between two CUDA
    events, the contenders taking turns every round."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(per_round):
                step()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / per_round)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _mlm_inputs(vocab: int, batch_size: int, seq_len: int, max_predictions: int):
    """A full-length batch masked as ELECTRA masks (exactly ``max_predictions`` per row), on the GPU:
    (ids, labels [B, L], prediction slots (positions, labels) [B·max_predictions])."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (batch_size, seq_len), generator=g)
    order = torch.rand(batch_size, seq_len, generator=g).argsort(1)[:, :max_predictions]
    labels = torch.full_like(ids, -100).scatter(1, order, ids.gather(1, order))
    masked = ids.scatter(1, order, 4)
    positions, slot_labels = prediction_slots(labels, batch_size * max_predictions)
    return tuple(t.cuda() for t in (masked, labels, positions, slot_labels))


def _step(model: torch.nn.Module, forward: Callable[[], torch.Tensor], graphs: bool = False) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01, fused=True)
    model.train()

    def step() -> None:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _hf_model(name: str, cfg):
    if name.startswith("convbert"):
        from transformers import ConvBertForMaskedLM

        from .step import hf_convbert_config

        return ConvBertForMaskedLM(hf_convbert_config(cfg))
    from transformers import ElectraConfig, ElectraForMaskedLM

    return ElectraForMaskedLM(ElectraConfig(
        vocab_size=cfg.vocab_size, embedding_size=cfg.emb_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size, hidden_dropout_prob=cfg.hidden_dropout,
        attention_probs_dropout_prob=cfg.attention_dropout, layer_norm_eps=cfg.layer_norm_eps,
    ))  # fmt: skip


def bench_model(name: str, batch_size: int, seq_len: int, rounds: int, peak: float, hf: bool,
                compile_modes: tuple[str, ...] = ()) -> list[dict]:  # fmt: skip
    """Rows of the step table for one model: each contender's ms/step, tokens/s, MFU and ratio."""
    cfg = model_config(name)
    predictions = int((0.15 + 0.005) * seq_len)  # ELECTRA's max_predictions_per_seq
    masked, labels, positions, slot_labels = _mlm_inputs(cfg.vocab_size, batch_size, seq_len, predictions)
    contenders, compile_s = {}, {}
    torch.manual_seed(0)
    ours = MaskedLM(cfg).cuda()
    contenders["convexp"] = _step(ours, lambda: ours(masked, labels=slot_labels, positions=positions, padded=False).loss)
    for mode in compile_modes:
        torch.manual_seed(0)
        model = MaskedLM(cfg).cuda()
        compiled = torch.compile(model, fullgraph=True, dynamic=False,
                                 mode="reduce-overhead" if mode == "graphs" else None)  # fmt: skip
        step = _step(model, lambda c=compiled: c(masked, labels=slot_labels, positions=positions, padded=False).loss,
                     graphs=mode == "graphs")  # fmt: skip
        t = time.perf_counter()
        step()
        step()
        torch.cuda.synchronize()
        compile_s[f"convexp compile={mode}"] = time.perf_counter() - t
        contenders[f"convexp compile={mode}"] = step
    if hf:
        torch.manual_seed(0)
        theirs = _hf_model(name, cfg).cuda()
        contenders["HF"] = _step(theirs, lambda: theirs(input_ids=masked, labels=labels).loss)
    ms = time_cuda(contenders, rounds)
    flops = training_step_flops(cfg, batch_size, seq_len, batch_size * predictions)
    rows = []
    for contender, t in ms.items():
        row = {
            "model": name, "shape": f"{batch_size}x{seq_len}", "contender": contender, "ms/step": t,
            "tokens/s": batch_size * seq_len / (t / 1e3), "MFU %": 100 * flops / (t / 1e3) / (peak * 1e12),
        }  # fmt: skip
        if "HF" in ms:
            row["vs HF"] = ms["HF"] / t
        if contender in compile_s:
            row["compile s"] = compile_s[contender]
        rows.append(row)
    del contenders, ours
    torch.cuda.empty_cache()
    return rows


def run_cuda_benchmarks(rounds: int, hf: bool, compile_modes: tuple[str, ...] = (), shapes=STEP_SHAPES) -> dict:
    """The whole CUDA step table; returns {device, matmul_tflops, rows} (also printed)."""
    from .step import print_rows, console

    torch.backends.cuda.matmul.allow_tf32 = True  # convexp's trainer.tf32 default
    torch.backends.cudnn.allow_tf32 = True
    out = console()
    peak = matmul_tflops()
    device = torch.cuda.get_device_name()
    out.print(f"torch {torch.__version__}, {device}: bf16 matrix product {peak:.0f} TFLOP/s (measured)")
    rows: list[dict] = []

    def measured():  # each model's rows as soon as they are timed (a compile takes a minute or more)
        for name, batch_size, seq_len in shapes:
            small = batch_size * seq_len <= 128 * 128
            for r in bench_model(name, batch_size, seq_len, rounds, peak, hf, compile_modes if small else ()):
                for k in ("vs HF", "compile s"):
                    r.setdefault(k, float("nan"))
                rows.append(r)
                yield r

    fmt = {"ms/step": ".2f", "tokens/s": ",.0f", "MFU %": ".1f", "vs HF": ".2f", "compile s": ".0f"}
    print_rows(f"MLM training step (forward+backward+fused AdamW), bf16 autocast, {device}", measured(), fmt, out, "rows")
    ratio = _ratio(rows, "convbert_small", "electra_small")
    if ratio:
        out.print(f"ConvBERT-small step / ELECTRA-small step (convexp, eager): {ratio:.2f}")
    import datetime as dt

    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")  # the plots' date
    return {"device": device, "time": when, "torch": torch.__version__, "matmul_tflops": peak, "rows": rows}


def _ratio(rows: list[dict], a: str, b: str) -> float | None:
    t = {r["model"]: r["ms/step"] for r in rows if r["contender"] == "convexp"}
    return t[a] / t[b] if a in t and b in t else None
