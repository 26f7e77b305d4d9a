"""BERMO's layer mixing (BERMO eq. 1; ELMo's scalar mix)."""

from __future__ import annotations

import torch
from torch import nn


class ScalarMix(nn.Module):
    """Combine = γ Σ_j softmax(α)_j · h_j over the embedding output and every layer output.

    Before mixing, the stacked features are normalised across the layer axis (a LayerNorm whose
    "channels" are the L+1 layers, no affine parameters) and dropout is applied. Only L+2
    parameters: α (Xavier-initialised) and γ (init 1).
    """

    def __init__(self, num_inputs: int, dropout: float = 0.1, eps: float = 1e-6):
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(num_inputs))
        self.gamma = nn.Parameter(torch.ones(()))
        self.dropout = nn.Dropout(dropout)
        self.eps = eps
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = (6.0 / (1 + self.alpha.numel())) ** 0.5  # Xavier-uniform for a [1, L+1] matrix
        nn.init.uniform_(self.alpha, -bound, bound)

    def forward(self, hidden_states: list[torch.Tensor]) -> torch.Tensor:
        h = torch.stack(hidden_states)  # [L+1, B, T, D]
        mean = h.mean(0, keepdim=True)
        var = h.var(0, unbiased=False, keepdim=True)
        h = self.dropout((h - mean) * torch.rsqrt(var + self.eps))
        w = torch.softmax(self.alpha, 0).to(h.dtype)  # [L+1]
        return self.gamma * torch.einsum("l,lbtd->btd", w, h)  # [B, T, D]
