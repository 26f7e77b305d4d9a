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
import textwrap
from pathlib import Path

import torch
from matplotlib.figure import Figure

from ..models.config import ModelConfig
from ..models.parts import builtin_part
from ..models.encoder import Encoder
from ..models.io import load_encoder_weights, read_model_config
from .figures import fit_title

WIDTH = 4  # ConvBERT §6.5: |i - j| ≤ 4 is "local"
NUM_EXAMPLES, SEQ_LEN, SEED = 8, 64, 0  # default examples
SOURCES = {"synthetic": "synthetic corpus", "random": "random token ids", "given": "given ids"}
MAX_TICKS = 16  # token tick labels per attention axis
DPI = 100


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
        # args: (x, keep, first_only); the maps are every query's, whatever the forward computed
        layer.mixer.register_forward_hook(lambda m, args, out: maps.append(m.attention_probs(*args[:2])))
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


def token_names(model_dir: Path, ids: list[int]) -> list[str]:
    """The tokens of ``ids`` from the tokenizer saved with the model ("#<id>" without one)."""
    from ..data.errors import TokenizerError
    from ..data.tokenizer import Tokenizer

    try:
        backend = Tokenizer.load(model_dir).backend
    except TokenizerError:
        backend = None
    names = [backend.id_to_token(i) if backend is not None else None for i in ids]
    return [n if n is not None else f"#{i}" for n, i in zip(names, ids)]


def thinned_ticks(tokens: list[str], most: int = MAX_TICKS) -> tuple[list[int], list[str]]:
    """Every k-th position and its token (k chosen so at most ``most`` are labelled): readable ticks
    for sequences of any length."""
    step = max(1, -(-len(tokens) // most))
    positions = list(range(0, len(tokens), step))
    return positions, [f"{tokens[p][:10]}" for p in positions]


def attention_figure(maps: torch.Tensor, tokens: list[str], title: str, width: int = WIDTH) -> Figure:
    """Grid of one example's maps [layers, H, L, L] (ConvBERT Fig. 2 draws one example): one column
    per layer, the head mean on top, then one row per head, each panel titled with its C. Axes are
    the example's tokens (thinned), query i down, key j across; one log colour scale for every panel,
    its colour bar labelled, from the smallest to the largest probability drawn (at most 4 decades)."""
    from matplotlib.colors import LogNorm

    layers, H, L, _ = maps.shape
    c_head, c_layer = diagonal_concentration(maps, width), diagonal_concentration(maps.mean(1), width)
    side = 2.0 if L > 16 else 1.6
    fig = Figure(figsize=(side * layers + 2.4, side * (H + 1) + 1.6), layout="constrained")
    axes = fig.subplots(H + 1, layers, squeeze=False, sharex=True, sharey=True)
    top = maps.max().item()  # one log scale over the maps' own range (a near-uniform map still shows)
    norm = LogNorm(vmin=max(maps.min().item(), top * 1e-4, 1e-12), vmax=top, clip=True)
    positions, labels = thinned_ticks(tokens)
    for l in range(layers):
        panels = [(maps[l].mean(0), f"layer {l + 1}: head mean\nC={_fmt(c_layer[l].item())}")]
        panels += [
            (maps[l, h], f"layer {l + 1}: head {h + 1}\nC={_fmt(c_head[l, h].item())}") for h in range(H)
        ]
        for ax, (m, text) in zip(axes[:, l], panels):
            im = ax.imshow(m.numpy(), cmap="viridis", norm=norm, interpolation="nearest")
            ax.set_title(text, fontsize=7)
    axes[0, 0].set_xticks(positions, labels)
    axes[0, 0].set_yticks(positions, labels)
    for ax in axes.flat:
        ax.tick_params(labelsize=5, length=2)
        ax.tick_params(axis="x", labelrotation=90)
    for ax in axes[-1, :]:
        ax.set_xlabel("key token j", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("query token i", fontsize=7)
    bar = fig.colorbar(im, ax=axes, shrink=0.6, aspect=30)
    bar.set_label(r"attention probability $\alpha_{ij}$ (each row sums to 1; log scale)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    fig.suptitle(fit_title(title, fig, 9), fontsize=9)
    return fig


def plot_attention(maps: torch.Tensor, path: Path, title: str, tokens: list[str] | None = None) -> None:
    """``attention_figure`` saved as PNG (tokens: "0", "1", ... when not given)."""
    L = maps.shape[-1]
    attention_figure(maps, tokens or [str(i) for i in range(L)], title).savefig(path, dpi=DPI)


KERNEL_BARS = {
    "head": "$\\beta_{h,j-i}$: learned weight added to the attention logits (eq.\u00a04), no unit",
    "channel (sorted)": "$\\beta_{j-i,c}$: learned depthwise convolution weight (eq.\u00a07), no unit",
}


def kernel_figure(fixed: torch.Tensor | None, depthwise: torch.Tensor | None, title: str) -> Figure:
    """Heatmaps of the kernels, one panel per layer: fixed β [H, 2k+1] (top row) and depthwise β
    [C, 2k+1] with channels sorted by previous_next_order (bottom row); x is the offset j - i. One
    colour scale per row, symmetric about 0, with a labelled colour bar."""
    rows = [(w, lab) for w, lab in ((fixed, "head"), (depthwise, "channel (sorted)")) if w is not None]
    layers = rows[0][0].shape[0]
    fig = Figure(figsize=(max(1.7 * layers, 4.0) + 1.6, 2.8 * len(rows) + 0.8), layout="constrained")
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
            ax.set_xlabel("offset j − i (tokens)", fontsize=7)
            ax.tick_params(labelsize=6)
            if ylabel == "head":
                ax.set_yticks(range(wl.shape[0]), [str(h + 1) for h in range(wl.shape[0])])
        axes[r, 0].set_ylabel(ylabel, fontsize=8)
        bar = fig.colorbar(im, ax=list(axes[r]), shrink=0.8)
        bar.set_label("\n".join(textwrap.wrap(KERNEL_BARS[ylabel], 34)), fontsize=7)
        bar.ax.tick_params(labelsize=7)
    fig.suptitle(fit_title(title, fig, 9), fontsize=9)
    return fig


def plot_kernels(fixed: torch.Tensor | None, depthwise: torch.Tensor | None, path: Path, title: str) -> None:
    """``kernel_figure`` saved as PNG."""
    kernel_figure(fixed, depthwise, title).savefig(path, dpi=DPI)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def _num(c: float) -> float | None:
    return c if math.isfinite(c) else None  # strict JSON has no ∞


def analyze_model(
    model_dir: Path, out_dir: Path, name: str, examples: list[list[int]] | None = None, about: str = ""
) -> dict:
    """Write ``attention_<name>.png`` (and ``kernels_<name>.png`` when the model has fixed or depthwise
    kernels) into out_dir; return the numbers as a JSON-serialisable dict. ``about``: the figures'
    first title line (the sweep, the variant and its values of the swept keys; default ``name``).

    The numbers (C) are of the maps averaged over the examples; the attention figure draws the
    first example's maps, its tokens on the axes. C values are floats, None where infinite (no
    attention mass off the band)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = read_model_config(model_dir)
    encoder = load_encoder(model_dir)
    if not all(hasattr(layer.mixer, "attention_probs") for layer in encoder.layers):
        return {
            "error": f"model.mixer={cfg.mixer} has no attention_probs(x, keep) returning [B, H, L, L] "
            "probabilities: no attention maps to draw (give your class that method to have them)"
        }
    source = "given"
    if examples is None:
        examples, source = default_examples(model_dir, cfg)
    maps = average_attention(encoder, examples)  # [layers, H, L, L]
    layers, H, L, _ = maps.shape
    first = examples[0][:L]
    one = attention_maps(encoder, torch.tensor([first]))[:, 0]  # [layers, H, L, L]
    about = about or name

    attention_png = out_dir / f"attention_{name}.png"
    part = builtin_part(cfg, "mixer")
    heads = "all heads" if part is None or part.maps_all_heads else "attention heads only"
    c_all = diagonal_concentration(maps.mean((0, 1))).item()
    title = (
        f"{about}\nattention maps of example 1 ({SOURCES[source]}, {L} tokens; {heads}); "
        f"row i (query) attends to column j (key)\neach panel's C = band mass |i − j| ≤ {WIDTH} / mass outside it; over all "
        f"{len(examples)} examples C = {_fmt(c_all)} (a uniform map: {_fmt(uniform_concentration(L))})"
    )
    plot_attention(one, attention_png, title, token_names(model_dir, first))
    files = [str(attention_png)]

    fixed, depthwise = fixed_kernels(encoder), depthwise_kernels(encoder)
    kernels = {}
    if fixed is not None:
        kernels["fixed"] = {"shape": list(fixed.shape)}
    if depthwise is not None:
        kernels["depthwise"] = {"shape": list(depthwise.shape)}
    if kernels:
        kernels_png = out_dir / f"kernels_{name}.png"
        title = f"{about}\nlearned relative-convolution kernels (Chang et al. Figs. 2–3)"
        plot_kernels(fixed, depthwise, kernels_png, title)
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
