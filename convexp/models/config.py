"""The one configuration every encoder variant in the three papers is built from.

A preset in ``conf/model/NAME.yaml`` is a set of values for :class:`ModelConfig`; the encoder
never branches on a preset's name, only on these fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Dict, List, Optional

from .parts import BUILTIN, builtin_part, is_import_path  # the built-in parts; any other: an import path

CONV_TYPES = ("sdconv", "conventional", "dynamic", "none")
CLASSIFIERS = ("cls", "pooler", "hf")
NORMS = ("per_layer", "layers", "none")  # ScalarMix's normalisation of each layer (scalar_mix.py)
INITS = ("normal", "truncated")


@dataclass
class ModelConfig:
    name: str = "custom"

    # --- sizes ---------------------------------------------------------------------------
    vocab_size: int = 30522
    hidden_size: int = 256  # D
    embedding_size: Optional[int] = None  # E; None means E = D (no projection)
    num_layers: int = 12
    num_heads: int = 4  # N
    head_size: Optional[int] = None  # d; None means D // N
    intermediate_size: int = 1024  # I
    ffn_groups: int = 1  # G, grouped linear FFN (ConvBERT eq. 7)
    # Per-layer sizes of a structurally pruned model (``convexp export``), None = every layer has the
    # sizes above. One dict per layer: {"heads": self-attention heads (the mixer's ``heads``: N, or
    # ConvBERT's N // γ), "intermediate": FFN units (I)} plus, with conv_qkv, "conv_heads": how many of
    # those heads are convolutional in the conv_qkv projections (default heads // 2).
    layer_sizes: Optional[List[Dict[str, int]]] = None

    # --- embeddings ----------------------------------------------------------------------
    absolute_positions: bool = True
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    pad_token_id: int = 0

    # --- token mixer -----------------------------------------------------------------------
    # "attention": multi-head self-attention with Chang et al.'s convolution options;
    # "mixed": ConvBERT mixed attention (bottleneck self-attention heads + convolution heads);
    # or a researcher's own nn.Module by its import path, "module:Class" (models/parts.py), built as
    # Class(cfg, layer, **mixer_options).
    mixer: str = "attention"
    mixer_options: Dict[str, Any] = field(default_factory=dict)
    # A user mixer that lets padding into real positions on purpose (its padding check is skipped);
    # the built-in ConvBERT's counterpart is hf_padding.
    reads_padding: bool = False
    kernel_size: int = 17  # Chang et al.: relative window 2k+1; ConvBERT: span K (paper: 9)
    # Chang et al. (mixer=attention)
    content_attention: bool = True  # the q·k term; False leaves only the convolution terms
    fixed_conv: bool = False  # eq. 4, per-head relative bias β (T5-like)
    dynamic_conv: bool = False  # eq. 5, query-based relative embeddings W^Q (Shaw-like)
    key_conv: bool = False  # key-based dynamic convolution W^K
    depthwise_conv: bool = False  # eq. 7, fixed depthwise convolution on the values
    conv_qkv: str = ""  # subset of "qkv": depthwise-separable projections in half the heads
    # ConvBERT (mixer=mixed)
    head_ratio: int = 2  # γ: self-attention heads = N // γ
    conv_type: str = "sdconv"  # sdconv | conventional | dynamic | none (ConvBERT Table 2, "+BNK")
    hf_padding: bool = False  # reproduce HF ConvBERT: padding leaks into the convolution branch

    # --- rest of the block ---------------------------------------------------------------
    # "feedforward": dense or ConvBERT's grouped linear (ffn_groups); or an import path "module:Class"
    # built as Class(cfg, layer, **ffn_options), mapping [..., D] to [..., D].
    ffn: str = "feedforward"
    ffn_options: Dict[str, Any] = field(default_factory=dict)
    hidden_act: str = "gelu"
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    # "normal": N(0, initializer_range) as PyTorch/Hugging Face BERT (Chang et al.'s code);
    # "truncated": as the TF code of ELECTRA / ConvBERT / BERT (modeling.py create_initializer):
    # N(0, initializer_range) re-drawn beyond 2σ, and Glorot-uniform where that code gives no
    # initializer (embeddings_project, the RTD output, ELECTRA's classifier). See encoder.init_weights.
    weight_init: str = "normal"

    # --- outputs ---------------------------------------------------------------------------
    pooler: bool = False  # BERT's dense+tanh pooler (Chang et al. count it in their tables)
    # Sequence-classification head: "cls" ([CLS] -> dropout -> linear; ELECTRA's classification
    # task, google-research/electra finetune/classification/classification_tasks.py), "pooler"
    # (BERT: pooled [CLS] -> dropout -> linear), "hf" (Hugging Face ELECTRA/ConvBERT
    # *ForSequenceClassification: [CLS] -> dropout -> dense -> act -> dropout -> linear).
    # None: by family, "pooler" with a pooler, else "cls".
    classifier: Optional[str] = None
    scalar_mix: bool = False  # BERMO eq. 1: softmax-weighted mix of all layer outputs feeds the heads
    scalar_mix_dropout: float = 0.1
    scalar_mix_norm: str = "per_layer"  # per_layer | layers | none: see models/scalar_mix.py

    def __post_init__(self) -> None:
        self.validate()

    # Derived sizes -------------------------------------------------------------------------
    @property
    def emb_size(self) -> int:
        return self.embedding_size or self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_size // self.num_heads

    @property
    def attn_heads(self) -> int:
        """Self-attention heads: the mixer's (N, or N // γ with ConvBERT's bottleneck; a user's: N)."""
        part = builtin_part(self, "mixer")
        return part.heads(self) if part is not None else self.num_heads

    @property
    def reads_padding_positions(self) -> bool:
        """Whether a mixer lets padding positions into real ones (HF ConvBERT's convolutions under
        ``hf_padding``, or a user mixer that says so): then no block may skip its padding rows."""
        return self.hf_padding or self.reads_padding

    @property
    def classifier_head(self) -> str:
        """The classification head this config builds (``classifier``, or its family default)."""
        return self.classifier or ("pooler" if self.pooler else "cls")

    def layer_size(self, i: int) -> dict:
        """Sizes of layer i: {"heads", "intermediate", "conv_heads"}; conv_heads None means the
        conv_qkv default (half the heads). Without layer_sizes every layer has the global sizes."""
        s = (self.layer_sizes or [{}] * self.num_layers)[i]
        return {
            "heads": s.get("heads", self.attn_heads),
            "intermediate": s.get("intermediate", self.intermediate_size),
            "conv_heads": s.get("conv_heads"),
        }

    def validate(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"model {self.name!r}: {msg}")

        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "ffn_groups",
                    "max_position_embeddings", "type_vocab_size", "embedding_size", "head_size"):
            value = getattr(self, key)
            if not (value is None and key in ("embedding_size", "head_size")) and not 1 <= value < 2**31:
                bad(f"{key} must be a whole number >= 1, got {value} (e.g. model.{key}={getattr(type(self), key) or 64})")
        if not 0 <= self.pad_token_id < self.vocab_size:
            bad(f"pad_token_id must be a token id in [0, vocab_size), got {self.pad_token_id}")
        for key in ("hidden_dropout", "attention_dropout", "scalar_mix_dropout"):
            if not 0 <= getattr(self, key) < 1:
                bad(f"{key} must be in [0, 1), got {getattr(self, key)} (e.g. model.{key}=0.1)")
        for key in ("layer_norm_eps", "initializer_range"):
            if not getattr(self, key) > 0:
                bad(f"{key} must be > 0, got {getattr(self, key)} (e.g. model.{key}={getattr(type(self), key)})")
        for kind in ("mixer", "ffn"):
            name, builtin = getattr(self, kind), tuple(BUILTIN[kind])
            if not isinstance(name, str) or name not in builtin and not is_import_path(name):
                bad(f"{kind} must be one of {builtin} or an import path module:Class, got {name!r}")
        if self.conv_type not in CONV_TYPES:
            bad(f"conv_type must be one of {CONV_TYPES}, got {self.conv_type!r}")
        if self.weight_init not in INITS:
            bad(f"weight_init must be one of {INITS}, got {self.weight_init!r}")
        if self.classifier is not None and self.classifier not in CLASSIFIERS:
            bad(f"classifier must be one of {CLASSIFIERS}, got {self.classifier!r}")
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            bad(f"kernel_size must be odd and positive, got {self.kernel_size}")
        if set(self.conv_qkv) - set("qkv") or len(set(self.conv_qkv)) != len(self.conv_qkv):
            bad(f"conv_qkv must be a subset of 'qkv', got {self.conv_qkv!r}")
        if self.head_size is None and self.hidden_size % self.num_heads:
            bad(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.conv_qkv and self.num_heads % 2:
            bad("conv_qkv puts convolutions in half the heads: num_heads must be even")
        for kind in ("mixer", "ffn"):  # each built-in part's own rules (attention_part.py, ffn_part.py)
            part = builtin_part(self, kind)
            if part is not None:
                part.check(self, bad)
        if self.layer_sizes is not None:
            self._validate_layer_sizes(bad)

    def _validate_layer_sizes(self, bad) -> None:
        """One line for the first problem in ``layer_sizes`` (see the field's comment)."""
        sizes = self.layer_sizes
        if not isinstance(sizes, (list, tuple)) or len(sizes) != self.num_layers:
            n = len(sizes) if isinstance(sizes, (list, tuple)) else type(sizes).__name__
            bad(f"layer_sizes must list one entry per layer: got {n}, num_layers is {self.num_layers}")
        allowed = {"heads", "intermediate"} | ({"conv_heads"} if self.conv_qkv else set())
        mixer = builtin_part(self, "mixer")
        fixed_heads = mixer is not None and mixer.fixed_heads(self)
        for i, s in enumerate(sizes):
            where = f"layer_sizes[{i}]"
            if not hasattr(s, "keys") or not {"heads", "intermediate"} <= set(s) or set(s) - allowed:
                bad(
                    f"{where} must be {{{', '.join(sorted(allowed))}}} "
                    f"(heads, intermediate required), got {s!r}"
                )
            for key, value in s.items():
                low = 0 if key == "conv_heads" else 1  # a layer may have no convolutional head left
                if not isinstance(value, int) or isinstance(value, bool) or value < low:
                    bad(f"{where}.{key} must be an integer >= {low}, got {value!r}")
            heads, units = s["heads"], s["intermediate"]
            if units % self.ffn_groups:
                bad(f"{where}.intermediate {units} must be a multiple of ffn_groups {self.ffn_groups}")
            if fixed_heads and heads != self.attn_heads:
                bad(
                    f"{where}.heads must be {self.attn_heads}: conv_type {self.conv_type} shares its heads "
                    "with the convolution branch, so they cannot be rebuilt from a per-layer count"
                )
            if self.conv_qkv and s.get("conv_heads", heads // 2) > heads:
                bad(f"{where}.conv_heads {s['conv_heads']} exceeds heads {heads}")
            if self.conv_qkv and "conv_heads" not in s and heads % 2:
                bad(f"{where}: conv_qkv with an odd head count ({heads}) needs conv_heads")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config key(s) {unknown}; known keys: {sorted(known)}")
        return cls(**d)


def generator_config(cfg: ModelConfig, fraction: float) -> ModelConfig:
    """ELECTRA's generator: same depth and embedding size, hidden/heads/FFN scaled by `fraction`."""
    hidden = max(1, round(cfg.hidden_size * fraction))
    heads = max(1, round(cfg.num_heads * fraction))
    while hidden % heads:
        heads -= 1
    return replace(
        cfg,
        name=f"{cfg.name}-generator",
        hidden_size=hidden,
        num_heads=heads,
        head_ratio=min(cfg.head_ratio, heads),  # a 1-head generator keeps its one head (as HF ConvBERT)
        head_size=None,
        intermediate_size=max(
            cfg.ffn_groups, round(cfg.intermediate_size * fraction) // cfg.ffn_groups * cfg.ffn_groups
        ),
        embedding_size=cfg.emb_size,
        pooler=False,
        scalar_mix=False,
    )
