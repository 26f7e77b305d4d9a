"""Figures as the papers draw them (matplotlib, PNG)."""

from __future__ import annotations

from pathlib import Path

from .decide import comparable
from .tables import header
from .varied import keys, settings

DPI = 110  # small PNGs (README figures stay under 200 KB)


def curve(sweep, rows, varies: dict, title: str, path: Path) -> Path:
    """Scores against a variant parameter: ConvBERT Fig. 5 (GLUE dev vs kernel size), BERMO Fig. 5
    (accuracy vs epochs, one line per model). One panel per ``y`` column; one line per variant
    ``series`` (ours with standard errors when the sweep aggregates by mean, and the paper's points
    where printed, beside ours); a variant without ``x`` is a horizontal reference line (BERMO's
    unpruned baseline). The x axis names the swept key(s) whose values are the variants' ``x``.
    Columns with no number (their tasks not run, no paper point) get no panel."""
    from matplotlib.figure import Figure

    spec = sweep.report.figure
    ys = spec["y"] if isinstance(spec["y"], list) else [spec["y"]]
    drawn = [y for y in ys if any(r.ours[y].value is not None or _number(r.paper.get(y)) for r in rows)]
    ys = drawn or ys[:1]  # a panel per column with a number to draw (tasks not run: none)
    fig = Figure(figsize=(5 * len(ys), 3.9), layout="constrained")
    axes = fig.subplots(1, len(ys), squeeze=False)
    series: dict[str, list] = {}
    for r in rows:
        series.setdefault(sweep.variants[r.variant].series or "convexp", []).append(r)
    xs = [sweep.variants[r.variant].x for r in rows if sweep.variants[r.variant].x is not None]
    for ax, y in zip(axes[0], ys):
        for name, members in series.items():
            points = [
                (sweep.variants[r.variant].x, r) for r in members if sweep.variants[r.variant].x is not None
            ]
            ours = [(x, r.ours[y]) for x, r in points if r.ours[y].value is not None]
            if ours:
                ax.errorbar(
                    [x for x, _ in ours],
                    [c.value for _, c in ours],
                    yerr=[c.stderr or 0 for _, c in ours],
                    marker="o",
                    capsize=3,
                    label=f"{name}, ours",
                )
            paper = [(x, r.paper[y]) for x, r in points if _number(r.paper.get(y))]
            if paper:
                ax.plot([x for x, _ in paper], [v for _, v in paper], "s--", label=f"{name}, paper")
            for r in members:
                if sweep.variants[r.variant].x is None and r.ours[y].value is not None:
                    ax.axhline(r.ours[y].value, linestyle=":", color="gray", label=r.label)
        ax.set_xlabel(_x_label(spec.get("x", "x"), sweep, rows, varies))
        ax.set_ylabel(f"{header(y)}, {sweep.report.aggregate} over seeds (points)")
        ax.set_title(header(y), fontsize=10)
        if xs and all(isinstance(x, (int, float)) and x > 0 for x in xs) and max(xs) / min(xs) > 8:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        if xs:
            ax.set_xticks(sorted(set(xs)), [f"{x:g}" for x in sorted(set(xs))])
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(fit_title(title, fig, 10), fontsize=10)
    fig.savefig(path, dpi=DPI)
    return path


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _x_label(name: str, sweep, rows, varies: dict) -> str:
    """The x axis: the sweep's name for it and the varied keys whose values are the variants' x."""
    with_x = [r.variant for r in rows if sweep.variants[r.variant].x is not None]
    swept = [
        k
        for k in keys(varies)
        if with_x and all(_same(varies[v].get(k), sweep.variants[v].x) for v in with_x) and k != name
    ]
    return f"{name} ({', '.join(swept)})" if swept else name


def _same(value: str | None, x) -> bool:
    try:
        return value is not None and float(value) == float(x)
    except ValueError:
        return False


# ----------------------------------------------------------------------------- the decision figures

def units(style: str) -> str:
    """What a figure's score is: the report style's per-task score (tasks/scores.py), × 100."""
    how = {
        "convbert": "ConvBERT's style: MCC for CoLA, Spearman for STS-B, accuracy otherwise",
        "probing": "the probing task's accuracy",
    }.get(style, "Chang et al.'s style: the mean of the task's metrics")
    return f"points: the task's metric × 100 ({how})"


def fit_title(text: str, fig, fontsize: float) -> str:
    """``text`` with each line wrapped to the figure's width (about 0.55 em per character)."""
    import textwrap

    width = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))
    return "\n".join(part for line in text.splitlines() for part in textwrap.wrap(line, width) or [""])


def _wrap(label: str, width: int = 20) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, width)) or label


def variant_labels(rows, varies: dict) -> list[str]:
    """Each row's label over its values of the swept keys ("9" / "model.kernel_size=9"), so the
    variants' axis names the ablated component and its values."""
    out = []
    for r in rows:
        own = "\n".join(f"{k}={v}" for k, v in varies.get(r.variant, {}).items())  # a line per swept key
        out.append(_wrap(r.label) + (f"\n{own}" if own and own != r.label else ""))
    return out


def _panels(columns: list[str], labels: list[str], title: str, note: str):
    """A page of small multiples: one panel per column (4 to a row), the variants ``labels`` down the
    side of each row, top to bottom in the table's order. Returns (figure, {column: axes})."""
    from matplotlib.figure import Figure

    ncols = min(len(columns), 4)
    nrows = -(-len(columns) // ncols)
    height = max(1.6, 0.3 * sum(label.count("\n") + 1 for label in labels) + 1.0)
    fig = Figure(figsize=(2.4 * ncols + 1.7, height * nrows + 1.0), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    for ax in axes.flat[len(columns):]:
        ax.set_visible(False)
    for ax, c in zip(axes.flat, columns):
        ax.set_title(header(c), fontsize=11)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=9)
    axes[0, 0].set_yticks(range(len(labels)), labels)
    axes[0, 0].set_ylim(len(labels) - 0.5, -0.5)
    for ax in axes[:, 0]:
        ax.set_ylabel("variant", fontsize=9)
    fig.suptitle(fit_title(f"{title}\n{note}", fig, 11), fontsize=11)
    return fig, dict(zip(columns, axes.flat))


def _mark_partial(axes: dict, rows) -> None:
    """A GLUE panel over fewer tasks than the paper's average says so (as the table's GLUE*)."""
    partial = [r.glue_over for r in rows if "glue" in axes and r.ours["glue"].note]
    if partial:
        ax = axes["glue"]
        ax.set_title(f"GLUE* ({len(partial[0])} columns run)", fontsize=ax.title.get_fontsize())


def _legend_and_save(fig, axes, path: Path, xlabel: str) -> Path:
    for ax in axes.values():
        ax.set_xlabel(xlabel, fontsize=9)
    handles = {}
    for ax in axes.values():
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=len(handles), fontsize=9)
    fig.savefig(path, dpi=DPI)
    return path


def seed_scores(dec, rows, varies: dict, split: str, style: str, title: str, path: Path) -> Path:
    """Every seed's score per variant, one panel per task (and the GLUE average): variants down the
    side (with their values of the swept keys), the seeds as dots, our aggregate as a bar, the
    paper's number as a red diamond beside them."""
    labels = variant_labels(rows, varies)
    fig, axes = _panels(dec.columns, labels, title, f"every fine-tuning seed's {split} score, in {units(style)}")
    for c, ax in axes.items():
        for y, r in enumerate(rows):
            scores = list(r.seeds.get(c, {}).values())
            if scores:
                jitter = [(-0.2 + 0.4 * k / max(len(scores) - 1, 1)) for k in range(len(scores))]
                ax.scatter(scores, [y + j for j in jitter], s=14, color="C0", alpha=0.75, zorder=3,
                           label="one seed")  # fmt: skip
                if r.ours[c].value is not None:
                    ax.plot([r.ours[c].value] * 2, [y - 0.32, y + 0.32], color="black", lw=2, zorder=4,
                            label=f"ours ({dec.how} over seeds)")  # fmt: skip
            if comparable(r, c):
                ax.scatter([r.paper[c]], [y], marker="D", s=30, color="C3", zorder=5, label="paper")
    _mark_partial(axes, rows)
    return _legend_and_save(fig, axes, path, f"{split} score (points)")


def differences(dec, rows, varies: dict, style: str, title: str, path: Path) -> Path:
    """A forest plot per task (and GLUE): each variant's difference from the baseline with its 95%
    interval, filled where the interval excludes 0; the paper's difference as a red cross."""
    base = next(r for r in rows if r.variant == dec.baseline)
    others = [r for r in rows if r is not base]
    own = settings(varies, base.variant)
    note = (
        f"difference from the baseline “{base.label}”{f' with {own}' if own else ''} (variant − baseline, mean over seeds) with its 95% "
        f"interval, filled where it excludes 0;\nin {units(style)}"
    )
    fig, axes = _panels(dec.columns, variant_labels(others, varies), title, note)
    for c, ax in axes.items():
        ax.axvline(0, color="gray", lw=1)
        for y, r in enumerate(others):
            d = dec.differences.get((r.variant, c))
            if d is not None:
                ax.errorbar([d.diff], [y], xerr=[[d.diff - d.low], [d.high - d.diff]], fmt="o", color="C0",
                            mfc="C0" if d.excludes_zero else "white", capsize=3, ms=6,
                            label="ours: difference, 95% interval")  # fmt: skip
            if comparable(r, c) and comparable(base, c):
                ax.scatter([r.paper[c] - base.paper[c]], [y], marker="x", s=36, color="C3", zorder=5,
                           label="paper's difference")  # fmt: skip
    _mark_partial(axes, rows)
    return _legend_and_save(fig, axes, path, "Δ vs baseline (points)")
