"""Structured configs: the types and ranges of the config nodes, checked when a command composes.

YAML says what the values are; these dataclasses say what they may be. A composed config is
checked against them before anything runs or any directory is made (``--cfg`` included), so
``model.kernel_size=abc``, ``trainer.max_steps=0`` or ``optim.lr=-1`` fails at once with one line
naming the key. ``0`` is never a stand-in for "the paper's value": that is ``null``. Checking never
changes the composed config (run ids are hashes of it): the typed copy is thrown away.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError, UserError


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
    nonfinite_patience: int = 0  # non-finite steps in a row tolerated (AMP's skipped steps)
    lock_wait: float = 0.0  # seconds to wait for another process writing the same run
    requeue_signal: Optional[str] = "SIGUSR1"  # SLURM time-limit warning: checkpoint + requeue; null: off

    def __post_init__(self) -> None:
        for key in ("max_steps", "batch_size"):
            positive(f"trainer.{key}", getattr(self, key), "null: the paper's")
        for key in ("num_nodes", "accumulate_grad_batches", "val_every_n_steps", "val_batches",
                    "log_every_n_steps", "checkpoint_every_n_steps", "steps_multiplier"):
            positive(f"trainer.{key}", getattr(self, key))
        if self.nonfinite_patience < 0 or self.lock_wait < 0:
            raise ValueError("trainer.nonfinite_patience and trainer.lock_wait must be 0 or more")
        if self.requeue_signal is not None and not isinstance(getattr(signal, self.requeue_signal, None), signal.Signals):
            raise ValueError(f"trainer.requeue_signal={self.requeue_signal}: not a signal name; use e.g. SIGUSR1 or null")
        if self.num_workers < 0:
            raise ValueError(f"trainer.num_workers={self.num_workers}: must be 0 (load in the main process) or more")


@dataclass
class OptimSchema:
    """``conf/optim/``: AdamW with linear warm-up and decay."""

    lr: Optional[float] = None
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_steps: int = 10000
    grad_clip: Optional[float] = 1.0

    def __post_init__(self) -> None:
        positive("optim.lr", self.lr, "null: the paper's")
        positive("optim.eps", self.eps)
        positive("optim.grad_clip", self.grad_clip, "null: no clipping")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"optim.weight_decay={self.weight_decay}: must be 0 or more")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps={self.warmup_steps}: must be 0 or more")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optim.betas={list(self.betas)}: two numbers in [0, 1)")


def positive(key: str, value, none_means: str | None = None) -> None:
    """``value`` must be a finite number > 0 (or None when ``none_means`` says what None is)."""
    if value is None and none_means:
        return
    if value is None or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        hint = f" ({none_means})" if none_means else ""
        raise ValueError(f"{key}={value}: must be a number > 0{hint}")


@dataclass
class PretrainSchema:
    """The top-level keys of ``conf/pretrain.yaml``."""

    stage: str = "pretrain"
    seed: int = 42
    seq_len: int = 128
    init: Optional[str] = None
    resume: bool = True
    name: Optional[str] = None
    outputs: str = "outputs"

    def __post_init__(self) -> None:
        positive("seq_len", self.seq_len)


@dataclass
class FinetuneSchema:
    """The top-level keys of ``conf/finetune.yaml`` that are numbers or lists."""

    seeds: List[int] = field(default_factory=lambda: [42])
    lr: Optional[float] = None
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    layerwise_lr_decay: Optional[float] = None
    group_by_length: bool = True  # GLUE/probing training batches of rows of similar length
    checkpoint_every_s: float = 300.0  # fine-tuning's last.ckpt at most this often (0: every half epoch)

    def __post_init__(self) -> None:
        if self.checkpoint_every_s < 0:
            raise ValueError(f"checkpoint_every_s={self.checkpoint_every_s}: give seconds >= 0")
        if not self.seeds:
            raise ValueError("seeds=[]: give at least one seed, e.g. seeds=[42]")
        for key in ("lr", "epochs", "batch_size"):
            positive(key, getattr(self, key), "null: the protocol's")
        d = self.layerwise_lr_decay
        if d is not None and not 0 < d <= 1:
            raise ValueError(f"layerwise_lr_decay={d}: must be in (0, 1] (null: the protocol's)")


def typed(schema: type, node: DictConfig, where: str):
    """``node`` as an instance of dataclass ``schema``; a wrong type or unknown key is one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or getattr(e, "key", None) or "?"
        key = f"{where}.{key}" if where else key
        first = str(e).strip().splitlines()[0]
        if "not in" in first:
            raise ConfigError(
                f"unknown {where} config key '{key}': check the spelling (--cfg prints every key)"
            ) from e
        if "is not a ListConfig" in first:
            raise ConfigError(f"{key}: expected a list, e.g. {key}=[1,2]") from e
        raise ConfigError(f"{key}: {first}") from e
    except (TypeError, ValueError) as e:  # the dataclass's own checks (ModelConfig.validate)
        if isinstance(e, UserError):
            raise
        raise ConfigError(str(e)) from e


def check_types(cfg: DictConfig) -> None:
    """Check every typed node of a composed stage config (model, trainer, optim, the stage's own
    keys), and what no type says: names are text, the outputs folder can be written."""
    from pathlib import Path

    from .models import ModelConfig

    for key, schema in (("model", ModelConfig), ("trainer", TrainerSchema), ("optim", OptimSchema)):
        if key in cfg:
            typed(schema, cfg[key], key)
    if cfg.get("stage") == "pretrain":
        own = typed(PretrainSchema, _own(cfg, PretrainSchema), "")
        positions = OmegaConf.select(cfg, "model.max_position_embeddings")
        if positions is not None and own.seq_len > positions:
            raise ConfigError(
                f"seq_len={own.seq_len} exceeds the model's model.max_position_embeddings={positions}"
            )
    if cfg.get("stage") == "finetune":
        typed(FinetuneSchema, _own(cfg, FinetuneSchema), "")
    name = cfg.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"name={name!r} is not text: quote it, e.g. name='{name}'")
    outputs = cfg.get("outputs")
    if outputs is not None and Path(outputs).exists() and not Path(outputs).is_dir():
        raise ConfigError(f"outputs {outputs!r} is a file, not a folder: set outputs= (or CONVEXP_OUTPUTS) to a folder")


def _own(cfg: DictConfig, schema: type) -> DictConfig:
    """The stage's top-level keys that ``schema`` types."""
    from dataclasses import fields

    return OmegaConf.masked_copy(cfg, [f.name for f in fields(schema) if f.name in cfg])
