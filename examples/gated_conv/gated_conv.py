"""A gated depthwise convolution in place of self-attention: an example of your own mixer.

    y = W_o (DWConv_K(W_v x) ⊙ σ(W_g x))

Each channel of the values is convolved over the sequence with its own kernel of K taps (a
lightweight convolution without the softmax, one kernel per channel), and a sigmoid gate computed
from the token itself decides how much of it passes. No attention, no positions: the convolution's
window is the only way tokens see each other, as in Chang et al.'s "convolution only" rows.

convexp's mixer protocol (README "Your own idea"): ``Class(cfg, layer, **options)``, an nn.Module
whose ``forward(x, keep)`` maps x [B, L, D] to [B, L, D]; ``keep`` [B, L] is True on real tokens
(None: nothing is padded). Padding must not reach real positions: the values are zeroed there
before the convolution, so a padded sequence gives the same outputs as the sequence alone.
"""

import torch
from torch import nn


class GatedDepthwiseConv(nn.Module):
    def __init__(self, cfg, layer: int, kernel_size: int | None = None):
        super().__init__()
        D = cfg.hidden_size
        K = kernel_size or cfg.kernel_size  # an option, else the preset's kernel (17 for Chang et al.'s)
        if K % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a centred window), got {K}")
        self.value = nn.Linear(D, D)
        self.gate = nn.Linear(D, D)
        self.conv = nn.Conv1d(D, D, K, padding=K // 2, groups=D)  # depthwise: one kernel per channel
        self.out = nn.Linear(D, D)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        v = self.value(x)  # [B, L, D]
        if keep is not None:
            v = v * keep.unsqueeze(-1).to(v.dtype)  # padding contributes nothing to the windows
        c = self.conv(v.transpose(1, 2)).transpose(1, 2)  # [B, L, D]
        return self.out(c * torch.sigmoid(self.gate(x)))
