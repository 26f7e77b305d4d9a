"""The analysis figures of ``convexp report``: attention maps, diagonal concentration, learned kernels.

1. Average attention maps (ConvBERT Fig. 2): the probabilities α_ij that each layer's softmax
   produces, per head, averaged over example sequences of one length (no padding). For Chang et
   al.'s variants they include the relative terms (fixed β, dynamic q·W^Q, key-based k·W^K); for
   ConvBERT's mixed attention only the self-attention heads have a map. Forward hooks on the mixers
   ask each mixer for them (``attention_probs(x, keep)``, the mixer's own score code): the model's
   forward pass is untouched.

2. Diagonal concentration (ConvBERT appendix §6.5, in the Chinese translation of the paper; Table 8)
   of an attention map M:

       C = Σ_{|i-j|≤4} M_ij / Σ_{|i-j|>4} M_ij

   a ratio of attention mass inside the band |i - j| ≤ 4 to the mass outside it (not a fraction),
   so an identity map has C = ∞ and a uniform L×L map has C = n / (L² - n), with
   n = (2w+1)L - w(w+1) band cells (w = 4). We apply it to averaged maps: per head to M_lh, per
   layer to the head-averaged map M_l = mean_h M_lh, overall to the map averaged over layers and
   heads. Every row of M sums to 1, so C of an average is the pooled band mass over the pooled
   off-band mass (a mean of per-head ratios would be dominated by the most local head).

3. Learned relative-convolution kernels (Chang et al. Figs. 2-3): the fixed lightweight kernels
   β_{h, j-i} (eq. 4, [heads, 2k+1] per layer) and the depthwise kernels β_{j-i, c} (eq. 7,
   [channels, 2k+1] per layer), column t holding offset j - i = t - k (negative: earlier tokens).
   Fig. 3 sorts channels "such that kernels differentiating the previous and next token are grouped
   together"; we sort each layer's channels by β_{+1,c} - β_{-1,c} (ascending), so channels that
   prefer the previous token come first, channels indifferent between the two sit in the middle,
   and channels that prefer the next token come last.

Figures are drawn with matplotlib's object API (``Figure`` + Agg via ``savefig``; no pyplot, no
display, no global backend switch).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from matplotlib.figure import Figure

from ..models.config import ModelConfig
from ..models.encoder import Encoder
from ..models.io import load_encoder_weights, read_model_config

WIDTH = 4  # ConvBERT §6.5: |i - j| ≤ 4 is "local"
NUM_EXAMPLES, SEQ_LEN, SEED = 8, 64, 0  # default examples


def load_encoder(model_dir: Path) -> Encoder:
    """The Encoder of a convexp model directory (``encoder.*`` weights), in eval mode."""
    encoder = Encoder(read_model_config(model_dir))
    load_encoder_weights(encoder, model_dir)
    return encoder.eval()


# ---------------------------------------------------------------------------------------------
# Attention maps
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def attention_maps(
    encoder: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention probabilities of every layer for a batch: input_ids [B, L] -> [layers, B, H, L, L]."""
    maps = []
    hooks = [
        layer.mixer.register_forward_hook(lambda m, args, out: maps.append(m.attention_probs(*args)))
        for layer in encoder.layers
    ]
    try:
        encoder(input_ids, attention_mask)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack(maps)


def average_attention(encoder: Encoder, examples: list[list[int]]) -> torch.Tensor:
    """Attention maps averaged over examples: [layers, H, L, L].

    Examples of unequal length are cut to the shortest, so no position is padding."""
    L = min(len(e) for e in examples)
    ids = torch.tensor([e[:L] for e in examples])  # [B, L]
    return attention_maps(encoder, ids).mean(dim=1)


def diagonal_concentration(M: torch.Tensor, width: int = WIDTH) -> torch.Tensor:
    """C = Σ_{|i-j|≤w} M_ij / Σ_{|i-j|>w} M_ij (ConvBERT appendix §6.5, w = 4) of maps M [..., L, L] -> [...].

    ∞ when no mass lies outside the band (e.g. the identity)."""
    L = M.shape[-1]
    if L <= width + 1:
        raise ValueError(f"C needs maps longer than {width + 1} positions (|i - j| > {width}), got L = {L}")
    pos = torch.arange(L, device=M.device)
    band = (pos[:, None] - pos[None, :]).abs() <= width  # [L, L]
    M = M.double()
    return (M * band).sum((-1, -2)) / (M * ~band).sum((-1, -2))


def uniform_concentration(L: int, width: int = WIDTH) -> float:
    """C of a uniform L×L map: n / (L² - n) with n = (2w+1)L - w(w+1) band cells."""
    if L <= width + 1:
        return math.inf
    n = (2 * width + 1) * L - width * (width + 1)
    return n / (L * L - n)


# ---------------------------------------------------------------------------------------------
# Learned kernels
# ---------------------------------------------------------------------------------------------


def fixed_kernels(encoder: Encoder) -> torch.Tensor | None:
    """Chang et al. eq. 4 β_{h, j-i} of every layer: [layers, H, 2k+1] (column t: offset t - k), or None."""
    ws = [getattr(layer.mixer, "fixed", None) for layer in encoder.layers]
    return None if ws[0] is None else torch.stack([w.detach() for w in ws])


def depthwise_kernels(encoder: Encoder) -> torch.Tensor | None:
    """Chang et al. eq. 7 β_{j-i, c} of every layer: [layers, C, 2k+1] (column t: offset t - k), or None.

    The convolution of the values is y_ic = Σ_t w[c, t] v_{i+t-k, c} (cross-correlation), so column t
    weights the token at offset j - i = t - k, as for β."""
    convs = [getattr(layer.mixer, "depthwise", None) for layer in encoder.layers]
    return None if convs[0] is None else torch.stack([c.weight.detach()[:, 0, :] for c in convs])


def previous_next_order(w: torch.Tensor) -> torch.Tensor:
    """Channel order for kernels w [C, 2k+1]: ascending β_{+1,c} - β_{-1,c} (previous-token first). [C]"""
    k = w.shape[-1] // 2
    if k == 0:
        return torch.arange(w.shape[0])
    return torch.argsort(w[:, k + 1] - w[:, k - 1], stable=True)


# ---------------------------------------------------------------------------------------------
# Default examples
# ---------------------------------------------------------------------------------------------


def default_examples(
    model_dir: Path, cfg: ModelConfig, n: int = NUM_EXAMPLES, seq_len: int = SEQ_LEN
) -> tuple[list[list[int]], str]:
    """n sequences of one length, "[CLS] ... [SEP]", and where they came from ("synthetic" or "random").

    With the tokenizer saved in the model directory: consecutive chunks of the built-in synthetic
    corpus (seed 0). Without one (or with a vocabulary larger than the model's): random ids from
    [5, vocab) (the 5 special ids of convexp's tokenizers excluded), seed 0."""
    from ..data.errors import TokenizerError
    from ..data.synthetic import synthetic_corpus
    from ..data.tokenizer import Tokenizer

    if cfg.absolute_positions:
        seq_len = min(seq_len, cfg.max_position_embeddings)
    try:
        tok = Tokenizer.load(model_dir)
    except TokenizerError:
        tok = None
    if tok is not None and tok.vocab_size <= cfg.vocab_size:
        need, docs, stream = n * (seq_len - 2), n, []
        while len(stream) < need and docs <= 64 * n:
            stream = [t for ids in tok.encode_batch(synthetic_corpus(docs, SEED)) for t in ids]
            docs *= 2
        if len(stream) >= need:
            body = [stream[i * (seq_len - 2) : (i + 1) * (seq_len - 2)] for i in range(n)]
            return [[tok.cls_id, *b, tok.sep_id] for b in body], "synthetic"
    low = 5 if cfg.vocab_size > 5 else 0
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(low, cfg.vocab_size, (n, seq_len), generator=g).tolist(), "random"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def _fmt(c: float) -> str:
    return "∞" if math.isinf(c) else f"{c:.2f}"


def plot_attention(maps: torch.Tensor, path: Path, title: str, width: int = WIDTH) -> None:
    """Grid of averaged maps [layers, H, L, L]: one column per layer, the head mean on top, then one
    row per head; each panel titled with its C, the overall C in the figure title. Each panel has its
    own colour scale from 0 to its largest probability."""
    layers, H, L, _ = maps.shape
    c_head, c_layer = diagonal_concentration(maps, width), diagonal_concentration(maps.mean(1), width)
    c_all = diagonal_concentration(maps.mean((0, 1)), width).item()
    fig = Figure(figsize=(max(1.45 * layers, 7.0), 1.6 * (H + 1) + 0.9), layout="constrained")
    axes = fig.subplots(H + 1, layers, squeeze=False)
    for l in range(layers):
        panels = [(maps[l].mean(0), f"layer {l + 1}: mean\nC={_fmt(c_layer[l].item())}")]
        panels += [
            (maps[l, h], f"layer {l + 1}: head {h + 1}\nC={_fmt(c_head[l, h].item())}") for h in range(H)
        ]
        for ax, (m, text) in zip(axes[:, l], panels):
            ax.imshow(m.numpy(), cmap="viridis", vmin=0, interpolation="nearest")
            ax.set_title(text, fontsize=7)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(
        f"{title}\nrow i (query) attends to column j (key); C = Σ_{{|i-j|≤{width}}} M / Σ_{{|i-j|>{width}}} M\n"
        f"overall C = {_fmt(c_all)} (a uniform map: {_fmt(uniform_concentration(L, width))})",
        fontsize=9,
    )
    fig.savefig(path, dpi=100)


def plot_kernels(fixed: torch.Tensor | None, depthwise: torch.Tensor | None, path: Path, title: str) -> None:
    """Heatmaps of the kernels, one panel per layer: fixed β [H, 2k+1] (top row) and depthwise β
    [C, 2k+1] with channels sorted by previous_next_order (bottom row); x is the offset j - i."""
    rows = [(w, lab) for w, lab in ((fixed, "head"), (depthwise, "channel (sorted)")) if w is not None]
    layers = rows[0][0].shape[0]
    fig = Figure(figsize=(max(1.7 * layers, 4.0) + 1.0, 2.8 * len(rows) + 0.5), layout="constrained")
    axes = fig.subplots(len(rows), layers, squeeze=False)
    for r, (w, ylabel) in enumerate(rows):
        k = w.shape[-1] // 2
        vmax = w.abs().max().item() or 1.0
        for l in range(layers):
            wl = w[l] if ylabel == "head" else w[l][previous_next_order(w[l])]
            ax = axes[r, l]
            im = ax.imshow(
                wl.numpy(),
                cmap="RdBu_r",
                vmin=-vmax,
                vmax=vmax,
                aspect="auto",
                interpolation="nearest",
                extent=(-k - 0.5, k + 0.5, wl.shape[0] - 0.5, -0.5),
            )
            kind = "fixed β (eq. 4)" if ylabel == "head" else "depthwise β (eq. 7)"
            ax.set_title(f"layer {l + 1}: {kind}", fontsize=7)
            ax.set_xlabel("j - i", fontsize=7)
            ax.tick_params(labelsize=6)
            if ylabel == "head":
                ax.set_yticks(range(wl.shape[0]), [str(h + 1) for h in range(wl.shape[0])])
        axes[r, 0].set_ylabel(ylabel, fontsize=8)
        fig.colorbar(im, ax=list(axes[r]), shrink=0.8)
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=100)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def _num(c: float) -> float | None:
    return c if math.isfinite(c) else None  # strict JSON has no ∞


def analyze_model(model_dir: Path, out_dir: Path, name: str, examples: list[list[int]] | None = None) -> dict:
    """Write ``attention_<name>.png`` (and ``kernels_<name>.png`` when the model has fixed or depthwise
    kernels) into out_dir; return the numbers as a JSON-serialisable dict.

    C values are floats, None where infinite (no attention mass off the band)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = read_model_config(model_dir)
    encoder = load_encoder(model_dir)
    source = "given"
    if examples is None:
        examples, source = default_examples(model_dir, cfg)
    maps = average_attention(encoder, examples)  # [layers, H, L, L]
    layers, H, L, _ = maps.shape

    attention_png = out_dir / f"attention_{name}.png"
    heads = "attention heads only" if cfg.mixer == "mixed" else "all heads"
    plot_attention(
        maps, attention_png, f"{name}: average attention, {len(examples)} examples × {L} tokens ({heads})"
    )
    files = [str(attention_png)]

    fixed, depthwise = fixed_kernels(encoder), depthwise_kernels(encoder)
    kernels = {}
    if fixed is not None:
        kernels["fixed"] = {"shape": list(fixed.shape)}
    if depthwise is not None:
        kernels["depthwise"] = {"shape": list(depthwise.shape)}
    if kernels:
        kernels_png = out_dir / f"kernels_{name}.png"
        plot_kernels(fixed, depthwise, kernels_png, f"{name}: learned relative-convolution kernels")
        files.append(str(kernels_png))

    return {
        "name": name,
        "model_dir": str(model_dir),
        "mixer": cfg.mixer,
        "layers": layers,
        "attention_heads": H,
        "examples": len(examples),
        "examples_source": source,
        "seq_len": L,
        "width": WIDTH,
        "C": _num(diagonal_concentration(maps.mean((0, 1))).item()),
        "C_per_layer": [_num(c) for c in diagonal_concentration(maps.mean(1)).tolist()],
        "C_per_head": [[_num(c) for c in row] for row in diagonal_concentration(maps).tolist()],
        "C_uniform": uniform_concentration(L),
        "kernels": kernels,
        "files": files,
    }
