"""Export a convexp model as a Hugging Face ``transformers`` directory (``config.json`` +
``model.safetensors``), for every architecture a ``transformers`` class holds exactly:

============================ ============ =================================================
convexp model                 model_type   transformers class
============================ ============ =================================================
Encoder                       bert         BertModel (a model with BERT's pooler)
                              electra      ElectraModel (no pooler; any embedding size)
                              convbert     ConvBertModel (mixer=mixed, SDConv)
MaskedLM                      bert         BertForMaskedLM
                              electra      ElectraForMaskedLM (ELECTRA's generator)
                              convbert     ConvBertForMaskedLM
ReplacedTokenDetector         electra      ElectraForPreTraining (ELECTRA's discriminator)
SequenceClassifier            bert         BertForSequenceClassification (classifier=pooler)
                              electra      ElectraForSequenceClassification (classifier=hf)
                              convbert     ConvBertForSequenceClassification (classifier=hf)
============================ ============ =================================================

The model type follows the architecture (:func:`hf_model_type`): mixed attention with SDConv is
ConvBERT; plain self-attention with a pooler is BERT, without one ELECTRA. Anything else (Chang et
al.'s convolutions, BERMO's layer mixing, a pruned model's per-layer sizes, a user's module, ELECTRA's
``cls`` classifier) is an :class:`~convexp.models.hf_keys.ExportError` naming why. The key tables are
the import's (:mod:`.hf_keys`), so an export loads back with :func:`convexp.models.hf.load_pretrained`
to the same tensors.
"""

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
from .hf_keys import LAYOUTS, ExportError, cls_head_keys, encoder_key_table, mlm_head_keys, rtd_head_keys
from .parts import builtin_part, user_parts

_HF_ACT = ("gelu", "gelu_new", "relu")
PREFIX = {"bert": "bert.", "electra": "electra.", "convbert": "convbert."}
CLASSES = {  # (model_type, head) -> the transformers class
    ("bert", None): "BertModel", ("electra", None): "ElectraModel", ("convbert", None): "ConvBertModel",
    ("bert", "mlm"): "BertForMaskedLM", ("electra", "mlm"): "ElectraForMaskedLM",
    ("convbert", "mlm"): "ConvBertForMaskedLM", ("electra", "rtd"): "ElectraForPreTraining",
    ("bert", "classification"): "BertForSequenceClassification",
    ("electra", "classification"): "ElectraForSequenceClassification",
    ("convbert", "classification"): "ConvBertForSequenceClassification",
}  # fmt: skip


def hf_model_type(cfg: ModelConfig) -> str:
    """The ``transformers`` model type of ``cfg``'s architecture: convbert (mixed attention), bert
    (self-attention with BERT's pooler) or electra (self-attention, no pooler)."""
    return builtin_part(cfg, "mixer").hf_model_type(cfg)


def check_exportable(cfg: ModelConfig) -> str:
    """The model type ``cfg`` exports as; :class:`ExportError` naming every reason it cannot."""
    users = user_parts(cfg)
    if users:
        raise ExportError(
            f"model.{', model.'.join(f'{k}={v}' for k, v in users.items())} is your own module, which "
            "transformers has no class for: share the model in convexp's format instead (save_pretrained / "
            "push_to_hub, loaded with --user-dir holding the module)"
        )
    mt = hf_model_type(cfg)
    why = builtin_part(cfg, "mixer").hf_refusals(cfg)  # the mixer's own (attention_part.py)
    if mt == "bert" and cfg.emb_size != cfg.hidden_size:
        why.append(f"embedding_size {cfg.emb_size} != hidden_size (BERT has no embedding projection)")
    if cfg.ffn != "feedforward" or (mt != "convbert" and cfg.ffn_groups != 1):
        why.append(f"ffn={cfg.ffn!r}, ffn_groups={cfg.ffn_groups}")
    if not cfg.absolute_positions:
        why.append(f"absolute_positions=False ({mt} always adds absolute position embeddings)")
    if cfg.scalar_mix:
        why.append(f"scalar_mix=True (no BERMO layer mixing in {mt})")
    if cfg.hidden_act not in _HF_ACT:
        why.append(f"hidden_act={cfg.hidden_act!r}")
    if cfg.layer_sizes is not None:
        why.append(f"layer_sizes is set (a structurally pruned model; {mt} has one size for every layer)")
    if why:
        raise ExportError(f"model {cfg.name!r} cannot be exported as a Hugging Face {mt}: " + "; ".join(why))
    return mt


def hf_config_from_model_config(cfg: ModelConfig) -> dict:
    """config.json fields of the ``transformers`` model equivalent to ``cfg`` (checked by
    :func:`check_exportable`)."""
    mt = check_exportable(cfg)
    out = {
        "model_type": mt,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": cfg.hidden_act,
        "hidden_dropout_prob": cfg.hidden_dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": max(cfg.type_vocab_size, 1),
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps,
        "pad_token_id": cfg.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "is_decoder": False,
        "add_cross_attention": False,
        "dtype": "float32",
    }
    if mt in ("electra", "convbert"):
        out["embedding_size"] = cfg.emb_size
    if mt == "convbert":
        out.update(head_ratio=cfg.head_ratio, conv_kernel_size=cfg.kernel_size, num_groups=cfg.ffn_groups)
    return out


# ModelConfig fields that do not change the exported weights or outputs in eval mode
_ARCH_CFG_FIELDS_IGNORED = {
    "name",
    "hidden_dropout",
    "attention_dropout",
    "scalar_mix_dropout",
    "initializer_range",
    "hf_padding",
    "weight_init",
}


def _head(model: nn.Module) -> tuple[Encoder, str | None]:
    if isinstance(model, Encoder):
        return model, None
    for cls, kind in ((MaskedLM, "mlm"), (ReplacedTokenDetector, "rtd"), (SequenceClassifier, "classification")):
        if isinstance(model, cls):
            return model.encoder, kind
    raise ExportError(
        f"cannot export a {type(model).__name__}; pass an Encoder, MaskedLM, ReplacedTokenDetector or "
        "SequenceClassifier"
    )


def export_hf(
    model: nn.Module, cfg: ModelConfig | None, out_dir: str | os.PathLike, labels: list[str] | None = None
) -> Path:
    """Write ``model`` as a Hugging Face directory of the class the module table names.

    ``cfg`` defaults to the encoder's own config; if given, it must describe the same architecture.
    ``labels``: a classifier's label names by id (config.json's ``id2label``; else ``LABEL_i``).
    The directory is written to a temporary sibling and renamed into place; an existing
    non-empty ``out_dir`` is an error. Returns the output path.
    """
    out = Path(out_dir)
    encoder, head = _head(model)
    cfg = cfg if cfg is not None else encoder.cfg
    enc_cfg = getattr(encoder, "cfg", None)
    if enc_cfg is not None:
        a = {k: v for k, v in cfg.to_dict().items() if k not in _ARCH_CFG_FIELDS_IGNORED}
        b = {k: v for k, v in enc_cfg.to_dict().items() if k not in _ARCH_CFG_FIELDS_IGNORED}
        diff = sorted(k for k in a if a[k] != b[k])
        if diff:
            raise ExportError(f"cfg does not describe this model: fields {diff} differ from the encoder's config")
    hf_cfg = hf_config_from_model_config(cfg)  # raises ExportError when not exportable
    mt = hf_cfg["model_type"]
    if (mt, head) not in CLASSES:
        raise ExportError(
            f"transformers' {mt} has no replaced-token-detection head (ELECTRA's discriminator is an "
            "electra model): export its encoder (`convexp hf export RUN --part encoder`)"
        )
    prefix = "" if head is None else PREFIX[mt]
    enc_keys = encoder_key_table(cfg)
    if head in ("mlm", "rtd"):  # BertForMaskedLM has no pooler: a pre-training model's is not exported
        enc_keys = [k for k in enc_keys if not k[0].startswith("pooler.")]
    table = [(prefix + h, ("" if head is None else "encoder.") + c, lay) for h, c, lay in enc_keys]
    hf_cfg["architectures"] = [CLASSES[(mt, head)]]
    if head == "mlm":
        if mt != "bert" and cfg.hidden_act != "gelu":
            raise ExportError(f"HF {mt}'s generator head always uses exact GELU, but hidden_act={cfg.hidden_act!r}")
        table += mlm_head_keys(mt)[0]
    elif head == "rtd":
        table += rtd_head_keys(mt)[0]
    elif head == "classification":
        if mt == "electra" and cfg.classifier_head == "hf" and cfg.hidden_act != "gelu":
            raise ExportError(f"HF ELECTRA's classifier always uses exact GELU, but hidden_act={cfg.hidden_act!r}")
        if mt == "bert" and cfg.classifier_head != "pooler":
            raise ExportError(
                f"classifier={cfg.classifier_head} on a model with BERT's pooler: BertForSequenceClassification "
                "classifies the pooled [CLS] (classifier=pooler): export the encoder (`convexp hf export RUN --part encoder`)"
            )
        table += cls_head_keys(cfg)[0]
        n = model.head.num_labels
        names = list(labels) if labels is not None else [f"LABEL_{i}" for i in range(n)]
        if len(names) != n or len(set(names)) != n:
            raise ExportError(f"labels must be {n} distinct names (the classifier's labels), got {names}")
        hf_cfg["id2label"] = {str(i): name for i, name in enumerate(names)}
        hf_cfg["label2id"] = {name: i for i, name in enumerate(names)}
        if n == 1:
            hf_cfg["problem_type"] = "regression"

    src = model.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for h, c, lay in table:
        if c not in src:
            raise ExportError(f"model has no parameter {c!r} (expected by cfg); is cfg the model's config?")
        tensors[h] = LAYOUTS[lay][1](src[c].detach()).to("cpu").contiguous().clone()
    word = tensors[prefix + "embeddings.word_embeddings.weight"]
    if cfg.type_vocab_size == 0:  # HF always adds a token-type embedding: a zero row is a no-op
        tensors[prefix + "embeddings.token_type_embeddings.weight"] = torch.zeros(1, cfg.emb_size, dtype=word.dtype)
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
