"""Figures as the papers draw them (matplotlib, PNG)."""

from __future__ import annotations

from pathlib import Path


def curve(sweep, rows, path: Path) -> Path:
    """A score against a variant parameter (ConvBERT Fig. 5: GLUE dev vs kernel size): ours, with
    standard errors when the sweep aggregates by mean, and the paper's points where printed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = sweep.report.figure
    y = spec["y"]
    xs = [sweep.variants[r.variant].x for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ours = [(x, r.ours[y]) for x, r in zip(xs, rows) if r.ours[y].value is not None]
    if ours:
        ax.errorbar(
            [x for x, _ in ours],
            [c.value for _, c in ours],
            yerr=[c.stderr or 0 for _, c in ours],
            marker="o",
            capsize=3,
            label="convexp",
        )
    paper = [(x, r.paper[y]) for x, r in zip(xs, rows) if isinstance(r.paper.get(y), (int, float))]
    if paper:
        ax.plot(
            [x for x, _ in paper],
            [v for _, v in paper],
            "s--",
            label=f"paper ({sweep.source.get('ref', '')})",
        )
    ax.set_xlabel(spec.get("x", "x"))
    ax.set_ylabel(f"{y} ({sweep.report.aggregate})")
    ax.set_title(f"{sweep.name}")
    if all(isinstance(x, (int, float)) and x > 0 for x in xs) and max(xs) / min(xs) > 8:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
