"""A checkpoint's files read with the light readers (json, safetensors' header; no torch): a
damaged config or weights file is refused at once, before a stage's heavy imports, with the line
:func:`convexp.store.checkpoint.open_checkpoint` gives for it when the stage opens it (the messages
are built here, for both). What only torch can read (``pytorch_model.bin``, the tensors themselves)
is left to the stage."""

from __future__ import annotations

import json
from pathlib import Path

from ..models.files import CONFIG, WEIGHTS
from .locate import CheckpointError, locate, named


def first(e: BaseException) -> str:
    """An exception's text on one line, cut to 300 characters."""
    return " ".join(str(e).split())[:300]


def damaged_weights(name: str, path: Path, e: BaseException) -> CheckpointError:
    return CheckpointError(f"{name}: the weights in {path} are damaged ({first(e)}); re-create or re-download them")


def unreadable_checkpoint(name: str, path: Path, e: BaseException) -> CheckpointError:
    return CheckpointError(
        f"{name}: cannot read the checkpoint in {path} ({type(e).__name__}: {first(e)}); re-create or re-download it"
    )


def unreadable_config(name: str, path: Path, e: BaseException) -> CheckpointError:
    return CheckpointError(f"{name}: cannot read {path / CONFIG} ({first(e)}); re-create it")


def peek_checkpoint(ref: str, label: str = "init", weights: bool = True) -> None:
    """``ref`` located (:func:`~convexp.store.locate.locate`), its config parsed and, with
    ``weights``, its safetensors header read; a hub name is left to the stage."""
    where = locate(ref, label, weights=weights)
    if where.path is None:
        return
    name, d = named(label, ref), where.path
    if where.kind == "hf_dir":
        try:
            json.loads((d / "config.json").read_text())
        except (ValueError, OSError) as e:
            raise unreadable_checkpoint(name, d, e) from e
        files = [d / "model.safetensors"]
    else:
        try:
            json.loads((d / CONFIG).read_text())
        except ValueError as e:
            raise unreadable_config(name, d, e) from e
        files = [d / WEIGHTS]
    for f in files if weights else ():
        if f.is_file():
            _safetensors_header(name, d, f)


def _safetensors_header(name: str, d: Path, f: Path) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(f), framework="numpy") as s:
            s.keys()
    except SafetensorError as e:
        raise damaged_weights(name, d, e) from e
