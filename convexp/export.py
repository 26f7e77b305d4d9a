"""`convexp export`: a fine-pruned run as a smaller, faster model directory that loads like any other.

    RUN/model (masks already folded into the weights, W ⊙ M)
      -> remove dead heads and FFN units (:func:`convexp.pruning.remove_dead_structures`)
      -> a ModelConfig with per-layer ``layer_sizes`` (:func:`~convexp.pruning.structured.pruned_config`)
      -> rebuild the model from that config and check it against the loaded one on a padded random
         batch (max |Δ| of logits and features ≤ 1e-4, fp32; otherwise nothing is written)
      -> time both (:func:`~convexp.pruning.measure_speedup`, dense = the loaded model)
      -> DIR (default RUN/export/), written atomically: model.safetensors, model_config.json,
         the tokenizer files (from the source model dir or ``tokenizer``) and export.json.

DIR loads with ``convexp finetune glue init=DIR`` (tokenizer files in DIR, else tokenizer_path=...),
with :func:`convexp.store.checkpoint.open_checkpoint` and with :func:`convexp.models.io.load_model_dir`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from typing import TYPE_CHECKING

from .errors import UserError
from .models.files import TOKENIZER_FILES, WEIGHTS
from .store.locate import locate

if TYPE_CHECKING:
    import torch

# torch, the checkpoint and the pruning modules are imported by the functions that compute: the
# arguments are checked before them (a mistake is one line at once)

TOLERANCE = 1e-4  # max |Δ| between the loaded and the exported model's outputs (fp32)
EXPORT_JSON = "export.json"


class ExportMismatch(RuntimeError):
    """The exported model does not reproduce the loaded one (a bug: nothing was written)."""


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------


def source_dir(run: Path) -> Path:
    """The convexp model directory to export: a run directory's model/ or a model directory
    (from the names of its files: nothing read)."""
    if not Path(run).expanduser().exists():
        raise UserError(f"{run} does not exist; give a convexp run directory or model directory")
    where = locate(Path(run), "", weights=False)
    if where.kind not in ("run", "model_dir"):
        raise UserError(
            f"{run} is a Hugging Face checkpoint, not a convexp run or model directory; "
            "export reads convexp runs (fine-tune it first: convexp finetune glue init=...)"
        )
    return where.path


QA_HEADS = ("head.qa_outputs.weight", "head.start.weight")  # BERT's SpanHead, ELECTRA's JointSpanHead


def _check_classifier(src: Path, run) -> None:
    """Export rebuilds sequence classifiers; a SQuAD run's question answerer is refused in one line."""
    from safetensors import safe_open

    try:
        with safe_open(str(src / WEIGHTS), "pt") as f:
            names = set(f.keys())
    except Exception:  # damaged or missing weights: the checkpoint's own loading says so in one line
        return
    if any(name in names for name in QA_HEADS):
        raise UserError(
            f"{run} is a SQuAD run: export removes pruned structures from GLUE classifiers only; "
            f"its model/ already holds the pruned weights (masks folded in: W ⊙ M) and loads as init={src}"
        )


def default_out(src: Path) -> Path:
    """RUN/export for RUN/model; a sibling DIR-export for any other model directory."""
    return src.parent / "export" if src.name == "model" else src.parent / f"{src.name}-export"


def tokenizer_files(src: Path, tokenizer: Path | None = None) -> list[Path]:
    """tokenizer.json / vocab.txt to ship: from ``tokenizer`` (a file or a directory) if given, else
    from the source model directory (pre-training runs have them, fine-tuning runs do not)."""
    if tokenizer is None:
        return [src / n for n in TOKENIZER_FILES if (src / n).is_file()]
    t = Path(tokenizer).expanduser()
    found = [t] if t.is_file() and t.name in TOKENIZER_FILES else [t / n for n in TOKENIZER_FILES]
    found = [f for f in found if f.is_file()]
    if not found:
        raise UserError(f"--tokenizer {t}: give a tokenizer.json or vocab.txt, or a directory holding one")
    return found


def _check_tokenizer(files: list[Path], vocab_size: int) -> None:
    if not files:
        return
    from .data.tokenizer import Tokenizer

    n = Tokenizer.load(files[0]).vocab_size
    if n != vocab_size:
        raise UserError(
            f"the tokenizer {files[0]} has {n} tokens but the model a vocabulary of {vocab_size}; "
            "give the model's own tokenizer"
        )


# ---------------------------------------------------------------------------------------------
# Loading, checking, timing
# ---------------------------------------------------------------------------------------------


def _rebuild(model: torch.nn.Module) -> torch.nn.Module:
    """A fresh model built from ``pruned_config(model)`` holding ``model``'s tensors: proves that
    the saved directory will load (strict: every name and shape)."""
    from .models.io import build_model, model_kind
    from .pruning.structured import pruned_config

    state = model.state_dict()
    kind, num_labels = model_kind(state)
    fresh = build_model(pruned_config(model), kind, num_labels)
    try:
        fresh.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ExportMismatch(f"the pruned model cannot be rebuilt from its layer_sizes: {e}") from e
    return fresh.eval()


def check_batch(cfg, batch: int, seq_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [B, L], attention_mask [B, L]): random tokens, B = min(batch, 8) ≥ 2, the last row padded
    from L // 2 on (so the padding paths are checked too)."""
    import torch

    B = max(2, min(batch, 8))
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, cfg.vocab_size, (B, seq_len), generator=g)
    mask = torch.ones(B, seq_len, dtype=torch.long)
    mask[-1, max(1, seq_len // 2) :] = 0
    ids[mask == 0] = cfg.pad_token_id
    return ids, mask


def output_difference(a: torch.nn.Module, b: torch.nn.Module, ids, mask) -> dict:
    """Max |Δ| of the logits and of the encoder features [B, L, D] of two models (eval mode)."""
    import torch

    a.eval(), b.eval()
    with torch.no_grad():
        la, lb = a(ids, attention_mask=mask).logits, b(ids, attention_mask=mask).logits
        fa, fb = a.encoder(ids, mask).features, b.encoder(ids, mask).features
    return {
        "logits": float((la.float() - lb.float()).abs().max()),
        "features": float((fa.float() - fb.float()).abs().max()),
    }


def _params(model: torch.nn.Module) -> dict:
    from .pruning.structured import layers_parameters

    return {"layers": layers_parameters(model), "total": sum(p.numel() for p in model.parameters())}


def _run_metrics(src: Path) -> dict:
    """task / remaining_weights / pruning from the run's metrics.json (a fine-tuning run), or {}."""
    p = src.parent / "metrics.json"
    if src.name != "model" or not p.is_file():
        return {}
    m = json.loads(p.read_text())
    return {k: m[k] for k in ("task", "remaining_weights", "pruning") if k in m}


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def export_model(
    run: Path,
    out: Path | None = None,
    structured: bool = True,
    batch: int = 32,
    seq_len: int = 128,
    tokenizer: Path | None = None,
    repeats: int = 10,
    warmup: int = 3,
) -> dict:
    """Export the model of ``run`` (see the module docstring) and return export.json's content
    (plus "out", the directory written)."""
    src = source_dir(run)
    out = Path(out).expanduser() if out else default_out(src)
    if out.exists():
        raise UserError(f"{out} exists; refusing to overwrite it (give another --out or delete it)")
    if batch < 1 or seq_len < 1:
        raise UserError(f"--batch and --seq-len must be positive, got {batch} and {seq_len}")
    files = tokenizer_files(src, tokenizer)  # every input checked before torch and the weights
    import torch

    from .pruning.masked import remaining_weights
    from .pruning.structured import layer_sizes, measure_speedup, remove_dead_structures
    from .models.io import save_model_dir
    from .store.checkpoint import open_checkpoint

    _check_classifier(src, run)
    ckpt = open_checkpoint(Path(run), label="", weights=False)
    dense = ckpt.model()
    cfg = dense.encoder.cfg
    if cfg.absolute_positions and seq_len > cfg.max_position_embeddings:
        raise UserError(f"--seq-len {seq_len} exceeds the model's {cfg.max_position_embeddings} positions")
    _check_tokenizer(files, cfg.vocab_size)

    model = ckpt.model()
    summary = remove_dead_structures(model, heads=structured, ffn=structured)
    exported = _rebuild(model)
    ids, mask = check_batch(cfg, batch, seq_len)
    diff = output_difference(dense, exported, ids, mask)
    if max(diff.values()) > TOLERANCE:
        raise ExportMismatch(f"the exported model's outputs differ from {src}'s by {diff} (> {TOLERANCE})")
    timing = measure_speedup(dense, exported, batch=batch, seq_len=seq_len, repeats=repeats, warmup=warmup)

    before, after = _params(dense), _params(exported)
    info = {
        "source": str(src),
        "structured": structured,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "run": _run_metrics(src),
        "layer_sizes_before": layer_sizes(dense),
        "layer_sizes_after": layer_sizes(exported),
        "params_before": before,
        "params_after": after,
        "layers_params_kept_pct": 100 * after["layers"] / before["layers"],
        "remaining_weights_pct": 100 * remaining_weights(dense),  # Sanh et al.'s count, encoder layers
        "max_abs_diff": diff,
        "timing": {
            "batch": batch,
            "seq_len": seq_len,
            "threads": torch.get_num_threads(),
            "device": "cpu",
            "dtype": "float32",
            "dense_ms": timing["dense_ms"],
            "pruned_ms": timing["pruned_ms"],
            "speedup": timing["speedup"],
        },
        "tokenizer": [f.name for f in files],
        "notes": list(summary.notes)
        + (
            []
            if files
            else ["no tokenizer files: fine-tune from it with tokenizer_path=<the run's tokenizer>"]
        ),
    }
    texts = {EXPORT_JSON: json.dumps(info, indent=2) + "\n"}
    save_model_dir(exported, exported.encoder.cfg, out, extra_files=files, texts=texts)
    return {**info, "out": str(out)}


def print_export(info: dict) -> None:
    """A short table: per-layer heads and FFN units, parameters and forward time, before/after."""
    from rich.console import Console
    from rich.table import Table

    def sizes(key: str, which: str) -> str:
        return " ".join(str(s[key]) for s in info[f"layer_sizes_{which}"])

    t, pb, pa = info["timing"], info["params_before"], info["params_after"]
    table = Table(title=f"convexp export -> {info['out']}")
    for col in ("", "loaded", "exported"):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row("heads per layer", sizes("heads", "before"), sizes("heads", "after"))
    table.add_row("FFN units per layer", sizes("intermediate", "before"), sizes("intermediate", "after"))
    table.add_row("encoder-layer params", f"{pb['layers']:,}", f"{pa['layers']:,}")
    table.add_row("all params", f"{pb['total']:,}", f"{pa['total']:,}")
    table.add_row(
        f"forward ms ({t['batch']}x{t['seq_len']}, {t['threads']} threads)",
        f"{t['dense_ms']:.1f}",
        f"{t['pruned_ms']:.1f}",
    )
    console = Console()
    console.print(table)
    console.print(
        f"speed-up {t['speedup']:.2f}x; remaining weights {info['remaining_weights_pct']:.1f}%; "
        f"max |Δ logits| {info['max_abs_diff']['logits']:.1e}"
    )
    for note in info["notes"]:
        console.print(f"note: {note}")
