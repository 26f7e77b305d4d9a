"""Hugging Face interop: import BERT / ELECTRA / ConvBERT checkpoints (export: :mod:`.hf_export`).

Public API
----------
``load_pretrained(path_or_name, *, task="base", num_labels=None, hf_padding=False)``
    -> ``(model, ModelConfig)``. Reads ``config.json`` and ``model.safetensors`` (or sharded
    safetensors, or ``pytorch_model.bin`` via ``torch.load(weights_only=True)``) from a local
    directory, or downloads them with ``huggingface_hub.snapshot_download`` when the argument is
    not an existing directory. ``task`` picks the returned module:

    ============== ============================== =====================================================
    task           convexp module                 HF weights it needs besides the encoder
    ============== ============================== =====================================================
    "base"         :class:`Encoder`               none (heads in the checkpoint are ignored)
    "mlm"          :class:`MaskedLM`              BERT ``cls.predictions.*``; ELECTRA/ConvBERT
                                                  ``generator_predictions.*`` + ``generator_lm_head.bias``
    "rtd"          :class:`ReplacedTokenDetector` ELECTRA ``discriminator_predictions.*``
    "classification" :class:`SequenceClassifier`  ``classifier.*`` if present, else a freshly
                                                  initialised head (``num_labels`` required then)
    ============== ============================== =====================================================

    The model is returned in eval mode, fp32. ``hf_padding=True`` reproduces HF ConvBERT's
    padding leak into the convolution branch (bit-for-bit equivalence on padded batches);
    the default masks padding so real-token outputs do not depend on the padding.

    Loading is strict: every checkpoint tensor is either used, a tied copy (checked equal), or
    in an explicit ignore list (position-id buffers, NSP head, heads of other tasks); every
    convexp parameter is filled. Anything else raises :class:`CheckpointMismatchError`.

``hf_export.export_hf(model, cfg, out_dir)``
    Writes a Hugging Face ConvBERT directory (``config.json`` + ``model.safetensors``) from an
    :class:`Encoder` (as ``ConvBertModel``), a :class:`MaskedLM` (as ``ConvBertForMaskedLM``) or
    a :class:`SequenceClassifier` without pooler (as ``ConvBertForSequenceClassification``).
    Only for architectures HF ConvBERT can express; otherwise :class:`ExportError`.

``resolve_checkpoint(path_or_name) -> Path``: the local directory (downloaded if needed), e.g.
    to find the tokenizer files that were downloaded alongside the weights.

All errors are subclasses of ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import Iterable

import torch
from torch import nn

from .attention_part import hf_head_size
from .config import ModelConfig
from .files import HF_MODEL_TYPES
from .encoder import Encoder
from .heads import MaskedLM, ReplacedTokenDetector, SequenceClassifier
from .hf_keys import (
    ALWAYS_IGNORED,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    UnsupportedCheckpointError,
    HEAD_PREFIXES,
    LAYOUTS,
    cls_head_keys,
    encoder_key_table,
    mlm_head_keys,
    rtd_head_keys,
)

log = logging.getLogger(__name__)

TASKS = ("base", "mlm", "rtd", "classification")
MODEL_TYPES = HF_MODEL_TYPES  # models/files.py: read before torch by the checks (store/peek.py)

# HF activation name -> convexp activation name (only exact equivalences).
_ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu"}

# Files fetched from the hub: config, weights, tokenizer.
_HUB_PATTERNS = [
    "config.json",
    "model_config.json",  # a convexp model directory (HubModel.push_to_hub)
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*.safetensors",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
_HUB_BIN_PATTERNS = ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*.bin"]

# Prefixes under which HF task models keep the base model.
_BASE_PREFIXES = ("bert.", "electra.", "convbert.", "discriminator.")


# ----------------------------------------------------------------------------------------------
# Locating and reading checkpoints
# ----------------------------------------------------------------------------------------------


def _has_weights(d: Path) -> bool:
    return any(
        (d / f).is_file()
        for f in (
            "model.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "pytorch_model.bin.index.json",
        )
    )


def _not_found(name: str, reason: str) -> CheckpointNotFoundError:
    reason = " ".join(str(reason).split())
    return CheckpointNotFoundError(
        f"cannot load Hugging Face checkpoint {name!r}: {reason}; pass a local directory holding "
        "config.json and model.safetensors (or pytorch_model.bin), or a hub model name such as "
        "'YituTech/conv-bert-small' with network access (HF_HUB_OFFLINE unset) or already in the HF cache"
    )


def resolve_checkpoint(path_or_name: str | os.PathLike) -> Path:
    """Local directory of a checkpoint: ``path_or_name`` itself if it is a directory, otherwise a
    hub snapshot (config, weights and tokenizer files) downloaded with ``snapshot_download``."""
    name = str(path_or_name)
    p = Path(name).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise _not_found(name, f"directory {str(p)!r} has no config.json")
        if not _has_weights(p):
            raise _not_found(name, f"directory {str(p)!r} has no model.safetensors or pytorch_model.bin")
        return p
    if p.exists():
        raise _not_found(name, "it is a file, not a directory")
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name:
        raise _not_found(name, "no such directory (and not a hub name)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - huggingface_hub comes with datasets/tokenizers
        raise _not_found(name, f"not a local directory and huggingface_hub is not installed ({e})") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        d = Path(snapshot_download(repo_id=name, allow_patterns=_HUB_PATTERNS, local_files_only=offline))
        if not _has_weights(d):  # older repos only have pytorch_model.bin
            d = Path(
                snapshot_download(
                    repo_id=name, allow_patterns=_HUB_PATTERNS + _HUB_BIN_PATTERNS, local_files_only=offline
                )
            )
    except Exception as e:  # noqa: BLE001 - hub errors come in many types; all mean "not available"
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        reason = f"not a local directory, and the hub download failed ({type(e).__name__}: {msg})"
        raise _not_found(name, reason) from None
    if not (d / "config.json").is_file() or not _has_weights(d):
        raise _not_found(name, f"hub snapshot {str(d)!r} lacks config.json or weights")
    return d


def _load_weight_file(f: Path) -> dict[str, torch.Tensor]:
    if f.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(f), device="cpu")
    sd = torch.load(str(f), map_location="cpu", weights_only=True)
    if not isinstance(sd, dict):
        raise CheckpointMismatchError(f"{str(f)!r} does not hold a state dict")
    return sd


def read_state_dict(d: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, preferring safetensors; sharded checkpoints are merged."""
    for single, index in (
        ("model.safetensors", "model.safetensors.index.json"),
        ("pytorch_model.bin", "pytorch_model.bin.index.json"),
    ):
        if (d / single).is_file():
            return _load_weight_file(d / single)
        if (d / index).is_file():
            shards = sorted(set(json.loads((d / index).read_text())["weight_map"].values()))
            sd: dict[str, torch.Tensor] = {}
            for s in shards:
                sd.update(_load_weight_file(d / s))
            return sd
    raise _not_found(str(d), "no model.safetensors or pytorch_model.bin")


# ----------------------------------------------------------------------------------------------
# Config translation
# ----------------------------------------------------------------------------------------------


def model_config_from_hf(
    hf: dict, *, has_pooler: bool = False, hf_padding: bool = False, name: str = "hf"
) -> ModelConfig:
    """The convexp :class:`ModelConfig` equivalent to a Hugging Face ``config.json`` dict."""
    mt = hf.get("model_type")
    if mt not in MODEL_TYPES:
        raise UnsupportedCheckpointError(
            f"{name}: unsupported model_type {mt!r}; convexp imports {', '.join(MODEL_TYPES)}"
        )
    act = hf.get("hidden_act", "gelu")
    if act not in _ACT_FROM_HF:
        raise UnsupportedCheckpointError(
            f"{name}: hidden_act {act!r} has no convexp equivalent (supported: {sorted(_ACT_FROM_HF)})"
        )
    pos = hf.get("position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        raise UnsupportedCheckpointError(
            f"{name}: position_embedding_type {pos!r} is not supported (only 'absolute')"
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise UnsupportedCheckpointError(f"{name}: decoder / cross-attention checkpoints are not supported")
    D, N = hf["hidden_size"], hf["num_attention_heads"]
    E = hf.get("embedding_size", D) if mt in ("electra", "convbert") else D
    pad = hf.get("pad_token_id")
    kw = dict(
        name=name,
        vocab_size=hf["vocab_size"],
        hidden_size=D,
        embedding_size=None if E == D else E,
        num_layers=hf["num_hidden_layers"],
        num_heads=N,
        intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2),
        pad_token_id=0 if pad is None else pad,
        hidden_act=_ACT_FROM_HF[act],
        hidden_dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
        initializer_range=hf.get("initializer_range", 0.02),
        pooler=has_pooler,
        hf_padding=hf_padding,
    )
    if mt == "convbert":
        ratio = hf.get("head_ratio", 2)
        n, d = hf_head_size(D, N, ratio)
        if D % n:
            raise UnsupportedCheckpointError(
                f"{name}: hidden_size {D} is not divisible by {n} attention heads"
            )
        kw.update(
            mixer="mixed",
            conv_type="sdconv",
            head_ratio=min(ratio, N),  # HF turns γ > N into one head (γ = N); convexp refuses γ > N
            kernel_size=hf.get("conv_kernel_size", 9),
            ffn_groups=hf.get("num_groups", 1),
            head_size=None if d == D // N and D % N == 0 else d,
        )
    try:
        return ModelConfig(**kw)
    except ValueError as e:
        raise UnsupportedCheckpointError(f"{name}: no convexp equivalent ({e})") from None


# ----------------------------------------------------------------------------------------------
# Import
# ----------------------------------------------------------------------------------------------


def _normalise_keys(sd: dict[str, torch.Tensor]) -> dict[str, tuple[str, torch.Tensor]]:
    """Strip base-model prefixes and rename old LayerNorm gamma/beta: new key -> (original key, tensor)."""
    out: dict[str, tuple[str, torch.Tensor]] = {}
    for k, v in sd.items():
        nk = k
        for p in _BASE_PREFIXES:
            if nk.startswith(p):
                nk = nk[len(p) :]
                break
        nk = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", nk)
        nk = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", nk)
        if nk in out:
            raise CheckpointMismatchError(f"checkpoint keys {out[nk][0]!r} and {k!r} both map to {nk!r}")
        out[nk] = (k, v)
    return out


def _fmt(keys: Iterable[str], limit: int = 25) -> str:
    keys = sorted(keys)
    more = f" ... (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_pretrained(
    path_or_name: str | os.PathLike,
    *,
    task: str = "base",
    num_labels: int | None = None,
    hf_padding: bool = False,
) -> tuple[nn.Module, ModelConfig]:
    """Load a Hugging Face BERT / ELECTRA (discriminator or generator) / ConvBERT checkpoint.

    Args:
        path_or_name: a local directory (``save_pretrained`` output) or a hub model name.
        task: "base" -> :class:`Encoder`; "mlm" -> :class:`MaskedLM`; "rtd" ->
            :class:`ReplacedTokenDetector` (ELECTRA discriminators); "classification" ->
            :class:`SequenceClassifier` (HF ``classifier.*`` loaded when present, else new).
        num_labels: classification only; defaults to the checkpoint's ``num_labels`` (id2label).
        hf_padding: set ``ModelConfig.hf_padding`` (ConvBERT: let padding leak into the
            convolution branch exactly as HF does).

    Returns:
        ``(model, cfg)`` with the model in eval mode.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if num_labels is not None and task != "classification":
        raise ValueError(f"num_labels is only used with task='classification', not task={task!r}")
    d = resolve_checkpoint(path_or_name)
    hf = json.loads((d / "config.json").read_text())
    name = str(path_or_name)
    mt = hf.get("model_type")
    if mt not in MODEL_TYPES:  # before reading the weights
        model_config_from_hf(hf, name=name)  # raises UnsupportedCheckpointError
    sd = _normalise_keys(read_state_dict(d))
    has_pooler = mt == "bert" and "pooler.dense.weight" in sd
    cfg = model_config_from_hf(
        hf, has_pooler=has_pooler, hf_padding=hf_padding, name=f"hf:{Path(name).name or name}"
    )
    if task == "classification" and not has_pooler and any(k.startswith("classifier.") for k in sd):
        cfg = dataclasses.replace(cfg, classifier="hf")  # a HF *ForSequenceClassification head

    # ---- build the module and the key tables ----
    enc_prefix = "" if task == "base" else "encoder."
    table = [(h, enc_prefix + c, lay) for h, c, lay in encoder_key_table(cfg)]
    tied: dict[str, str] = {}
    head_optional = False
    if task == "base":  # every parameter comes from the checkpoint (checked below): no random init
        with torch.device("meta"):
            model: nn.Module = Encoder(cfg)
        model.to_empty(device="cpu")
    elif task == "mlm":
        if mt != "bert" and cfg.hidden_act != "gelu":
            raise UnsupportedCheckpointError(
                f"{name}: HF {mt} generator head always uses exact GELU, but hidden_act={cfg.hidden_act!r}"
            )
        model = MaskedLM(cfg)
        head, tied = mlm_head_keys(mt)
        table += head
    elif task == "rtd":
        head, tied = rtd_head_keys(mt)
        model = ReplacedTokenDetector(cfg)
        table += head
    else:
        if num_labels is None:
            num_labels = len(hf["id2label"]) if hf.get("id2label") else hf.get("num_labels", 2)
        if mt == "electra" and cfg.classifier_head == "hf" and cfg.hidden_act != "gelu":
            raise UnsupportedCheckpointError(
                f"{name}: HF ELECTRA's classifier always uses exact GELU, but hidden_act={cfg.hidden_act!r}"
            )
        model = SequenceClassifier(cfg, num_labels)
        head, tied = cls_head_keys(cfg) if cfg.classifier_head != "cls" else ([], {})
        head_optional = not any(h in sd for h, _, _ in head)
        if head_optional:
            log.info(
                "%s: no classifier weights in the checkpoint; the classification head is newly initialised",
                name,
            )
        else:
            table += head

    # ---- map checkpoint tensors ----
    target = model.state_dict()
    values: dict[str, torch.Tensor] = {}
    missing_hf, bad_shape = [], []
    for h, c, lay in table:
        if h not in sd:
            missing_hf.append(h)
            continue
        orig, t = sd[h]
        try:
            t = LAYOUTS[lay][0](t)
        except CheckpointMismatchError:
            bad_shape.append(f"{orig} {tuple(t.shape)}")
            continue
        if c not in target:  # internal consistency: the table names a convexp key that does not exist
            raise CheckpointMismatchError(f"internal error: convexp has no parameter {c!r} for {orig!r}")
        if t.shape != target[c].shape:
            bad_shape.append(f"{orig} {tuple(sd[h][1].shape)} -> {c} {tuple(target[c].shape)}")
            continue
        values[c] = t
    used = {h for h, _, _ in table}

    # the requested head's namespace: unknown keys there are errors, not "other heads"
    own = tuple(p for p in HEAD_PREFIXES if any(h.startswith(p) for h, _, _ in table))
    unexpected, ignored, untied = [], [], []
    for h, (orig, t) in sd.items():
        if h in used:
            continue
        if h in tied:
            src = values.get(tied[h])
            if src is not None and not torch.equal(src.to(t.dtype), t):
                untied.append(orig)
            ignored.append(orig)
        elif any(p.search(h) for p in ALWAYS_IGNORED):
            ignored.append(orig)
        elif h.startswith(HEAD_PREFIXES) and not (own and h.startswith(own)):
            ignored.append(orig)  # a head of another task
        else:
            unexpected.append(orig)

    # convexp parameters not filled (aliases such as the tied MLM decoder count as filled)
    sd_ref = model.state_dict(keep_vars=True)
    filled = {id(sd_ref[c]) for c in values}
    head_keys = {c for c in sd_ref if c.startswith("head.")} if head_optional else set()  # a new head
    not_filled = [c for c, v in sd_ref.items() if id(v) not in filled and c not in head_keys]

    problems = []
    if missing_hf:
        problems.append(f"missing checkpoint tensors: {_fmt(missing_hf)}")
    if unexpected:
        problems.append(f"unexpected checkpoint tensors: {_fmt(unexpected)}")
    if bad_shape:
        problems.append(f"shape mismatches: {_fmt(bad_shape)}")
    if untied:
        problems.append(
            f"output embeddings not tied to the input embeddings (convexp ties them): {_fmt(untied)}"
        )
    if not_filled and not missing_hf:
        problems.append(f"convexp parameters without a checkpoint tensor: {_fmt(not_filled)}")
    if problems:
        raise CheckpointMismatchError(
            f"{name} ({mt}, task={task!r}) does not match convexp: " + "; ".join(problems)
        )
    if ignored:
        log.info("%s: ignored checkpoint tensors: %s", name, _fmt(ignored))

    res = model.load_state_dict(values, strict=False)
    if res.unexpected_keys:  # cannot happen: every key was checked against model.state_dict()
        raise CheckpointMismatchError(f"internal error: unexpected convexp keys {_fmt(res.unexpected_keys)}")
    model.eval()
    return model, cfg

__all__ = [
    "load_pretrained",
    "resolve_checkpoint",
    "read_state_dict",
    "model_config_from_hf",
    "hf_head_size",
    "CheckpointNotFoundError",
    "UnsupportedCheckpointError",
    "CheckpointMismatchError",
]
