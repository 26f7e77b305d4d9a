"""Input embeddings: word (width E), absolute positions (optional), token types, then E->D."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig
from .dropout import Dropout


class Embeddings(nn.Module):
    TF_GLOROT = ("project",)  # ELECTRA's embeddings_project has no initializer (Glorot-uniform)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        E, D = cfg.emb_size, cfg.hidden_size
        self.word = nn.Embedding(cfg.vocab_size, E, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, E) if cfg.absolute_positions else None
        self.token_type = nn.Embedding(cfg.type_vocab_size, E) if cfg.type_vocab_size > 0 else None
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout)
        # Factorised embeddings (ELECTRA/ConvBERT small): project E -> D after normalisation.
        self.project = nn.Linear(E, D) if E != D else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word(input_ids)  # [B, L, E]
        if self.position is not None:
            L = input_ids.shape[1]
            if L > self.position.num_embeddings:
                raise ValueError(
                    f"sequence length {L} exceeds max_position_embeddings {self.position.num_embeddings}"
                )
            x = x + self.position.weight[:L]
        if self.token_type is not None:
            x = x + (
                self.token_type(token_type_ids) if token_type_ids is not None else self.token_type.weight[0]
            )
        x = self.dropout(self.norm(x))
        return self.project(x) if self.project is not None else x  # [B, L, D]
