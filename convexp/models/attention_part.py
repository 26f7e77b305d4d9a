"""The two built-in token mixers as parts (the protocol: models/parts.py), without torch: each
builds its module (models/attention.py) and says what the rest of convexp asks of a mixer — its
options' rules, its self-attention heads, its parameters and FLOPs, what it keeps for the backward
beyond self-attention's, its FLOPs as ConvBERT's Table 3 counts them, its name in tables, and its
``transformers`` class and keys.

* :data:`SELF_ATTENTION` (``mixer: attention``) — BERT's multi-head self-attention with Chang et
  al.'s relative-position convolutions (eqs. 4-7 and §5).
* :data:`MIXED_ATTENTION` (``mixer: mixed``) — ConvBERT's mixed attention (eqs. 4-6): N/γ bottleneck
  self-attention heads beside span-based dynamic convolution heads (or Table 2's alternatives).

FLOPs as torch's FlopCounterMode counts them: 2·m·n per matrix product, a convolution 2·C_in/groups·K
per output value, attention 4·H·L·d per query; elementwise work not counted (models/stats.py).
"""

from __future__ import annotations

import importlib


def module_class(path: str):
    """The nn.Module class a part builds, by its import path (``module:Class``), imported on first
    use: a part is described without torch, and ModelConfig (which asks its part) stays below the
    modules that build from it."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def linear_params(i: int, o: int) -> int:
    """Parameters of nn.Linear(i, o): weight and bias."""
    return i * o + o


def weight_bias_keys(hf: str, cx: str) -> list[tuple[str, str, str]]:
    """(HF key, convexp key, "same") of a layer's weight and bias."""
    return [(f"{hf}.weight", f"{cx}.weight", "same"), (f"{hf}.bias", f"{cx}.bias", "same")]


CHANG_OPTIONS = ("fixed_conv", "dynamic_conv", "key_conv", "depthwise_conv")


class SelfAttentionPart:
    """``mixer: attention``: :class:`~convexp.models.attention.SelfAttention`."""

    name = "attention"
    maps_all_heads = True  # attention_probs covers every head (report/analysis.py)

    def __call__(self, cfg, layer: int):
        size = cfg.layer_size(layer)
        return module_class("convexp.models.attention:SelfAttention")(cfg, size["heads"], size["conv_heads"])

    def check(self, cfg, bad) -> None:
        if not (cfg.content_attention or cfg.fixed_conv or cfg.dynamic_conv or cfg.key_conv):
            bad("content_attention=false needs at least one of fixed_conv, dynamic_conv, key_conv")

    def heads(self, cfg) -> int:
        return cfg.num_heads

    def fixed_heads(self, cfg) -> bool:
        """Whether a per-layer head count (structured pruning) cannot be rebuilt."""
        return False

    def label(self, cfg) -> str:
        return "attention"

    def count(self, cfg, i: int) -> tuple[int, int, int]:
        """(parameters, forward FLOPs per token independent of length, FLOPs per token per position)."""
        D, K, d = cfg.hidden_size, cfg.kernel_size, cfg.head_dim
        size = cfg.layer_size(i)
        H = size["heads"]
        conv_out = None if size["conv_heads"] is None else size["conv_heads"] * d
        params = flops = 0
        used = [n for n, on in (("q", cfg.content_attention or cfg.dynamic_conv),
                                ("k", cfg.content_attention or cfg.key_conv), ("v", True)) if on]  # fmt: skip
        for n in used:  # attention.Projection: half its outputs (or conv_out) from a separable conv
            half = (H * d // 2 if conv_out is None else conv_out) if n in cfg.conv_qkv else 0
            params += (D * K + D + linear_params(D, half) if half else 0) + linear_params(D, H * d - half)
            flops += 2 * D * (H * d - half) + (2 * D * K + 2 * D * half if half else 0)
        params += H * K * cfg.fixed_conv + d * K * (cfg.dynamic_conv + cfg.key_conv)
        flops += 2 * H * d * K * (cfg.dynamic_conv + cfg.key_conv)  # q·W^Q, k·W^K for every offset
        if cfg.depthwise_conv:  # eq. 7
            params += H * d * K + H * d
            flops += 2 * H * d * K
        per_pos = (4 if cfg.content_attention else 2) * H * d  # q kᵀ and probs·v (or probs·v alone)
        params += linear_params(H * d, D)
        flops += 2 * H * d * D
        return params, flops, per_pos

    def extra_saved(self, cfg, i: int, seq_len: int) -> tuple[int, int]:
        """(values per token, [L, L]-map entries per token) kept for the backward beyond
        self-attention's (sweep/memory.py): none."""
        return 0, 0

    def table3_extra(self, cfg, s: int, softmax_flops: int) -> tuple[float, int]:
        """(forward FLOPs per token, extra width read by the output projection) beyond bottleneck
        self-attention's, as ELECTRA's flops_computation.py counts (models/stats.py; a softmax costs
        ``softmax_flops`` a value): none."""
        return 0.0, 0

    # --- transformers -------------------------------------------------------------------------

    def hf_model_type(self, cfg) -> str:
        return "bert" if cfg.pooler else "electra"

    def hf_refusals(self, cfg) -> list[str]:
        """Why ``cfg`` has no ``transformers`` class (empty: it has one)."""
        mt = self.hf_model_type(cfg)
        why = []
        convs = [k for k in CHANG_OPTIONS if getattr(cfg, k)]
        convs += [f"conv_qkv={cfg.conv_qkv!r}"] if cfg.conv_qkv else []
        convs += ["content_attention=False"] if not cfg.content_attention else []
        if convs:
            why.append(f"{', '.join(convs)} (Chang et al.'s convolutions: {mt} has plain self-attention)")
        if cfg.head_dim * cfg.num_heads != cfg.hidden_size:
            why.append(f"{cfg.num_heads} heads of {cfg.head_dim} != hidden_size {cfg.hidden_size}")
        return why

    def hf_keys(self, cfg, hf: str, cx: str) -> list[tuple[str, str, str]] | None:
        """(HF key, convexp key, layout) of the mixer of one layer (``hf``, ``cx``: the layer's
        prefixes); None where ``transformers`` has no such module."""
        t = []
        for name, mod in (("query", "q"), ("key", "k_proj"), ("value", "v")):
            t += weight_bias_keys(f"{hf}attention.self.{name}", f"{cx}mixer.{mod}.linear")
        return t + weight_bias_keys(f"{hf}attention.output.dense", f"{cx}mixer.out")


class MixedAttentionPart(SelfAttentionPart):
    """``mixer: mixed``: :class:`~convexp.models.attention.MixedAttention` (``conv_type``: sdconv,
    conventional, dynamic or none, ConvBERT Table 2; ``head_ratio``: γ)."""

    name = "mixed"
    maps_all_heads = False  # the convolution heads have no attention map

    def __call__(self, cfg, layer: int):
        return module_class("convexp.models.attention:MixedAttention")(cfg, cfg.layer_size(layer)["heads"])

    def check(self, cfg, bad) -> None:
        if not 1 <= cfg.head_ratio <= cfg.num_heads:
            bad(f"head_ratio (γ) must be in [1, num_heads={cfg.num_heads}], got {cfg.head_ratio}")
        if any(getattr(cfg, k) for k in CHANG_OPTIONS) or cfg.conv_qkv or not cfg.content_attention:
            bad("Chang et al. options (fixed/dynamic/key/depthwise conv, conv_qkv) need mixer=attention")

    def heads(self, cfg) -> int:
        return cfg.num_heads // cfg.head_ratio

    def fixed_heads(self, cfg) -> bool:
        return cfg.conv_type in ("sdconv", "dynamic")  # the convolution branch shares the heads

    def label(self, cfg) -> str:
        return f"mixed/{cfg.conv_type}"

    def count(self, cfg, i: int) -> tuple[int, int, int]:
        D, K, d = cfg.hidden_size, cfg.kernel_size, cfg.head_dim
        H = cfg.layer_size(i)["heads"]
        c = self.heads(cfg)  # convolution heads
        A, C = H * d, c * d
        params, flops, per_pos = 3 * linear_params(D, A), 3 * 2 * D * A, 4 * H * d
        if cfg.conv_type == "sdconv":
            params += D * K + linear_params(D, C) + linear_params(C, c * K) + linear_params(D, C)
            flops += 2 * D * K + 2 * D * C + 2 * C * c * K + 2 * D * C
        elif cfg.conv_type == "dynamic":
            params += linear_params(D, c * K) + linear_params(D, C)
            flops += 2 * D * c * K + 2 * D * C
        elif cfg.conv_type == "conventional":
            params += D * K + linear_params(D, C)
            flops += 2 * D * K + 2 * D * C
        width = A if cfg.conv_type == "none" else A + C
        return params + linear_params(width, D), flops + 2 * width * D, per_pos

    def extra_saved(self, cfg, i: int, seq_len: int) -> tuple[int, int]:
        if cfg.conv_type == "none":
            return 0, 0
        D, K, d = cfg.hidden_size, cfg.kernel_size, cfg.head_dim
        c = self.heads(cfg)  # convolution heads: as many as self-attention's (ConvBERT's γ split)
        A = cfg.layer_size(i)["heads"] * d
        # the branch's inputs, kernels and outputs; the banded [L, L] kernel matrix of each conv head
        return 2 * D + 2 * A + 3 * c * d + 2 * c * K, c * seq_len

    def table3_extra(self, cfg, s: int, softmax_flops: int) -> tuple[float, int]:
        if cfg.conv_type == "none":
            return 0.0, 0
        D, K, n, d = cfg.hidden_size, cfg.kernel_size, self.heads(cfg), cfg.head_dim
        C = n * d  # convolution-branch width
        f = 0.0
        if cfg.conv_type in ("sdconv", "conventional"):
            f += 2 * D * K + 2 * D * C + C  # depthwise-separable conv (span-aware key / the branch)
        if cfg.conv_type == "sdconv":
            f += C + 2 * C * n * K + n * K  # Ks ⊙ Q, conv_kernel_layer
        elif cfg.conv_type == "dynamic":
            f += 2 * D * n * K + n * K  # kernel from the token itself
        if cfg.conv_type in ("sdconv", "dynamic"):
            f += softmax_flops * n * K + 2 * D * C + C + 2 * C * K  # kernel softmax, conv value, conv
        return f, C

    def hf_model_type(self, cfg) -> str:
        return "convbert"

    def hf_refusals(self, cfg) -> list[str]:
        why = []
        if cfg.conv_type != "sdconv":
            why.append(f"conv_type={cfg.conv_type!r} (HF ConvBERT only has 'sdconv')")
        if cfg.pooler:
            why.append("pooler=True (HF ConvBERT has no pooler)")
        n, d = hf_head_size(cfg.hidden_size, cfg.num_heads, cfg.head_ratio)
        if cfg.hidden_size % n:
            why.append(f"hidden_size {cfg.hidden_size} not divisible by {n} attention heads")
        if cfg.head_dim != d:
            why.append(f"head size {cfg.head_dim} != HF's (hidden_size // {n}) // 2 = {d}")
        return why

    def hf_keys(self, cfg, hf: str, cx: str) -> list[tuple[str, str, str]] | None:
        t = []
        for name in ("query", "key", "value"):
            t += weight_bias_keys(f"{hf}attention.self.{name}", f"{cx}mixer.{name}")
        if cfg.conv_type == "sdconv":
            sep = f"{hf}attention.self.key_conv_attn_layer"
            t += [
                (f"{sep}.depthwise.weight", f"{cx}mixer.key_conv.depthwise", "depthwise"),
                (f"{sep}.pointwise.weight", f"{cx}mixer.key_conv.pointwise.weight", "pointwise"),
                (f"{sep}.bias", f"{cx}mixer.key_conv.pointwise.bias", "col_bias"),
            ]
            t += weight_bias_keys(f"{hf}attention.self.conv_kernel_layer", f"{cx}mixer.conv_kernel")
            t += weight_bias_keys(f"{hf}attention.self.conv_out_layer", f"{cx}mixer.conv_value")
        elif cfg.conv_type != "none":
            return None  # conventional and dynamic convolutions: HF ConvBERT has SDConv only
        return t + weight_bias_keys(f"{hf}attention.output.dense", f"{cx}mixer.out")


def hf_head_size(hidden_size: int, num_heads: int, head_ratio: int) -> tuple[int, int]:
    """(self-attention heads n, head size d) exactly as HF ConvBERT computes them."""
    n = max(num_heads // head_ratio, 1)
    return n, (hidden_size // n) // 2


SELF_ATTENTION = SelfAttentionPart()
MIXED_ATTENTION = MixedAttentionPart()
