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
from .hub import HubModel

IGNORE = -100


@dataclass
class HeadOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [M, V] against labels [M] over the rows whose label is not
    ``IGNORE`` (-100), in fp32 or wider; 0 when no row is labelled.

    ``F.cross_entropy(logits.float(), labels)`` with the forward's exponentials kept for the
    backward (softmax - one-hot): a third less time on the masked-LM head's [M, 30522] logits.
    Nothing is read back to the host (the count of labelled rows stays on the device), so a
    fixed number of prediction slots, some unused, keeps the step free of synchronisation."""
    if logits.shape[0] == 0:
        return logits.float().sum() * 0.0
    return _CrossEntropy.apply(logits, labels)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))  # [M, V]
        used = labels != IGNORE  # [M]
        target = labels.clamp(min=0)[:, None]  # [M, 1]: any valid index at unused rows
        top = x.amax(-1, keepdim=True)  # [M, 1]
        exp = torch.sub(x, top).exp_()  # [M, V]
        total = exp.sum(-1, keepdim=True)  # [M, 1]
        row_loss = (top + total.log() - x.gather(-1, target)).squeeze(-1)  # [M]
        weight = used.to(x.dtype) / used.sum().clamp(min=1)  # [M]: 1/n at labelled rows, else 0
        ctx.save_for_backward(exp, total, target, weight)
        ctx.logits_dtype = logits.dtype
        return (row_loss * weight).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        exp, total, target, weight = ctx.saved_tensors
        scale = (grad * weight)[:, None]  # [M, 1]: d(loss)/d(row loss)
        g = exp * (scale / total)  # softmax · scale
        g.scatter_add_(-1, target, -scale)
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

    def forward(
        self, features: torch.Tensor, labels: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> HeadOutput:
        """Scores only the predicted positions, which saves most of the head's cost:

        * ``labels`` [B, L] (-100 = not predicted): logits [M, V] for the M labelled tokens, in
          row-major order (M depends on the data: the selection reads it back to the host);
        * ``positions`` [P] into the flattened [B·L] batch with ``labels`` [P] (pre-training's
          prediction slots, :func:`~convexp.tasks.pretraining.objectives.prediction_slots`): logits [P, V]
          for the tokens at those positions, a shape fixed by P; unused slots (position B·L,
          label -100) are scored on the last token and left out of the loss. ELECTRA's
          ``gather_positions`` does the same.

        Without labels, every position of ``features`` is scored."""
        if positions is not None:
            flat = features.reshape(-1, features.shape[-1])  # [B·L, D]
            features = flat.index_select(0, positions.clamp(max=flat.shape[0] - 1))  # [P, D]
        elif labels is not None:
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


class MaskedLM(nn.Module, HubModel):
    """Encoder + tied MLM head (BERT pre-training, ELECTRA generator)."""

    KIND = "mlm"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.head = MLMHead(cfg, self.encoder.embeddings.word)
        self.encoder.init_weights(self.head)

    def forward(
        self, input_ids, attention_mask=None, token_type_ids=None, labels=None, positions=None, padded=None
    ) -> HeadOutput:
        enc = self.encoder(input_ids, attention_mask, token_type_ids, padded)
        return self.head(enc.features, labels, positions)


class ReplacedTokenDetector(nn.Module, HubModel):
    """Encoder + RTD head (ELECTRA discriminator)."""

    KIND = "rtd"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.head = RTDHead(cfg)
        self.encoder.init_weights(self.head)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, padded=None) -> HeadOutput:
        enc = self.encoder(input_ids, attention_mask, token_type_ids, padded)
        return self.head(enc.features, labels, attention_mask if padded is not False else None)


class SequenceClassifier(nn.Module, HubModel):
    """Encoder + classification/regression head (GLUE)."""

    KIND = "classifier"

    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.head = ClassificationHead(cfg, num_labels)
        self.encoder.init_weights(self.head)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, padded=None) -> HeadOutput:
        # the head reads [CLS] alone: the last block computes nothing else (Encoder ``first_only``);
        # ``padded``: whether the mask masks anything, from the host (None: the encoder looks)
        enc = self.encoder(input_ids, attention_mask, token_type_ids, padded=padded, first_only=True)
        return self.head(enc, labels)
