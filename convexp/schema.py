"""Structured configs: the types of the config nodes, checked when a command composes its config.

YAML says what the values are; these dataclasses say what they may be. A composed config is
checked against them before anything runs (``--cfg`` included), so ``model.kernel_size=abc`` or
``trainer.max_steps=ten`` fails at once with one line naming the key. Checking never changes the
composed config (run ids are hashes of it): the typed copy is thrown away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import DictConfig, OmegaConf

from .errors import UserError


@dataclass
class TrainerSchema:
    """``conf/trainer/``: the Lightning Trainer and the loop around the step."""

    accelerator: str = "auto"
    devices: Any = 1  # a count, "auto", or a list of device ids
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    max_steps: Optional[int] = None
    steps_multiplier: float = 1.0
    batch_size: Optional[int] = None
    accumulate_grad_batches: int = 1
    val_every_n_steps: int = 10000
    val_batches: int = 50
    log_every_n_steps: int = 50
    checkpoint_every_n_steps: int = 10000
    num_workers: int = 2
    deterministic: bool = False


@dataclass
class OptimSchema:
    """``conf/optim/``: AdamW with linear warm-up and decay."""

    lr: Optional[float] = None
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_steps: int = 10000
    grad_clip: float = 1.0


def typed(schema: type, node: DictConfig, where: str):
    """``node`` as an instance of dataclass ``schema``; a wrong type or unknown key is one line."""
    from omegaconf.errors import OmegaConfBaseException

    from .config import ConfigError

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or getattr(e, "key", None) or "?"
        first = str(e).strip().splitlines()[0]
        if "not in" in first:
            raise ConfigError(
                f"unknown {where} config key '{where}.{key}': check the spelling (--cfg prints every key)"
            ) from e
        raise ConfigError(f"{where}.{key}: {first}") from e
    except (TypeError, ValueError) as e:  # the dataclass's own checks (ModelConfig.validate)
        if isinstance(e, UserError):
            raise
        raise ConfigError(str(e)) from e


def check_types(cfg: DictConfig) -> None:
    """Check every typed node of a composed stage config (model, trainer, optim)."""
    from .models import ModelConfig

    for key, schema in (("model", ModelConfig), ("trainer", TrainerSchema), ("optim", OptimSchema)):
        if key in cfg:
            typed(schema, cfg[key], key)
