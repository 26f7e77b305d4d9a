"""GLUE server submissions: one TSV file per test split, zipped as the server wants them."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

from ...atomic import atomic_write
from ...data.errors import TaskFileError
from .registry import SUBMISSION_FILES, Task, get_task

log = logging.getLogger(__name__)


def write_submission(task: str | Task, split_name: str, idx, predictions, out_dir) -> Path:
    """Write the GLUE server file of a test split (e.g. ``RTE.tsv``, ``MNLI-mm.tsv``, ``AX.tsv``)
    into ``out_dir``: a header ``index\\tprediction``, then one row per example sorted by index.

    predictions: class ids [N], logits [N, C] (argmax taken) or STS-B scores. Written as class
    ids (CoLA, SST-2, MRPC, QQP, WNLI), label names (MNLI, AX, QNLI, RTE) or scores clipped to
    [0, 5] with 3 decimals (STS-B)."""
    import numpy as np

    t = get_task(task)
    name = t.submission_file(split_name)
    idx, preds = np.asarray(idx).reshape(-1), np.asarray(predictions)
    if t.is_regression:
        preds = preds.reshape(-1).astype(float)
    elif preds.ndim == 2:
        preds = preds.argmax(-1)
    if len(idx) != len(preds):
        raise ValueError(f"{len(idx)} indices for {len(preds)} predictions")
    if len(set(idx.tolist())) != len(idx):
        raise ValueError(f"duplicate indices in the {t.name} {split_name} predictions")
    lines = ["index\tprediction"]
    for i in np.argsort(idx, kind="stable"):
        p = preds[i]
        if t.submission_labels == "float":
            value = f"{min(5.0, max(0.0, float(p))):.3f}"
        elif t.submission_labels == "name":
            value = t.label_names[int(p)]
        else:
            value = str(int(p))
        lines.append(f"{int(idx[i])}\t{value}")
    path = Path(out_dir) / name
    atomic_write(path, "\n".join(lines) + "\n")
    return path


def missing_submission_files(out_dir) -> list[str]:
    """The server files (of the 11) not yet in ``out_dir``."""
    return [n for n in SUBMISSION_FILES if not (Path(out_dir) / n).is_file()]


def zip_submission(out_dir, zip_path) -> Path:
    """Zip the server files found in ``out_dir`` (flat, as ``zip -j``) into ``zip_path``.

    The server wants all 11 files: a zip lacking only WNLI (which the papers do not fine-tune) is a
    warning that says what to add; a partial run's (some tasks) is an INFO line."""
    out_dir, zip_path = Path(out_dir), Path(zip_path)
    present = [n for n in SUBMISSION_FILES if (out_dir / n).is_file()]
    if not present:
        raise TaskFileError(
            f"no GLUE submission file in {out_dir}; write predictions with write_submission first"
        )
    missing = missing_submission_files(out_dir)
    if missing == ["WNLI.tsv"]:  # every task the papers fine-tune is there
        log.warning(
            "%s lacks WNLI.tsv, which the GLUE server needs: none of the three papers fine-tunes WNLI "
            "(its scores leave it out); the usual entry is the training set's majority class for every "
            "test row (BERT's). Add it to %s and zip again.", zip_path, out_dir
        )
    elif missing:  # a run of some tasks: a submission only once task=all has run
        log.info("%s: %d of the server's %d files (task=all writes the rest)", zip_path, len(present),
                 len(SUBMISSION_FILES))  # fmt: skip
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = zip_path.with_name(f".{zip_path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n in present:
            z.write(out_dir / n, arcname=n)
    tmp.replace(zip_path)
    return zip_path
