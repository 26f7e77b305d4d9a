"""Structured step: physically remove dead FFN units and dead attention heads (after :func:`fold_masks`).

Unstructured masks give no speed-up in dense PyTorch; removing whole rows/columns does (nn_pruning's
approach, cf. HF ``prune_heads``). Everything here is exact in eval mode (no dropout): a unit or head
is removed only when its contribution is zero or a constant, and constants are folded into a bias.

FFN unit j (h_j = act(x·W1[j] + b1[j]), output += h_j · W2[:, j]) is dead when
  * its fc2 column W2[:, j] is zero (contributes nothing), or
  * its fc1 row W1[j] is zero: h_j = act(b1[j]) is a constant, so b2 += act(b1[j])·W2[:, j].
Grouped FFNs (ConvBERT eq. 7) keep the same number of units in every group (the weight is
[G, in/G, out/G]), so each group loses min over groups of its dead count.

Attention head h (output += W_o[:, h]·softmax(...)·v_h) is dead when
  * its columns of the output matrix are zero, or
  * its value rows are zero (linear or convolutional value): v_h = b_v[h] at every position, and the
    attention weights sum to one, so the head outputs the constant W_o[:, h]·b_v[h] -> folded into the
    output bias. Not used with eq. 7's depthwise convolution on the values (which sees the padding
    boundary, so a constant v does not give a constant output).
A head whose Q and K rows are zero is *not* dead (it averages its values uniformly).

Each prunable mixer says what its heads are and slices its own projections (``dead_values``,
``value_bias``, ``keep_heads``, ``layer_size``, ``heads_fixed``: models/attention.py); this module
finds the dead ones, folds constants into the output bias and slices the output matrix.
Heads are removed without any model change for ``SelfAttention`` (every Chang et al. option: β is
sliced per head, the depthwise Conv1d per channel, the convolutional Q/K/V keep their order
[conv heads ; linear heads]) and for ``MixedAttention`` with conv_type ``none`` or ``conventional``
(the head count is only used by the self-attention branch). For conv_type ``sdconv`` / ``dynamic``
``MixedAttention.heads`` is shared by both branches (and sdconv's kernel reads the full query), so
head removal there needs a model change (``MixedAttention.heads_fixed`` says so in the report); their FFN units
are still removed. At least one head per layer and one unit per FFN (group) is always kept, so the
shapes stay valid (a fully dead mixer keeps one dead head, which contributes 0 or a constant).

A structurally pruned model no longer matches its ModelConfig's global sizes (head count /
intermediate size vary per layer): :func:`pruned_config` gives the config with ``layer_sizes`` that
rebuilds exactly its shapes, so ``save_model_dir(model, pruned_config(model), dir)`` saves a model
directory that loads like any other (``convexp export`` does this, see :mod:`convexp.export`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from ..models.config import ModelConfig
from ..models.parts import builtin_part
from ..models.ffn import FeedForward, GroupedLinear
from ..models.slicing import head_features, is_zero, linear_copy, rows
from .masked import find_encoder, masks

USER_PART_NOTE = (
    "model.{kind}={name} is your own module: its {what} are not removed (structured pruning knows the "
    "built-in parts' shapes only); its pruned weights stay in place as zeros"
)


@dataclass
class StructuredSummary:
    heads_before: list[int] = field(default_factory=list)  # per layer
    heads_after: list[int] = field(default_factory=list)
    ffn_before: list[int] = field(default_factory=list)  # intermediate units per layer
    ffn_after: list[int] = field(default_factory=list)
    params_before: int = 0  # encoder.layers parameters
    params_after: int = 0
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Small helpers: new layers with selected rows / columns
# ---------------------------------------------------------------------------------------------


def _grouped(weight: torch.Tensor, bias: torch.Tensor) -> GroupedLinear:
    G, i, o = weight.shape
    gl = GroupedLinear(G * i, G * o, G).to(weight.device, weight.dtype)
    with torch.no_grad():
        gl.weight.copy_(weight)
        gl.bias.copy_(bias)
    return gl


def _check_unmasked(model: nn.Module) -> None:
    if masks(model):
        raise ValueError("fold_masks(model) first: the structured step works on plain weights")


def layers_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in find_encoder(model).layers.parameters())


def layer_sizes(model: nn.Module) -> list[dict]:
    """Per layer: {"heads": self-attention heads, "intermediate": FFN units} and, for Chang et al.'s
    convolutional Q/K/V (conv_qkv), "conv_heads": how many of those heads are convolutional. The
    format of ``ModelConfig.layer_sizes``, which rebuilds these shapes."""
    enc = find_encoder(model)
    out = []
    for i, block in enumerate(enc.layers):
        built = enc.cfg.layer_size(i)  # a user's part keeps the sizes it was built with
        size = {"heads": built["heads"], "intermediate": built["intermediate"]}
        if isinstance(block.ffn, FeedForward):
            w1 = block.ffn.fc1.weight  # [I, D], or grouped [G, D/G, I/G]
            size["intermediate"] = w1.shape[0] if w1.dim() == 2 else w1.shape[0] * w1.shape[2]
        if hasattr(block.mixer, "layer_size"):  # the mixer's own heads (and conv_qkv's conv heads)
            size.update(block.mixer.layer_size())
        out.append(size)
    return out


def pruned_config(model: nn.Module) -> ModelConfig:
    """The model's ModelConfig with ``layer_sizes`` set to its actual per-layer sizes (None when
    every layer still has the config's global sizes), so ``Encoder(cfg)`` builds its exact shapes."""
    cfg = find_encoder(model).cfg
    sizes = layer_sizes(model)
    uniform = {"heads": cfg.attn_heads, "intermediate": cfg.intermediate_size}
    if cfg.conv_qkv and builtin_part(cfg, "mixer") is not None:  # the default split: half the heads
        uniform["conv_heads"] = cfg.attn_heads // 2
    return replace(cfg, layer_sizes=None if all(s == uniform for s in sizes) else sizes)


# ---------------------------------------------------------------------------------------------
# FFN
# ---------------------------------------------------------------------------------------------


def dead_ffn_units(ffn: FeedForward) -> tuple[torch.Tensor, torch.Tensor]:
    """(dead_in, dead_out): bool [I] (dense) or [G, I/G] (grouped); dead_in = zero fc1 row,
    dead_out = zero fc2 column."""
    w1, w2 = ffn.fc1.weight, ffn.fc2.weight
    if isinstance(ffn.fc1, GroupedLinear):  # w1 [G, D/G, I/G], w2 [G, I/G, D/G]
        return is_zero(w1, 1), is_zero(w2, 2)
    return is_zero(w1, 1), is_zero(w2, 0)  # w1 [I, D], w2 [D, I]


@torch.no_grad()
def prune_ffn(ffn: FeedForward) -> int:
    """Remove dead intermediate units of ``ffn`` in place (folding constants into fc2's bias).
    Returns the number of units removed."""
    dead_in, dead_out = dead_ffn_units(ffn)
    dead = dead_in | dead_out
    b1 = ffn.fc1.bias
    const = ffn.act(b1.float()).to(b1.dtype)  # act(b1): the output of a unit with a zero fc1 row
    if isinstance(ffn.fc1, GroupedLinear):
        G, per = dead.shape
        n_remove = min(min(int(d.sum()) for d in dead), per - 1)  # same count in every group
        if n_remove == 0:
            return 0
        w1, w2, b2 = ffn.fc1.weight, ffn.fc2.weight, ffn.fc2.bias.clone()  # [G, D/G, I/G], [G, I/G, D/G]
        keep_idx, Dg = [], w2.shape[2]
        for g in range(G):
            removed = torch.nonzero(dead[g]).flatten()[:n_remove]
            for c in removed.tolist():
                if dead_in[g, c] and not dead_out[g, c]:
                    b2[g * Dg : (g + 1) * Dg] += const[g * per + c] * w2[g, c]
            keep = torch.ones(per, dtype=torch.bool, device=dead.device)
            keep[removed] = False
            keep_idx.append(torch.nonzero(keep).flatten())
        idx = torch.stack(keep_idx)  # [G, per - n_remove]
        new_w1 = torch.stack([w1[g][:, idx[g]] for g in range(G)])  # [G, D/G, per']
        new_w2 = torch.stack([w2[g][idx[g]] for g in range(G)])  # [G, per', D/G]
        flat = (idx + torch.arange(G, device=idx.device)[:, None] * per).flatten()  # kept units
        ffn.fc1 = _grouped(new_w1, b1[flat])
        ffn.fc2 = _grouped(new_w2, b2)
        return n_remove * G
    keep = ~dead
    if not keep.any():
        keep[0] = True  # keep one unit so the shapes stay valid
    removed = ~keep
    fold = removed & dead_in & ~dead_out
    b2 = ffn.fc2.bias + ffn.fc2.weight[:, fold] @ const[fold]  # [D]
    idx = torch.nonzero(keep).flatten()
    ffn.fc1 = rows(ffn.fc1, idx)
    ffn.fc2 = linear_copy(ffn.fc2.weight[:, idx], b2)
    return int(removed.sum())


# ---------------------------------------------------------------------------------------------
# Attention heads
# ---------------------------------------------------------------------------------------------


def dead_heads(mixer: nn.Module) -> tuple[list[bool], list[bool]]:
    """(dead_out, dead_v) per self-attention head: zero output columns / zero value rows (the
    mixer's own ``dead_values``)."""
    H, d = mixer.heads, mixer.head_dim
    w_o = mixer.out.weight  # [D, in]; the self-attention heads are the first H·d columns
    return [bool(is_zero(w_o[:, h * d : (h + 1) * d], (0, 1))) for h in range(H)], mixer.dead_values()


def prunable(mixer: nn.Module) -> bool:
    """Whether a mixer's heads can be removed: it has the protocol (``heads``, ``head_dim``, ``out``,
    ``dead_values``, ``value_bias``, ``keep_heads``: SelfAttention, MixedAttention) and no reason not
    to (``heads_fixed``)."""
    return hasattr(mixer, "keep_heads") and not mixer.heads_fixed


@torch.no_grad()
def prune_heads(mixer: nn.Module) -> int:
    """Remove a mixer's dead self-attention heads in place; returns the number removed (0 where
    its heads cannot be removed). A head whose values are a constant leaves W_o[:, h]·b_v[h] in the
    output bias; the mixer slices its own projections (``keep_heads``), the output matrix here."""
    if not prunable(mixer):
        return 0
    H, d = mixer.heads, mixer.head_dim
    dead_out, dead_v = dead_heads(mixer)
    dead = [o or v for o, v in zip(dead_out, dead_v)]
    keep = [h for h in range(H) if not dead[h]] or [0]
    removed = [h for h in range(H) if h not in keep]
    if not removed:
        return 0
    w_o, b_o = mixer.out.weight, mixer.out.bias.clone()
    for h in removed:  # constant head output W_o[:, h]·b_v[h] -> output bias
        if dead_v[h] and not dead_out[h]:
            b_o += w_o[:, h * d : (h + 1) * d] @ mixer.value_bias(h)
    feat = head_features(keep, d, w_o.device)
    rest = torch.arange(H * d, w_o.shape[1], device=w_o.device)  # ConvBERT's convolution-branch columns stay
    mixer.out = linear_copy(w_o[:, torch.cat([feat, rest])], b_o)
    mixer.keep_heads(keep)
    return len(removed)


# ---------------------------------------------------------------------------------------------
# The whole model
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def remove_dead_structures(model: nn.Module, heads: bool = True, ffn: bool = True) -> StructuredSummary:
    """Remove every dead head and FFN unit of every layer, in place (call :func:`fold_masks` first).
    Exact in eval mode."""
    _check_unmasked(model)
    s = StructuredSummary(params_before=layers_parameters(model))
    before = layer_sizes(model)
    cfg = find_encoder(model).cfg
    for block in find_encoder(model).layers:
        if heads:
            if not hasattr(block.mixer, "keep_heads"):
                _note(s, USER_PART_NOTE.format(kind="mixer", name=cfg.mixer, what="heads"))
            elif block.mixer.heads_fixed:
                _note(s, block.mixer.heads_fixed)
            else:
                prune_heads(block.mixer)
        if ffn:
            if isinstance(block.ffn, FeedForward):
                prune_ffn(block.ffn)
            else:
                _note(s, USER_PART_NOTE.format(kind="ffn", name=cfg.ffn, what="units"))
    after = layer_sizes(model)
    s.heads_before, s.heads_after = [x["heads"] for x in before], [x["heads"] for x in after]
    s.ffn_before, s.ffn_after = [x["intermediate"] for x in before], [x["intermediate"] for x in after]
    s.params_after = layers_parameters(model)
    return s


def _note(summary: StructuredSummary, note: str) -> None:
    if note not in summary.notes:
        summary.notes.append(note)


def _forward_s(model: nn.Module, ids: torch.Tensor) -> float:
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    model(ids)
    sync()
    return time.perf_counter() - t0


def measure_speedup(
    dense_model: nn.Module,
    pruned_model: nn.Module,
    batch: int = 32,
    seq_len: int = 128,
    repeats: int = 10,
    warmup: int = 3,
    seed: int = 0,
) -> dict:
    """Median eval-mode forward time of both models on the same random batch (on the dense model's
    device), the two models timed alternately so that a change in the machine's load hits both.
    Returns {"dense_ms", "pruned_ms", "speedup", "dense_params", "pruned_params"} (params of
    encoder.layers). A measurement, not a guarantee: time it on the hardware you care about."""
    enc = find_encoder(dense_model)
    device = next(dense_model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, enc.cfg.vocab_size, (batch, seq_len), generator=g).to(device)
    modes = (dense_model.training, pruned_model.training)
    dense_model.eval(), pruned_model.eval()
    times: dict[str, list[float]] = {"dense": [], "pruned": []}
    try:
        with torch.inference_mode():
            for i in range(warmup + repeats):
                for name, model in (("dense", dense_model), ("pruned", pruned_model)):
                    t = _forward_s(model, ids)
                    if i >= warmup:
                        times[name].append(t)
    finally:
        dense_model.train(modes[0]), pruned_model.train(modes[1])
    dense, pruned = (1000 * statistics.median(times[k]) for k in ("dense", "pruned"))
    return {
        "dense_ms": dense,
        "pruned_ms": pruned,
        "speedup": dense / pruned,
        "dense_params": layers_parameters(dense_model),
        "pruned_params": layers_parameters(pruned_model),
    }
