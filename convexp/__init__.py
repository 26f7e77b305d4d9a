"""convexp: convolution inside BERT-style encoders, reproduced and extendable."""

__version__ = "0.1.0"
