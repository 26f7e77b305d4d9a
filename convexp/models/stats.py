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
