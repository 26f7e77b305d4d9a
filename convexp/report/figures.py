"""Figures as the papers draw them (matplotlib, PNG)."""

from __future__ import annotations

from pathlib import Path

from .decide import comparable
from .tables import header


def curve(sweep, rows, path: Path) -> Path:
    """Scores against a variant parameter: ConvBERT Fig. 5 (GLUE dev vs kernel size), BERMO Fig. 5
    (accuracy vs epochs, one line per model). One panel per ``y`` column; one line per variant
    ``series`` (ours with standard errors when the sweep aggregates by mean, and the paper's points
    where printed); a variant without ``x`` is a horizontal reference line (BERMO's unpruned baseline)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = sweep.report.figure
    ys = spec["y"] if isinstance(spec["y"], list) else [spec["y"]]
    fig, axes = plt.subplots(1, len(ys), figsize=(5 * len(ys), 3.5), squeeze=False)
    series: dict[str, list] = {}
    for r in rows:
        series.setdefault(sweep.variants[r.variant].series or "convexp", []).append(r)
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
                    label=name,
                )
            paper = [(x, r.paper[y]) for x, r in points if isinstance(r.paper.get(y), (int, float))]
            if paper:
                ax.plot([x for x, _ in paper], [v for _, v in paper], "s--", label=f"{name}, paper")
            for r in members:
                if sweep.variants[r.variant].x is None and r.ours[y].value is not None:
                    ax.axhline(r.ours[y].value, linestyle=":", color="gray", label=r.label)
        xs = [v.x for v in sweep.variants.values() if v.x is not None]
        ax.set_xlabel(spec.get("x", "x"))
        ax.set_ylabel(f"{header(y)} ({sweep.report.aggregate})")
        ax.set_title(f"{sweep.name}: {header(y)}" if len(ys) > 1 else sweep.name)
        if all(isinstance(x, (int, float)) and x > 0 for x in xs) and max(xs) / min(xs) > 8:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- the decision figures

SCORE_UNITS = "points: metric × 100"


def _wrap(label: str, width: int = 18) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, width)) or label


def seed_scores(dec, rows, split: str, title: str, path: Path) -> Path:
    """Every seed's score per variant, one panel per task (and the GLUE average): variants down the
    side, the seeds as dots, our aggregate as a bar, the paper's number as a red diamond."""
    from matplotlib.figure import Figure

    cols = dec.columns
    ncols = min(len(cols), 4)
    nrows = -(-len(cols) // ncols)
    height = max(1.9, 0.42 * len(rows) + 1.1)
    fig = Figure(figsize=(3.1 * ncols + 1.6, height * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    ys = {r.variant: i for i, r in enumerate(rows)}
    for ax, c in zip(axes.flat, cols):
        for r in rows:
            y, scores = ys[r.variant], list(r.seeds.get(c, {}).values())
            if scores:
                jitter = [(-0.18 + 0.36 * k / max(len(scores) - 1, 1)) for k in range(len(scores))]
                ax.scatter(scores, [y + j for j in jitter], s=16, color="C0", alpha=0.8, zorder=3,
                           label="one seed")  # fmt: skip
                agg = r.ours[c].value
                if agg is not None:
                    ax.plot([agg, agg], [y - 0.3, y + 0.3], color="black", lw=2, zorder=4,
                            label=f"ours ({dec.how})")  # fmt: skip
            if comparable(r, c):
                ax.scatter([r.paper[c]], [y], marker="D", s=36, color="C3", zorder=5, label="paper")
        ax.set_title(header(c), fontsize=11)
        ax.set_xlabel(f"{header(c)} {split} score\n({SCORE_UNITS})", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    for ax in axes.flat[len(cols):]:
        ax.set_visible(False)
    axes[0, 0].set_yticks(range(len(rows)), [_wrap(r.label) for r in rows])
    axes[0, 0].set_ylim(len(rows) - 0.5, -0.5)  # the table's order, top to bottom
    handles, labels = axes.flat[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), loc="outside lower center", ncols=len(unique), fontsize=9)
    fig.suptitle(title, fontsize=12)
    fig.savefig(path, dpi=130)
    return path


def differences(dec, rows, title: str, path: Path) -> Path:
    """A forest plot: each variant's difference from the baseline per task (and GLUE) with its 95%
    interval; filled where the interval excludes 0, the paper's difference as a cross."""
    from matplotlib.figure import Figure

    others = [r for r in rows if r.variant != dec.baseline]
    base = next(r for r in rows if r.variant == dec.baseline)
    cols = dec.columns
    step = 0.8 / max(len(others), 1)
    fig = Figure(figsize=(8.5, max(3.0, 0.25 * len(cols) * max(len(others), 2) + 1.8)), layout="constrained")
    ax = fig.subplots()
    for k, r in enumerate(others):
        color = f"C{k % 10}"
        for i, c in enumerate(cols):
            y = i - 0.4 + step * (k + 0.5)
            d = dec.differences.get((r.variant, c))
            if d is not None:
                ax.errorbar([d.diff], [y], xerr=[[d.diff - d.low], [d.high - d.diff]], fmt="o", color=color,
                            mfc=color if d.excludes_zero else "white", capsize=3, ms=6,
                            label=_wrap(r.label, 40))  # fmt: skip
            if comparable(r, c) and comparable(base, c):
                ax.scatter([r.paper[c] - base.paper[c]], [y], marker="x", s=40, color=color, zorder=5,
                           label=f"paper's difference ({_wrap(r.label, 40)})")  # fmt: skip
    ax.axvline(0, color="gray", lw=1)
    ax.set_yticks(range(len(cols)), [header(c) for c in cols])
    ax.set_ylim(len(cols) - 0.5, -0.5)
    ax.set_xlabel(f"difference from the baseline {base.label} ({SCORE_UNITS})", fontsize=10)
    ax.set_title(title + f"\nvariant − baseline ({base.label}), mean over seeds, 95% interval; "
                 "filled: interval excludes 0", fontsize=10)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    fig.savefig(path, dpi=130)
    return path
