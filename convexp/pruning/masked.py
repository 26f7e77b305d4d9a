"""Masked weight matrices: W' = M ⊙ W as a ``torch.nn.utils.parametrize`` parametrization.

Why a parametrization rather than a ``MaskedLinear`` subclass: the same :class:`WeightMask` works
unchanged on ``nn.Linear`` (weight [out, in]) and on convexp's ``GroupedLinear`` (weight
[G, in/G, out/G]), the layers keep their class and forward (so every mixer is supported with no
model code), and :func:`fold_masks` simply removes the parametrization leaving ``W ⊙ M`` behind,
which gives back an ordinary convexp model with its original parameter names.

While pruned, a layer's parameters are named ``<layer>.parametrizations.weight.original`` (W) and
``<layer>.parametrizations.weight.0.scores`` (S); the current threshold is the persistent buffer
``<layer>.parametrizations.weight.0.threshold`` (so a checkpoint restores the mask exactly).

Which matrices are masked (Sanh et al.: query, key, value, attention output, intermediate and output
dense of every layer; never embeddings, LayerNorms, biases, pooler or classifier). In convexp terms:
**every ``nn.Linear`` / ``GroupedLinear`` weight inside ``encoder.layers[i].mixer`` and
``encoder.layers[i].ffn``**, which is

* SelfAttention: ``q``/``k_proj``/``v`` linear parts (``Projection.linear``) and, for Chang et al.'s
  convolutional Q/K/V, the convolution heads' pointwise projection (``Projection.conv.pointwise``);
  ``out``;
* MixedAttention (ConvBERT): ``query``, ``key``, ``value``, ``out`` and the convolution branch's linear
  projections: span-aware key ``key_conv.pointwise``, ``conv_kernel`` (kernel generator),
  ``conv_value``, the conventional branch's ``conv.pointwise``;
* FeedForward: ``fc1``, ``fc2`` (dense or grouped; a grouped weight is one matrix for top-k).

Left dense (counted as "other parameters" in :func:`remaining_weights`): biases, LayerNorms, the
depthwise kernels (``SeparableConv1d.depthwise`` [C, K] and its bias, SelfAttention's eq. 7
``depthwise`` Conv1d), Chang et al.'s relative-position parameters (β [H, K], W^Q / W^K [d, K]) —
all O(D·K), under 2 % of a layer at K ≤ 17 — and, outside the layers, embeddings (incl. the E->D
projection), BERMO's scalar mix, the pooler and every task head.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..errors import UserError
from ..models.encoder import Encoder
from ..models.ffn import GroupedLinear
from .binarizers import (
    MIN_KEEP,
    SigmoidThresholdBinarizer,
    TopKBinarizer,
    expected_l0,
    hard_concrete_mask,
    l1_sigmoid,
    magnitude_mask,
)
from .methods import canonical_method

KEEP_ALL = {"magnitude": 1.0, "topk": 1.0, "sigmoid_threshold": 0.0, "l0": 1.0}  # threshold masking nothing
MASKABLE = (nn.Linear, GroupedLinear)


class WeightMask(nn.Module):
    """Parametrization W -> M ⊙ W with M = f(S) (see :mod:`.binarizers`).

    scores S: same shape as W (absent for magnitude, whose M is computed from the current |W|);
    threshold: kept fraction (topk, magnitude), τ (sigmoid_threshold) or unused (l0).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        method: str,
        mask_scale: float = 0.0,
        mask_init: str = "constant",
        threshold: float | None = None,
        min_keep: float = MIN_KEEP,
        name: str = "",
    ):
        super().__init__()
        self.method = canonical_method(method)
        self.min_keep = min_keep
        self.name = name  # qualified name of the masked layer, for logging
        self.scores = None
        if self.method != "magnitude":
            self.scores = nn.Parameter(torch.empty_like(weight, dtype=torch.float32))
            if mask_init == "constant":
                nn.init.constant_(self.scores, mask_scale)
            elif mask_init == "uniform":
                nn.init.uniform_(self.scores, -mask_scale, mask_scale)
            elif mask_init == "kaiming":
                nn.init.kaiming_uniform_(self.scores, a=5**0.5)
            else:
                raise ValueError(f"unknown mask_init {mask_init!r}; choose constant, uniform or kaiming")
        t = KEEP_ALL[self.method] if threshold is None else threshold
        # Persistent buffer (checkpoints restore the mask) mirrored by a Python float, so that the
        # forward never reads a device tensor back to the host. Change it with set_threshold().
        self.register_buffer("threshold", torch.tensor(float(t)))
        self._threshold = float(t)

    def set_threshold(self, threshold: float) -> None:
        self.threshold.fill_(float(threshold))
        self._threshold = float(threshold)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._threshold = float(self.threshold)

    def mask(self, weight: torch.Tensor, training: bool | None = None) -> torch.Tensor:  # M, shape of W
        """The mask for ``weight``; ``training`` defaults to the module's mode (matters for l0 only)."""
        training = self.training if training is None else training
        t = self._threshold
        if self.method == "magnitude":
            m = magnitude_mask(weight, t)
        elif self.method == "topk":
            m = TopKBinarizer.apply(self.scores, t)
        elif self.method == "sigmoid_threshold":
            m = SigmoidThresholdBinarizer.apply(self.scores, t, self.min_keep)
        else:
            m = hard_concrete_mask(self.scores, training)
        return m.to(weight.dtype)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:  # W' = M ⊙ W
        return weight * self.mask(weight)

    def extra_repr(self) -> str:
        return f"method={self.method}, threshold={self._threshold:g}"


# ---------------------------------------------------------------------------------------------
# Finding things
# ---------------------------------------------------------------------------------------------


def find_encoder(model: nn.Module) -> Encoder:
    """The convexp Encoder of ``model`` (an Encoder, or any model with an ``.encoder``)."""
    if isinstance(model, Encoder):
        return model
    enc = getattr(model, "encoder", None)
    if isinstance(enc, Encoder):
        return enc
    raise TypeError(f"{type(model).__name__} is neither a convexp Encoder nor has an .encoder")


def prunable_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, layer) of every maskable matrix: the nn.Linear / GroupedLinear modules inside
    each layer's mixer and FFN (masked or not)."""
    enc = find_encoder(model)
    prefix = "" if enc is model else "encoder."
    out = []
    for i, block in enumerate(enc.layers):
        for part in ("mixer", "ffn"):
            for name, mod in getattr(block, part).named_modules():
                if isinstance(mod, MASKABLE):
                    out.append((f"{prefix}layers.{i}.{part}.{name}", mod))
    return out


def weight_mask(layer: nn.Module) -> WeightMask | None:
    """The WeightMask on ``layer.weight``, or None."""
    if not parametrize.is_parametrized(layer, "weight"):
        return None
    found = [p for p in layer.parametrizations.weight if isinstance(p, WeightMask)]
    return found[0] if found else None


def masks(model: nn.Module) -> list[WeightMask]:
    return [m for m in model.modules() if isinstance(m, WeightMask)]


# ---------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------


def prune(
    model: nn.Module,
    method: str,
    mask_scale: float = 0.0,
    mask_init: str = "constant",
    threshold: float | None = None,
    min_keep: float = MIN_KEEP,
) -> list[WeightMask]:
    """Mask every prunable matrix of ``model`` in place; returns the new :class:`WeightMask` modules.

    ``threshold`` defaults to the value masking nothing (1 for topk/magnitude, 0 for
    sigmoid_threshold), so the outputs are unchanged until :func:`set_threshold` is called. l0's eval
    mask is all ones only for S ≥ log 11 (at BERMO's mask_scale 2.197, M = 0.98 at eval).
    """
    method = canonical_method(method)
    if masks(model):
        raise ValueError("model is already pruned (call fold_masks first to re-prune)")
    layers = prunable_layers(model)
    if not layers:  # a user's mixer and FFN without nn.Linear (models/parts.py)
        cfg = find_encoder(model).cfg
        raise UserError(
            f"pruning.method={method}: model.mixer={cfg.mixer} and model.ffn={cfg.ffn} have no nn.Linear "
            "to mask; pruning cannot apply to this model (pruning.method=none)"
        )
    created = []
    for name, layer in layers:
        wm = WeightMask(layer.weight, method, mask_scale, mask_init, threshold, min_keep, name)
        wm.to(layer.weight.device)
        parametrize.register_parametrization(layer, "weight", wm)
        created.append(wm)
    return created


def set_threshold(model: nn.Module, threshold: float) -> None:
    """Set every mask's threshold (call once per step with the value from the schedule)."""
    for m in masks(model):
        m.set_threshold(threshold)


def score_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The mask scores S (the reference trains them with their own LR, 1e-2, and no weight decay)."""
    return [m.scores for m in masks(model) if m.scores is not None]


def regularization(model: nn.Module, method: str | None = None) -> torch.Tensor:
    """Mean over masked matrices of the per-matrix penalty (the reference's ``regularization``).

    ``method``: ``"l1"`` or ``"sigmoid_threshold"`` -> mean σ(S); ``"l0"`` -> expected L0
    (mean σ(S − β·log(−l/r))); anything else -> 0. None = the masks' own method. Multiply by
    λ = final_lambda · (the multiplier of :func:`~.schedule.cubic_threshold`).
    """
    ms = [m for m in masks(model) if m.scores is not None]
    mode = method if method is not None else (ms[0].method if ms else None)
    mode = {"sigmoid_threshold": "l1", "sigmoied_threshold": "l1", "soft_movement": "l1"}.get(mode, mode)
    if not ms or mode not in ("l1", "l0"):
        p = next(model.parameters(), None)
        return torch.zeros((), device=p.device if p is not None else None)
    penalty = l1_sigmoid if mode == "l1" else expected_l0
    return torch.stack([penalty(m.scores) for m in ms]).mean()


def remaining_weights(model: nn.Module, scope: str = "layers") -> float:
    """Fraction of weights remaining, counted as Sanh et al.'s ``counts_parameters.py`` does.

    remaining = (kept entries of the prunable matrices + every other parameter in scope)
                / (every parameter in scope)

    * scope ``"layers"`` (default) = ``encoder.layers``: the transformer blocks, which is what the
      reference's "encoder" means (HF BERT's ``bert.encoder`` — no embeddings, no pooler; BERMO's
      "84M" BERT-base is this count, 85.05M) ; ``"encoder"`` = the whole convexp Encoder
      (adds embeddings, scalar mix, pooler). The task head is never counted. Mask scores are not
      parameters of the model being measured and are never counted.
    * kept entries of a masked matrix = non-zeros of its eval-mode mask (topk: exactly ⌊v·n⌋; l0:
      M > 0 as in the reference); of a prunable matrix that is not masked (e.g. after
      :func:`fold_masks`) = its non-zero entries, so folding does not change the count.
    """
    enc = find_encoder(model)
    if scope == "layers":
        root = enc.layers
    elif scope == "encoder":
        root = enc
    else:
        raise ValueError(f"scope must be 'layers' or 'encoder', got {scope!r}")
    kept = total = 0
    special = set()  # ids of the tensors counted by the prunable-matrix rule (and of scores)
    for name, layer in prunable_layers(model):
        wm = weight_mask(layer)
        with torch.no_grad():
            if wm is not None:
                w = layer.parametrizations.weight.original
                n_kept = int(torch.count_nonzero(wm.mask(w, training=False)))
                special.add(id(wm.scores))
            else:
                w = layer.weight
                n_kept = int(torch.count_nonzero(w))
        special.add(id(w))
        kept += n_kept
        total += w.numel()
    for p in root.parameters():
        if id(p) not in special:
            kept += p.numel()
            total += p.numel()
    return kept / total


def fold_masks(model: nn.Module) -> nn.Module:
    """Replace every masked weight by the plain parameter W ⊙ M (eval-mode mask), in place.

    The layers revert to their own classes and parameter names, so the result is an ordinary convexp
    model (loadable with the usual state dict) with the same eval-mode outputs. Returns ``model``.
    """
    for _, layer in prunable_layers(model):
        wm = weight_mask(layer)
        if wm is None:
            continue
        with torch.no_grad():
            m = wm.mask(layer.parametrizations.weight.original, training=False)
            parametrize.remove_parametrizations(layer, "weight", leave_parametrized=False)
            layer.weight.mul_(m)
    return model
