"""convexp's own model directory: ``model.safetensors`` + ``model_config.json`` (+ tokenizer files).

Written by ``convexp pretrain`` (the exported model) and read by ``convexp finetune``. Weights are
stored under the module names of :class:`~convexp.models.MaskedLM` / ``ReplacedTokenDetector`` /
``SequenceClassifier`` (``encoder.*`` and ``head.*``); tied tensors are stored once.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_model

from ..atomic import atomic_dir
from .config import ModelConfig

WEIGHTS, CONFIG = "model.safetensors", "model_config.json"


def save_model_dir(
    model: torch.nn.Module, cfg: ModelConfig, out_dir: Path, extra_files: list[Path] = ()
) -> None:
    """Write the directory atomically (a temporary sibling, then rename); replaces nothing."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; refusing to overwrite a saved model")
    with atomic_dir(out_dir) as tmp:
        save_model(model, str(tmp / WEIGHTS))
        (tmp / CONFIG).write_text(json.dumps(asdict(cfg), indent=2) + "\n")
        for f in extra_files:
            shutil.copy2(f, tmp / Path(f).name)


def is_model_dir(path: Path) -> bool:
    return (Path(path) / WEIGHTS).exists() and (Path(path) / CONFIG).exists()


def read_model_config(path: Path) -> ModelConfig:
    return ModelConfig.from_dict(json.loads((Path(path) / CONFIG).read_text()))


def load_encoder_weights(encoder: torch.nn.Module, path: Path) -> None:
    """Load the ``encoder.*`` tensors of a model directory into an Encoder (strict)."""
    state = load_file(str(Path(path) / WEIGHTS))
    enc = {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}
    missing, unexpected = encoder.load_state_dict(enc, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path}: encoder weights do not match the config (missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
