"""Dropout with cheaper masks on CPU.

``F.dropout`` on CPU draws its mask with ``bernoulli_``: about 5 ns per element on one core, a
fifth of a ConvBERT-small training step in bf16 (37 masks per step). :func:`dropout` draws one
31-bit integer per element from the same generator (``random_``, a third of the cost) and keeps
the element when it is at least p·2³¹: the keep probability is 1 - p to within 2⁻³², and the kept
values are scaled by 1/(1 - p) as ``F.dropout`` does. Results stay a function of torch's CPU seed
(so resuming and activation checkpointing replay the same masks), but they are not the masks
``F.dropout`` would draw. Other devices and compiled code use ``F.dropout`` (CUDA's masks are
cheap already).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def cpu_masks(x: torch.Tensor) -> bool:
    """Whether :func:`dropout` draws its own masks for x: on CPU, in eager mode (``torch.compile``
    generates its own random numbers, and cannot trace ``random_``)."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element with probability p, scale the rest by 1/(1 - p); identity unless training."""
    if not training or p == 0.0:
        return x
    if not cpu_masks(x) or p >= 1.0:
        return F.dropout(x, p, True)
    return x * _scaled_mask(torch.empty(x.shape, dtype=torch.int32).random_(), p, x.dtype)


def _scaled_mask(draws: torch.Tensor, p: float, dtype: torch.dtype) -> torch.Tensor:
    """0 where a draw (uniform on [0, 2³¹)) falls below p·2³¹, else 1/(1 - p)."""
    return (draws >= round(p * 2**31)).to(dtype).mul_(1.0 / (1.0 - p))


def dropout_rows(y: torch.Tensor, p: float, training: bool, rows: torch.Tensor, total: int) -> torch.Tensor:
    """:func:`dropout` of y: [N, D], the rows ``rows`` ([N]) of a [total, D] tensor, with the mask
    :func:`dropout` would draw for the whole tensor (the same random numbers, so that an unpadded
    block draws what the padded one did and every later mask stays the same)."""
    if not training or p == 0.0:
        return y
    if not cpu_masks(y) or p >= 1.0:
        return F.dropout(y, p, True)
    draws = torch.empty((total, y.shape[-1]), dtype=torch.int32).random_()[rows]  # [N, D]
    return y * _scaled_mask(draws, p, y.dtype)


class Dropout(nn.Dropout):
    """``nn.Dropout`` drawing its masks with :func:`dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def rows(self, y: torch.Tensor, rows: torch.Tensor, total: int) -> torch.Tensor:
        """:func:`dropout_rows`."""
        return dropout_rows(y, self.p, self.training, rows, total)
