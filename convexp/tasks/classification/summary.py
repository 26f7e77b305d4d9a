"""The summary of a ``convexp finetune`` invocation: every seed's result and the aggregates.

``outputs/runs/glue/<slug>-<hash>/`` (``runs/probing/`` for SentEval probing) holds summary.json —
per task the runs, the chosen setting (:func:`results.best_setting`), its seed statistics
(mean ± s.e., median, best) and the GLUE columns in ConvBERT's and Chang et al.'s styles, the GLUE
averages both ways (BERMO Table 1's probing averages for probing) — and submission.zip (each
task's best-dev run). The table printed at the end shows the same numbers.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from omegaconf import DictConfig

from . import results
from ...atomic import config_hash
from .scores import glue_average, task_score
from .submissions import zip_submission
from .registry import GROUPS, PROBING_COLUMNS, PROBING_ORDER, get_task
from ...store.runs import Run, said
from ...width import terminal_width


def write_summary(cfg: DictConfig, init_slug: str, runs_by_task: dict) -> Path:
    """Aggregate ``{task: {seed: [Run]}}`` into summary.json and submission.zip; print the table."""
    per_task, columns = {}, {"convbert": {}, "chang": {}}
    best_runs = {}
    for name, by_seed in runs_by_task.items():
        task = get_task(name)
        runs = [(seed, r, r.read_json("metrics.json")) for seed, rs in by_seed.items() for r in rs]
        # with a grid: the setting with the best mean dev score over seeds is the task's result
        chosen = results.best_setting(runs, metrics=_metrics)
        best = max(chosen, key=lambda e: e[2]["score"])  # best-dev run
        best_runs[name] = best[1]
        per_task[name] = {
            "runs": [{"run": r.id, "seed": seed, **m} for seed, r, m in runs],
            "hp": chosen[0][2]["hp"],
            "settings_tried": len(results.by_setting(runs, metrics=_metrics)),
            "score": results.seed_stats([m["score"] for _, _, m in chosen]),
            "best_run": best[1].id,
        }
        tests = [
            m["test"][task.test_splits[0]] for _, _, m in chosen if task.test_splits[0] in m.get("test", {})
        ]
        if tests and len(tests) == len(chosen):  # labelled test rows (the probing tasks)
            per_task[name]["test_score"] = results.seed_stats([task_score(task, t) for t in tests])
        for style in ("convbert", "chang"):
            columns[style].update(results.style_columns(name, [m for _, _, m in chosen], style))
    glue_scores = {}
    for style, cols in columns.items():
        for stat in results.STATS:
            vals = {c: v[stat] for c, v in cols.items()}
            try:
                glue_scores[f"{style}_{stat}"] = glue_average(vals, style)
            except Exception:
                glue_scores[f"{style}_{stat}"] = None  # not every task was run
    is_probing = all(get_task(name).benchmark == "probing" for name in runs_by_task)
    slug = "-".join(filter(None, [init_slug, cfg.task.name, cfg.protocol, cfg.name]))
    every_run = sorted(r.id for by_seed in runs_by_task.values() for rs in by_seed.values() for r in rs)
    kind = "probing" if is_probing else "glue"
    out = Path(cfg.outputs) / "runs" / kind / f"{slug}-{config_hash(every_run, length=10)}"
    summary = {
        "init": init_slug,
        "protocol": cfg.protocol,
        "tasks": per_task,
        "columns": columns,
        "glue": glue_scores,
        **({"probing": probing_averages(per_task)} if is_probing else {}),
    }
    out.mkdir(parents=True, exist_ok=True)
    Run(out).write_json("summary.json", summary)
    sub = out / "submission"
    sub.mkdir(exist_ok=True)
    for name, run in best_runs.items():
        for f in (run.dir / "submission").glob("*.tsv"):
            (sub / f.name).write_bytes(f.read_bytes())
    if any(sub.iterdir()):
        zip_submission(sub, out / "submission.zip")
    (print_probing_summary if is_probing else print_summary)(summary)
    print(said("summary", out, "(summary.json)"))  # 80 columns: a long run name on a line of its own
    return out


def _metrics(entry: tuple) -> dict:  # (seed, Run, metrics.json)
    return entry[2]


def probing_averages(per_task: dict) -> dict:
    """BERMO Table 1's averages of the mean accuracies: over all ten tasks and per group (surface,
    syntactic, semantic), for every complete set: {set: {"dev": .., "test": .. or None}}."""
    out = {}
    for group, names in {"all": PROBING_ORDER, **GROUPS}.items():
        if all(n in per_task for n in names):
            dev = statistics.fmean(per_task[n]["score"]["mean"] for n in names)
            has_test = all("test_score" in per_task[n] for n in names)
            test = statistics.fmean(per_task[n]["test_score"]["mean"] for n in names) if has_test else None
            out[group] = {"dev": dev, "test": test}
    return out


def print_probing_summary(summary: dict) -> None:
    """The accuracies of a probing invocation, in BERMO Table 1's column order."""
    from rich.console import Console
    from rich.table import Table

    def cell(agg: dict | None) -> str:
        return f"{agg['mean']:.2f} ± {agg['stderr']:.2f}" if agg else "-"

    table = Table(title=f"SentEval probing accuracy ({summary['protocol']} protocol), init {summary['init']}")
    for col in ("task", "SentEval file", "dev mean ± s.e.", "test mean ± s.e.", "best dev", "runs"):
        table.add_column(col, justify="left" if col in ("task", "SentEval file") else "right")
    tasks = summary["tasks"]
    for name in [n for n in PROBING_ORDER if n in tasks]:
        t = tasks[name]
        file = f"{get_task(name).folder}.txt"
        table.add_row(
            f"{PROBING_COLUMNS[name]} ({name})",
            file,
            cell(t["score"]),
            cell(t.get("test_score")),
            f"{t['score']['best']:.2f}",
            str(t["score"]["n"]),
        )
    for group, avg in summary.get("probing", {}).items():
        test = "-" if avg["test"] is None else f"{avg['test']:.2f}"
        label = "average, all ten tasks" if group == "all" else f"average, {group} tasks"
        table.add_row(label, "", f"{avg['dev']:.2f}", test, "", "")
    Console(width=terminal_width(140)).print(table)


def print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"GLUE dev ({summary['protocol']} protocol), init {summary['init']}")
    for col in ("task", "metrics (mean over runs)", "score mean ± s.e.", "median", "best", "runs"):
        table.add_column(col, justify="left" if col in ("task", "metrics (mean over runs)") else "right")
    for name, t in summary["tasks"].items():
        runs = [r for r in t["runs"] if r["hp"] == t["hp"]]  # the chosen setting's seeds
        keys = [(s, k) for s, d in runs[0]["dev"].items() for k in d]
        mets = ", ".join(
            f"{k}{'' if len(runs[0]['dev']) == 1 else '/' + s.split('_')[-1][:2]} {statistics.fmean(r['dev'][s][k] for r in runs):.1f}"
            for s, k in keys
        )
        sc = t["score"]
        table.add_row(
            name,
            mets,
            f"{sc['mean']:.1f} ± {sc['stderr']:.1f}",
            f"{sc['median']:.1f}",
            f"{sc['best']:.1f}",
            str(sc["n"]),
        )
    g = summary["glue"]
    for style, label in (
        ("convbert", "GLUE, ConvBERT (8 tasks)"),
        ("chang", "GLUE, Chang et al. (9 columns)"),
    ):
        if g.get(f"{style}_mean") is not None:
            table.add_row(
                label,
                "",
                f"{g[f'{style}_mean']:.1f}",
                f"{g[f'{style}_median']:.1f}",
                f"{g[f'{style}_best']:.1f}",
                "",
            )
    Console(width=terminal_width(140)).print(table)
