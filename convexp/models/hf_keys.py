"""The state-dict key tables between convexp and Hugging Face BERT / ELECTRA / ConvBERT: for a
:class:`ModelConfig`, every (HF key, convexp key, tensor layout) of the encoder and of each task
head, and the layouts' conversions. Used by the import (:mod:`.hf`) and the export
(:mod:`.hf_export`)."""

from __future__ import annotations

import re
from typing import Callable

import torch

from ..errors import UserError
from .config import ModelConfig
from .attention_part import weight_bias_keys
from .parts import builtin_part


class CheckpointNotFoundError(UserError):
    """Neither a usable local directory nor a downloadable hub model."""


class UnsupportedCheckpointError(UserError):
    """The checkpoint's architecture has no convexp equivalent."""


class CheckpointMismatchError(UserError):
    """Checkpoint tensors and convexp parameters do not correspond one to one."""


class ExportError(UserError):
    """The convexp model cannot be expressed as a Hugging Face ConvBERT."""


# ----------------------------------------------------------------------------------------------
# Tensor layout conversions: (to convexp, to HF)
# ----------------------------------------------------------------------------------------------


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _drop_dim(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(t: torch.Tensor) -> torch.Tensor:
        if t.dim() < 2 or t.shape[dim] != 1:
            raise CheckpointMismatchError(
                f"expected a size-1 axis {dim} in a tensor of shape {tuple(t.shape)}"
            )
        return t.squeeze(dim)

    return f


def _add_dim(dim: int) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: t.unsqueeze(dim)


LAYOUTS = {
    "same": (_same, _same),
    "depthwise": (_drop_dim(1), _add_dim(1)),  # HF Conv1d [D, 1, K]  <-> convexp [D, K]
    "pointwise": (_drop_dim(-1), _add_dim(-1)),  # HF Conv1d [A, D, 1]  <-> Linear [A, D]
    "col_bias": (_drop_dim(-1), _add_dim(-1)),  # HF bias [A, 1]        <-> [A]
}


# ----------------------------------------------------------------------------------------------
# Key tables: (HF key, convexp key, layout) for a given convexp config
# ----------------------------------------------------------------------------------------------


def encoder_key_table(cfg: ModelConfig) -> list[tuple[str, str, str]]:
    """HF base-model keys (no ``bert.``/``convbert.`` prefix) <-> :class:`Encoder` keys."""
    t: list[tuple[str, str, str]] = [("embeddings.word_embeddings.weight", "embeddings.word.weight", "same")]
    if cfg.absolute_positions:
        t.append(("embeddings.position_embeddings.weight", "embeddings.position.weight", "same"))
    if cfg.type_vocab_size > 0:
        t.append(("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight", "same"))
    t += weight_bias_keys("embeddings.LayerNorm", "embeddings.norm")
    if cfg.emb_size != cfg.hidden_size:
        t += weight_bias_keys("embeddings_project", "embeddings.project")
    for i in range(cfg.num_layers):
        hf, cx = f"encoder.layer.{i}.", f"layers.{i}."
        for kind in ("mixer", "ffn"):  # each part's own keys (attention_part.py, ffn_part.py)
            part = builtin_part(cfg, kind)
            keys = part.hf_keys(cfg, hf, cx) if part is not None else None
            if keys is None:
                what = part.label(cfg) if part is not None else getattr(cfg, kind)
                raise UnsupportedCheckpointError(f"{kind} {what} has no Hugging Face equivalent")
            t += keys
        t += weight_bias_keys(f"{hf}attention.output.LayerNorm", f"{cx}norm1")
        t += weight_bias_keys(f"{hf}output.LayerNorm", f"{cx}norm2")
    if cfg.pooler:
        t += weight_bias_keys("pooler.dense", "pooler")
    return t


# Heads: HF keys <-> convexp keys (relative to the task module), plus tied HF keys -> the convexp
# key whose value they must equal. Keyed by (model_type, task).
def mlm_head_keys(model_type: str) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    if model_type == "bert":
        table = weight_bias_keys("cls.predictions.transform.dense", "head.dense")
        table += weight_bias_keys("cls.predictions.transform.LayerNorm", "head.norm")
        table.append(("cls.predictions.bias", "head.bias", "same"))
        tied = {
            "cls.predictions.decoder.weight": "encoder.embeddings.word.weight",
            "cls.predictions.decoder.bias": "head.bias",
        }
        return table, tied
    table = weight_bias_keys("generator_predictions.dense", "head.dense")
    table += weight_bias_keys("generator_predictions.LayerNorm", "head.norm")
    table.append(("generator_lm_head.bias", "head.bias", "same"))
    return table, {"generator_lm_head.weight": "encoder.embeddings.word.weight"}


def rtd_head_keys(model_type: str) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    if model_type != "electra":
        raise UnsupportedCheckpointError(
            f"task='rtd' needs an ELECTRA discriminator head; Hugging Face {model_type!r} has none "
            "(load with task='base' and add a convexp RTDHead)"
        )
    return weight_bias_keys("discriminator_predictions.dense", "head.dense") + weight_bias_keys(
        "discriminator_predictions.dense_prediction", "head.prediction"
    ), {}


def cls_head_keys(cfg: ModelConfig) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    if cfg.classifier_head == "pooler":  # BERT: dropout -> classifier on the pooled [CLS]
        return weight_bias_keys("classifier", "head.out"), {}
    if cfg.classifier_head == "hf":  # ELECTRA/ConvBERT: dense -> act -> dropout -> out_proj
        return weight_bias_keys("classifier.dense", "head.dense") + weight_bias_keys("classifier.out_proj", "head.out"), {}
    raise ExportError(
        "classifier=cls ([CLS] -> dropout -> linear, ELECTRA's code) has no Hugging Face equivalent: export "
        "the encoder alone (`convexp hf export RUN --part encoder`), or fine-tune with classifier=hf"
    )


# HF keys that are never loaded (besides heads of other tasks).
ALWAYS_IGNORED = [
    re.compile(r"^embeddings\.(position_ids|token_type_ids)$"),  # buffers in older checkpoints
    re.compile(r"^cls\.seq_relationship\."),  # BERT next-sentence-prediction head
]
HEAD_PREFIXES = (
    "cls.predictions.",
    "generator_predictions.",
    "generator_lm_head.",
    "discriminator_predictions.",
    "classifier.",
    "qa_outputs.",
    "sequence_summary.",
)
