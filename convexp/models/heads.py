"""Task heads over :class:`~convexp.models.encoder.EncoderOutput` features."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .dropout import Dropout
from .encoder import Encoder
from .ffn import activation

IGNORE = -100


@dataclass
class HeadOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [M, V] against labels [M] (every row labelled), in fp32 or wider.

    ``F.cross_entropy(logits.float(), labels)`` with the forward's exponentials kept for the
    backward (softmax - one-hot): a third less time on the masked-LM head's [M, 30522] logits."""
    if logits.shape[0] == 0:
        return F.cross_entropy(logits.float(), labels)
    return _CrossEntropy.apply(logits, labels)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))  # [M, V]
        top = x.amax(-1, keepdim=True)  # [M, 1]
        exp = torch.sub(x, top).exp_()  # [M, V]
        total = exp.sum(-1, keepdim=True)  # [M, 1]
        log_z = top + total.log()
        ctx.save_for_backward(exp, total, labels)
        ctx.logits_dtype = logits.dtype
        return (log_z - x.gather(-1, labels[:, None])).mean()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        exp, total, labels = ctx.saved_tensors
        scale = grad / exp.shape[0]  # d(mean)/d(row loss)
        g = exp * (scale / total)  # softmax · scale
        g.scatter_add_(-1, labels[:, None], (-scale).expand(labels.shape[0], 1))
        return g.to(ctx.logits_dtype), None


class MLMHead(nn.Module):
    """Masked-LM head: dense D->E, act, LayerNorm(E), then E->V tied to the word embeddings."""

    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.emb_size)
        self.act = activation(cfg.hidden_act)
        self.norm = nn.LayerNorm(cfg.emb_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.tie(word_embeddings)

    def tie(self, word_embeddings: nn.Embedding) -> None:
        """Use ``word_embeddings`` as the output matrix: logits = h · Wᵀ + b.

        Kept out of the module tree (object.__setattr__ bypasses nn.Module's registration) so the
        tied matrix appears once in state dicts, as the encoder's word embedding, which owns it
        and moves it between devices."""
        object.__setattr__(self, "_tied", word_embeddings)

    @property
    def decoder(self) -> nn.Embedding:
        return self._tied

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> HeadOutput:
        """With labels ([B, L], -100 = not predicted) only the predicted positions are scored:
        logits are [M, V] for the M labelled tokens, which saves most of the head's cost."""
        if labels is not None:
            sel = labels != IGNORE
            features, labels = features[sel], labels[sel]  # [M, D], [M]
        h = self.norm(self.act(self.dense(features)))
        logits = F.linear(h, self.decoder.weight, self.bias)
        loss = cross_entropy(logits, labels) if labels is not None else None
        return HeadOutput(loss, logits)


class RTDHead(nn.Module):
    """ELECTRA replaced-token-detection discriminator head: dense D->D, act, dense D->1."""

    TF_GLOROT = ("prediction",)  # run_pretraining.py: tf.layers.dense(hidden, units=1), no initializer

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = activation(cfg.hidden_act)
        self.prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(
        self,
        features: torch.Tensor,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> HeadOutput:
        logits = self.prediction(self.act(self.dense(features))).squeeze(-1)  # [B, L]
        loss = None
        if labels is not None:
            per_token = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")
            if attention_mask is None:
                loss = per_token.mean()
            else:
                m = attention_mask.float()
                loss = (per_token * m).sum() / m.sum()
        return HeadOutput(loss, logits)


class ClassificationHead(nn.Module):
    """Sequence classification (num_labels > 1, cross-entropy) or regression (num_labels = 1, MSE).

    ``cfg.classifier_head`` picks the form:

    * "cls" (ELECTRA/ConvBERT, google-research/electra classification_tasks.py): [CLS] -> dropout
      -> Linear. ELECTRA has no pooler (its ``get_pooled_output`` is the [CLS] vector).
    * "pooler" (BERT): pooled [CLS] (dense + tanh) -> dropout -> Linear.
    * "hf" (Hugging Face ``ElectraForSequenceClassification`` / ``ConvBertForSequenceClassification``):
      [CLS] -> dropout -> dense D->D -> act -> dropout -> Linear.
    """

    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        self.num_labels = num_labels
        self.kind = cfg.classifier_head
        if self.kind == "pooler" and not cfg.pooler:
            raise ValueError(f"model {cfg.name!r}: classifier=pooler needs pooler=true")
        self.dropout = Dropout(cfg.hidden_dropout)
        if self.kind == "hf":
            self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
            self.act = activation(cfg.hidden_act)
        self.out = nn.Linear(cfg.hidden_size, num_labels)
        # ELECTRA's classifier: tf.layers.dense(reprs, num_labels), no initializer (Glorot-uniform)
        self.TF_GLOROT = ("out",) if self.kind == "cls" else ()

    def forward(self, enc, labels: torch.Tensor | None = None) -> HeadOutput:
        h = enc.pooled if self.kind == "pooler" else enc.features[:, 0]  # [B, D]
        if self.kind == "hf":
            h = self.act(self.dense(self.dropout(h)))
        logits = self.out(self.dropout(h))  # [B, num_labels]
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                logits = logits.squeeze(-1)
                loss = F.mse_loss(logits.float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels)
        return HeadOutput(loss, logits)


class MaskedLM(nn.Module):
    """Encoder + tied MLM head (BERT pre-training, ELECTRA generator)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.head = MLMHead(cfg, self.encoder.embeddings.word)
        self.encoder.init_weights(self.head)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> HeadOutput:
        enc = self.encoder(input_ids, attention_mask, token_type_ids)
        return self.head(enc.features, labels)


class ReplacedTokenDetector(nn.Module):
    """Encoder + RTD head (ELECTRA discriminator)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.head = RTDHead(cfg)
        self.encoder.init_weights(self.head)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> HeadOutput:
        enc = self.encoder(input_ids, attention_mask, token_type_ids)
        return self.head(enc.features, labels, attention_mask)


class SequenceClassifier(nn.Module):
    """Encoder + classification/regression head (GLUE)."""

    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.head = ClassificationHead(cfg, num_labels)
        self.encoder.init_weights(self.head)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> HeadOutput:
        return self.head(self.encoder(input_ids, attention_mask, token_type_ids), labels)
