"""The encoder stack. Every variant in the papers is a :class:`ModelConfig` of this one class."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import ModelConfig
from .conv import SeparableConv1d
from .dropout import Dropout
from .embeddings import Embeddings
from . import parts
from .ffn import GroupedLinear
from .scalar_mix import ScalarMix


class Block(nn.Module):
    """Post-LN transformer block: x = LN(x + mixer(x)); x = LN(x + FFN(x)).

    The mixer and the FFN come from the table of parts (``cfg.mixer``, ``cfg.ffn``: a built-in or a
    user's module, models/parts.py); ``index`` is the layer (its sizes in ``cfg.layer_sizes``, a
    structurally pruned model)."""

    def __init__(self, cfg: ModelConfig, index: int = 0):
        super().__init__()
        self.mixer = parts.build("mixer", cfg, index)
        self.mixer_first_only = parts.takes_first_only(self.mixer)  # else: every position, then cut
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = parts.build("ffn", cfg, index)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout)

    def forward(
        self, x: torch.Tensor, keep: torch.Tensor | None, first_only: bool = False, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x: [B, L, D] -> [B, L, D]; ``first_only``: [B, 1, D], the output at position 0 alone (the
        mixer still reads every position as key and value; the rest runs on position 0 only).
        ``rows``: [N] indices of the real tokens in the B·L positions (:func:`real_rows`): the
        residuals, norms and FFN run on those alone, padding positions come out zero."""
        if self.mixer_first_only:
            m = self.mixer(x, keep, first_only)  # [B, L or 1, D]
        else:
            m = self.mixer(x, keep)  # [B, L, D]
            m = m[:, :1] if first_only else m
        if rows is None:
            x = self.norm1((x[:, :1] if first_only else x) + self.dropout(m))
            return self.norm2(x + self.dropout(self.ffn(x)))
        B, L, D = x.shape
        h = self.norm1(x.reshape(B * L, D)[rows] + self.dropout(m).reshape(B * L, D)[rows])  # [N, D]
        h = self.norm2(h + self.dropout.rows(self.ffn(h), rows, B * L))  # [N, D]
        return x.new_zeros(B * L, D).index_copy(0, rows, h).view(B, L, D)


def real_rows(keep: torch.Tensor | None, cfg: ModelConfig, x: torch.Tensor) -> torch.Tensor | None:
    """Where a block may skip its padding: [N] indices of the real tokens among keep's [B, L]
    positions, or None. Only on a CPU, where a step's time is its matrix products (a GPU's short
    fine-tuning steps are bound by kernel launches, and finding the rows would wait for the device),
    and only where no mixer reads a padding position's value (``hf_padding`` lets them into
    ConvBERT's convolutions; ``reads_padding``, into a user's mixer). The same outputs at every real
    position, to rounding."""
    if keep is None or x.device.type != "cpu" or cfg.reads_padding_positions:
        return None
    return keep.reshape(-1).nonzero().squeeze(1)


@dataclass
class EncoderOutput:
    hidden_states: list[torch.Tensor]  # embedding output and every layer output, each [B, L, D]
    features: torch.Tensor  # what the heads read: last layer, or BERMO's scalar mix   [B, L, D]
    pooled: torch.Tensor | None  # BERT pooler on features[:, 0]                       [B, D]

    @property
    def last_hidden_state(self) -> torch.Tensor:
        return self.hidden_states[-1]


def _normal(w: torch.Tensor, std: float, truncated: bool) -> None:
    """N(0, std); truncated: re-drawn beyond ±2·std (TF's truncated_normal_initializer)."""
    if truncated:
        nn.init.trunc_normal_(w, std=std, a=-2 * std, b=2 * std)
    else:
        nn.init.normal_(w, std=std)


def init_weights(m: nn.Module, std: float = 0.02, truncated: bool = False) -> None:
    """BERT's N(0, std) for matrices and embeddings (truncated at 2σ as the TF code of ELECTRA /
    ConvBERT / BERT does, when ``truncated``), zero biases, unit LayerNorms. ConvBERT's depthwise
    kernels: N(0, 1/K) (yitu-opensource/ConvBert model/modeling.py: ``depthwise_initializer=
    create_initializer(1/conv_kernel_size)``). Chang et al.'s convolutions keep PyTorch's default
    U(±1/√K) as their code does (nn.Conv1d; W^Q, W^K by kaiming_uniform(a=√5)); β starts at 0.
    A module with parameters of its own kind says how they start: ``init_parameters(std, truncated)``
    (SelfAttention's W^Q and W^K; a user's part may define it too). Use as ``module.apply(partial(init_weights, std=...))``."""
    if isinstance(m, nn.Linear):
        if m.weight.numel():  # a pruned Projection may have no linear head left: nn.Linear(D, 0)
            _normal(m.weight, std, truncated)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        _normal(m.weight, std, truncated)
        if m.padding_idx is not None:
            nn.init.zeros_(m.weight[m.padding_idx])
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
    elif isinstance(m, GroupedLinear):
        _normal(m.weight, std, truncated)
    elif isinstance(m, nn.Conv1d):
        m.reset_parameters()
    elif isinstance(m, SeparableConv1d):
        if m.depthwise_bias is None:  # ConvBERT
            _normal(m.depthwise, 1.0 / m.depthwise.shape[1], truncated)
        else:  # Chang et al.
            bound = m.depthwise.shape[1] ** -0.5
            nn.init.uniform_(m.depthwise, -bound, bound)
            nn.init.uniform_(m.depthwise_bias, -bound, bound)
    elif hasattr(m, "init_parameters"):  # a part's own parameters (SelfAttention's W^Q, W^K; a user's)
        m.init_parameters(std, truncated)


def glorot_where_tf_had_no_initializer(module: nn.Module) -> None:
    """TF's ``tf.layers.dense`` without ``kernel_initializer`` is Glorot-uniform: ELECTRA/ConvBERT's
    ``embeddings_project``, the RTD output layer (run_pretraining.py) and ELECTRA's classifier
    (classification_tasks.py). Modules name those layers in ``TF_GLOROT``."""
    for sub in module.modules():
        for name in getattr(sub, "TF_GLOROT", ()):
            layer = getattr(sub, name, None)
            if layer is not None:
                nn.init.xavier_uniform_(layer.weight)


class Encoder(nn.Module):
    """Embeddings, the blocks, optional scalar mix and pooler.

    ``gradient_checkpointing = True`` (``trainer.gradient_checkpointing``) keeps only each block's
    input for the backward pass and recomputes the block there (``torch.utils.checkpoint``,
    non-reentrant, the RNG state replayed so dropout draws the same masks): the same outputs and
    gradients, activation memory of one block instead of all, about one more forward of compute."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.gradient_checkpointing = False
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_layers))
        self.scalar_mix = (
            ScalarMix(cfg.num_layers + 1, cfg.scalar_mix_dropout, norm=cfg.scalar_mix_norm)
            if cfg.scalar_mix
            else None
        )
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size) if cfg.pooler else None
        self.init_weights(self)

    def init_weights(self, module: nn.Module) -> None:
        if self.embeddings.word.weight.is_meta:  # shape-only model (parameter/FLOP counting)
            return
        truncated = self.cfg.weight_init == "truncated"
        module.apply(lambda m: init_weights(m, self.cfg.initializer_range, truncated))
        if truncated:
            glorot_where_tf_had_no_initializer(module)

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, L]
        attention_mask: torch.Tensor | None = None,  # [B, L], 1 = real token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # [B, L]
        padded: bool | None = None,
        first_only: bool = False,
    ) -> EncoderOutput:
        """``padded``: whether ``attention_mask`` masks anything, when the caller knows (pre-training's
        batches say so from the host); None: look, which reads the device. An unpadded batch runs
        without a mask (SDPA's flash kernel, no zeroing before the convolutions).

        ``first_only``: the caller reads position 0 alone ([CLS]: ``pooled`` or ``features[:, 0]``,
        sequence classification). The last block's mixer still reads every position, but its
        residual, norms and FFN run on position 0 only, and the scalar mix mixes position 0: the
        same [CLS] vector as the full stack, for about 1/num_layers less compute (the last FFN's
        share). ``features`` and the last hidden state are then [B, 1, D]; the other hidden states
        stay [B, L, D], zero at padding positions on a CPU, where the blocks below skip the padding
        in their residuals, norms and FFN (:func:`real_rows`: two thirds of a layer's products; SST-2's
        random batches are two thirds padding)."""
        if padded is None:
            padded = attention_mask is not None and not bool(attention_mask.all())
        keep = attention_mask.bool() if padded else None
        x = self.embeddings(input_ids, token_type_ids)
        hidden = [x]
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        rows = real_rows(keep, self.cfg, x) if first_only else None  # padding read by no head
        for i, layer in enumerate(self.layers):
            first = first_only and i == len(self.layers) - 1
            args = (x, keep, first, None if first else rows)
            x = checkpoint(layer, *args, use_reentrant=False) if recompute else layer(*args)
            hidden.append(x)
        if self.scalar_mix is None:
            features = x
        else:
            features = self.scalar_mix([h[:, :1] for h in hidden] if first_only else hidden)
        pooled = torch.tanh(self.pooler(features[:, 0])) if self.pooler is not None else None
        return EncoderOutput(hidden, features, pooled)
