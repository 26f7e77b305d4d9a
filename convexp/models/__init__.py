"""Pure-PyTorch models: one encoder configured into every variant of the three papers."""

from .config import ModelConfig
from .encoder import Encoder, EncoderOutput
from .heads import ClassificationHead, MaskedLM, MLMHead, ReplacedTokenDetector, RTDHead, SequenceClassifier

__all__ = [
    "ModelConfig",
    "Encoder",
    "EncoderOutput",
    "MLMHead",
    "RTDHead",
    "ClassificationHead",
    "MaskedLM",
    "ReplacedTokenDetector",
    "SequenceClassifier",
]
