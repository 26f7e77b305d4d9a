"""Figures as the papers draw them (matplotlib, PNG)."""

from __future__ import annotations

from pathlib import Path

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
