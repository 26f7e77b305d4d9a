"""A checkpoint's files read with the light readers (json, safetensors' header; no torch): a
damaged config or weights file is refused at once, before a stage's heavy imports, with the line
:func:`convexp.store.checkpoint.open_checkpoint` gives for it when the stage opens it (the messages
are built here, for both). What only torch can read (``pytorch_model.bin``, the tensors themselves)
is left to the stage."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..models.files import CONFIG, HF_MODEL_TYPES, TOKENIZER_FILES, WEIGHTS
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


def unreadable_file(name: str, f: Path, e: OSError) -> CheckpointError:
    return CheckpointError(f"{name}: {f} cannot be read ({e.strerror or first(e)}); check the file and its permissions")


def unreadable_config(name: str, path: Path, e: BaseException) -> CheckpointError:
    return CheckpointError(f"{name}: cannot read {path / CONFIG} ({first(e)}); re-create it")


@dataclasses.dataclass(frozen=True)
class Peeked:
    """What a local checkpoint's config and files say, read without torch."""

    name: str  # the option and the reference, as messages name it
    model_type: str | None  # a Hugging Face checkpoint's model_type; None: a convexp one
    positions: int | None  # the absolute position table's size; None: no absolute positions
    tokenizer: bool  # a tokenizer file (tokenizer.json, vocab.txt) beside the weights


def peek_checkpoint(ref: str, label: str = "init", weights: bool = True) -> Peeked | None:
    """``ref`` located (:func:`~convexp.store.locate.locate`), its config parsed and, with
    ``weights``, its safetensors header read; what they say (None: a hub name, left to the stage).
    A Hugging Face model type convexp does not import is refused here."""
    where = locate(ref, label, weights=weights)
    if where.path is None:
        return None
    name, d = named(label, ref), where.path
    if where.kind == "hf_dir":
        try:
            config = json.loads((d / "config.json").read_text())
        except (ValueError, OSError) as e:
            raise unreadable_checkpoint(name, d, e) from e
        mt = config.get("model_type") if isinstance(config, dict) else None
        if mt not in HF_MODEL_TYPES:
            raise CheckpointError(
                f"{name} is a Hugging Face {mt!r} checkpoint (config.json's model_type); convexp imports "
                f"{', '.join(HF_MODEL_TYPES)}: give one of those, or a convexp run"
            )
        absolute = config.get("position_embedding_type", "absolute") in (None, "absolute")
        positions = config.get("max_position_embeddings", 512) if absolute else None
        files = [d / "model.safetensors"]
    else:
        try:
            config = json.loads((d / CONFIG).read_text())
        except ValueError as e:
            raise unreadable_config(name, d, e) from e
        mt = None
        positions = config.get("max_position_embeddings", 512) if config.get("absolute_positions", True) else None
        files = [d / WEIGHTS]
    for f in files if weights else ():
        if f.is_file():
            _safetensors_header(name, d, f)
    tokenizer = any((d / n).is_file() for n in TOKENIZER_FILES)
    return Peeked(name, mt, int(positions) if isinstance(positions, int) else None, tokenizer)


def _safetensors_header(name: str, d: Path, f: Path) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(f), framework="numpy") as s:
            s.keys()
    except SafetensorError as e:
        raise damaged_weights(name, d, e) from e
    except OSError as e:  # no permission, a vanished file, an I/O error
        raise unreadable_file(name, f, e) from e
