"""Metrics and scores of fine-tuned tasks: per-task metrics, the papers' task scores, GLUE averages.

compute_metrics(task, predictions, labels)  the task's metrics in percent (torchmetrics)
collapsed(task, predictions)                 did a run diverge (BERMO Table 3's "Diverges")
task_score / convbert_score                  one number per task, as Chang et al. / ConvBERT
score_columns, glue_average, column_of       the GLUE table's columns and its two averages
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

from ...data.errors import TaskError
from .. import GLUE
from .registry import Task, get_task

CONVBERT_COLUMNS = GLUE  # ConvBERT's GLUE columns (convexp/tasks/__init__.py; mnli = matched)
CHANG_COLUMNS = ("cola", "mnli-m", "mnli-mm", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb")
_DEV_COLUMNS = {"validation_matched": "mnli-m", "validation_mismatched": "mnli-mm"}


def column_of(task: str, split: str) -> str:
    """A split's score column: ``mnli-m`` / ``mnli-mm`` for MNLI's dev splits, else the task."""
    return _DEV_COLUMNS.get(split, task)


def compute_metrics(task: str | Task, predictions, labels) -> dict[str, float]:
    """The task's metrics in percent (x100), computed with torchmetrics' functional API.

    predictions: class ids [N], logits [N, C] (argmax taken) or, for STS-B, scores [N] / [N, 1].
    Keys: cola mcc; sst2/qnli/rte/wnli/mnli accuracy (MNLI: call once per dev split); mrpc/qqp
    f1 (positive class 1) and accuracy; stsb pearson and spearman. A correlation that is
    undefined (constant predictions) counts as 0, as sklearn does for MCC."""
    import numpy as np
    import torch
    from torchmetrics.functional import pearson_corrcoef, spearman_corrcoef
    from torchmetrics.functional.classification import (
        binary_f1_score,
        binary_matthews_corrcoef,
        multiclass_accuracy,
    )

    t = get_task(task)
    preds, target = torch.as_tensor(np.asarray(predictions)), torch.as_tensor(np.asarray(labels))
    if t.is_regression:
        preds, target = preds.double().reshape(-1), target.double().reshape(-1)
    elif preds.ndim == 2:
        preds = preds.argmax(-1)
    if len(preds) != len(target) or len(target) == 0:
        raise ValueError(f"{len(preds)} predictions for {len(target)} labels")
    if t.is_regression:
        with warnings.catch_warnings():  # constant predictions: NaN, reported as 0 below
            warnings.simplefilter("ignore", UserWarning)
            values = {
                "pearson": pearson_corrcoef(preds, target),
                "spearman": spearman_corrcoef(preds, target),
            }
    else:
        preds, target = preds.long(), target.long()
        if (target < 0).any():
            raise TaskError(
                f"{t.name} labels hold -1 (an unlabelled test split); compute metrics on a dev split"
            )
        compute = {
            "accuracy": lambda: multiclass_accuracy(
                preds, target, num_classes=max(t.num_labels, 2), average="micro"
            ),
            # MCC is undefined when either side is constant: 0, as sklearn and the GLUE scorer
            # give (torchmetrics returns a smoothed non-zero value there)
            "mcc": lambda: (
                binary_matthews_corrcoef(preds, target)
                if preds.unique().numel() > 1 and target.unique().numel() > 1
                else torch.tensor(0.0)
            ),
            "f1": lambda: binary_f1_score(preds, target),
        }
        values = {m: compute[m]() for m in t.metrics}
    out = {}
    for k, v in values.items():
        v = float(v)
        out[k] = 0.0 if math.isnan(v) else 100.0 * v
    return out


def collapsed(task: str | Task, predictions) -> bool:
    """Did a fine-tuning run diverge (BERMO Table 3's "Diverges")? It collapsed when every
    prediction is the same class (logits [N, C] or class ids [N]) or, for STS-B, the same score,
    or when any output is not finite."""
    import numpy as np

    t = get_task(task)
    p = np.asarray(predictions, dtype=float)
    if not np.isfinite(p).all():
        return True
    if t.is_regression:
        return bool(np.ptp(p.reshape(-1)) < 1e-6)
    ids = p.argmax(-1) if p.ndim == 2 else p
    return len(np.unique(ids)) == 1


def task_score(task: str | Task, metrics: Mapping[str, float]) -> float:
    """The GLUE-leaderboard score of one task: the mean of its metrics (MRPC and QQP: (F1 + acc)/2,
    STS-B: (Pearson + Spearman)/2, CoLA: MCC, others: accuracy). Used for Chang et al.'s averages."""
    t = get_task(task)
    return sum(metrics[m] for m in t.metrics) / len(t.metrics)


def convbert_score(task: str | Task, metrics: Mapping[str, float]) -> float:
    """The score ConvBERT (and ELECTRA) report: Spearman for STS-B, MCC for CoLA, accuracy otherwise."""
    t = get_task(task)
    return metrics[t.convbert_metric]


def score_columns(results: Mapping[str, Mapping[str, Mapping[str, float]]], style: str = "convbert") -> dict:
    """{column: score} from {task: {dev split: metrics}}, scored as ``style`` does.

    convbert: ``convbert_score``, MNLI's matched split as column "mnli" (mismatched also given as
    "mnli-mm"); chang: ``task_score``, MNLI as "mnli-m" and "mnli-mm". WNLI stays a column (the
    averages ignore it)."""
    _check_style(style)
    score = convbert_score if style == "convbert" else task_score
    out = {}
    for task, by_split in results.items():
        t = get_task(task)
        for split, metrics in by_split.items():
            out[_style_column(t, split, style)] = score(t, metrics)
    return out


def task_columns(task: str, style: str = "convbert") -> tuple[str, ...]:
    """The columns a task's dev splits give (``score_columns``'s, before any result): MNLI two."""
    _check_style(style)
    t = get_task(task)
    return tuple(_style_column(t, split, style) for split in t.dev_splits)


def _style_column(t: Task, split: str, style: str) -> str:
    column = _DEV_COLUMNS.get(split, t.name)
    return "mnli" if style == "convbert" and column == "mnli-m" else column


def glue_average(per_task_scores: Mapping[str, float], style: str = "convbert") -> float:
    """The GLUE average of per-column scores (WNLI and other extra keys ignored).

    convbert: the mean of the 8 columns cola, sst2, mrpc, stsb, qqp, mnli (matched; "mnli-m" is
    accepted for it), qnli, rte. chang: the mean of the 9 columns cola, mnli-m, mnli-mm, mrpc,
    qnli, qqp, rte, sst2, stsb. The per-column scores must be those of the style (see
    ``score_columns``)."""
    _check_style(style)
    scores = dict(per_task_scores)
    if style == "convbert" and "mnli" not in scores and "mnli-m" in scores:
        scores["mnli"] = scores["mnli-m"]
    columns = CONVBERT_COLUMNS if style == "convbert" else CHANG_COLUMNS
    missing = [c for c in columns if c not in scores]
    if missing:
        raise TaskError(
            f"no score for {', '.join(missing)}: the {style} GLUE average needs {', '.join(columns)}; "
            "fine-tune those tasks first"
        )
    return sum(float(scores[c]) for c in columns) / len(columns)


def _check_style(style: str) -> None:
    if style not in ("convbert", "chang"):
        raise TaskError(f"unknown GLUE average style {style!r}; use convbert or chang")
