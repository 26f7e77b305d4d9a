"""Parameter counts and training FLOPs of model presets (for ``convexp models`` and the reports).

Counting convention (it is Chang et al.'s, whose tables are precise to 0.01M): the parameters of
the pre-training model, i.e. the encoder plus the tied MLM head (dense D->E, LayerNorm(E), output
bias V), without a pooler. ConvBERT's Table 1 rounds to whole millions and fits the same count.
"""

from __future__ import annotations

import dataclasses

import torch

from .config import ModelConfig
from .heads import MaskedLM


def _pretraining_model(cfg: ModelConfig, device: str = "meta") -> MaskedLM:
    with torch.device(device):
        return MaskedLM(dataclasses.replace(cfg, pooler=False))


def count_parameters(cfg: ModelConfig) -> int:
    """Parameters of encoder + tied MLM head, no pooler (built on the meta device: no memory)."""
    return sum(p.numel() for p in _pretraining_model(cfg).parameters())


def training_flops_per_token(cfg: ModelConfig, seq_len: int = 128) -> float:
    """FLOPs of one forward + backward pass of encoder + MLM head over every token, per token.

    Counted by ``torch.utils.flop_counter`` on the meta device (matrix products, convolutions and
    attention; elementwise work is not counted), so it follows the code rather than a formula.
    """
    from torch.utils.flop_counter import FlopCounterMode

    model = _pretraining_model(cfg)
    ids = torch.zeros(1, seq_len, dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with counter:
        model(ids).logits.sum().backward()
    return counter.get_total_flops() / seq_len


def preset_table(names: list[str], seq_len: int = 128) -> None:
    """Print every preset with its parameter count and training FLOPs per token."""
    from rich.console import Console
    from rich.table import Table

    from ..config import model_config

    table = Table(title=f"convexp model presets (FLOPs: forward+backward per token at length {seq_len})")
    for col in ("preset", "mixer", "layers", "D", "heads", "E", "params", "train GFLOPs/token"):
        table.add_column(col, justify="left" if col in ("preset", "mixer") else "right")
    for name in names:
        cfg = model_config(name)
        mixer = cfg.mixer if cfg.mixer == "attention" else f"mixed/{cfg.conv_type}"
        table.add_row(
            name,
            mixer,
            str(cfg.num_layers),
            str(cfg.hidden_size),
            str(cfg.num_heads),
            str(cfg.emb_size),
            f"{count_parameters(cfg) / 1e6:.2f}M",
            f"{training_flops_per_token(cfg, seq_len) / 1e9:.3f}",
        )
    Console().print(table)
