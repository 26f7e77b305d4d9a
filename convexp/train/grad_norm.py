"""The gradients' total 2-norm, computed once per optimizer step.

Two things in a step need it: the divergence check (``health.Health``: is it finite?) and gradient
clipping (``common.OptimizerStep``: scale the gradients by min(1, max_norm / (norm + 1e-6))).
Each computing its own would read every gradient twice more than the clipping needs; instead the
check computes it and hands it to the clipping through ``OptimizerStep.step_grad_norm``, and the
clipping only scales. ``total_norm`` then ``clip_with_norm`` is what ``clip_grad_norm_`` does, to
the bit (torch's own split of it, 2.6 and later; the fallbacks below do the same for older ones).

  total_norm(grads)                 fp32 0-d tensor on the gradients' device
  clip_with_norm(params, max, n)    scale the gradients in place, given their norm n
"""

from __future__ import annotations

import torch


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients together, fp32, on their device: one fused kernel per device
    and dtype (a 0-d CPU zero when there are none)."""
    if not grads:
        return torch.zeros(())
    get = getattr(torch.nn.utils, "get_total_norm", None)
    if get is None:  # torch < 2.6: clip_grad_norm_'s own computation, written out
        norms = torch._foreach_norm(grads, 2.0)
        return torch.linalg.vector_norm(torch.stack([n.to(grads[0].device) for n in norms]), 2.0).float()
    return get(grads, 2.0).float()


def clip_with_norm(params: list[torch.nn.Parameter], max_norm: float, norm: torch.Tensor) -> None:
    """Scale the gradients of ``params`` so that their total norm ``norm`` (``total_norm``) is
    at most ``max_norm``, without reading them to compute it again."""
    clip = getattr(torch.nn.utils, "clip_grads_with_norm_", None)
    if clip is not None:
        clip(params, max_norm, norm)
        return
    grads = [p.grad for p in params if p.grad is not None]  # torch < 2.6
    if grads:
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef.to(grads[0].device))
