"""Parameter counts and training FLOPs of model presets (for ``convexp models`` and the reports).

Counting convention (it is Chang et al.'s, whose tables are precise to 0.01M): the parameters of
the pre-training model, i.e. the encoder plus the tied MLM head (dense D->E, LayerNorm(E), output
bias V), without a pooler. ConvBERT's Table 1 rounds to whole millions and fits the same count.

The papers' parts are counted by formula, from shapes alone. A block with a user's mixer or FFN
(models/parts.py) is *measured* instead (:func:`measured_layer`): its parameters from the built
block, its forward FLOPs by torch's FlopCounterMode at two lengths.
"""

from __future__ import annotations

import dataclasses
import sys

from .config import ModelConfig
from .attention_part import linear_params
from .parts import builtin_part, code_digests, user_parts

# Everything here is computed from ModelConfig's shapes alone (no torch), so ``convexp models``
# answers at once. tests/test_presets.py checks every preset against the built modules'
# ``numel`` and torch's FlopCounterMode.


def _layer(cfg: ModelConfig, i: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs per token independent of length, FLOPs per token per position)
    of layer i: its mixer's and feed-forward's own counts (their parts: attention_part.py,
    ffn_part.py) and two LayerNorms. FLOPs as torch's FlopCounterMode counts them: 2·m·n per matrix
    product, convolutions 2·C_in/groups·K per output value, attention 4·H·L·d per query; elementwise
    work not counted. A layer with a user's part: :func:`measured_layer`."""
    if user_parts(cfg):
        return measured_layer(cfg, i)
    mixer, ffn = builtin_part(cfg, "mixer"), builtin_part(cfg, "ffn")
    params, flops, per_pos = (a + b for a, b in zip(mixer.count(cfg, i), ffn.count(cfg, i)))
    return params + 2 * 2 * cfg.hidden_size, flops, per_pos  # + the block's two LayerNorms


def is_measured(cfg: ModelConfig) -> bool:
    """Whether ``cfg``'s counts are measured from built modules (a user's part) or derived."""
    return bool(user_parts(cfg))


MEASURE_LENGTHS = (8, 16)  # two lengths: the per-token and per-position shares of a block's FLOPs


def measured_layer(cfg: ModelConfig, i: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs per token, forward FLOPs per token per position) of layer i as
    built: the block's parameter count, and torch's FlopCounterMode over one forward of the block on
    one sequence at each of MEASURE_LENGTHS (f(L)/L = a + b·L solved for a and b). Training counts
    3 x forward, as for the presets: the same convention in every row of a table (and torch's
    counter charges a grouped convolution's backward as if it were dense: 17.9M FLOPs where the
    example's depthwise convolution does 0.14M). Cached by the configuration and the part's source."""
    import json

    key = json.dumps([dataclasses.asdict(cfg), code_digests(cfg), i], sort_keys=True, default=str)
    if key not in _MEASURED:
        _MEASURED[key] = _measure_layer(cfg, i)
    return _MEASURED[key]


_MEASURED: dict[str, tuple[int, int, int]] = {}


def _measure_layer(cfg: ModelConfig, i: int) -> tuple[int, int, int]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from .encoder import Block

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = Block(cfg, i).eval()
    params = sum(p.numel() for p in block.parameters())
    per_token = []
    for L in MEASURE_LENGTHS:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):  # fused CPU kernels go uncounted
            block(torch.randn(1, L, cfg.hidden_size), None)
        per_token.append(counter.get_total_flops() / L)
    (L1, L2), (f1, f2) = MEASURE_LENGTHS, per_token
    per_pos = max(0.0, (f2 - f1) / (L2 - L1))
    return params, round(f1 - per_pos * L1), round(per_pos)


def parameter_count(cfg: ModelConfig, mlm_head: bool = True) -> int:
    """Parameters of the encoder ``cfg`` builds (with its pooler and scalar mix when configured)
    plus, with ``mlm_head``, the tied MLM head (dense D->E, LayerNorm(E), output bias V)."""
    D, E, V = cfg.hidden_size, cfg.emb_size, cfg.vocab_size
    n = V * E + 2 * E  # word embeddings, LayerNorm
    n += cfg.max_position_embeddings * E if cfg.absolute_positions else 0
    n += cfg.type_vocab_size * E if cfg.type_vocab_size > 0 else 0
    n += linear_params(E, D) if E != D else 0
    n += sum(_layer(cfg, i)[0] for i in range(cfg.num_layers))
    n += cfg.num_layers + 2 if cfg.scalar_mix else 0  # α (L+1) and γ
    n += linear_params(D, D) if cfg.pooler else 0
    n += linear_params(D, E) + 2 * E + V if mlm_head else 0
    return n


def forward_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Forward FLOPs per token of encoder + MLM head scoring every token, no pooler (see _layer)."""
    D, E, V = cfg.hidden_size, cfg.emb_size, cfg.vocab_size
    f = 2 * E * D if E != D else 0
    for i in range(cfg.num_layers):
        _, const, per_pos = _layer(cfg, i)
        f += const + per_pos * seq_len
    if cfg.scalar_mix:
        f += 2 * (cfg.num_layers + 1) * D  # the weighted sum over layers (an einsum, i.e. a product)
    return f + 2 * D * E + 2 * E * V


def training_step_flops(cfg: ModelConfig, batch_size: int, seq_len: int, predicted: int) -> float:
    """Useful FLOPs of one masked-LM training step: 3 x forward (the backward costs twice the
    forward), the encoder on every token and the MLM head (dense, E->V) on the ``predicted``
    tokens only, counted as :func:`forward_flops_per_token` counts (what MFU divides by)."""
    D, E, V = cfg.hidden_size, cfg.emb_size, cfg.vocab_size
    head = 2 * D * E + 2 * E * V
    encoder = forward_flops_per_token(cfg, seq_len) - head
    return 3.0 * (batch_size * seq_len * encoder + predicted * head)


def model_stats(cfg: ModelConfig, seq_len: int = 128) -> tuple[int, float]:
    """(parameters, training FLOPs per token) of encoder + tied MLM head scoring every token, no
    pooler (Chang et al.'s count). Training FLOPs = 3 x forward (the backward pass costs twice the
    forward), the usual convention."""
    stats_cfg = dataclasses.replace(cfg, pooler=False)
    return parameter_count(stats_cfg), 3.0 * forward_flops_per_token(stats_cfg, seq_len)


_FLOPS: dict[tuple[str, int], float] = {}


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token of :func:`model_stats` (computed once per config and length)."""
    key = (repr(cfg), seq_len)
    if key not in _FLOPS:
        _FLOPS[key] = model_stats(cfg, seq_len)[1]
    return _FLOPS[key]


def count_parameters(cfg: ModelConfig) -> int:
    return model_stats(cfg)[0]


def preset_table(cfgs: dict[str, ModelConfig], seq_len: int = 128, user: set[str] = frozenset()) -> None:
    """Print every preset (name -> its ModelConfig) with its parameter count and training FLOPs per
    token (``user``: the presets from the user's config directories, marked *)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"convexp model presets (params: encoder + tied MLM head; training FLOPs per token at length {seq_len})"
    )
    for col in ("preset", "mixer", "layers", "D", "heads", "E", "params", "train GFLOPs/token"):
        table.add_column(col, justify="left" if col in ("preset", "mixer") else "right")
    for name, cfg in cfgs.items():
        params, flops = model_stats(cfg, seq_len)
        part = builtin_part(cfg, "mixer")
        mixer = part.label(cfg) if part is not None else cfg.mixer
        table.add_row(
            name + ("*" if name in user else "") + ("†" if is_measured(cfg) else ""),
            mixer,
            str(cfg.num_layers),
            str(cfg.hidden_size),
            str(cfg.num_heads),
            str(cfg.emb_size),
            f"{params / 1e6:.2f}M",
            f"{flops / 1e9:.3f}",
        )
    notes = ["* from your config directories (--config-dir / --user-dir)"] if user else []
    if any(is_measured(c) for c in cfgs.values()):
        notes.append(
            "† a user's mixer or FFN: parameters and FLOPs measured from the built blocks (FlopCounterMode)"
        )
    if notes:
        table.caption = "\n".join(notes)
    Console(width=None if sys.stdout.isatty() else 160).print(table)


# ----------------------------------------------------------------------------- ConvBERT Table 3 FLOPs
# ELECTRA's constants (google-research/electra flops_computation.py): elementwise operations per value.
DROPOUT_FLOPS, LAYER_NORM_FLOPS, ACTIVATION_FLOPS, SOFTMAX_FLOPS = 4, 5, 8, 5
ELECTRA_OUTPUT_FRAC = 0.15625  # flops_computation.py: share of tokens through the MLM softmax (20/128)


def _block_flops(cfg: ModelConfig, s: int) -> float:
    """Forward FLOPs of one layer per token, ELECTRA's way (a matrix product 2·m·n; elementwise
    work with the constants above), extended to ConvBERT's mixed attention and grouped FFN."""
    if user_parts(cfg):  # a user's part: measured (matrix products only), the layers' mean
        layers = [measured_layer(cfg, i) for i in range(cfg.num_layers)]
        return sum(const + per_pos * s for _, const, per_pos in layers) / cfg.num_layers
    D, I, G = cfg.hidden_size, cfg.intermediate_size, cfg.ffn_groups
    n, d = cfg.attn_heads, cfg.head_dim
    A = n * d  # self-attention width (D, or D/γ with ConvBERT's bottleneck)
    f = 3 * 2 * D * A + 3 * A  # query, key, value (+ biases)
    f += 2 * A * s + (SOFTMAX_FLOPS + DROPOUT_FLOPS + 1) * n * s + 2 * A * s  # q·kᵀ, softmax, ·v
    extra, more_width = builtin_part(cfg, "mixer").table3_extra(cfg, s, SOFTMAX_FLOPS)  # e.g. ConvBERT's convolution
    f += extra
    width = A + more_width  # what the output projection reads
    f += 2 * width * D + D + DROPOUT_FLOPS * D + D + LAYER_NORM_FLOPS * D  # output, residual, norm
    f += 2 * D * I // G + I + ACTIVATION_FLOPS * I  # FFN in (grouped linear: 1/G of the products)
    f += 2 * I * D // G + D + DROPOUT_FLOPS * D + D + LAYER_NORM_FLOPS * D  # FFN out
    return f


def _embedding_flops(cfg: ModelConfig, s: int) -> float:
    """Input embeddings per token, as a dense one-hot product (ELECTRA's assumption), + E->D."""
    E, D, V = cfg.emb_size, cfg.hidden_size, cfg.vocab_size
    f = 2 * E * V + 2 * E * (s + 2) + 2 * E + LAYER_NORM_FLOPS * E + DROPOUT_FLOPS * E
    return f + (2 * D * E + D if E != D else 0)


def _mlm_output_flops(cfg: ModelConfig, output_frac: float) -> float:
    """The MLM head per token: dense D->E, act, LayerNorm, E->V, softmax, on output_frac of tokens."""
    E, D, V = cfg.emb_size, cfg.hidden_size, cfg.vocab_size
    f = 2 * E * V + 2 * D * E + E + ACTIVATION_FLOPS * E + LAYER_NORM_FLOPS * E
    return output_frac * (f + SOFTMAX_FLOPS * V + 2 * V)


def pretraining_flops(
    cfg: ModelConfig,
    batch_size: int,
    steps: float,
    seq_len: int = 128,
    objective: str = "electra",
    generator: ModelConfig | None = None,
    output_frac: float = ELECTRA_OUTPUT_FRAC,
) -> float:
    """Pre-training FLOPs counted as ConvBERT's Table 3 (and ELECTRA's Table 1) count them.

    Convention (google-research/electra ``flops_computation.py``, on which ConvBERT's code is built):
    every token of every sequence in the batch, every step; a matrix product costs 2·m·n, the
    embedding lookup counts as a dense one-hot product (2·E·V per token), elementwise work
    (dropout 4, LayerNorm 5, GELU 8, softmax 5 per value) is included; the **backward pass costs
    the same as the forward** (training = 2 × forward, not the usual 3 ×); the MLM softmax is paid on
    ``output_frac`` = 15.625% of the tokens. ``objective="mlm"``: encoder + MLM head (BERT).
    ``objective="electra"``: discriminator (encoder + RTD head dense-act-dense) plus, when given,
    the ``generator`` (encoder + MLM head). ConvBERT's span-based convolution, bottleneck and
    grouped FFN are counted by the same rules (Chang et al.'s relative terms are not counted).

    Against Table 3 (length 128, 1M steps): ConvBERT-small 1.26e18 (printed 1.3e18) and
    medium-small 1.57e18 (1.5e18) with batch 128 and their ¼-size generators. ConvBERT-base
    (batch 256, ⅓-size generator) comes to 1.89e19, but Table 3 prints 1.4e19, which is the
    discriminator alone (1.41e19) — the base row apparently leaves the generator out (the full run
    at ELECTRA-base's 766k steps would also give 1.45e19). ELECTRA's own script gives
    ELECTRA-small 1.29e18 where both papers print 1.4e18, and ELECTRA-base (length 512, 766k
    steps) 6.4e19 as printed.
    """
    if objective not in ("electra", "mlm"):
        raise ValueError(f"objective must be 'electra' or 'mlm', got {objective!r}")
    s = seq_len

    def encoder(c: ModelConfig) -> float:
        return c.num_layers * _block_flops(c, s) + _embedding_flops(c, s)

    if objective == "mlm":
        per_token = encoder(cfg) + _mlm_output_flops(cfg, output_frac)
    else:
        D = cfg.hidden_size
        per_token = encoder(cfg) + 2 * D * D + D + ACTIVATION_FLOPS * D + 2 * D  # + RTD head
        if generator is not None:
            per_token += encoder(generator) + _mlm_output_flops(generator, output_frac)
    return 2 * batch_size * steps * s * per_token
