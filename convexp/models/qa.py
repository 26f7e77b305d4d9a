"""Extractive question answering (SQuAD) heads over encoder features [B, L, D].

``SpanHead`` — BERT / Hugging Face ``run_qa.py`` (BERMO): one dense D→2 gives independent start
  and end logits; loss = (CE(start) + CE(end)) / 2, batch mean.
``JointSpanHead`` — ELECTRA's QA head (ConvBERT Table 4 uses ELECTRA's fine-tuning code):
  start logits = dense D→1, with every token that is neither context nor [CLS] pushed down by
  1000 (ELECTRA's ``logits += 1000 · (answer_mask − 1)``); end logits are *joint*: token j's end
  logit is dense(GELU(dense([h_start ; h_j]))) → 1 (hidden 512 in ELECTRA), where h_start is the
  gold start's vector in training and, at inference, each of a beam of the k best starts (k = 20),
  each keeping its k best ends. loss = (CE(start) + CE(end | gold start)) / 2. The answerable
  classifier reads [h_CLS ; Σ_j softmax(start)_j · h_j] → dense-GELU → 1: the *no-answer* logit
  (ELECTRA trains it on the question's ``is_impossible``, on SQuAD 1.1 too, where every label is
  0), sigmoid CE added with weight 0.5; only v2.0's decoding reads it.

``QuestionAnswerer`` wraps convexp's :class:`Encoder` with either head. Its output carries the
start and end logits over the tokens ([B, L]; for the joint head the end logits are conditioned
on the gold start, so run the teacher with the batch's start_positions too), so a teacher's logits
can be distilled position-wise as Sanh et al.'s ``masked_run_squad.py`` does, (KL_start +
KL_end) / 2: ``convexp.pruning.distill.distillation_loss(out.distillation_logits,
teacher_out.distillation_logits, out.loss)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .encoder import Encoder

MASKED = 1000.0  # ELECTRA's additive mask for tokens that cannot start or end an answer
QA_HEADS = ("bert", "electra")


@dataclass
class QAOutput:
    loss: torch.Tensor | None
    start_logits: torch.Tensor  # [B, L]
    end_logits: torch.Tensor | None  # [B, L]; joint head: conditioned on the gold start (None without it)
    null_logit: torch.Tensor | None = None  # [B] no-answer logit (joint head with the answerable classifier)
    # joint head at inference (not training): the beam
    start_top_log_probs: torch.Tensor | None = None  # [B, k]
    start_top_index: torch.Tensor | None = None  # [B, k]
    end_top_log_probs: torch.Tensor | None = None  # [B, k, k]
    end_top_index: torch.Tensor | None = None  # [B, k, k]

    @property
    def distillation_logits(self) -> torch.Tensor:
        """Start and end logits stacked as [2B, L]: ``soft_target_loss`` (batch mean) of the stacks
        is (KL_start + KL_end) / 2, Sanh et al.'s ``masked_run_squad.py`` distillation term."""
        if self.end_logits is None:
            raise ValueError("no end logits to distil: run the joint head with start_positions")
        return torch.cat([self.start_logits, self.end_logits], 0)


def span_loss(start_logits, end_logits, start_positions, end_positions) -> torch.Tensor:
    """(CE(start) + CE(end)) / 2, batch mean; positions outside [0, L) are ignored (as run_qa clamps)."""
    L = start_logits.shape[-1]
    s = start_positions.clamp(0, L)
    e = end_positions.clamp(0, L)
    return (
        F.cross_entropy(start_logits.float(), s, ignore_index=L)
        + F.cross_entropy(end_logits.float(), e, ignore_index=L)
    ) / 2


class SpanHead(nn.Module):
    """BERT / run_qa head: dense D→2 → independent start and end logits (no masking)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)

    def forward(
        self,
        features: torch.Tensor,  # [B, L, D]
        context_mask: torch.Tensor | None = None,  # unused: run_qa rules out non-context spans when decoding
        start_positions: torch.Tensor | None = None,  # [B]
        end_positions: torch.Tensor | None = None,  # [B]
        is_impossible: torch.Tensor | None = None,  # unused: v2.0 uses start[CLS] + end[CLS]
    ) -> QAOutput:
        start, end = self.qa_outputs(features).unbind(-1)  # [B, L] each
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start, end, start_positions, end_positions)
        return QAOutput(loss, start, end)


class JointSpanHead(nn.Module):
    """ELECTRA's QA head (see the module docstring).

    answer_mask = context tokens + [CLS] (position 0); hidden = the joint layer's width (512);
    beam_size = k; answerable = add the SQuAD 2.0 answerable classifier; answerable_weight = 0.5.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        hidden: int = 512,
        beam_size: int = 20,
        answerable: bool = False,
        answerable_weight: float = 0.5,
    ):
        super().__init__()
        D = cfg.hidden_size
        self.beam_size = beam_size
        self.answerable_weight = answerable_weight
        self.start = nn.Linear(D, 1)
        self.end_hidden = nn.Linear(2 * D, hidden)  # over [h_start ; h_j]
        self.end = nn.Linear(hidden, 1)
        self.answerable = None
        if answerable:
            self.answerable = nn.Sequential(nn.Linear(2 * D, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def _end_logits(self, h: torch.Tensor, h_start: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
        """End logits of every token given start vectors: h [B, L, D], h_start [B, K, D] -> [B, K, L].

        dense([h_start ; h_j]) = W_s·h_start + W_e·h_j + b, computed without the [B, K, L, 2D]
        concatenation."""
        D = h.shape[-1]
        w = self.end_hidden.weight  # [H, 2D]
        a = F.linear(h_start, w[:, :D], self.end_hidden.bias)  # [B, K, H]
        b = F.linear(h, w[:, D:])  # [B, L, H]
        z = F.gelu(a.unsqueeze(2) + b.unsqueeze(1))  # [B, K, L, H]
        return self.end(z).squeeze(-1) + penalty.unsqueeze(1)  # [B, K, L]

    def forward(
        self,
        features: torch.Tensor,  # [B, L, D]
        context_mask: torch.Tensor,  # [B, L], 1 = context token
        start_positions: torch.Tensor | None = None,  # [B]
        end_positions: torch.Tensor | None = None,  # [B]
        is_impossible: torch.Tensor | None = None,  # [B], 1 = no answer (v1.1: all 0)
    ) -> QAOutput:
        B, L, _ = features.shape
        answer_mask = context_mask.to(features.dtype).clone()
        answer_mask[:, 0] = 1.0  # [CLS] = "no answer here"
        penalty = MASKED * (answer_mask - 1)  # [B, L]: 0 allowed, −1000 ruled out
        start = self.start(features).squeeze(-1) + penalty  # [B, L]
        out = QAOutput(None, start, None)
        if start_positions is not None:  # teacher forcing: the end distribution given the gold start
            h_start = features[
                torch.arange(B, device=features.device), start_positions.clamp(0, L - 1)
            ]  # [B, D]
            out.end_logits = self._end_logits(features, h_start.unsqueeze(1), penalty).squeeze(1)  # [B, L]
        elif self.training:
            raise ValueError(
                "JointSpanHead needs start_positions in training (its end logits depend on them)"
            )
        if not self.training:  # the beam: k best starts, each with its k best ends
            k = min(self.beam_size, L)
            out.start_top_log_probs, out.start_top_index = F.log_softmax(start.float(), -1).topk(
                k, -1
            )  # [B, k]
            h_start = torch.gather(
                features, 1, out.start_top_index.unsqueeze(-1).expand(-1, -1, features.shape[-1])
            )
            # one start at a time: [B, L, H] live instead of [B, k, L, H] (0.7 GB at B 32, L 512)
            end = torch.cat([self._end_logits(features, h_start[:, i : i + 1], penalty) for i in range(k)], 1)
            out.end_top_log_probs, out.end_top_index = F.log_softmax(end.float(), -1).topk(k, -1)  # [B, k, k]
        if self.answerable is not None:
            p = F.softmax(start.float(), -1).to(features.dtype)  # [B, L]
            pooled = torch.einsum("bl,bld->bd", p, features)  # Σ softmax(start)·h   [B, D]
            out.null_logit = self.answerable(torch.cat([features[:, 0], pooled], -1)).squeeze(-1)  # [B]
        if start_positions is not None and end_positions is not None:
            out.loss = span_loss(start, out.end_logits, start_positions, end_positions)
            if self.answerable is not None and is_impossible is not None:
                bce = F.binary_cross_entropy_with_logits(out.null_logit.float(), is_impossible.float())
                out.loss = out.loss + self.answerable_weight * bce
        return out


class QuestionAnswerer(nn.Module):
    """Encoder + span head: ``head="bert"`` (SpanHead) or ``"electra"`` (JointSpanHead; keyword
    arguments such as hidden, beam_size, answerable go to it)."""

    def __init__(self, cfg: ModelConfig, head: str = "bert", **head_kwargs):
        super().__init__()
        if head not in QA_HEADS:
            raise ValueError(f"unknown QA head {head!r}; choose one of {', '.join(QA_HEADS)}")
        self.encoder = Encoder(cfg)
        self.head = SpanHead(cfg, **head_kwargs) if head == "bert" else JointSpanHead(cfg, **head_kwargs)
        self.encoder.init_weights(self.head)

    def forward(
        self,
        input_ids,
        attention_mask=None,
        token_type_ids=None,
        context_mask=None,
        start_positions=None,
        end_positions=None,
        is_impossible=None,
        padded=None,  # whether the mask masks anything, from the host (None: the encoder looks)
    ) -> QAOutput:
        enc = self.encoder(input_ids, attention_mask, token_type_ids, padded=padded)
        return self.head(enc.features, context_mask, start_positions, end_positions, is_impossible)
