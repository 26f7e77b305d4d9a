"""A sweep's results as the paper's table: rows = variants, columns = tasks, GLUE, params, FLOPs.

Results come from the run store (or W&B) through the sweep's plan, so a report reads exactly
the runs ``convexp ablate`` made with the same arguments. Fine-tuning seeds are aggregated as
the paper did: ``median`` (ConvBERT: median of 9 runs), ``mean`` ± standard error (Chang et
al. appendix, dev) or ``best`` (Chang et al.'s test tables: the best dev run of ten).

Columns: ``params``, ``flops``, ``pretrain.KEY``; a task's score column (``sst2``, ``mnli-m``,
``sentlen``...) and ``glue``; ``TASK.METRIC`` (one metric of a task's runs, e.g. ``qqp.f1``,
``mnli-mm.accuracy``, ``mnli.remaining_weights``); the probing groups ``surface``, ``syntactic``,
``semantic`` and ``probing`` (means of their task cells, as BERMO Table 1 averages); ``s<SEED>``
(that seed's run of the sweep's single task, "diverges" when it collapsed: BERMO Table 3) and
``diverged`` (collapsed runs / runs). SQuAD tasks (``squad1``, ``squad2``): the task column is the
run's score (F1; v2.0 F1 at the dev-chosen no-answer threshold), ``squad1.exact``, ``squad2.best_f1``
etc. its official metrics.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass, field

from ..tasks.classification import results
from ..tasks.classification import scores
from ..tasks import PROBING
from ..tasks import kind as kind_by_name
from ..tasks import task_kind
from ..tasks.classification.registry import GROUPS

HEADERS = {
    "params": "Params",
    "flops": "Train FLOPs",
    "glue": "GLUE",
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "mnli-m": "MNLI-m",
    "mnli-mm": "MNLI-mm",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
    "sentlen": "SentLen",
    "wc": "WC",
    "treedepth": "TreeDepth",
    "topconst": "TopConst",
    "bshift": "BShift",
    "tense": "Tense",
    "subjnum": "SubjNum",
    "objnum": "ObjNum",
    "somo": "SOMO",
    "coordinv": "CoordInv",
    "surface": "Surface",
    "syntactic": "Syntactic",
    "semantic": "Semantic",
    "probing": "Probing avg",
    "diverged": "Diverged",
    "squad1": "SQuAD v1.1",
    "squad2": "SQuAD v2.0",
}
METRICS = {
    "accuracy": "acc",
    "f1": "F1",
    "mcc": "MCC",
    "remaining_weights": "remaining %",
    "exact": "EM",
    "best_exact": "EM (best thr.)",
    "best_f1": "F1 (best thr.)",
}
RUN_FACTS = ("remaining_weights", "wall_time_s", "examples_per_s", "eval_time_s")  # TASK.KEY, not scores
PROBING_GROUPS = {**{g: tuple(ts) for g, ts in GROUPS.items()}, "probing": PROBING}


def header(column: str) -> str:
    if column.startswith("s") and column[1:].isdigit():
        return f"Seed {column[1:]}"
    if "." in column and not column.startswith("pretrain."):
        task, metric = column.split(".", 1)
        return f"{HEADERS.get(task, task)} {METRICS.get(metric, metric)}"
    return HEADERS.get(column, column)


MEASURED = "†"  # a params or FLOPs cell measured from the built blocks of a user's module


@dataclass
class Cell:
    """One aggregated number: the value, its standard error (mean only) and how many runs."""

    value: float | None
    stderr: float | None = None
    n: int = 0
    note: str = ""
    diverged: bool = False  # a single run that collapsed (per-seed columns)

    def text(self, column: str) -> str:
        if self.diverged:
            return "diverges"
        if self.value is None:
            return "–"
        if column == "diverged":
            return f"{int(self.value)}/{self.n}"
        if column == "params":
            return f"{self.value / 1e6:.2f}M{self.note}"
        if column == "flops":
            return f"{self.value:.1e}{self.note}"
        if column.startswith("pretrain."):
            return f"{self.value:.3g}"
        s = f"{self.value:.1f}"
        if self.stderr is not None and self.n > 1:
            s += f" ± {self.stderr:.1f}"
        return s + self.note


@dataclass
class Row:
    variant: str
    label: str
    ours: dict[str, Cell]
    paper: dict[str, object]
    runs: dict[str, list[str]] = field(default_factory=dict)  # column -> run ids behind it
    seeds: dict[str, dict[int, float]] = field(default_factory=dict)  # column -> {seed: score} behind it
    glue_over: tuple[str, ...] = ()  # the task columns our GLUE average is over (those that were run)


def aggregate(values: list[float], how: str) -> Cell:
    """One cell of seed statistics (:func:`convexp.tasks.classification.results.seed_stats`): ``how`` = mean (± s.e.),
    median or best."""
    if not values:
        return Cell(None)
    stats = results.seed_stats(values)
    return Cell(stats[how], stats["stderr"] if how == "mean" else None, stats["n"])


def chosen_runs(finetunes: list[dict]) -> dict[str, list[dict]]:
    """{task: the runs of its chosen setting} (:func:`convexp.tasks.classification.results.best_setting`)."""
    by_task: dict[str, list[dict]] = {}
    for m in finetunes:
        by_task.setdefault(m["task"], []).append(m)
    return {t: results.best_setting(ms) for t, ms in by_task.items()}


def run_values(m: dict, style: str, split: str = "dev") -> dict[str, float]:
    """Every column one fine-tuning run gives (its metrics.json ``m``): its task's score column(s)
    and ``COLUMN.METRIC`` for each metric (``mnli``'s: of the matched split; ``mnli-m.*``, ``mnli-mm.*``
    per split), plus ``TASK.remaining_weights`` etc. The scores are on ``split`` (dev or test)."""
    task = m["task"]
    results = m.get(split) or {}
    out = _kind(m).score_columns(m, style, split)  # the task's score column(s), as its kind scores it
    for i, (sp, metrics) in enumerate(results.items()):
        column = scores.column_of(task, sp)
        names = [column, task] if i == 0 and column != task else [column]
        for name in names:
            out.update({f"{name}.{k}": float(v) for k, v in metrics.items()})
    for k in RUN_FACTS:
        if isinstance(m.get(k), (int, float)):
            out[f"{task}.{k}"] = float(m[k])
    return out


def _kind(m: dict):
    """The TaskKind of a fine-tuning run's results (``kind``: its sweep node's; else by task name)."""
    return task_kind(m.get("kind") or kind_by_name(m["task"]))


def variant_row(
    variant,
    style: str,
    how: str,
    columns: list[str],
    pretrain: dict | None,
    finetunes: list[dict],
    split: str = "dev",
    exclude_diverged: bool = False,
) -> Row:
    """One row: every column aggregated over the variant's fine-tuning seeds.

    pretrain: {"metrics": metrics.json or None, "params": int, "flops": float}; finetunes: the
    fine-tuning runs' metrics.json dicts (with "seed" and "run" added). With ``exclude_diverged``
    collapsed runs are left out of the aggregates (BERMO: "averaged over three runs")."""
    runs = chosen_runs(finetunes)
    per_seed: dict[int, dict[str, float]] = {}  # seed -> {column: score}
    per_column: dict[str, list[float]] = {}
    seed_cells: dict[str, Cell] = {}
    ids: dict[str, list[str]] = {}
    diverged = [m.get("diverged", False) for ms in runs.values() for m in ms]
    for task, ms in runs.items():
        for m in ms:
            values = run_values(m, style, split)
            score = _kind(m).score(m, style, split)  # the task's main split, as its kind scores it
            seed_cells[f"s{m['seed']}"] = Cell(score, n=1, diverged=bool(m.get("diverged")))
            if exclude_diverged and m.get("diverged"):
                continue
            for col, v in values.items():
                per_column.setdefault(col, []).append(v)
                per_seed.setdefault(m["seed"], {})[col] = v
                ids.setdefault(col, []).append(m["run"])
    ours: dict[str, Cell] = {}
    by_seed: dict[str, dict[int, float]] = {}  # the seed scores of the columns aggregated over seeds
    for col in columns:
        if col in ("params", "flops"):  # † measured from a user's module (models/stats.py)
            measured = MEASURED if (pretrain or {}).get("measured") else ""
            ours[col] = Cell(pretrain[col] if pretrain else None, n=1, note=measured)
        elif col.startswith("pretrain."):
            metrics = (pretrain or {}).get("metrics") or {}
            ours[col] = Cell(metrics.get(col.split(".", 1)[1]), n=1)
        elif col == "glue":
            ours[col] = _glue_cell(per_seed, per_column, style, how)
            by_seed["glue"] = _glue_by_seed(per_seed, per_column, style)
        elif col in PROBING_GROUPS:
            cells = [aggregate(per_column[t], how).value for t in PROBING_GROUPS[col] if t in per_column]
            note = "" if len(cells) == len(PROBING_GROUPS[col]) else "*"
            ours[col] = Cell(statistics.fmean(cells) if cells else None, n=1, note=note)
        elif col == "diverged":
            ours[col] = Cell(sum(diverged), n=len(diverged)) if diverged else Cell(None)
        elif col.startswith("s") and col[1:].isdigit():
            ours[col] = seed_cells.get(col, Cell(None))
        else:
            ours[col] = aggregate(per_column.get(col, []), how)
            if col.rsplit(".", 1)[-1] not in RUN_FACTS:  # a score: its seeds are compared
                by_seed[col] = {s: vs[col] for s, vs in per_seed.items() if col in vs}
    by_seed = {c: v for c, v in by_seed.items() if v}
    over = tuple(c for c in glue_columns(style) if c in per_column) if "glue" in columns else ()
    return Row(variant.name, variant.label, ours, dict(variant.paper), ids, by_seed, over)


def glue_columns(style: str) -> tuple[str, ...]:
    return scores.CONVBERT_COLUMNS if style == "convbert" else scores.CHANG_COLUMNS


def _glue_by_seed(per_seed: dict, per_column: dict, style: str) -> dict[int, float]:
    """{seed: its GLUE score} over the seeds that ran every task of the average."""
    wanted = [c for c in glue_columns(style) if c in per_column]
    complete = {s: v for s, v in per_seed.items() if wanted and all(c in v for c in wanted)}
    return {s: statistics.fmean(v[c] for c in wanted) for s, v in complete.items()}


def _glue_cell(per_seed: dict, per_column: dict, style: str, how: str) -> Cell:
    """The GLUE average. median / mean: of the per-seed GLUE scores (Chang et al. A.2: "GLUE
    score averages and standard errors over ten GLUE scores"); best: of the per-task best runs.
    With some tasks not run, the average is over those that were, marked with *."""
    wanted = [c for c in glue_columns(style) if c in per_column]
    if not wanted:
        return Cell(None)
    note = "" if len(wanted) == len(glue_columns(style)) else "*"
    if how == "best":
        return Cell(statistics.fmean(max(per_column[c]) for c in wanted), n=1, note=note)
    cell = aggregate(list(_glue_by_seed(per_seed, per_column, style).values()), how)
    cell.note = note
    return cell


# what each paper's printed GLUE score averages (REFERENCE.md §4; WNLI left out by all three papers)
PAPER_GLUE = {
    "convbert": "ConvBERT's GLUE score is the mean of its 8 tasks",  # §4.1: "the average of all 8 tasks"
    "chang": "Chang et al.'s GLUE score is the mean of their 9 columns",  # MNLI-m and MNLI-mm apart
}


def glue_note(rows: list[Row], style: str) -> str | None:
    """One line for a table with a GLUE column: which tasks our average is over (those that were run)
    and, where the paper's GLUE score stands beside it, what that score averages, so that a 4-task
    mean is not read as the paper's score. None when every average is over all the tasks and no
    paper score is shown."""
    shown = [r for r in rows if r.glue_over]
    if not shown:
        return None
    full = glue_columns(style)
    overs = list(dict.fromkeys(r.glue_over for r in shown))
    papers = any(isinstance(r.paper.get("glue"), (int, float)) for r in shown)
    names = ", ".join(header(c) for c in full)
    paper = f"{PAPER_GLUE.get(style, PAPER_GLUE['chang'])} ({names}; WNLI left out)"
    if overs == [full]:
        return f"GLUE: ours averages the same tasks as the paper's score; {paper}." if papers else None
    ours = " or ".join(f"{len(o)} ({', '.join(header(c) for c in o)})" for o in overs if o != full)
    if not papers:
        return f"GLUE*: averages only the columns of the tasks that were run, {ours} of the {len(full)}."
    return (
        f"GLUE*: ours averages only the columns of the tasks that were run, {ours}, while {paper}: "
        "not the same number, so no verdict is given on it."
    )


# ----------------------------------------------------------------------------- rendering


def _paper_text(value, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if column.endswith(".remaining_weights"):
        return f"{value}%"
    if column == "params":
        return f"{value}M"
    if column == "flops":
        return f"{value:.1e}"
    return f"{value:.1f}" if round(value, 1) == value else str(value)  # as printed: 79.85 stays 79.85


def _has_paper(rows: list[Row]) -> bool:
    return any(r.paper for r in rows)


def to_markdown(
    rows: list[Row], columns: list[str], title: str, lines: list[str], beside: dict | None = None
) -> str:
    """``beside``: {variant: {column: text}}, a row under the paper's (the verdicts, "vs paper")."""
    heads = ["Model", ""] + [header(c) for c in columns]
    out = [f"## {title}", "", *lines, "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        out.append("| " + " | ".join([r.label, "ours", *(r.ours[c].text(c) for c in columns)]) + " |")
        if r.paper:
            out.append(
                "| " + " | ".join(["", "paper", *(_paper_text(r.paper.get(c), c) for c in columns)]) + " |"
            )
        if (beside or {}).get(r.variant):
            cells = [beside[r.variant].get(c, "") for c in columns]
            out.append("| " + " | ".join(["", "vs paper", *cells]) + " |")
    return "\n".join(out) + "\n"


def to_csv(rows: list[Row], columns: list[str]) -> str:
    """Long format: one line per (variant, source, column)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["variant", "label", "source", "column", "value", "stderr", "n"])
    for r in rows:
        for c in columns:
            cell = r.ours[c]
            w.writerow([r.variant, r.label, "ours", c, cell.value, cell.stderr, cell.n])
            if c in r.paper:
                w.writerow([r.variant, r.label, "paper", c, r.paper[c], None, None])
    return buf.getvalue()


# LaTeX's special characters in text mode, each escaped in one pass (so no escape is escaped again)
_TEX = str.maketrans(
    {
        **{c: "\\" + c for c in "&%$#_{}"},
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
        "\\": r"\textbackslash{}",
        "±": r"$\pm$",
    }
)


def latex_escape(s: str) -> str:
    return s.translate(_TEX)


def to_latex(
    rows: list[Row], columns: list[str], title: str, beside: dict | None = None, notes: tuple[str, ...] = ()
) -> str:
    """``beside``: {variant: {column: LaTeX}}, a row under the paper's (the verdicts, "vs paper");
    ``notes``: sentences the caption carries after the title (e.g. :func:`glue_note`)."""
    heads = ["Model", ""] + [header(c) for c in columns]
    out = [
        r"\begin{table}[t]",
        r"\centering",
        r"\begin{tabular}{ll" + "r" * len(columns) + "}",
        r"\hline",
        " & ".join(latex_escape(h) for h in heads) + r" \\",
        r"\hline",
    ]
    for r in rows:
        out.append(" & ".join([latex_escape(r.label), "ours", *(latex_escape(r.ours[c].text(c)) for c in columns)]) + r" \\")
        if r.paper:
            cells = [r"\textit{" + latex_escape(_paper_text(r.paper.get(c), c)) + "}" for c in columns]
            out.append(" & ".join(["", r"\textit{paper}", *cells]) + r" \\")
        if (beside or {}).get(r.variant):
            cells = [beside[r.variant].get(c, "") for c in columns]
            out.append(" & ".join(["", r"\textit{vs paper}", *cells]) + r" \\")
    caption = latex_escape(". ".join([title, " ".join(notes)]) if notes else title)
    out += [r"\hline", r"\end{tabular}", r"\caption{" + caption + "}", r"\end{table}"]
    return "\n".join(out) + "\n"


def to_json(rows: list[Row], columns: list[str]) -> list[dict]:
    return [
        {
            "variant": r.variant,
            "label": r.label,
            "ours": {
                c: {"value": r.ours[c].value, "stderr": r.ours[c].stderr, "n": r.ours[c].n} for c in columns
            },
            "paper": r.paper,
            "runs": r.runs,
        }
        for r in rows
    ]
