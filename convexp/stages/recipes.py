"""The papers' pre-training recipes, used where a config leaves lr / max_steps / batch_size null.

ConvBERT (appendix; ELECTRA's settings): LR 3e-4 small, 5e-4 medium-small, 2e-4 base; batch 128
(256 base); 1M updates; warm-up 10k. Chang et al. Table 4: small LR 3e-4, batch 128, 125k
steps; base LR 1e-4, batch 256, 1M steps; warm-up 10k.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    lr: float
    batch_size: int
    max_steps: int


def paper_recipe(preset: str, hidden_size: int) -> Recipe:
    """The recipe of the paper a preset comes from, by its family and size."""
    if preset.startswith("chang_"):
        return Recipe(3e-4, 128, 125_000) if hidden_size < 768 else Recipe(1e-4, 256, 1_000_000)
    if hidden_size >= 768:
        return Recipe(2e-4, 256, 1_000_000)
    if hidden_size > 256:  # medium-small
        return Recipe(5e-4, 128, 1_000_000)
    return Recipe(3e-4, 128, 1_000_000)


def generator_fraction(hidden_size: int) -> float:
    """ELECTRA/ConvBERT generator size relative to the discriminator: 1/4, or 1/3 for base."""
    return 1 / 3 if hidden_size >= 768 else 1 / 4
