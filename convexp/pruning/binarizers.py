"""Mask functions M = f(S) for W' = M ⊙ W (Sanh et al. 2020, "Movement Pruning"; BERMO §3.2).

Every function returns a mask of the same shape as its input ("per matrix": selection is over
the whole tensor it is given, never across tensors).

* :func:`magnitude_mask`  — M = 1 for the top v% of |W| (Zhu & Gupta 2017). No learned scores and
  no gradient through M: W only receives dL/dW = dL/dW' ⊙ M.
* :class:`TopKBinarizer`  — movement pruning: M = 1 for the top v% of the learned scores S. The
  straight-through estimator passes dL/dM unchanged to S; since W' = M ⊙ W gives dL/dM = dL/dW' ⊙ W,
  the score gradient is dS = dL/dW' ⊙ W (paper eq. 7: S accumulates −Σ_t ∂L/∂W · W).
* :class:`SigmoidThresholdBinarizer` — soft movement: M = [σ(S) > τ], straight-through (dS = dL/dM).
* :func:`hard_concrete_mask` — L0 regularisation (Louizos et al. 2018), differentiable by the
  reparameterisation trick, no straight-through.

Checked against the Hugging Face research project (``examples/research_projects/movement-pruning/
emmental/modules/binarizer.py`` and ``masked_nn.py``):

* top-k keeps ``int(v · n)`` entries; the reference sorts with an unstable sort, so ties (e.g. the
  constant ``mask_scale`` initialisation, where *every* score ties) are broken arbitrarily. Here the
  sort is stable: among equal scores the lower flat index wins, so the mask is deterministic.
  k = ⌊v·n + 1e-6⌋ (the epsilon only absorbs float error such as 0.29·100 = 28.999…).
* the threshold binarizer of the reference never keeps fewer than ``int(0.005·n) + 1`` entries
  ("at least 0.5 % of the weights are remaining"); kept here as ``min_keep`` (tie-safe: the
  fallback is the exact top-k of S instead of the reference's ``S > kthvalue``).
* hard concrete: l = −0.1, r = 1.1, β = 2/3; u is clamped to [1e-4, 1 − 1e-4]. At **eval** the
  reference uses s = σ(S) (no noise, no temperature) and the same stretch-and-clamp, so the eval
  mask is deterministic but *not binary*: M = clamp(1.2·σ(S) − 0.1, 0, 1), i.e. exactly 0 for
  σ(S) ≤ 1/12, exactly 1 for σ(S) ≥ 11/12 (S ≥ log 11 ≈ 2.398) and fractional in between. (BERMO's
  printed eqs. 3 and 6 use log S and a (ε−γ)/β factor; they look garbled, and the experiments ran
  the reference code, which is what is implemented.)
* expected L0 penalty: mean σ(S − β·log(−l/r)) (the reference's ``sigmoid(S - 2/3·log(0.1/1.1))``).
"""

from __future__ import annotations

import math

import torch

L0_LEFT, L0_RIGHT, L0_BETA = -0.1, 1.1, 2.0 / 3.0  # stretch interval (l, r) and temperature β
L0_EPS = 1e-4  # u ~ U(0, 1) is clamped to [eps, 1 - eps] as in the reference
MIN_KEEP = 0.005  # the threshold binarizer keeps at least int(0.005·n) + 1 entries


def keep_count(keep: float, n: int) -> int:
    """Number of entries top-k keeps out of n for a kept fraction ``keep`` in [0, 1]."""
    return min(n, max(0, int(keep * n + 1e-6)))


def topk_mask(values: torch.Tensor, k: int) -> torch.Tensor:
    """Binary mask (dtype of ``values``) with ones at the k largest entries of ``values``.

    Ties are broken by flat index (stable sort, lower index first), so the result is deterministic.
    """
    flat = values.detach().flatten()  # [n]
    order = torch.sort(flat, descending=True, stable=True).indices  # [n]
    mask = torch.zeros_like(flat)
    mask[order[:k]] = 1
    return mask.view_as(values)


def magnitude_mask(weight: torch.Tensor, keep: float) -> torch.Tensor:
    """M = 1 for the top ``keep`` fraction of |W| (no gradient flows through M)."""
    return topk_mask(weight.detach().abs(), keep_count(keep, weight.numel()))


class TopKBinarizer(torch.autograd.Function):
    """Movement pruning: M = 1 for the top ``keep`` fraction of S; straight-through backward."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, keep: float) -> torch.Tensor:  # [*] -> [*] in {0, 1}
        return topk_mask(scores, keep_count(keep, scores.numel()))

    @staticmethod
    def backward(ctx, grad_mask: torch.Tensor):  # dS = dL/dM
        return grad_mask, None


class SigmoidThresholdBinarizer(torch.autograd.Function):
    """Soft movement pruning: M = [σ(S) > τ], at least ``min_keep`` of the entries kept;
    straight-through backward."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, tau: float, min_keep: float = MIN_KEEP) -> torch.Tensor:
        mask = (torch.sigmoid(scores) > tau).to(scores.dtype)
        n = scores.numel()
        n_min = int(min_keep * n) + 1 if min_keep > 0 else 0
        if mask.sum() < n_min:
            mask = topk_mask(scores, min(n_min, n))
        return mask

    @staticmethod
    def backward(ctx, grad_mask: torch.Tensor):  # dS = dL/dM
        return grad_mask, None, None


def hard_concrete_mask(scores: torch.Tensor, training: bool) -> torch.Tensor:
    """L0 hard-concrete gate, differentiable in S.

    training: u ~ U(0, 1), s = σ((log u − log(1 − u) + S)/β)   (stochastic)
    eval:     s = σ(S)                                         (deterministic)
    both:     M = clamp(s·(r − l) + l, 0, 1)
    """
    if training:
        u = torch.rand_like(scores).clamp(L0_EPS, 1 - L0_EPS)
        s = torch.sigmoid((u.log() - (1 - u).log() + scores) / L0_BETA)
    else:
        s = torch.sigmoid(scores)
    return (s * (L0_RIGHT - L0_LEFT) + L0_LEFT).clamp(0.0, 1.0)


def expected_l0(scores: torch.Tensor) -> torch.Tensor:
    """Expected fraction of non-zero gates, mean P(z > 0) = mean σ(S − β·log(−l/r)); a scalar."""
    return torch.sigmoid(scores - L0_BETA * math.log(-L0_LEFT / L0_RIGHT)).mean()


def l1_sigmoid(scores: torch.Tensor) -> torch.Tensor:
    """Soft movement's penalty: ‖σ(S)‖₁ / n = mean σ(S); a scalar."""
    return torch.sigmoid(scores).mean()
