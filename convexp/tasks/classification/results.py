"""Fine-tuning results as the papers report them: seed statistics, the chosen setting, task scores.

Shared by the summary of a ``convexp finetune`` invocation (summary.py) and the tables of
``convexp report`` (report/tables.py), so both aggregate and choose the same way:

* seed statistics: n, mean ± standard error (Chang et al.'s appendix), median (ConvBERT: the median
  of nine runs) and best (Chang et al.'s test tables: the best dev run);
* the chosen setting: with a hyper-parameter grid, the setting with the best mean dev score over
  seeds (the ConvBERT appendix); without one, all runs;
* scores in a paper's style: ``convbert`` (the metric ConvBERT and ELECTRA report: MCC for CoLA,
  Spearman for STS-B, accuracy otherwise; MNLI matched) or ``chang`` (the GLUE leaderboard's task
  score, the mean of a task's metrics; MNLI matched and mismatched as two columns).

A run is its metrics.json dict: at least ``hp`` and ``score`` (the dev score).
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Callable, Iterable, TypeVar

from . import scores
from .registry import Task

T = TypeVar("T")
STATS = ("mean", "median", "best")


def seed_stats(values: list[float]) -> dict:
    """{n, mean, stderr, median, best} of one number over seeds (stderr = s / √n, 0 for one run)."""
    n = len(values)
    return {
        "n": n,
        "mean": statistics.fmean(values),
        "stderr": statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0,
        "median": statistics.median(values),
        "best": max(values),
    }


def by_setting(runs: Iterable[T], metrics: Callable[[T], dict] = lambda m: m) -> dict[str, list[T]]:
    """Runs grouped by hyper-parameter setting (``hp``), in order of first appearance."""
    groups: dict[str, list[T]] = {}
    for r in runs:
        groups.setdefault(json.dumps(metrics(r)["hp"], sort_keys=True), []).append(r)
    return groups


def best_setting(runs: Iterable[T], metrics: Callable[[T], dict] = lambda m: m) -> list[T]:
    """The runs of the setting with the best mean dev ``score`` over seeds (the first on a tie)."""
    return max(
        by_setting(runs, metrics).values(), key=lambda rs: statistics.fmean(metrics(r)["score"] for r in rs)
    )


def style_score(task: str | Task, metrics: dict, style: str) -> float:
    """A task's score from one split's metrics in a paper's style (see the module docstring)."""
    return (scores.convbert_score if style == "convbert" else scores.task_score)(task, metrics)


def style_columns(task: str, runs: list[dict], style: str) -> dict[str, dict]:
    """{GLUE column: seed statistics over ``runs``} of one task's dev results in a paper's style
    (MNLI gives two columns in Chang et al.'s style)."""
    per_run = [scores.score_columns({task: m["dev"]}, style) for m in runs]
    return {c: seed_stats([pr[c] for pr in per_run]) for c in per_run[0]}
