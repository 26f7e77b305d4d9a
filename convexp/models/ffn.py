"""Position-wise feed-forward: dense, or ConvBERT's grouped linear (eq. 7)."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig

ACTIVATIONS = {"gelu": nn.GELU, "gelu_new": lambda: nn.GELU(approximate="tanh"), "relu": nn.ReLU}


def activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown hidden_act {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class GroupedLinear(nn.Module):
    """Split the features into G groups, transform each with its own matrix, concatenate (eq. 7).

    weight: [G, in/G, out/G] (Hugging Face ConvBERT's layout), bias: [out]. G x fewer weights
    and FLOPs than nn.Linear(in, out).
    """

    def __init__(self, in_features: int, out_features: int, groups: int):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(groups, in_features // groups, out_features // groups))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *lead, n = x.shape
        G = self.groups
        xg = x.reshape(-1, G, n // G).transpose(0, 1)  # [G, M, in/G]
        y = torch.bmm(xg, self.weight.to(xg.dtype))  # [G, M, out/G]
        return y.transpose(0, 1).reshape(*lead, -1) + self.bias


def linear(in_features: int, out_features: int, groups: int) -> nn.Module:
    return (
        nn.Linear(in_features, out_features)
        if groups == 1
        else GroupedLinear(in_features, out_features, groups)
    )


class FeedForward(nn.Module):
    """x -> act(x W1 + b1) W2 + b2, with W1: D->I and W2: I->D dense or grouped.

    ``intermediate`` overrides I (a structurally pruned layer, ``ModelConfig.layer_sizes``)."""

    def __init__(self, cfg: ModelConfig, intermediate: int | None = None):
        super().__init__()
        units = intermediate or cfg.intermediate_size  # I
        self.fc1 = linear(cfg.hidden_size, units, cfg.ffn_groups)
        self.act = activation(cfg.hidden_act)
        self.fc2 = linear(units, cfg.hidden_size, cfg.ffn_groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, L, D] -> [B, L, D]
        return self.fc2(self.act(self.fc1(x)))
