"""The arithmetic floor of ``convexp bench finetune``'s and ``bench squad``'s job: how long its matrix products alone take
on this machine, the time no fp32 tool can go under however little else it does.

  encoder_flops(batches, shape, train, cls_only)   FLOPs of a BERT encoder's matrix products over
                                                   padded batches [(rows, length, real), ...]
  gemm_rate(rows, shape)                           one sample of this machine's fp32 matmul rate
                                                   (FLOP/s) at the encoder's shapes, ``rows``
                                                   tokens a batch, after a warm-up
  BestRate(rows, shape, threads)                   the best of several such samples, taken at the
                                                   job's thread count wherever the bench calls
                                                   ``sample()`` (before, between, after its runs)
  job_floor(train, dev, batch_size, ..., threads)  the job's FLOPs for the full encoder and for
                                                   convexp's [CLS]-only last block (a sequence
                                                   classifier's; a SQuAD job: the full encoder
                                                   only), and the rate sampler to time them
  floor_record(floor, walls)                       the record's ``floor``: seconds at the best rate,
                                                   every sample, and ``floor_above_wall``

The products counted: per layer the Q, K, V and output projections (4 D² per token), the FFN
(2 D I; on the real tokens alone below a [CLS] head's last block, as convexp runs it on a CPU),
the scores QKᵀ and the weighted values (2 L D per token); twice as many again in the
backward pass (the inputs' and the weights' gradients). The pooler, classifier, embeddings and
every element-wise operation are left out: a floor, not an estimate. The batches are convexp's
(length-grouped training batches, length-sorted dev batches); the Trainer's grouping pads within a
few per cent of them.

One rate sample on a busy machine can be a quarter of the machine's rate (34 GFLOP/s against 136
a minute later), which put a floor above every measured wall. So the rate is the best of samples
spread over the benchmark; where even that floor is above a wall, nothing is clamped: the record
says ``floor_above_wall: true`` and the bench's line says the machine was too busy to measure it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ..data.length_batches import EVAL_TOKENS, grouped_permutation, sorted_batches


def encoder_flops(batches: list[tuple[int, ...]], shape: dict, train: bool, cls_only: bool = False) -> float:
    """FLOPs of the encoder's matrix products over ``batches`` of (rows, padded length) or (rows,
    padded length, real tokens): forward only, or forward and backward (``train``: 3x).
    ``cls_only``: a [CLS] head's encoder on a CPU (``Encoder(first_only=True)``): the last block
    computes K and V for every position, and Q, the scores, the output projection and the FFN for
    position 0 alone; the blocks below run their FFN on the real tokens alone (``real_rows``)."""
    D, I, n = shape["hidden"], shape["intermediate"], shape["layers"]
    total = 0.0
    for B, L, *real in batches:
        layer = 2 * B * L * (4 * D * D + 2 * D * I) + 2 * 2 * B * L * L * D  # projections, FFN; QKᵀ, PV
        below, last = layer, layer
        if cls_only:
            N = real[0] if real else B * L
            below = 2 * B * L * 4 * D * D + 2 * N * 2 * D * I + 2 * 2 * B * L * L * D
            last = 2 * B * L * 2 * D * D + 2 * B * (2 * D * D + 2 * D * I) + 2 * 2 * B * L * D
        total += (n - 1) * below + last
    return (3 if train else 1) * total


def gemm_rate(rows: int, shape: dict, repeats: int = 10, warmup: int = 3) -> float:
    """fp32 FLOP/s of torch's matmul at the encoder's forward and backward shapes with ``rows``
    tokens a batch, on this process's threads: every shape run ``warmup`` times first (the thread
    pool and the caches), then the best of ``repeats`` timings of each."""
    D, I = shape["hidden"], shape["intermediate"]
    pairs = [((rows, D), (D, I)), ((rows, I), (I, D)), ((rows, D), (D, D)),  # forward
             ((D, rows), (rows, I)), ((I, rows), (rows, D)), ((D, rows), (rows, D))]  # weight gradients
    operands = [(torch.randn(a), torch.randn(b)) for a, b in pairs]
    for _ in range(warmup):
        for x, y in operands:
            x @ y
    flops = seconds = 0.0
    for x, y in operands:
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            x @ y
            best = min(best, time.perf_counter() - t)
        flops += 2 * x.shape[0] * x.shape[1] * y.shape[1]
        seconds += best
    return flops / seconds


class BestRate:
    """The GEMM rate at a job's shapes (``rows`` tokens a batch) and thread count: ``sample()``
    measures once more (``measure(rows, shape)``, :func:`gemm_rate` unless a test gives another)
    with torch's threads set to ``threads`` for the while; ``best`` is the highest so far. The
    bench samples before, between and after its timed runs, so that a busy minute does not set
    the floor."""

    def __init__(self, rows: int, shape: dict, threads: int, measure: Callable[[int, dict], float] = gemm_rate):
        self.rows, self.shape, self.threads, self.measure = rows, shape, threads, measure
        self.samples: list[float] = []

    def sample(self) -> float:
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            rate = self.measure(self.rows, self.shape)
        finally:
            torch.set_num_threads(before)
        self.samples.append(rate)
        return rate

    @property
    def best(self) -> float:
        if not self.samples:
            self.sample()
        return max(self.samples)


def job_floor(train: torch.Tensor, dev: torch.Tensor, batch_size: int, epochs: int, shape: dict, seed: int,
              threads: int, measure: Callable[[int, dict], float] = gemm_rate, cls_only: bool = True,
              grouped: bool = True) -> dict:  # fmt: skip
    """The FLOPs of a fine-tuning job whose rows have ``train`` and ``dev`` token counts (padded
    lengths before grouping): training batches as convexp's stream draws them for ``seed`` (each
    epoch on its own; length-grouped, or at random with ``grouped=False``), dev batches as convexp
    evaluates on a CPU; ``rate``, a :class:`BestRate` at the job's mean padded batch and
    ``threads``, not sampled yet. ``cls_only=False``: the full encoder only (a span head reads every
    position: SQuAD)."""
    batches = []
    for epoch in range(epochs):
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = grouped_permutation(train, batch_size, g) if grouped else torch.randperm(len(train), generator=g)
        batches += [(len(b), int(train[b].max()), int(train[b].sum())) for b in torch.split(order, batch_size)]
    dev_batches = [(len(b), int(dev[b].max()), int(dev[b].sum())) for b in sorted_batches(dev, EVAL_TOKENS["cpu"])]
    padded = sum(B * L for B, L, _ in batches)
    return {
        "train_tokens": epochs * int(train.sum()),
        "train_padded_tokens": padded,
        "flops": {
            "full": encoder_flops(batches, shape, train=True) + encoder_flops(dev_batches, shape, train=False),
            **({"cls_only": encoder_flops(batches, shape, train=True, cls_only=True)
                + encoder_flops(dev_batches, shape, train=False, cls_only=True)} if cls_only else {}),
        },
        "rate": BestRate(round(padded / len(batches)), shape, threads, measure),
    }


def floor_record(floor: dict, walls: dict[str, list[float]]) -> dict:
    """The record's ``floor``: seconds of each kind (``full``, ``cls_only``) at the best sampled
    rate, the samples, and ``floor_above_wall``: whether a kind's floor is above any of the wall
    times measured for it (``walls``: kind -> seconds), nothing clamped."""
    rate: BestRate = floor["rate"]
    best = rate.best
    seconds = {k: v / best for k, v in floor["flops"].items()}
    above = {k: min(w) for k, w in walls.items() if w and seconds[k] > min(w)}
    return {
        "train_tokens": floor["train_tokens"],
        "train_padded_tokens": floor["train_padded_tokens"],
        "gemm_gflop_per_s": best / 1e9,  # the best sample's
        "gemm_gflop_per_s_samples": [r / 1e9 for r in rate.samples],
        "gemm_rows": rate.rows,
        "threads": rate.threads,
        "tflop": {k: v / 1e12 for k, v in floor["flops"].items()},
        "seconds": seconds,
        "floor_above_wall": bool(above),
        "walls_below_floor": above,  # kind -> the least wall under its floor
    }


def floor_line(rec: dict) -> str:
    """The bench's line on the floor: under each wall time, or the machine too busy to measure it."""
    sec, n = rec["seconds"], len(rec["gemm_gflop_per_s_samples"])
    said = (f"Matrix products alone at this machine's fp32 rate ({rec['gemm_gflop_per_s']:.0f} GFLOP/s, the best "
            f"of {n} sample{'s' if n != 1 else ''} on {rec['threads']} thread{'s' if rec['threads'] != 1 else ''}): ")
    if "cls_only" in sec:
        said += (f"{sec['cls_only']:.1f} s with convexp's [CLS]-only last block, {sec['full']:.1f} s for the full "
                 "encoder (the plain loop's and the Trainer's)")  # fmt: skip
    else:
        said += f"{sec['full']:.1f} s for the full encoder (every tool's: a span head reads every position)"
    if not rec["floor_above_wall"]:
        return said + ": the floor under each wall time."
    walls = ", ".join(f"{k} {w:.1f} s" for k, w in rec["walls_below_floor"].items())
    return (said + f": above a measured wall ({walls}): the machine was too busy to measure the floor "
            "(floor_above_wall in the record); rerun on a quieter machine.")
