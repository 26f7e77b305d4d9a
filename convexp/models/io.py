"""convexp's own model directory, as the stages write and read it (the layout: `convexp.models.hub`).

Written by ``convexp pretrain`` (the exported model), ``convexp finetune`` (``RUN/model``) and
``convexp export``; read by ``convexp finetune`` and :func:`load_model_dir`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from ..atomic import atomic_dir
from .config import ModelConfig
from .heads import MaskedLM, ReplacedTokenDetector, SequenceClassifier
from .files import WEIGHTS
from .hub import model_kind, read_model_config, write_model_files

CLASSES = {"classifier": SequenceClassifier, "mlm": MaskedLM, "rtd": ReplacedTokenDetector}


def save_model_dir(
    model: torch.nn.Module,
    cfg: ModelConfig,
    out_dir: Path,
    extra_files: list[Path] = (),
    texts: dict[str, str] | None = None,
) -> None:
    """Write the directory atomically (a temporary sibling, then rename); replaces nothing.
    ``extra_files`` are copied in (tokenizer files); ``texts`` maps more file names to contents."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; refusing to overwrite a saved model")
    with atomic_dir(out_dir) as tmp:
        write_model_files(model, cfg, tmp, extra_files, texts)


def load_encoder_weights(encoder: torch.nn.Module, path: Path) -> None:
    """Load the ``encoder.*`` tensors of a model directory into an Encoder (strict)."""
    state = load_file(str(Path(path) / WEIGHTS))
    enc = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
    missing, unexpected = encoder.load_state_dict(enc, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path}: encoder weights do not match the config (missing {missing[:5]}, unexpected {unexpected[:5]})"
        )


def build_model(cfg: ModelConfig, kind: str, num_labels: int | None = None) -> torch.nn.Module:
    """A freshly initialised SequenceClassifier / MaskedLM / ReplacedTokenDetector of ``cfg``."""
    return CLASSES[kind](cfg, num_labels) if kind == "classifier" else CLASSES[kind](cfg)


def load_model_dir(path: Path) -> torch.nn.Module:
    """The model saved in a model directory, in eval mode on the CPU: a ``SequenceClassifier`` for
    a fine-tuning run's ``model/`` (num_labels from its head), the ``MaskedLM`` or
    ``ReplacedTokenDetector`` of a pre-training run. Loads every tensor strictly (the config,
    ``layer_sizes`` included, must build exactly the saved shapes)."""
    state = load_file(str(Path(path) / WEIGHTS))
    return CLASSES[model_kind(state)[0]].load_dir(path, state)
