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

Heads are removed without any model change for ``SelfAttention`` (every Chang et al. option: β is
sliced per head, the depthwise Conv1d per channel, the convolutional Q/K/V keep their order
[conv heads ; linear heads]) and for ``MixedAttention`` with conv_type ``none`` or ``conventional``
(the head count is only used by the self-attention branch). For conv_type ``sdconv`` / ``dynamic``
``MixedAttention.heads`` is shared by both branches (and sdconv's kernel reads the full query), so
head removal there needs a model change (see the report / :data:`MIXED_HEADS_NOTE`); their FFN units
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
import warnings
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from ..models.attention import MixedAttention, Projection, SelfAttention
from ..models.config import ModelConfig
from ..models.parts import builtin_part
from ..models.ffn import FeedForward, GroupedLinear
from .masked import find_encoder, masks

MIXED_HEADS_NOTE = (
    "MixedAttention heads are shared by the self-attention and the sdconv/dynamic convolution branch; "
    "removing heads there needs separate head counts in the model (not done)"
)
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


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
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


def _rows(lin: nn.Linear, idx: torch.Tensor) -> nn.Linear:  # keep output features idx
    return _linear(lin.weight[idx], lin.bias[idx] if lin.bias is not None else None)


def _cols(lin: nn.Linear, idx: torch.Tensor) -> nn.Linear:  # keep input features idx
    return _linear(lin.weight[:, idx], lin.bias)


def _grouped(weight: torch.Tensor, bias: torch.Tensor) -> GroupedLinear:
    G, i, o = weight.shape
    gl = GroupedLinear(G * i, G * o, G).to(weight.device, weight.dtype)
    with torch.no_grad():
        gl.weight.copy_(weight)
        gl.bias.copy_(bias)
    return gl


def _zero(t: torch.Tensor, dim) -> torch.Tensor:
    """True where the slices of ``t`` reduced over ``dim`` are all zero."""
    return t.detach().abs().sum(dim) == 0


def _check_unmasked(model: nn.Module) -> None:
    if masks(model):
        raise ValueError("fold_masks(model) first: the structured step works on plain weights")


def layers_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in find_encoder(model).layers.parameters())


def _conv_heads(mixer: SelfAttention, conv_qkv: str) -> int:
    """Convolutional heads of the conv_qkv projections (all sliced alike, so the first one present
    tells; heads // 2, the default, when none of them exists, e.g. q without content attention)."""
    for name, proj in (("q", mixer.q), ("k", mixer.k_proj), ("v", mixer.v)):
        if name in conv_qkv and proj is not None:
            return proj.conv.pointwise.weight.shape[0] // mixer.head_dim if proj.conv is not None else 0
    return mixer.heads // 2


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
        if isinstance(block.mixer, (SelfAttention, MixedAttention)):
            size["heads"] = block.mixer.heads
        if enc.cfg.conv_qkv and isinstance(block.mixer, SelfAttention):
            size["conv_heads"] = _conv_heads(block.mixer, enc.cfg.conv_qkv)
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
        return _zero(w1, 1), _zero(w2, 2)
    return _zero(w1, 1), _zero(w2, 0)  # w1 [I, D], w2 [D, I]


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
    ffn.fc1 = _rows(ffn.fc1, idx)
    ffn.fc2 = _linear(ffn.fc2.weight[:, idx], b2)
    return int(removed.sum())


# ---------------------------------------------------------------------------------------------
# Attention heads
# ---------------------------------------------------------------------------------------------


def _projection_parts(proj: Projection, d: int) -> list[tuple[nn.Linear, int]]:
    """Per head of a Projection, in head order [conv heads ; linear heads]: (the nn.Linear holding
    its d output rows, first row)."""
    parts = []
    if proj.conv is not None:
        pw = proj.conv.pointwise
        parts += [(pw, i * d) for i in range(pw.weight.shape[0] // d)]
    parts += [(proj.linear, i * d) for i in range(proj.linear.weight.shape[0] // d)]
    return parts


def _slice_projection(proj: Projection, keep: list[int], d: int) -> None:
    """Keep heads ``keep`` (sorted) of ``proj``, in place."""
    dev = proj.linear.weight.device
    n_conv = proj.conv.pointwise.weight.shape[0] // d if proj.conv is not None else 0
    conv_heads = [h for h in keep if h < n_conv]
    lin_heads = [h - n_conv for h in keep if h >= n_conv]

    def rows(heads):
        return torch.tensor([h * d + c for h in heads for c in range(d)], dtype=torch.long, device=dev)

    if proj.conv is not None:
        if conv_heads:
            proj.conv.pointwise = _rows(proj.conv.pointwise, rows(conv_heads))
        else:
            proj.conv = None  # no convolution head left: Projection.forward returns the linear part
    proj.linear = _rows(proj.linear, rows(lin_heads))


def _head_dim(mixer: nn.Module) -> int:
    return mixer.head_dim if isinstance(mixer, SelfAttention) else mixer.query.weight.shape[0] // mixer.heads


def dead_heads(mixer: nn.Module) -> tuple[list[bool], list[bool]]:
    """(dead_out, dead_v) per self-attention head: zero output columns / zero value rows."""
    H, d = mixer.heads, _head_dim(mixer)
    w_o = mixer.out.weight  # [D, in]; the self-attention heads are the first H·d columns
    dead_out = [bool(_zero(w_o[:, h * d : (h + 1) * d], (0, 1))) for h in range(H)]
    if isinstance(mixer, SelfAttention):
        dead_v = [bool(_zero(lin.weight[r : r + d], (0, 1))) for lin, r in _projection_parts(mixer.v, d)]
        if mixer.depthwise is not None:
            dead_v = [False] * H
    else:
        dead_v = [bool(_zero(mixer.value.weight[h * d : (h + 1) * d], (0, 1))) for h in range(H)]
    return dead_out, dead_v


def _value_bias(mixer: nn.Module, h: int, d: int) -> torch.Tensor:  # b_v of head h, [d]
    if isinstance(mixer, SelfAttention):
        lin, r = _projection_parts(mixer.v, d)[h]
        return lin.bias[r : r + d]
    return mixer.value.bias[h * d : (h + 1) * d]


@torch.no_grad()
def prune_heads(mixer: nn.Module) -> int:
    """Remove dead self-attention heads of a SelfAttention or MixedAttention (conv_type none /
    conventional) in place; returns the number removed (0 for mixers where it is not supported)."""
    if isinstance(mixer, MixedAttention) and mixer.conv_type not in ("none", "conventional"):
        return 0
    H, d = mixer.heads, _head_dim(mixer)
    dead_out, dead_v = dead_heads(mixer)
    dead = [o or v for o, v in zip(dead_out, dead_v)]
    keep = [h for h in range(H) if not dead[h]] or [0]
    removed = [h for h in range(H) if h not in keep]
    if not removed:
        return 0
    w_o, b_o = mixer.out.weight, mixer.out.bias.clone()
    for h in removed:  # constant head output W_o[:, h]·b_v[h] -> output bias
        if dead_v[h] and not dead_out[h]:
            b_o += w_o[:, h * d : (h + 1) * d] @ _value_bias(mixer, h, d)
    dev = w_o.device
    feat = torch.tensor([h * d + c for h in keep for c in range(d)], dtype=torch.long, device=dev)
    rest = torch.arange(H * d, w_o.shape[1], device=dev)  # ConvBERT's convolution-branch columns stay
    mixer.out = _linear(w_o[:, torch.cat([feat, rest])], b_o)
    if isinstance(mixer, SelfAttention):
        for name in ("q", "k_proj", "v"):
            proj = getattr(mixer, name)
            if proj is not None:
                _slice_projection(proj, keep, d)
        if mixer.fixed is not None:  # β [H, K]
            mixer.fixed = nn.Parameter(mixer.fixed[keep].clone())
        if mixer.depthwise is not None:  # per-channel Conv1d over the H·d value channels
            old = mixer.depthwise
            C, K = len(feat), old.kernel_size[0]
            new = nn.Conv1d(C, C, K, padding=old.padding, groups=C).to(old.weight.device, old.weight.dtype)
            new.weight.copy_(old.weight[feat])
            new.bias.copy_(old.bias[feat])
            mixer.depthwise = new
    else:
        mixer.query, mixer.key, mixer.value = (_rows(m, feat) for m in (mixer.query, mixer.key, mixer.value))
    mixer.heads = len(keep)
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
            if isinstance(block.mixer, MixedAttention) and block.mixer.conv_type in ("sdconv", "dynamic"):
                _note(s, MIXED_HEADS_NOTE)
            elif isinstance(block.mixer, (SelfAttention, MixedAttention)):
                prune_heads(block.mixer)
            else:
                _note(s, USER_PART_NOTE.format(kind="mixer", name=cfg.mixer, what="heads"))
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
