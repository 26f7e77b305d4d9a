"""The arithmetic floor of ``convexp bench finetune``'s job: how long its matrix products alone take
on this machine, the time no fp32 tool can go under however little else it does.

  encoder_flops(batches, shape, train, cls_only)   FLOPs of a BERT encoder's matrix products over
                                                   padded batches [(rows, length), ...]
  gemm_rate(rows, shape)                           this machine's fp32 matmul rate (FLOP/s) at the
                                                   encoder's shapes, ``rows`` tokens a batch
  job_floor(train, dev, batch_size, shape, ...)    both together for a job: FLOPs and seconds for
                                                   the full encoder and for convexp's [CLS]-only
                                                   last block (a sequence classifier's)

The products counted: per layer the Q, K, V and output projections (4 D² per token), the FFN
(2 D I), the scores QKᵀ and the weighted values (2 L D per token); twice as many again in the
backward pass (the inputs' and the weights' gradients). The pooler, classifier, embeddings and
every element-wise operation are left out: a floor, not an estimate. The batches are convexp's
(length-grouped training batches, length-sorted dev batches); the Trainer's grouping pads within a
few per cent of them.
"""

from __future__ import annotations

import time

import torch

from ..data.length_batches import EVAL_TOKENS, grouped_permutation, sorted_batches


def encoder_flops(batches: list[tuple[int, int]], shape: dict, train: bool, cls_only: bool = False) -> float:
    """FLOPs of the encoder's matrix products over ``batches`` of (rows, padded length): forward
    only, or forward and backward (``train``: 3x). ``cls_only``: the last block computes position 0
    alone (``Encoder(first_only=True)``): K and V for every position, Q, the scores, the output
    projection and the FFN for one."""
    D, I, n = shape["hidden"], shape["intermediate"], shape["layers"]
    total = 0.0
    for B, L in batches:
        layer = 2 * B * L * (4 * D * D + 2 * D * I) + 2 * 2 * B * L * L * D  # projections, FFN; QKᵀ, PV
        last = layer
        if cls_only:
            last = 2 * B * L * 2 * D * D + 2 * B * (2 * D * D + 2 * D * I) + 2 * 2 * B * L * D
        total += (n - 1) * layer + last
    return (3 if train else 1) * total


def gemm_rate(rows: int, shape: dict, repeats: int = 10) -> float:
    """fp32 FLOP/s of torch's matmul at the encoder's forward and backward shapes with ``rows``
    tokens a batch, on this process's threads (the best of ``repeats`` timings of each shape)."""
    D, I = shape["hidden"], shape["intermediate"]
    pairs = [((rows, D), (D, I)), ((rows, I), (I, D)), ((rows, D), (D, D)),  # forward
             ((D, rows), (rows, I)), ((I, rows), (rows, D)), ((D, rows), (rows, D))]  # weight gradients
    flops = seconds = 0.0
    for a, b in pairs:
        x, y = torch.randn(a), torch.randn(b)
        for _ in range(3):
            x @ y
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            x @ y
            best = min(best, time.perf_counter() - t)
        flops += 2 * a[0] * a[1] * b[1]
        seconds += best
    return flops / seconds


def job_floor(train: torch.Tensor, dev: torch.Tensor, batch_size: int, epochs: int, shape: dict, seed: int) -> dict:
    """The floor of a fine-tuning job whose rows have ``train`` and ``dev`` token counts (padded
    lengths before grouping): training batches grouped as convexp's stream groups them for
    ``seed`` (each epoch on its own), dev batches as convexp evaluates on a CPU."""
    batches = []
    for epoch in range(epochs):
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        batches += [(len(b), int(train[b].max())) for b in torch.split(grouped_permutation(train, batch_size, g), batch_size)]
    dev_batches = [(len(b), int(dev[b].max())) for b in sorted_batches(dev, EVAL_TOKENS["cpu"])]
    padded = sum(B * L for B, L in batches)
    rate = gemm_rate(round(padded / len(batches)), shape)
    flops = {
        "full": encoder_flops(batches, shape, train=True) + encoder_flops(dev_batches, shape, train=False),
        "cls_only": encoder_flops(batches, shape, train=True, cls_only=True)
        + encoder_flops(dev_batches, shape, train=False, cls_only=True),
    }
    return {
        "train_tokens": epochs * int(train.sum()),
        "train_padded_tokens": padded,
        "gemm_gflop_per_s": rate / 1e9,
        "tflop": {k: v / 1e12 for k, v in flops.items()},
        "seconds": {k: v / rate for k, v in flops.items()},
    }
