"""BERMO's layer mixing (BERMO eq. 1; ELMo's scalar mix)."""

from __future__ import annotations

import torch
from torch import nn

from .config import NORMS
from .dropout import Dropout


class ScalarMix(nn.Module):
    """Combine = γ Σ_j softmax(α)_j · norm(h)_j over the embedding output and every layer output
    (eq. 1), with dropout on the normalised stack. Only L+2 parameters: α (Xavier-initialised)
    and γ (init 1).

    BERMO's text ("we normalize the stacked features across the layer … similar to Layer
    Normalization where channels are replaced by the features of the layers", §3, Figure 4) allows
    two readings; ``norm`` offers both, no affine parameters in either:

    * ``"per_layer"`` (default): a LayerNorm of each layer's features, over the hidden axis D, so
      every h_j enters the mix at the same scale. This is what ELMo's scalar mix does with layer
      normalisation on (AllenNLP ``ScalarMix(do_layer_norm=True)`` normalises each layer's tensor
      on its own), and it keeps eq. 1 a weighted *average* of features: with uniform weights the
      mix is the mean of the normalised layers. Chosen as default for those two reasons.
    * ``"layers"``: for each element (token, channel), normalise the L+1 values across the layer
      axis (the layers are LayerNorm's "channels"). Every element's normalised values sum to zero
      over the layers, so with uniform weights the mix is exactly zero and at initialisation it
      carries only the weights' deviations from uniform.
    * ``"none"``: the raw layer outputs.
    """

    def __init__(self, num_inputs: int, dropout: float = 0.1, eps: float = 1e-6, norm: str = "per_layer"):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"scalar_mix_norm must be one of {NORMS}, got {norm!r}")
        self.alpha = nn.Parameter(torch.empty(num_inputs))
        self.gamma = nn.Parameter(torch.ones(()))
        self.dropout = Dropout(dropout)
        self.eps, self.norm = eps, norm
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = (6.0 / (1 + self.alpha.numel())) ** 0.5  # Xavier-uniform for a [1, L+1] matrix
        nn.init.uniform_(self.alpha, -bound, bound)

    def normalise(self, h: torch.Tensor) -> torch.Tensor:
        """h: [L+1, B, T, D] -> the same shape, normalised as ``self.norm`` says."""
        if self.norm == "none":
            return h
        axis = 0 if self.norm == "layers" else -1
        mean = h.mean(axis, keepdim=True)
        var = h.var(axis, unbiased=False, keepdim=True)
        return (h - mean) * torch.rsqrt(var + self.eps)

    def forward(self, hidden_states: list[torch.Tensor]) -> torch.Tensor:
        h = self.dropout(self.normalise(torch.stack(hidden_states)))  # [L+1, B, T, D]
        w = torch.softmax(self.alpha, 0).to(h.dtype)  # [L+1]
        return self.gamma * torch.einsum("l,lbtd->btd", w, h)  # [B, T, D]
