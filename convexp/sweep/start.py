"""Where a variant's fine-tuning starts: its own pre-training run, or one checkpoint that every
variant fine-tunes (the sweep's ``init:`` above scale=smoke, or ``init=`` on the command line)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig

from .spec import Sweep, SweepError


@dataclasses.dataclass
class Start:
    """Where a variant's fine-tuning starts: its pre-training run, or a checkpoint (``init:``)."""

    init: str  # the fine-tuning stage's init= (a run directory, a checkpoint dir or hub name)
    slug: str  # the init's name in fine-tuning run ids
    width: int  # hidden size (the protocols' learning rates depend on it)
    node: str | None = None  # the pre-training node, None for a checkpoint
    model_cfg: object = None  # its ModelConfig (None: a hub checkpoint that is not on disk)


def checkpoint_for(sweep: Sweep, settings: DictConfig) -> str | None:
    """The checkpoint every variant fine-tunes, or None to pre-train: ``init=`` on the command line
    (``init=pretrain``: pre-train even at scales above smoke), else the sweep's ``init:`` above smoke."""
    if settings.init is not None:
        return None if settings.init == "pretrain" else str(settings.init)
    return sweep.init if settings.scale != "smoke" else None


def checkpoint_start(init: str) -> Start:
    """A checkpoint's name and width, from its config when it is on disk (a directory, a convexp
    run, or the HF cache); a hub checkpoint not downloaded yet is assumed base-sized (768: only
    the convbert / chang protocols' learning rates depend on it)."""
    from ..store.checkpoint import CheckpointError, CheckpointNotCached, open_checkpoint

    try:
        ckpt = open_checkpoint(init, weights=False)
    except CheckpointNotCached:
        return Start(init, Path(init).name, 768)
    except CheckpointError as e:
        raise SweepError(str(e)) from e
    return Start(ckpt.source, ckpt.slug, ckpt.model_cfg.hidden_size, None, ckpt.model_cfg)
