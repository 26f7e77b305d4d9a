"""The report's decisions: which variant really differs from the baseline, which cells reproduce
the paper, and how many seeds a task needs (the statistics are in convexp/seed_stats.py).

Input: the table's rows with their per-seed scores (``Row.seeds``). Output: a :class:`Decisions`
and its renderings — lines under the markdown table, LaTeX tables, long-format CSV rows and JSON.
Only columns aggregated over fine-tuning seeds (task scores, ``TASK.METRIC``, ``glue``) get
statistics; the Holm family is the table's task cells (every variant against the baseline), the
GLUE average being a function of them.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from .. import seed_stats as stats
from .tables import Row, latex_escape, header

ALPHA = 1 - stats.LEVEL


@dataclass
class Decisions:
    baseline: str  # the variant every other one is compared with
    columns: list[str]  # the columns with seed scores
    how: str  # the table's aggregate (verdicts compare it with the paper's number)
    detect: float  # the difference seeds_needed is for (points)
    baseline_note: str = ""  # why the baseline is not the sweep's
    differences: dict[tuple[str, str], stats.Difference | None] = field(default_factory=dict)
    holm: dict[tuple[str, str], float] = field(default_factory=dict)  # the family's adjusted p-values
    verdicts: dict[tuple[str, str], stats.Agreement] = field(default_factory=dict)
    paired: bool = True  # the design seeds_needed assumes: every comparison paired
    spread: dict[str, float | None] = field(default_factory=dict)  # column -> s.d. of a seed (or difference)
    needed: dict[str, int | None] = field(default_factory=dict)

    def significant(self, key: tuple[str, str]) -> bool:
        return key in self.holm and self.holm[key] < ALPHA

    def mark(self, key: tuple[str, str]) -> str:
        """``*``: the 95% interval excludes 0; ``†``: still significant after Holm–Bonferroni."""
        d = self.differences.get(key)
        return ("*" if d and d.excludes_zero else "") + ("†" if self.significant(key) else "")


def decide(
    rows: list[Row],
    columns: list[str],
    how: str,
    baseline: str | None,
    detect: float,
    pretrain_seeds: dict[str, object],
    paper_se: dict[str, dict[str, float]],
    versus_paper: bool = True,
) -> Decisions:
    """``baseline``: a variant of ``rows`` (None: the first row); ``pretrain_seeds``: variant -> its
    pre-training seed (or checkpoint): seeds pair only between variants that share it;
    ``paper_se``: variant -> {column: the paper's printed standard error}; ``versus_paper``: whether
    our numbers and the paper's are on the same split (else no verdicts)."""
    by_name = {r.variant: r for r in rows}
    base = by_name.get(baseline) or rows[0]
    note = "" if baseline in (None, base.variant) else f"the sweep's baseline {baseline!r} was not run"
    cols = [c for c in columns if any(c in r.seeds for r in rows)]
    dec = Decisions(base.variant, cols, how, detect, note)
    spreads: dict[str, list[list[float]]] = {}
    for c in cols:
        for r in rows:
            seeds = r.seeds.get(c, {})
            paper = r.paper.get(c)
            if versus_paper and comparable(r, c) and seeds:
                se = paper_se.get(r.variant, {}).get(c)
                dec.verdicts[r.variant, c] = stats.agreement(list(seeds.values()), float(paper), how, se)
            if r is base:
                continue
            mine, theirs = seeds, base.seeds.get(c, {})
            same_start = pretrain_seeds.get(r.variant) == pretrain_seeds.get(base.variant)
            paired = set(mine) == set(theirs) and same_start
            dec.paired &= paired
            order = sorted(mine) if paired else []
            a = [mine[s] for s in order] if paired else list(mine.values())
            b = [theirs[s] for s in order] if paired else list(theirs.values())
            dec.differences[r.variant, c] = stats.difference(a, b, paired) if a and b else None
            if paired and len(a) > 1:
                spreads.setdefault(c, []).append([x - y for x, y in zip(a, b)])
    if len(rows) == 1:
        dec.paired = False
    for c in cols:
        groups = spreads.get(c) if dec.paired else [list(r.seeds.get(c, {}).values()) for r in rows]
        sd = stats.pooled_sd(groups or [])
        dec.spread[c] = sd
        dec.needed[c] = stats.seeds_needed(detect, sd, dec.paired) if sd else None
    family = [k for k, d in dec.differences.items() if d is not None and k[1] != "glue"]
    dec.holm = dict(zip(family, stats.holm([dec.differences[k].p for k in family])))
    return dec


def comparable(r: Row, column: str) -> bool:
    """Whether our cell can stand beside the paper's number: the paper prints a number and ours is
    not an average over fewer tasks (a GLUE average marked *)."""
    paper = r.paper.get(column)
    return isinstance(paper, (int, float)) and not isinstance(paper, bool) and not r.ours[column].note


# ----------------------------------------------------------------------------- text


def diff_text(d: stats.Difference | None) -> str:
    if d is None:
        return "?"
    return f"{d.diff:+.1f} [{d.low:+.1f}, {d.high:+.1f}]"


def verdict_lines(dec: Decisions, rows: list[Row], paper_se: dict) -> list[str]:
    """The legend and one-line summary of the verdicts row."""
    if not dec.verdicts:
        return []
    counts = {k: sum(a.verdict == k for a in dec.verdicts.values()) for k in ("within", "below", "above")}
    decided = sum(counts.values())
    few = len(dec.verdicts) - decided
    with_se = [r.label for r in rows if paper_se.get(r.variant)]
    if with_se and len(with_se) == sum(bool(r.paper) for r in rows):
        noise = "our standard error and the paper's printed ±"
    elif with_se:
        rows_se = ", ".join(with_se)
        noise = f"our standard error and the paper's printed ± (rows: {rows_se}); ours alone elsewhere"
    else:
        noise = "our standard error alone (the paper prints no ± for these numbers)"
    summary = (
        f"Reproduced {counts['within']} of {decided} cells within noise"
        + (f" ({counts['below']} below, {counts['above']} above it)" if decided > counts["within"] else "")
        if decided
        else "No verdicts"
    )
    if few:
        summary += f"; {few} cell(s) without a verdict (fewer than {stats.MIN_SEEDS} seeds)"
    return [
        f"vs paper: ✓ within noise; ↓ x / ↑ x: ours x points below / above the paper's number, beyond "
        f"noise; ? too few seeds (< {stats.MIN_SEEDS}). Noise: t(95%, n−1) × √(se_ours² + se_paper²), "
        f"with {noise}.",
        summary + ".",
    ]


@dataclass
class Section:
    """One table under the main one: its title, the lines stating its method, its rows."""

    title: str
    text: list[str]
    head: list[str]
    rows: list[list[str]]
    after: list[str] = field(default_factory=list)


def sections(dec: Decisions, rows: list[Row]) -> list[Section]:
    """The differences table and the seeds-needed table, with the lines stating their method."""
    out: list[Section] = []
    labels = {r.variant: r.label for r in rows}
    others = [r for r in rows if r.variant != dec.baseline]
    heads = [header(c) for c in dec.columns]
    if others and any(d is not None for d in dec.differences.values()):
        design = "paired by seed" if dec.paired else "unpaired where seeds or pre-training differ"
        table = []
        for r in others:
            ds = [dec.differences.get((r.variant, c)) for c in dec.columns]
            marks = [dec.mark((r.variant, c)) for c in dec.columns]
            table.append([r.label, "Δ", *(diff_text(d) + m for d, m in zip(ds, marks))])
            pairing = ["" if d is None else "paired" if d.paired else "unpaired" for d in ds]
            table.append(["", "seeds", *pairing])
        text = (
            f"Mean over seeds of the variant minus the baseline's, in points, with a 95% interval from "
            f"a bootstrap over seeds ({design}; {stats.REPS:,} resamples; ± t × bootstrap standard "
            f"error). * the interval excludes 0; ? fewer than {stats.MIN_SEEDS} seeds."
            + (f" Baseline: the first variant ({dec.baseline_note})." if dec.baseline_note else "")
        )
        title = f"Differences against the baseline {labels[dec.baseline]}"
        out.append(Section(title, [text], ["Model", "", *heads], table, [holm_line(dec, labels)]))
    if any(v is not None for v in dec.spread.values()):
        design = "paired differences" if dec.paired else "one variant's seeds, pooled over variants"
        text = (
            f"Seeds per variant for 80% power to detect a true difference of {dec.detect:g} points "
            f"at 95% (two-sided t, n−1 / 2n−2 degrees of freedom), from the observed spread "
            f"(standard deviation of {design}; `report.detect=` changes the difference)."
        )
        table = [
            ["spread (s.d., points)", *(_sd(dec.spread.get(c)) for c in dec.columns)],
            ["seeds needed", *(_needed(dec.needed.get(c), dec.spread.get(c)) for c in dec.columns)],
        ]
        out.append(Section(f"Seeds needed to detect {dec.detect:g} points", [text], ["", *heads], table))
    return out


def below_table(dec: Decisions, rows: list[Row], paper_se: dict) -> list[str]:
    """The markdown under the report's table: the verdicts' legend and summary, then the sections."""
    return [*verdict_lines(dec, rows, paper_se), *markdown(dec, rows)]


def markdown(dec: Decisions, rows: list[Row]) -> list[str]:
    out: list[str] = []
    for s in sections(dec, rows):
        out += ["", f"### {s.title}", "", *s.text, ""]
        out += ["| " + " | ".join(s.head) + " |", "|" + "---|" * len(s.head)]
        out += ["| " + " | ".join(row) + " |" for row in s.rows]
        out += [line for a in s.after for line in ("", a)]
    return out


def holm_line(dec: Decisions, labels: dict[str, str]) -> str:
    m = len(dec.holm)
    if not m:
        return f"Holm–Bonferroni: no task cell has {stats.MIN_SEEDS} seeds on both sides."
    kept = [f"{header(c)} ({labels[v]})" for (v, c) in dec.holm if dec.significant((v, c))]
    return (
        f"Holm–Bonferroni over the {m} task cell(s) of this table (GLUE average not included), "
        f"α = {ALPHA:.2f}: {len(kept)} remain{'s' if len(kept) == 1 else ''} significant"
        + (f" (marked †): {', '.join(kept)}." if kept else ".")
    )


def _sd(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _needed(n: int | None, sd: float | None) -> str:
    """The seeds-needed cell: – without a spread (one seed, or every seed the same score)."""
    if not sd:
        return "–"
    return "> 10,000" if n is None else str(n)


# ----------------------------------------------------------------------------- LaTeX

_SYMBOLS = {
    "✓": r"\checkmark{}",
    "↓": r"$\downarrow$",
    "↑": r"$\uparrow$",
    "†": r"\dag{}",
    "Δ": r"$\Delta$",
}


def tex(s: str) -> str:
    """Table text as LaTeX (the table's escapes, then the symbols of these tables; ✓ needs amssymb)."""
    s = latex_escape(s)
    for k, v in _SYMBOLS.items():
        s = s.replace(k, v)
    return s


def latex(dec: Decisions, rows: list[Row]) -> str:
    """The differences and seeds-needed tables as LaTeX tables, their lines in the captions."""
    out: list[str] = []
    for s in sections(dec, rows):
        out += [
            r"\begin{table}[t]",
            r"\centering",
            r"\begin{tabular}{" + "l" * (len(s.head) - len(dec.columns)) + "r" * len(dec.columns) + "}",
            r"\hline",
            " & ".join(tex(h) for h in s.head) + r" \\",
            r"\hline",
            *(" & ".join(tex(c) for c in row) + r" \\" for row in s.rows),
            r"\hline",
            r"\end{tabular}",
            r"\caption{" + tex(" ".join([s.title + ".", *s.text, *s.after])) + "}",
            r"\end{table}",
        ]
    return "\n".join(out) + ("\n" if out else "")


# ----------------------------------------------------------------------------- machine-readable


def to_json(dec: Decisions, labels: dict[str, str]) -> dict:
    def diff(key):
        d = dec.differences[key]
        if d is None:
            return None
        return {
            "diff": d.diff, "low": d.low, "high": d.high, "se": d.se, "p": d.p, "p_holm": dec.holm.get(key),
            "excludes_zero": d.excludes_zero, "significant_holm": dec.significant(key),
            "paired": d.paired, "n": d.n, "n_baseline": d.n_baseline,
        }  # fmt: skip

    def verdict(a: stats.Agreement):
        return {"verdict": a.verdict, "text": a.phrase(), "gap": a.gap, "margin": a.margin,
                "paper_se": a.paper_se}  # fmt: skip

    return {
        "baseline": dec.baseline,
        "baseline_label": labels[dec.baseline],
        "level": stats.LEVEL,
        "bootstrap_resamples": stats.REPS,
        "min_seeds": stats.MIN_SEEDS,
        "differences": _by_variant({k: diff(k) for k in dec.differences}),
        "verdicts": _by_variant({k: verdict(a) for k, a in dec.verdicts.items()}),
        "seeds_needed": {
            "detect": dec.detect,
            "power": stats.POWER,
            "design": "paired" if dec.paired else "unpaired",
            "spread": dec.spread,
            "seeds": dec.needed,
        },
    }


def _by_variant(cells: dict[tuple[str, str], object]) -> dict[str, dict[str, object]]:
    """{(variant, column): x} -> {variant: {column: x}}."""
    out: dict[str, dict[str, object]] = {}
    for (v, c), x in cells.items():
        out.setdefault(v, {})[c] = x
    return out


def verdict_cells(dec: Decisions, fmt=lambda s: s) -> dict[str, dict[str, str]]:
    """{variant: {column: the verdict's cell}} for the table's "vs paper" rows (``fmt``: e.g. tex)."""
    return _by_variant({k: fmt(a.text()) for k, a in dec.verdicts.items()})


def to_csv(dec: Decisions) -> str:
    """Long format: one line per statistic (difference, verdict, seeds_needed) and cell."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        ["kind", "variant", "baseline", "column", "estimate", "low", "high", "p", "p_holm", "mark", "paired",
         "n", "verdict", "spread"]
    )  # fmt: skip
    for (v, c), d in dec.differences.items():
        if d is None:
            w.writerow(["difference", v, dec.baseline, c, *[None] * 9, "too few seeds", None])
            continue
        w.writerow(
            ["difference", v, dec.baseline, c, d.diff, d.low, d.high, d.p, dec.holm.get((v, c)),
             dec.mark((v, c)), d.paired, d.n, None, None]
        )  # fmt: skip
    for (v, c), a in dec.verdicts.items():
        low, high = (a.gap - a.margin, a.gap + a.margin) if a.gap is not None else (None, None)
        w.writerow(
            ["vs_paper", v, None, c, a.gap, low, high, None, None, a.text(), None, None, a.phrase(), None]
        )
    for c in dec.columns:
        w.writerow(
            ["seeds_needed", None, None, c, dec.needed.get(c), None, None, None, None, None, dec.paired, None,
             None, dec.spread.get(c)]
        )  # fmt: skip
    return buf.getvalue()
