"""Benchmarks (``convexp bench``): throughput ratios against Hugging Face in the same process.

1. A full ConvBERT-small MLM training step (forward, backward, AdamW) at batch 32 x length 128,
   convexp (on the pre-training stage's inputs: prediction slots, no padding mask) vs
   ``transformers.ConvBertForMaskedLM`` of the same configuration, fp32 and bf16
   autocast: tokens/s of each and the ratio, the contenders' steps taking turns. Each side steps
   AdamW as its tool does: convexp with the fused kernel (``trainer.fused_adamw: auto``), the
   Hugging Face model with torch's default (a plain loop's ``torch.optim.AdamW(...)``); the model
   code alone is compared too, convexp under the default AdamW ("same AdamW").
   On a CUDA GPU ``convexp bench`` runs ``cuda_step.py`` instead.
2. Self-attention vs mixed attention at base size (ConvBERT appendix, CPU speed table) at several
   lengths: forward time of the attention module, and of the whole layer (inference), also
   taking turns.

The plug-in path's row (a user's file against the built-in self-attention) is ``plugin.py``'s.
"""

from __future__ import annotations

import statistics
import sys
import time
from contextlib import nullcontext
from collections.abc import Iterable, Iterator
from typing import Callable

import torch
from rich.console import Console
from rich.table import Table

from ..config.compose import model_config
from ..models import MaskedLM
from ..models.encoder import Block, init_weights
from ..train.accel import fused_adamw
from ..tasks.pretraining.objectives import prediction_slots


def mlm_batch(vocab: int, batch_size: int, seq_len: int, seed: int = 0):
    """(ids, mask, labels) of a random MLM batch: 15% of positions predicted, seeded."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch_size, seq_len), generator=g)
    labels = torch.full_like(ids, -100)
    masked = torch.rand(ids.shape, generator=g) < 0.15
    labels[masked] = ids[masked]
    ids = ids.masked_fill(masked, 4)
    return ids, torch.ones_like(ids), labels


def train_step(
    model: torch.nn.Module, forward: Callable[[], torch.Tensor], bf16: bool, fused: bool = False
) -> Callable[[], None]:
    """One AdamW update of ``model`` on the loss ``forward`` returns (bf16 autocast when asked)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01, fused=fused or None)
    model.train()

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            loss = forward()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def hf_convbert_config(cfg):
    """transformers.ConvBertConfig equal to a convexp ConvBERT ModelConfig."""
    from transformers import ConvBertConfig

    return ConvBertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        embedding_size=cfg.emb_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size,
        head_ratio=cfg.head_ratio,
        conv_kernel_size=cfg.kernel_size,
        num_groups=cfg.ffn_groups,
        hidden_dropout_prob=cfg.hidden_dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=cfg.pad_token_id,
    )


PHASE_EVERY_S = 10.0  # outside a terminal, a line at least this often while timing


def phase(text: str) -> None:
    """Outside a terminal (a pipe, a log), where no spinner shows what is being timed: one plain
    line as each phase starts."""
    if not sys.stdout.isatty():
        print(f"  ... {text}", flush=True)


def time_interleaved(steps: dict[str, Callable[[], None]], rounds: int, warmup: int = 2) -> dict[str, float]:
    """Median wall time of one call of each step, the steps taking turns every round (so a
    machine that speeds up or slows down during the benchmark affects them alike)."""
    phase(f"warm-up: {', '.join(steps)}, {warmup} calls each, then {rounds} timed rounds")
    said = [time.monotonic()]

    def tick(where: str) -> None:  # a line at least every PHASE_EVERY_S (a slow or busy machine)
        if time.monotonic() - said[0] >= PHASE_EVERY_S:
            phase(where)
            said[0] = time.monotonic()

    for name, step in steps.items():
        for i in range(warmup):
            step()
            tick(f"warm-up: {name} {i + 1} of {warmup}")
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(rounds):
        for name, step in steps.items():
            t = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t)
            tick(f"round {i + 1} of {rounds}: {name}")
    return {name: statistics.median(ts) for name, ts in times.items()}


def bench_training_step(steps: int, batch_size: int, seq_len: int, hf: bool) -> Iterator[dict]:
    """One row per precision (fp32, then bf16 autocast), each as soon as it is measured."""
    cfg = model_config("convbert_small")
    ids, mask, labels = mlm_batch(cfg.vocab_size, batch_size, seq_len)
    positions, slot_labels = prediction_slots(labels)  # the pre-training stage's inputs
    fused = fused_adamw("auto", "cpu")  # what convexp's trainer uses here
    for bf16 in (False, True):
        contenders = {}
        for name, kernel in (("convexp", fused), ("same AdamW", False)):
            torch.manual_seed(0)
            ours = MaskedLM(cfg)
            contenders[name] = train_step(
                ours, lambda m=ours: m(ids, labels=slot_labels, positions=positions, padded=False).loss, bf16, kernel
            )
        if hf:
            from transformers import ConvBertForMaskedLM

            torch.manual_seed(0)
            theirs = ConvBertForMaskedLM(hf_convbert_config(cfg))
            contenders["HF"] = train_step(
                theirs, lambda: theirs(input_ids=ids, attention_mask=mask, labels=labels).loss, bf16
            )
        t = time_interleaved(contenders, steps)
        row = {
            "precision": "bf16 autocast" if bf16 else "fp32",
            "convexp tok/s": batch_size * seq_len / t["convexp"],
            "convexp, same AdamW": batch_size * seq_len / t["same AdamW"],
        }
        if hf:
            row["HF tok/s"] = batch_size * seq_len / t["HF"]
            row["ratio"] = t["HF"] / t["convexp"]
            row["ratio, same AdamW"] = t["HF"] / t["same AdamW"]
        yield row


def bench_blocks(lengths: list[int], steps: int, batch_size: int = 1) -> Iterator[dict]:
    """Forward time (ms) at base size: the attention module alone (what ConvBERT's CPU table
    compares: self-attention vs mixed attention, output projection included) and the whole
    transformer layer (with the feed-forward network, identical in both). One row per length, each
    as soon as it is measured."""
    layers = {}
    for name in ("electra_base", "convbert_base"):
        torch.manual_seed(0)
        layers[name] = Block(model_config(name)).eval()
        layers[name].apply(init_weights)
    D = model_config("electra_base").hidden_size
    for L in lengths:
        x = torch.randn(batch_size, L, D)
        row = {"length": L}
        with torch.inference_mode():
            for part in ("attention", "layer"):
                forward = {
                    name: (lambda m=(layer.mixer if part == "attention" else layer): m(x, None))
                    for name, layer in layers.items()
                }
                t = {name: sec * 1e3 for name, sec in time_interleaved(forward, steps).items()}
                row[f"self-attn {part}"] = t["electra_base"]
                row[f"mixed {part}"] = t["convbert_base"]
                row[f"{part} speed-up"] = t["electra_base"] / t["convbert_base"]
        yield row


def console() -> Console:
    """The benchmarks' console: the terminal's width, 160 columns when piped (wide tables)."""
    return Console(width=None if sys.stdout.isatty() else 160)


def print_rows(title: str, rows: Iterable[dict], fmt: dict[str, str], out: Console, what: str) -> None:
    """Print each row as it is measured (with what is being timed while it runs), then the table."""
    done: list[dict] = []
    rows = iter(rows)
    if not out.is_terminal:
        out.print(f"timing {what} ...", highlight=False)
    while True:
        # outside a terminal no spinner shows: the title line above and each phase's (``phase``)
        with out.status(f"timing {what} ({len(done) + 1}) ...", spinner="line") if out.is_terminal else nullcontext():
            row = next(rows, None)
        if row is None:
            break
        done.append(row)
        out.print("  " + ", ".join(f"{k} {format(v, fmt.get(k, '')) if not isinstance(v, str) else v}" for k, v in row.items()),
                  highlight=False)  # fmt: skip
    table = Table(title=title)
    for col in done[0]:
        table.add_column(col, justify="right")
    for r in done:
        table.add_row(*(format(v, fmt.get(k, "")) if not isinstance(v, str) else v for k, v in r.items()))
    out.print(table)


def transformers_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def run_benchmarks(steps: int, batch_size: int, seq_len: int, lengths: list[int], hf: bool = True) -> None:
    out = console()
    out.print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if hf and not transformers_available():
        out.print(
            "transformers is not installed: timing convexp alone "
            '(`pip install "convexp\\[bench]"` adds the Hugging Face comparison)'
        )
        hf = False
    print_rows(
        f"ConvBERT-small MLM training step (forward+backward+AdamW), batch {batch_size} x length {seq_len}",
        bench_training_step(steps, batch_size, seq_len, hf),
        {"convexp tok/s": ",.0f", "convexp, same AdamW": ",.0f", "HF tok/s": ",.0f", "ratio": ".2f",
         "ratio, same AdamW": ".2f"},  # fmt: skip
        out,
        "the training step, fp32 then bf16",
    )
    fmt = {f"{who} {part}": ".2f" for who in ("self-attn", "mixed") for part in ("attention", "layer")}
    print_rows(
        "Base size, batch 1, forward ms: self-attention (electra_base) vs mixed attention (convbert_base)",
        bench_blocks(lengths, steps),
        {**fmt, "attention speed-up": ".2f", "layer speed-up": ".2f"},
        out,
        f"base-size blocks at lengths {','.join(map(str, lengths))}",
    )

