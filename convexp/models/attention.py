"""Token mixers: one per layer, [B, L, D] -> [B, L, D] (before the residual and LayerNorm).

* :class:`SelfAttention` — BERT's multi-head self-attention with the options of Chang et al. 2021
  (relative positions as convolutions; eqs. 4-7 and §5).
* :class:`MixedAttention` — ConvBERT's mixed attention (eqs. 4-6): bottleneck self-attention heads
  side by side with span-based dynamic convolution heads (or the Table 2 alternatives).

``keep`` is the boolean padding mask [B, L] (True = real token) or None when nothing is padded.
``first_only`` asks for position 0's output alone, [B, 1, D] (the last layer under a [CLS] head):
every position is still read as key and value.
Both mixers' ``attention_probs(x, keep)`` return the probabilities their softmax produces (for
analysis), from the same score code as ``forward``; ``forward`` itself never materialises them
where the attention is fused.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .conv import SeparableConv1d, depthwise_conv, lightweight_conv
from .dropout import cpu_masks
from .dropout import dropout as apply_dropout
from .slicing import head_features, is_zero, rows


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:  # [B, L, H*d] -> [B, H, L, d]
    B, L, _ = x.shape
    return x.view(B, L, heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:  # [B, H, L, d] -> [B, L, H*d]
    B, H, L, d = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d)


def zero_padding(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Zero padding positions so that convolution windows see them as outside the sequence."""
    return x if keep is None else x * keep.unsqueeze(-1).to(x.dtype)


def attention_scores(
    q: torch.Tensor | None,
    k: torch.Tensor | None,
    keep: torch.Tensor | None,
    bias: torch.Tensor | None,
    content: bool = True,
) -> torch.Tensor:
    """The scores s = q kᵀ/√d + bias before the softmax, fp32, -inf at padded keys: [B or 1, H, L, L].

    q, k: [B, H, L, d]; bias: [B or 1, H, L, L] or None; content=False drops the q kᵀ term. With the
    content term, the bias and the padding's -inf are added by the product itself (``baddbmm``: one
    pass over the [B, H, L, L] scores instead of a division, an addition and a masked fill, each
    with its backward: 0.3 s of a 3.4 s SQuAD-window step at 16 x 256 on a CPU)."""
    if not content:
        scores = bias.float()
        return scores if keep is None else scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    B, H, Lq, d = q.shape  # Lq: 1 for a [CLS] query alone
    Lk = k.shape[2]
    if bias is not None and bias.dtype != q.dtype:  # mixed precision: the bias added in its own
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d) + bias).float()  # precision, not rounded to q's
        return scores if keep is None else scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    add = None if bias is None else bias.expand(B, H, Lq, Lk)
    if keep is not None:
        pad = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill_(~keep, float("-inf"))
        pad = pad[:, None, None, :]  # [B, 1, 1, Lk]
        add = pad.expand(B, H, 1, Lk) if add is None else add + pad
    qk = (q.reshape(B * H, Lq, d), k.reshape(B * H, Lk, d).transpose(1, 2))
    if add is None:
        scores = torch.bmm(*qk).mul_(1.0 / math.sqrt(d))
    else:
        scores = torch.baddbmm(add.to(q.dtype).reshape(B * H, -1, Lk), *qk, alpha=1.0 / math.sqrt(d))
    return scores.view(B, H, Lq, Lk).float()


def attend(
    q: torch.Tensor | None,
    k: torch.Tensor | None,
    v: torch.Tensor,
    keep: torch.Tensor | None,
    bias: torch.Tensor | None,
    dropout: float,
    content: bool = True,
) -> torch.Tensor:
    """softmax(q kᵀ/√d + bias + mask) v, fused where possible. q, k, v: [B, H, L, d] -> [B, H, L, d].

    bias: [B or 1, H, L, L] additive score terms (Chang et al.'s convolutions) or None.
    content=False drops the q kᵀ term (Chang et al.'s "convolution only" ablation); q, k unused then.
    The unfused path computes :func:`attention_scores`, from which :func:`attention_probs` comes. It
    runs without the content term and, on CPU, under dropout: torch's CPU kernel is unfused there
    too, and :func:`~convexp.models.dropout.dropout` draws cheaper masks.
    """
    if content and not (dropout and cpu_masks(v)):
        if bias is None:
            mask = None if keep is None else keep[:, None, None, :]  # [B, 1, 1, L] bool
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        if keep is not None:
            bias = bias.masked_fill(~keep[:, None, None, :], float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), dropout_p=dropout)
    probs = torch.softmax(attention_scores(q, k, keep, bias, content), dim=-1)  # fp32 [B, H, L, L]
    return apply_dropout(probs, dropout).to(v.dtype) @ v


def attention_probs(scores: torch.Tensor, keep: torch.Tensor | None, batch: int) -> torch.Tensor:
    """The probabilities α = softmax_j(s_ij) that :func:`attend` applies (without dropout), from
    :func:`attention_scores`: fp32 [batch, H, L, L], 0 at padded keys, zero rows at padded queries."""
    L = scores.shape[-1]
    probs = torch.softmax(scores.expand(batch, -1, L, L), dim=-1)  # [B, H, L(i), L(j)]
    return probs if keep is None else probs * keep[:, None, :, None]


def relative_index(L: int, k: int, device: torch.device) -> torch.Tensor:
    """[L, L] index r + k of the clipped offset r = clamp(j - i, -k, k) for query i, key j."""
    pos = torch.arange(L, device=device)
    return (pos[None, :] - pos[:, None]).clamp(-k, k) + k


class Projection(nn.Module):
    """Q, K or V projection D -> H·d. With ``conv_kernel`` the first half of the heads use a
    depthwise-separable convolution (depthwise with bias, then pointwise; no activation, the
    "convolution_depth_mixed_no_act" form their README uses) instead of a linear
    map (Chang et al. §5); it reads the input with padding tokens zeroed.

    ``conv_out`` overrides the convolutional part's width (default out // 2): a structurally pruned
    layer may keep any number of convolution heads, including none (then ``conv`` is None) or all
    (then ``linear`` has no output features)."""

    def __init__(self, D: int, out: int, conv_kernel: int | None = None, conv_out: int | None = None):
        super().__init__()
        half = (out // 2 if conv_out is None else conv_out) if conv_kernel else 0
        self.conv = SeparableConv1d(D, half, conv_kernel, depthwise_bias=True) if half else None
        with warnings.catch_warnings():  # nn.Linear(D, 0) is valid (every head convolutional)
            warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
            self.linear = nn.Linear(D, out - half)

    def forward(self, x: torch.Tensor, x_zeroed: torch.Tensor) -> torch.Tensor:  # [B, L, D] -> [B, L, H·d]
        y = self.linear(x)
        return y if self.conv is None else torch.cat([self.conv(x_zeroed), y], dim=-1)

    def head_rows(self, d: int) -> list[tuple[nn.Linear, int]]:
        """Per head, in head order [conv heads ; linear heads]: (the nn.Linear holding its d output
        rows, its first row)."""
        parts = []
        if self.conv is not None:
            pw = self.conv.pointwise
            parts += [(pw, i * d) for i in range(pw.weight.shape[0] // d)]
        return parts + [(self.linear, i * d) for i in range(self.linear.weight.shape[0] // d)]

    def conv_head_count(self, d: int) -> int:
        return self.conv.pointwise.weight.shape[0] // d if self.conv is not None else 0

    def keep_heads(self, keep: list[int], d: int) -> None:
        """Keep heads ``keep`` (sorted), in place."""
        dev = self.linear.weight.device
        n_conv = self.conv_head_count(d)
        conv_heads, lin_heads = [h for h in keep if h < n_conv], [h - n_conv for h in keep if h >= n_conv]
        if self.conv is not None:
            if conv_heads:
                self.conv.pointwise = rows(self.conv.pointwise, head_features(conv_heads, d, dev))
            else:
                self.conv = None  # no convolution head left: forward returns the linear part
        self.linear = rows(self.linear, head_features(lin_heads, d, dev))


class SelfAttention(nn.Module):
    """Multi-head self-attention; with Chang et al.'s options the score for query i, key j is

        s_ij = q_i·k_j/√d            (content term; ``content_attention``)
             + β_{h,r}               (fixed lightweight convolution, eq. 4; ``fixed_conv``)
             + q_i·W^Q_r/√d          (dynamic lightweight convolution, eq. 5; ``dynamic_conv``)
             + k_j·W^K_{-r}/√d       (key-based dynamic convolution; ``key_conv``)

    with r = clamp(j - i, -k, k), kernel 2k+1. Composite attention (eq. 6) is content + fixed +
    dynamic. ``depthwise_conv`` adds a fixed per-channel convolution of the values to the output
    (eq. 7); ``conv_qkv`` makes the chosen projections convolutional in half the heads (§5).

    ``heads`` / ``conv_heads`` (a structurally pruned layer, ``ModelConfig.layer_sizes``) override
    N and the number of convolutional heads of the conv_qkv projections (default heads // 2).
    """

    def __init__(self, cfg: ModelConfig, heads: int | None = None, conv_heads: int | None = None):
        super().__init__()
        D, d, K = cfg.hidden_size, cfg.head_dim, cfg.kernel_size
        H = heads or cfg.num_heads
        self.heads, self.head_dim, self.k = H, d, K // 2
        self.content = cfg.content_attention
        self.dropout = cfg.attention_dropout
        conv_out = None if conv_heads is None else conv_heads * d
        proj = {n: Projection(D, H * d, K if n in cfg.conv_qkv else None, conv_out) for n in "qkv"}
        # Without the content term, queries and keys exist only to generate dynamic kernels.
        self.q = proj["q"] if cfg.content_attention or cfg.dynamic_conv else None
        self.k_proj = proj["k"] if cfg.content_attention or cfg.key_conv else None
        self.v = proj["v"]
        self.fixed = nn.Parameter(torch.zeros(H, K)) if cfg.fixed_conv else None  # β: [H, 2k+1]
        self.dynamic = nn.Parameter(torch.empty(d, K)) if cfg.dynamic_conv else None  # W^Q: [d, 2k+1]
        self.key_dynamic = nn.Parameter(torch.empty(d, K)) if cfg.key_conv else None  # W^K: [d, 2k+1]
        self.depthwise = (
            nn.Conv1d(H * d, H * d, K, padding=K // 2, groups=H * d) if cfg.depthwise_conv else None
        )
        self.out = nn.Linear(H * d, D)
        self.conv_qkv = cfg.conv_qkv

    # --- prunable heads (pruning/structured.py): what a removed head leaves, and the slicing

    heads_fixed = None  # every head can be removed

    def dead_values(self) -> list[bool]:
        """Per head: its value rows are zero (v_h = b_v[h] everywhere: a constant output). Never
        with eq. 7's depthwise convolution on the values, which sees the padding boundary."""
        d = self.head_dim
        dead = [bool(is_zero(lin.weight[r : r + d], (0, 1))) for lin, r in self.v.head_rows(d)]
        return [False] * self.heads if self.depthwise is not None else dead

    def value_bias(self, h: int) -> torch.Tensor:  # b_v of head h, [d]
        lin, r = self.v.head_rows(self.head_dim)[h]
        return lin.bias[r : r + self.head_dim]

    def keep_heads(self, keep: list[int]) -> None:
        """Keep heads ``keep`` (sorted) in every projection, β and eq. 7's convolution; ``out`` is
        sliced by the caller."""
        d = self.head_dim
        for proj in (self.q, self.k_proj, self.v):
            if proj is not None:
                proj.keep_heads(keep, d)
        if self.fixed is not None:  # β [H, K]
            self.fixed = nn.Parameter(self.fixed[keep].clone())
        if self.depthwise is not None:  # per-channel Conv1d over the H·d value channels
            feat, old = head_features(keep, d, self.out.weight.device), self.depthwise
            C, K = len(feat), old.kernel_size[0]
            new = nn.Conv1d(C, C, K, padding=old.padding, groups=C).to(old.weight.device, old.weight.dtype)
            with torch.no_grad():
                new.weight.copy_(old.weight[feat])
                new.bias.copy_(old.bias[feat])
            self.depthwise = new
        self.heads = len(keep)

    def layer_size(self) -> dict:
        """Its entry of ``ModelConfig.layer_sizes``: heads and, with conv_qkv, convolutional heads
        (all conv_qkv projections are sliced alike: the first present tells; heads // 2 when none
        exists, e.g. q without content attention)."""
        size = {"heads": self.heads}
        if self.conv_qkv:
            present = [p for n, p in zip("qkv", (self.q, self.k_proj, self.v)) if n in self.conv_qkv and p is not None]
            size["conv_heads"] = present[0].conv_head_count(self.head_dim) if present else self.heads // 2
        return size

    def init_parameters(self, std: float, truncated: bool) -> None:
        """Its own parameters' initialisation (encoder.init_weights calls it): W^Q and W^K as
        Chang et al.'s code leaves them, kaiming_uniform(a=√5), i.e. U(±1/√(2k+1))."""
        for p in (self.dynamic, self.key_dynamic):
            if p is not None:
                bound = p.shape[1] ** -0.5
                nn.init.uniform_(p, -bound, bound)

    def relative_bias(
        self, q: torch.Tensor | None, k: torch.Tensor | None, L: int, device
    ) -> torch.Tensor | None:
        """Sum of the convolution terms of the score, [B or 1, H, L, L], or None.

        q, k: [B, H, L, d] (None when the configuration does not use them)."""
        if self.fixed is None and self.dynamic is None and self.key_dynamic is None:
            return None
        idx = relative_index(L, self.k, device)  # [L, L]
        bias = torch.zeros((), device=device)
        if self.fixed is not None:
            bias = bias + self.fixed[:, idx].unsqueeze(0)  # [1, H, L, L]
        scale = 1.0 / math.sqrt(self.head_dim)
        if self.dynamic is not None:
            qw = (q @ self.dynamic.to(q.dtype)) * scale  # [B, H, L, 2k+1]: q_i·W^Q_r for every r
            bias = bias + qw.gather(-1, idx.expand(*qw.shape[:2], L, L))  # [B, H, L(i), L(j)]
        if self.key_dynamic is not None:
            kw = (k @ self.key_dynamic.to(k.dtype)) * scale  # [B, H, L, 2k+1]: k_j·W^K_m
            # the offset seen from key j is -r = clamp(i - j), i.e. idx[j, i]: gather then transpose
            bias = bias + kw.gather(-1, idx.expand(*kw.shape[:2], L, L)).transpose(-1, -2)
        return bias

    def score_terms(self, x: torch.Tensor, x0: torch.Tensor):
        """(q, k, relative bias) of the score for input x [B, L, D] (x0: x with padding zeroed):
        q, k [B, H, L, d] or None when unused, bias [B or 1, H, L, L] or None."""
        q = split_heads(self.q(x, x0), self.heads) if self.q is not None else None
        k = split_heads(self.k_proj(x, x0), self.heads) if self.k_proj is not None else None
        return q, k, self.relative_bias(q, k, x.shape[1], x.device)

    def attention_probs(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """The attention probabilities α_ij this layer applies to input x [B, L, D]: [B, H, L, L]
        (every score term as configured; see :func:`attention_probs`)."""
        q, k, bias = self.score_terms(x, zero_padding(x, keep))
        return attention_probs(attention_scores(q, k, keep, bias, self.content), keep, x.shape[0])

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, first_only: bool = False) -> torch.Tensor:
        """x: [B, L, D] -> [B, L, D], or [B, 1, D] with ``first_only``."""
        x0 = zero_padding(x, keep)
        v_flat = self.v(x, x0)  # [B, L, H·d]
        v = split_heads(v_flat, self.heads)  # [B, H, L, d]
        score_free = self.fixed is None and self.dynamic is None and self.key_dynamic is None
        # the content score alone: position 0's query is all that is needed
        first_query = first_only and score_free and self.depthwise is None and self.q is not None
        if first_query and self.q.conv is None:  # a linear query: projected for position 0 alone
            q = split_heads(self.q(x[:, :1].contiguous(), x0[:, :1]), self.heads)  # [B, H, 1, d]
            k, bias = split_heads(self.k_proj(x, x0), self.heads), None
        else:
            q, k, bias = self.score_terms(x, x0)
            if first_query:  # a convolutional query reads its neighbours: computed, then cut
                q = q[:, :, :1]
        drop = self.dropout if self.training else 0.0
        y = merge_heads(attend(q, k, v, keep, bias, drop, self.content))  # [B, L or 1, H·d]
        if self.depthwise is not None:  # eq. 7: per-channel convolution of the values, added after attention
            w = self.depthwise.weight.squeeze(1)  # [H·d, K]
            y = y + depthwise_conv(zero_padding(v_flat, keep), w, self.depthwise.bias)
        if first_only:
            y = y[:, :1].contiguous()  # [B, 1, H·d]; a strided view may take another BLAS path (rounding)
        return self.out(y)


class MixedAttention(nn.Module):
    """ConvBERT mixed attention (eq. 6): [n self-attention heads ; n convolution heads] -> D.

    n = N // γ heads of size d (bottleneck, "BNK"); the query is shared by both branches.
    Convolution branch by ``conv_type``:
      * ``sdconv``: span-based dynamic convolution (eq. 5). Span-aware key Ks = SepConv(x);
        kernel = softmax(Linear(Ks ⊙ Q)) per head over K taps; applied to V' = Linear(x).
      * ``dynamic``: kernel = softmax(Linear(x_i)) from the current token only (eq. 3), on V'.
      * ``conventional``: a depthwise-separable convolution of x.
      * ``none``: self-attention heads only (ConvBERT Table 1 "+BNK").

    ``heads`` (a structurally pruned layer, ``ModelConfig.layer_sizes``) overrides the number of
    self-attention heads; the convolution branch keeps N // γ heads. ``sdconv`` / ``dynamic`` share
    the head count between the branches (the config refuses another count for them).
    """

    def __init__(self, cfg: ModelConfig, heads: int | None = None):
        super().__init__()
        D, K = cfg.hidden_size, cfg.kernel_size
        c, d = cfg.attn_heads, cfg.head_dim  # convolution heads (never removed), head size
        n = heads or c  # self-attention heads
        if cfg.conv_type in ("sdconv", "dynamic") and n != c:
            raise ValueError(f"MixedAttention with conv_type {cfg.conv_type} needs {c} heads, got {n}")
        A, C = n * d, c * d  # self-attention width, convolution-branch width
        self.heads, self.conv_heads, self.kernel_size, self.conv_type = n, c, K, cfg.conv_type
        self.dropout = cfg.attention_dropout
        self.mask_conv = not cfg.hf_padding
        self.query, self.key, self.value = nn.Linear(D, A), nn.Linear(D, A), nn.Linear(D, A)
        if cfg.conv_type == "sdconv":
            self.key_conv = SeparableConv1d(D, C, K)  # span-aware key
            self.conv_kernel = nn.Linear(C, c * K)
        elif cfg.conv_type == "dynamic":
            self.conv_kernel = nn.Linear(D, c * K)
        elif cfg.conv_type == "conventional":
            self.conv = SeparableConv1d(D, C, K)
        if cfg.conv_type in ("sdconv", "dynamic"):
            self.conv_value = nn.Linear(D, C)
        self.out = nn.Linear(A if cfg.conv_type == "none" else A + C, D)

    # --- prunable heads (pruning/structured.py): the self-attention heads; the convolution heads stay

    @property
    def heads_fixed(self) -> str | None:
        """Why its heads cannot be removed (None: they can)."""
        if self.conv_type in ("sdconv", "dynamic"):
            return ("MixedAttention heads are shared by the self-attention and the sdconv/dynamic convolution "
                    "branch; removing heads there needs separate head counts in the model (not done)")  # fmt: skip
        return None

    @property
    def head_dim(self) -> int:
        return self.query.weight.shape[0] // self.heads

    def dead_values(self) -> list[bool]:
        d = self.head_dim
        return [bool(is_zero(self.value.weight[h * d : (h + 1) * d], (0, 1))) for h in range(self.heads)]

    def value_bias(self, h: int) -> torch.Tensor:
        d = self.head_dim
        return self.value.bias[h * d : (h + 1) * d]

    def keep_heads(self, keep: list[int]) -> None:
        feat = head_features(keep, self.head_dim, self.out.weight.device)
        self.query, self.key, self.value = (rows(m, feat) for m in (self.query, self.key, self.value))
        self.heads = len(keep)

    def layer_size(self) -> dict:
        return {"heads": self.heads}

    def attention_probs(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """The self-attention heads' probabilities softmax(q kᵀ/√d) for input x [B, L, D]:
        [B, n, L, L] (the convolution heads have none; see :func:`attention_probs`)."""
        q, k = (split_heads(t, self.heads) for t in (self.query(x), self.key(x)))
        return attention_probs(attention_scores(q, k, keep, None), keep, x.shape[0])

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None, first_only: bool = False) -> torch.Tensor:
        """x: [B, L, D] -> [B, L, D], or [B, 1, D] with ``first_only``."""
        B, L, _ = x.shape
        q = self.query(x)  # [B, L, A]
        drop = self.dropout if self.training else 0.0
        queries = q[:, :1] if first_only else q  # [B, L or 1, A]; the convolution branch reads all of q
        heads = [split_heads(t, self.heads) for t in (queries, self.key(x), self.value(x))]
        y = merge_heads(attend(*heads, keep, None, drop))  # [B, L or 1, A]
        if self.conv_type == "none":
            return self.out(y)
        conv_keep = keep if self.mask_conv else None
        if self.conv_type == "conventional":
            conv = self.conv(zero_padding(x, conv_keep))  # [B, L, A]
        else:
            if self.conv_type == "sdconv":
                ks = self.key_conv(zero_padding(x, conv_keep))  # [B, L, A]
                kernel = self.conv_kernel(ks * q)  # [B, L, n·K]
            else:
                kernel = self.conv_kernel(x)
            kernel = torch.softmax(kernel.view(B, L, self.conv_heads, self.kernel_size), dim=-1)
            v = zero_padding(self.conv_value(x), conv_keep).view(B, L, self.conv_heads, -1)  # [B, L, c, d]
            conv = lightweight_conv(v, kernel).reshape(B, L, -1)  # [B, L, C]
        return self.out(torch.cat([y, conv[:, :1] if first_only else conv], dim=-1))
