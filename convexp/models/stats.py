"""Parameter counts and training FLOPs of model presets (for ``convexp models`` and the reports).

Counting convention (it is Chang et al.'s, whose tables are precise to 0.01M): the parameters of
the pre-training model, i.e. the encoder plus the tied MLM head (dense D->E, LayerNorm(E), output
bias V), without a pooler. ConvBERT's Table 1 rounds to whole millions and fits the same count.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from .config import ModelConfig
from .heads import MaskedLM


def _pretraining_model(cfg: ModelConfig) -> MaskedLM:
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        return MaskedLM(dataclasses.replace(cfg, pooler=False))


def _forward_flops(model: MaskedLM, seq_len: int) -> int:
    """Forward FLOPs counted by ``torch.utils.flop_counter`` (matrix products, convolutions,
    attention; elementwise work is not counted), so the count follows the code, not a formula."""
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros(1, seq_len, dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(ids)
    return counter.get_total_flops()


def model_stats(cfg: ModelConfig, seq_len: int = 128) -> tuple[int, float]:
    """(parameters, training FLOPs per token) of encoder + tied MLM head scoring every token.

    Training FLOPs = 3 x forward (the backward pass costs twice the forward), the usual
    convention; the backward is not counted directly because torch's counter overcounts
    grouped-convolution gradients by the group count. All layers are equal, so both numbers are
    extrapolated exactly from 1- and 2-layer models, which keeps ``convexp models`` fast.
    """
    stats = []
    for depth in (1, 2):
        model = _pretraining_model(dataclasses.replace(cfg, num_layers=depth))
        stats.append((sum(p.numel() for p in model.parameters()), _forward_flops(model, seq_len)))
    (p1, f1), (p2, f2) = stats
    extra = cfg.num_layers - 1
    return p1 + extra * (p2 - p1), 3 * (f1 + extra * (f2 - f1)) / seq_len


def count_parameters(cfg: ModelConfig) -> int:
    return model_stats(cfg)[0]


def preset_table(names: list[str], seq_len: int = 128, user: set[str] = frozenset()) -> None:
    """Print every preset with its parameter count and training FLOPs per token (``user``: the
    presets from the user's config directories, marked *)."""
    from rich.console import Console
    from rich.table import Table

    from ..config import model_configs

    table = Table(
        title=f"convexp model presets (params: encoder + tied MLM head; training FLOPs per token at length {seq_len})"
    )
    for col in ("preset", "mixer", "layers", "D", "heads", "E", "params", "train GFLOPs/token"):
        table.add_column(col, justify="left" if col in ("preset", "mixer") else "right")
    for name, cfg in model_configs(names).items():
        params, flops = model_stats(cfg, seq_len)
        mixer = cfg.mixer if cfg.mixer == "attention" else f"mixed/{cfg.conv_type}"
        table.add_row(
            name + ("*" if name in user else ""),
            mixer,
            str(cfg.num_layers),
            str(cfg.hidden_size),
            str(cfg.num_heads),
            str(cfg.emb_size),
            f"{params / 1e6:.2f}M",
            f"{flops / 1e9:.3f}",
        )
    if user:
        table.caption = "* from your config directories (--config-dir / CONVEXP_CONFIG_PATH)"
    Console(width=None if sys.stdout.isatty() else 160).print(table)


# ----------------------------------------------------------------------------- ConvBERT Table 3 FLOPs
# ELECTRA's constants (google-research/electra flops_computation.py): elementwise operations per value.
DROPOUT_FLOPS, LAYER_NORM_FLOPS, ACTIVATION_FLOPS, SOFTMAX_FLOPS = 4, 5, 8, 5
ELECTRA_OUTPUT_FRAC = 0.15625  # flops_computation.py: share of tokens through the MLM softmax (20/128)


def _block_flops(cfg: ModelConfig, s: int) -> float:
    """Forward FLOPs of one layer per token, ELECTRA's way (a matrix product 2·m·n; elementwise
    work with the constants above), extended to ConvBERT's mixed attention and grouped FFN."""
    D, I, G, K = cfg.hidden_size, cfg.intermediate_size, cfg.ffn_groups, cfg.kernel_size
    n, d = cfg.attn_heads, cfg.head_dim
    A = n * d  # self-attention width (D, or D/γ with ConvBERT's bottleneck)
    f = 3 * 2 * D * A + 3 * A  # query, key, value (+ biases)
    f += 2 * A * s + (SOFTMAX_FLOPS + DROPOUT_FLOPS + 1) * n * s + 2 * A * s  # q·kᵀ, softmax, ·v
    width = A  # what the output projection reads
    if cfg.mixer == "mixed" and cfg.conv_type != "none":
        C = n * d  # convolution-branch width
        width += C
        if cfg.conv_type in ("sdconv", "conventional"):
            f += 2 * D * K + 2 * D * C + C  # depthwise-separable conv (span-aware key / the branch)
        if cfg.conv_type == "sdconv":
            f += C + 2 * C * n * K + n * K  # Ks ⊙ Q, conv_kernel_layer
        elif cfg.conv_type == "dynamic":
            f += 2 * D * n * K + n * K  # kernel from the token itself
        if cfg.conv_type in ("sdconv", "dynamic"):
            f += SOFTMAX_FLOPS * n * K + 2 * D * C + C + 2 * C * K  # kernel softmax, conv value, conv
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
