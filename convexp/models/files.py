"""The files of a convexp model directory, by name only (no torch): what tells a model directory
from a run or a Hugging Face checkpoint before anything is read."""

from __future__ import annotations

from pathlib import Path

WEIGHTS, CONFIG = "model.safetensors", "model_config.json"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")  # in the order Tokenizer.load prefers them
HF_MODEL_TYPES = ("bert", "electra", "convbert")  # the Hugging Face model types convexp imports (models/hf.py)


def is_model_dir(path: Path) -> bool:
    """A convexp model directory: its weights and its config."""
    return (Path(path) / WEIGHTS).exists() and (Path(path) / CONFIG).exists()
