"""Where a model comes from: one way to open a checkpoint, with one set of errors.

``open_checkpoint(ref)`` accepts, in this order,

    a convexp run directory    RUN/model holds the weights (a pre-training or fine-tuning run)
    a convexp model directory  model.safetensors + model_config.json (+ tokenizer.json / vocab.txt)
    a Hugging Face directory   config.json + model.safetensors or pytorch_model.bin (BERT, ELECTRA,
                               ConvBERT; translated by :mod:`convexp.models.hf`)
    a hub name                 ``org/name`` (or a legacy ``name``): the Hugging Face cache, else a
                               download when the hub is reachable; a Hugging Face checkpoint or a
                               convexp model directory (``push_to_hub``: `convexp.models.hub`)

and returns a :class:`Checkpoint`: the :class:`ModelConfig`, the weights under convexp's names, where
the tokenizer files are, and the name fine-tuning run ids use (``slug``). Every stage (fine-tuning
init and teacher, pre-training ``init=``, ``convexp export``) and the sweep planner open models
through it, so a bad reference fails the same way everywhere: :class:`CheckpointError`, one line
naming the reference and the fix (missing path, no weights, damaged file, unknown layout, a hub
model that is not cached while offline).

``weights=False`` reads only the config (the sweep planner: names and widths, no tensors). For a
Hugging Face checkpoint that config comes from config.json alone, which does not say whether the
weights include BERT's pooler (``pooler`` is False then); with weights it is exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
from pathlib import Path

import torch

from safetensors.torch import load_file

from ..errors import UserError
from ..models import ModelConfig, SequenceClassifier
from ..models.files import CONFIG, TOKENIZER_FILES, WEIGHTS
from ..models.io import load_model_dir, read_model_config
from .locate import HF_WEIGHTS, CheckpointError, locate, named
from .peek import damaged_weights, first as _first, unreadable_checkpoint, unreadable_config, unreadable_file

class CheckpointNotCached(CheckpointError):
    """A hub name that is not in the Hugging Face cache, while the hub cannot be asked (offline, or
    ``weights=False``, which never downloads)."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """An opened checkpoint. ``state`` holds every tensor under convexp's module names
    (``encoder.*``, plus ``head.*`` for a convexp model directory); None with ``weights=False``."""

    ref: str  # as given
    kind: str  # one of locate.KINDS
    path: Path  # the directory the files are read from (RUN/model, the directory, the hub snapshot)
    source: str  # what another process is given to find it again: the absolute path, or the hub name
    slug: str  # its name in run ids: the run's or directory's name, the hub name's last part
    model_cfg: ModelConfig
    state: dict[str, torch.Tensor] | None = None
    label: str = "init"  # the option it was given as, for messages

    @property
    def name(self) -> str:
        """How messages name it: ``init=<ref>``."""
        return named(self.label, self.ref)

    @property
    def is_convexp(self) -> bool:
        """A convexp run or model directory, local or from the hub (``model_config.json``)."""
        return self.kind in ("run", "model_dir") or (self.path / CONFIG).is_file()

    @property
    def tokenizer_path(self) -> Path | None:
        """The tokenizer.json or vocab.txt next to the weights, or None."""
        return next((self.path / n for n in TOKENIZER_FILES if (self.path / n).is_file()), None)

    @property
    def encoder_state(self) -> dict[str, torch.Tensor]:
        """The encoder's tensors, named as in :class:`~convexp.models.Encoder` (``encoder.`` removed)."""
        if self.state is None:
            raise RuntimeError(f"{self.name} was opened without weights")
        return {k.removeprefix("encoder."): v for k, v in self.state.items() if k.startswith("encoder.")}

    def model(self) -> torch.nn.Module:
        """The saved model of a convexp checkpoint (SequenceClassifier, MaskedLM or
        ReplacedTokenDetector, from its head's tensors), strictly loaded, eval mode, CPU."""
        if not self.is_convexp:
            raise CheckpointError(
                f"{self.name} is a Hugging Face checkpoint; give a convexp run or model directory"
            )
        with _readable(self):
            try:
                return load_model_dir(self.path)
            except ValueError as e:  # a config that does not build the saved shapes
                raise CheckpointError(f"{self.name}: {_first(e)}; re-create the model directory") from e

    def classifier(self, num_labels: int, task: str | None = None) -> SequenceClassifier:
        """A SequenceClassifier with this checkpoint's encoder and classification head (a fine-tuned
        model, e.g. a distillation teacher). A convexp checkpoint must hold a head of ``num_labels``;
        a Hugging Face one gets a new head when it has none."""
        if not self.is_convexp:
            return _hf_load(self, task="classification", num_labels=num_labels)[0]
        state = self.state if self.state is not None else _read_weights(self)
        model = SequenceClassifier(self.model_cfg, num_labels)
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError:  # e.g. a head with another number of labels
            missing, unexpected = ["head (shape)"], []
        if missing or unexpected:
            what = f"{task} classifier" if task else f"{num_labels}-label classifier"
            raise CheckpointError(
                f"{self.name} is not a {what} (missing {missing[:2]}, unexpected {unexpected[:2]}); "
                "give a fine-tuning run of the same task"
            )
        return model.eval()


def open_checkpoint(ref: str | os.PathLike, *, label: str = "init", weights: bool = True) -> Checkpoint:
    """Open ``ref`` (see the module docstring). ``label`` names the option in messages
    (``init``, ``distill.teacher``; "" for a bare path); ``weights=False`` reads configs only."""
    ref = str(ref)
    where = locate(ref, label, weights=weights)
    if where.kind == "hub":
        snapshot = _hub_snapshot(ref, named(label, ref), weights)
        if (snapshot / CONFIG).is_file():  # a convexp model directory on the hub
            return _open_convexp(ref, label, "hub", snapshot, ref, weights)
        return _open_hf(ref, label, "hub", snapshot, ref, weights)
    source = str(Path(ref).expanduser().resolve())
    if where.kind == "hf_dir":
        return _open_hf(ref, label, "hf_dir", where.path, source, weights)
    return _open_convexp(ref, label, where.kind, where.path, source, weights)


# ---------------------------------------------------------------------------------------------
# convexp checkpoints
# ---------------------------------------------------------------------------------------------


def _open_convexp(ref: str, label: str, kind: str, d: Path, source: str, weights: bool) -> Checkpoint:
    try:
        cfg = read_model_config(d)
    except (ValueError, TypeError) as e:  # not JSON, or fields ModelConfig refuses
        raise unreadable_config(named(label, ref), d, e) from e
    slug = Path(ref).name if kind == "hub" else d.parent.name if d.name == "model" else d.name
    ckpt = Checkpoint(ref, kind, d, source, slug, cfg, None, label)
    return dataclasses.replace(ckpt, state=_read_weights(ckpt)) if weights else ckpt


def _read_weights(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    with _readable(ckpt):
        return load_file(str(ckpt.path / WEIGHTS))


@contextlib.contextmanager
def _readable(ckpt: Checkpoint):
    """Turn a damaged safetensors file into a CheckpointError."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as e:
        raise damaged_weights(ckpt.name, ckpt.path, e) from e
    except (PermissionError, FileNotFoundError) as e:  # unreadable, or gone since it was found
        raise unreadable_file(ckpt.name, Path(e.filename or ckpt.path), e) from e


# ---------------------------------------------------------------------------------------------
# Hugging Face checkpoints
# ---------------------------------------------------------------------------------------------


def _open_hf(ref: str, label: str, kind: str, d: Path, source: str, weights: bool) -> Checkpoint:
    slug = Path(ref).name
    ckpt = Checkpoint(ref, kind, d, source, slug, None, None, label)  # model_cfg filled below
    if weights:
        encoder, cfg = _hf_load(ckpt, task="base")
        state = {f"encoder.{k}": v for k, v in encoder.state_dict().items()}
        return dataclasses.replace(ckpt, model_cfg=cfg, state=state)
    from ..models.hf import model_config_from_hf

    try:
        hf = json.loads((d / "config.json").read_text())
        cfg = model_config_from_hf(hf, name=f"hf:{slug}")
    except (ValueError, KeyError) as e:  # not JSON, an architecture convexp does not import
        raise CheckpointError(f"{ckpt.name}: {_first(e)}") from e
    return dataclasses.replace(ckpt, model_cfg=cfg)


def _hf_load(ckpt: Checkpoint, **kw):
    """models.hf.load_pretrained on the local directory, its errors as CheckpointErrors."""
    from ..models.hf import load_pretrained

    try:
        with _readable(ckpt):
            model, cfg = load_pretrained(ckpt.path, **kw)
    except CheckpointError:
        raise
    except UserError as e:  # unsupported architecture, tensors that do not match
        raise CheckpointError(f"{ckpt.name}: {_first(e)}") from e
    except (ValueError, OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:  # a damaged file
        raise unreadable_checkpoint(ckpt.name, ckpt.path, e) from e
    # named after the reference, not the snapshot directory (a hub snapshot is a commit hash)
    return model, dataclasses.replace(cfg, name=f"hf:{ckpt.slug}")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_snapshot(ref: str, name: str, weights: bool) -> Path:
    """The local snapshot of hub model ``ref``: from the cache, else downloaded (weights only, and
    only when the hub may be asked)."""
    from huggingface_hub import snapshot_download

    try:
        d = Path(snapshot_download(repo_id=ref, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, or not a valid repo id
        d = None
    if d is not None and ((d / "config.json").is_file() or (d / CONFIG).is_file()):
        if not weights or any((d / f).is_file() for f in HF_WEIGHTS):
            return d
    if not weights or _offline():
        why = "the hub is offline (HF_HUB_OFFLINE)" if weights else "it is only looked up there"
        raise CheckpointNotCached(
            f"{name} is not in the Hugging Face cache and {why}; download it first "
            f"(huggingface-cli download {ref}) or give a local checkpoint directory"
        )
    from ..models.hf import resolve_checkpoint

    try:
        return resolve_checkpoint(ref)
    except UserError as e:
        raise CheckpointError(f"{name}: {_first(e)}") from e
