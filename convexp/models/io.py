"""convexp's own model directory: ``model.safetensors`` + ``model_config.json`` (+ tokenizer files).

Written by ``convexp pretrain`` (the exported model), ``convexp finetune`` (``RUN/model``) and
``convexp export``; read by ``convexp finetune`` and :func:`load_model_dir`. Weights are stored under
the module names of :class:`~convexp.models.MaskedLM` / ``ReplacedTokenDetector`` /
``SequenceClassifier`` (``encoder.*`` and ``head.*``); tied tensors are stored once. A structurally
pruned model's config has ``layer_sizes`` (per-layer head and FFN sizes).
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
from .heads import MaskedLM, ReplacedTokenDetector, SequenceClassifier

WEIGHTS, CONFIG = "model.safetensors", "model_config.json"


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
        save_model(model, str(tmp / WEIGHTS))
        (tmp / CONFIG).write_text(json.dumps(asdict(cfg), indent=2) + "\n")
        for f in extra_files:
            shutil.copy2(f, tmp / Path(f).name)
        for name, text in (texts or {}).items():
            (tmp / name).write_text(text)


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


def model_kind(state: dict) -> tuple[str, int | None]:
    """Which model a model directory's tensors belong to, from its head's tensor names:
    ("classifier", num_labels) | ("mlm", None) | ("rtd", None)."""
    if "head.out.weight" in state:
        return "classifier", int(state["head.out.weight"].shape[0])  # [num_labels, D]
    if "head.prediction.weight" in state:
        return "rtd", None
    if "head.norm.weight" in state:
        return "mlm", None
    raise ValueError("no task head among the weights (head.out / head.prediction / head.norm)")


def build_model(cfg: ModelConfig, kind: str, num_labels: int | None = None) -> torch.nn.Module:
    """A freshly initialised SequenceClassifier / MaskedLM / ReplacedTokenDetector of ``cfg``."""
    if kind == "classifier":
        return SequenceClassifier(cfg, num_labels)
    return {"mlm": MaskedLM, "rtd": ReplacedTokenDetector}[kind](cfg)


def load_model_dir(path: Path) -> torch.nn.Module:
    """The model saved in a model directory, in eval mode on the CPU: a ``SequenceClassifier`` for
    a fine-tuning run's ``model/`` (num_labels from its head), the ``MaskedLM`` or
    ``ReplacedTokenDetector`` of a pre-training run. Loads every tensor strictly (the config,
    ``layer_sizes`` included, must build exactly the saved shapes)."""
    path = Path(path)
    state = load_file(str(path / WEIGHTS))
    kind, num_labels = model_kind(state)
    model = build_model(read_model_config(path), kind, num_labels)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = " ".join(str(e).split())[:300]
        raise ValueError(f"{path}: the weights do not match {CONFIG}: {first}") from e
    return model.eval()
