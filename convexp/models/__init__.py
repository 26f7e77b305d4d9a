"""Pure-PyTorch models: one encoder configured into every variant of the three papers.

The modules are imported on first use (PEP 562 ``__getattr__``), so ``from convexp.models import
ModelConfig`` and ``convexp.models.stats`` (parameter counts from shapes) do not import torch:
``convexp models`` answers at once.
"""

from importlib import import_module

from .config import ModelConfig

_MODULE_OF = {
    "Encoder": "encoder",
    "EncoderOutput": "encoder",
    "MLMHead": "heads",
    "RTDHead": "heads",
    "ClassificationHead": "heads",
    "MaskedLM": "heads",
    "ReplacedTokenDetector": "heads",
    "SequenceClassifier": "heads",
}

__all__ = ["ModelConfig", *_MODULE_OF]


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
