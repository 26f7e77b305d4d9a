"""Export a convexp ConvBERT (encoder, MLM or classifier without pooler) as a Hugging Face
ConvBERT directory (``config.json`` + ``model.safetensors``), for the architectures HF ConvBERT
can express; anything else is an :class:`~convexp.models.hf_keys.ExportError` naming why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from ..atomic import atomic_dir
from .config import ModelConfig
from .encoder import Encoder
from .heads import MaskedLM, ReplacedTokenDetector, SequenceClassifier
from .hf import hf_head_size
from .hf_keys import LAYOUTS, ExportError, cls_head_keys, encoder_key_table, mlm_head_keys
from .parts import user_parts


def hf_config_from_model_config(cfg: ModelConfig) -> dict:
    """config.json fields of the HF ConvBERT equivalent to ``cfg`` (checked by :func:`check_exportable`)."""
    check_exportable(cfg)
    return {
        "model_type": "convbert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "embedding_size": cfg.emb_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "head_ratio": cfg.head_ratio,
        "conv_kernel_size": cfg.kernel_size,
        "num_groups": cfg.ffn_groups,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": cfg.hidden_act,
        "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": max(cfg.type_vocab_size, 1),
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id,
        "tie_word_embeddings": True,
        "is_decoder": False,
        "add_cross_attention": False,
        "dtype": "float32",
    }


def check_exportable(cfg: ModelConfig) -> None:
    """Raise :class:`ExportError` naming every reason ``cfg`` is not an HF ConvBERT."""
    why = []
    users = user_parts(cfg)
    if users:
        raise ExportError(
            f"model.{', model.'.join(f'{k}={v}' for k, v in users.items())} is your own module, which "
            "transformers has no class for: share the model in convexp's format instead (save_pretrained / "
            "push_to_hub, loaded with --user-dir holding the module)"
        )
    if cfg.mixer != "mixed":
        why.append(
            f"mixer={cfg.mixer!r} (HF ConvBERT needs 'mixed'; Chang et al. attention variants have no HF model)"
        )
    elif cfg.conv_type != "sdconv":
        why.append(f"conv_type={cfg.conv_type!r} (HF ConvBERT only has 'sdconv')")
    if not cfg.absolute_positions:
        why.append("absolute_positions=False (HF ConvBERT always adds absolute position embeddings)")
    if cfg.scalar_mix:
        why.append("scalar_mix=True (no BERMO layer mixing in HF ConvBERT)")
    if cfg.pooler:
        why.append("pooler=True (HF ConvBERT has no pooler)")
    if cfg.mixer == "mixed":
        n, d = hf_head_size(cfg.hidden_size, cfg.num_heads, cfg.head_ratio)
        if cfg.hidden_size % n:
            why.append(f"hidden_size {cfg.hidden_size} not divisible by {n} attention heads")
        if cfg.head_dim != d:
            why.append(f"head size {cfg.head_dim} != HF's (hidden_size // {n}) // 2 = {d}")
    if cfg.hidden_act not in ("gelu", "gelu_new", "relu"):
        why.append(f"hidden_act={cfg.hidden_act!r}")
    if cfg.layer_sizes is not None:
        why.append(
            "layer_sizes is set (a structurally pruned model; HF ConvBERT has one size for every layer)"
        )
    if why:
        raise ExportError(
            f"model {cfg.name!r} cannot be exported as a Hugging Face ConvBERT: " + "; ".join(why)
        )


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------


# ModelConfig fields that do not change the exported weights or outputs in eval mode
_ARCH_CFG_FIELDS_IGNORED = {
    "name",
    "hidden_dropout",
    "attention_dropout",
    "scalar_mix_dropout",
    "initializer_range",
    "hf_padding",
}


def export_convbert(
    model: nn.Module, cfg: ModelConfig | None, out_dir: str | os.PathLike, labels: list[str] | None = None
) -> Path:
    """Write ``model`` as a Hugging Face ConvBERT directory (config.json + model.safetensors).

    ``model``: an :class:`Encoder` (-> ``ConvBertModel`` keys), a :class:`MaskedLM`
    (-> ``ConvBertForMaskedLM``: ``convbert.`` prefix + generator head) or a
    :class:`SequenceClassifier` (-> ``ConvBertForSequenceClassification``). For a
    :class:`ReplacedTokenDetector` pass ``model.encoder`` (HF ConvBERT has no RTD head).
    ``cfg`` defaults to the encoder's own config; if given, it must describe the same architecture.
    ``labels``: a classifier's label names by id (config.json's ``id2label``; else ``LABEL_i``).
    The directory is written to a temporary sibling and renamed into place; an existing
    non-empty ``out_dir`` is an error. Returns the output path.
    """
    out = Path(out_dir)
    if isinstance(model, Encoder):
        encoder, head_kind = model, None
    elif isinstance(model, MaskedLM):
        encoder, head_kind = model.encoder, "mlm"
    elif isinstance(model, SequenceClassifier):
        encoder, head_kind = model.encoder, "classification"
    elif isinstance(model, ReplacedTokenDetector):
        raise ExportError("HF ConvBERT has no replaced-token-detection head: export model.encoder instead")
    else:
        raise ExportError(
            f"cannot export a {type(model).__name__}; pass an Encoder, MaskedLM or SequenceClassifier"
        )
    cfg = cfg if cfg is not None else encoder.cfg
    enc_cfg = getattr(encoder, "cfg", None)
    if enc_cfg is not None:
        a = {k: v for k, v in cfg.to_dict().items() if k not in _ARCH_CFG_FIELDS_IGNORED}
        b = {k: v for k, v in enc_cfg.to_dict().items() if k not in _ARCH_CFG_FIELDS_IGNORED}
        diff = sorted(k for k in a if a[k] != b[k])
        if diff:
            raise ExportError(
                f"cfg does not describe this model: fields {diff} differ from the encoder's config"
            )
    hf_cfg = hf_config_from_model_config(cfg)  # raises ExportError when not exportable

    prefix = "" if head_kind is None else "convbert."
    table = [
        (prefix + h, ("" if head_kind is None else "encoder.") + c, lay)
        for h, c, lay in encoder_key_table(cfg)
    ]
    if head_kind == "mlm":
        if cfg.hidden_act != "gelu":
            raise ExportError(
                f"HF ConvBERT's generator head always uses exact GELU, but hidden_act={cfg.hidden_act!r}"
            )
        table += mlm_head_keys("convbert")[0]
        hf_cfg["architectures"] = ["ConvBertForMaskedLM"]
    elif head_kind == "classification":
        table += cls_head_keys(cfg)[0]
        n = model.head.num_labels
        names = list(labels) if labels is not None else [f"LABEL_{i}" for i in range(n)]
        if len(names) != n or len(set(names)) != n:
            raise ExportError(f"labels must be {n} distinct names (the classifier's labels), got {names}")
        hf_cfg["architectures"] = ["ConvBertForSequenceClassification"]
        hf_cfg["id2label"] = {str(i): name for i, name in enumerate(names)}
        hf_cfg["label2id"] = {name: i for i, name in enumerate(names)}
    else:
        hf_cfg["architectures"] = ["ConvBertModel"]

    src = model.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for h, c, lay in table:
        if c not in src:
            raise ExportError(f"model has no parameter {c!r} (expected by cfg); is cfg the model's config?")
        tensors[h] = LAYOUTS[lay][1](src[c].detach()).to("cpu").contiguous().clone()
    word = tensors[prefix + "embeddings.word_embeddings.weight"]
    if cfg.type_vocab_size == 0:  # HF always adds a token-type embedding: a zero row is a no-op
        tensors[prefix + "embeddings.token_type_embeddings.weight"] = torch.zeros(
            1, cfg.emb_size, dtype=word.dtype
        )
    hf_cfg["dtype"] = str(word.dtype).removeprefix("torch.")

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"output directory {str(out)!r} already exists and is not empty; choose a new path")
    from safetensors.torch import save_file

    if out.exists():
        out.rmdir()  # empty (checked above)
    with atomic_dir(out) as tmp:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_cfg, indent=2, sort_keys=True) + "\n")
    return out
