"""Which kind of checkpoint a reference names, from its path and file names alone (no torch, no
file read): the first half of :func:`convexp.store.checkpoint.open_checkpoint`, also asked before a
stage is imported, so a missing or misshapen ``init=`` / ``distill.teacher=`` is refused at once.

    a convexp run directory    RUN/model holds the weights (a pre-training or fine-tuning run)
    a convexp model directory  model.safetensors + model_config.json (+ tokenizer.json / vocab.txt)
    a Hugging Face directory   config.json + model.safetensors or pytorch_model.bin
    a hub name                 ``org/name`` (or a legacy ``name``): looked up when opened
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..models.files import CONFIG, WEIGHTS, is_model_dir

KINDS = ("run", "model_dir", "hf_dir", "hub")
HF_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
RUN_FILES = ("status.json", "config.yaml", "metrics.json")  # a convexp run directory has these


class CheckpointError(UserError):
    """A checkpoint reference that cannot be opened; the message names it and the fix."""


@dataclass(frozen=True)
class Located:
    """Where a reference points: its kind (one of KINDS) and the directory its files are in (None
    for a hub name, whose snapshot is found when it is opened)."""

    kind: str
    path: Path | None


def locate(ref: str | os.PathLike, label: str = "init", *, weights: bool = True) -> Located:
    """The kind of checkpoint ``ref`` is (see the module docstring), or CheckpointError naming the
    reference and the fix. ``weights=False``: a Hugging Face directory without weights will do."""
    ref = str(ref)
    p = Path(ref).expanduser()
    name = named(label, ref)
    if not p.exists():
        if not hub_name(ref):
            raise CheckpointError(
                f"{name} does not exist; give a convexp run directory, a model directory, "
                "a Hugging Face checkpoint directory or a hub name"
            )
        return Located("hub", None)
    if not p.is_dir():
        raise CheckpointError(f"{name} is a file; give the directory that holds it")
    if not os.access(p, os.R_OK | os.X_OK):
        raise CheckpointError(f"{name} cannot be read (no permission); give a folder you can read")
    if (p / "model").is_dir() or any((p / f).is_file() for f in RUN_FILES):  # a convexp run
        d = p / "model"
        if not is_model_dir(d):
            raise CheckpointError(
                f"{name}: the run has no model ({d}/{WEIGHTS} + {CONFIG}); let it finish "
                "(re-run its command) or give another checkpoint"
            )
        return Located("run", d)
    if (p / CONFIG).is_file():
        if not is_model_dir(p):
            raise CheckpointError(
                f"{name} has no weights ({WEIGHTS} + {CONFIG}); give a complete model directory"
            )
        return Located("model_dir", p)
    if (p / "config.json").is_file():
        if weights and not any((p / f).is_file() for f in HF_WEIGHTS):
            raise CheckpointError(
                f"{name} has no weights (model.safetensors or pytorch_model.bin next to config.json); "
                "give a complete Hugging Face checkpoint directory"
            )
        return Located("hf_dir", p)
    raise CheckpointError(
        f"{name} is not a convexp run or model directory ({WEIGHTS} + {CONFIG}) nor a Hugging Face "
        "checkpoint directory (no config.json); give one of those or a hub name"
    )


def hub_name(ref: str) -> bool:
    """Could ``ref`` be a hub repository id (``org/name`` or a legacy ``name``)?"""
    return not ref.startswith(("/", ".", "~")) and ref.count("/") <= 1 and "\\" not in ref and bool(ref)


def named(label: str, ref: str) -> str:
    """How messages name a reference: ``init=<ref>`` (the bare path without a label)."""
    return f"{label}={ref}" if label else ref
