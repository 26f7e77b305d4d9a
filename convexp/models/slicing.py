"""Copies of layers with some of their rows or columns: what removing a structure from a trained
model is made of (a part's ``keep_heads``, pruning/structured.py). No random initialisation."""

from __future__ import annotations

import warnings

import torch
from torch import nn


def linear_copy(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """nn.Linear holding copies of ``weight`` [out, in] and ``bias`` [out] (no random init)."""
    out_f, in_f = weight.shape
    with warnings.catch_warnings():  # a Projection may keep 0 linear heads: nn.Linear(D, 0) is valid
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
        lin = torch.nn.utils.skip_init(
            nn.Linear, in_f, out_f, bias=bias is not None, device=weight.device, dtype=weight.dtype
        )
    with torch.no_grad():
        lin.weight.copy_(weight)
        if bias is not None:
            lin.bias.copy_(bias)
    return lin


def rows(lin: nn.Linear, idx: torch.Tensor) -> nn.Linear:
    """``lin`` keeping output features ``idx``."""
    return linear_copy(lin.weight[idx], lin.bias[idx] if lin.bias is not None else None)


def head_features(heads: list[int], d: int, device) -> torch.Tensor:
    """The feature indices of ``heads`` of size ``d``: [h·d, ..., h·d + d - 1] for each, in order."""
    return torch.tensor([h * d + c for h in heads for c in range(d)], dtype=torch.long, device=device)


def is_zero(t: torch.Tensor, dim) -> torch.Tensor:
    """True where the slices of ``t`` reduced over ``dim`` are all zero."""
    return t.detach().abs().sum(dim) == 0
