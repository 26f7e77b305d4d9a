"""Adaptive seeds: each cell of a sweep's table decided with as few fine-tuning seeds as it takes.

A *cell* is one variant against the baseline on one task column (the report's Holm family: its
task cells), or one variant's column against the paper's number. A study runs in *looks*: every
cell gets ``looks[0]`` seeds, then only the cells still open get more, up to ``looks[1]``, ... and
``looks[-1]``, the cap. After each look a cell is

  better / worse   the difference from the baseline is not 0 (two-sided test);
  equivalent       the difference lies within ±``margin`` points (two one-sided tests, TOST);
  reproduced / not reproduced   the same two tests against the paper's number (± its printed s.e.);
  open             none of these yet: more seeds;
  undecided        none of these at the cap.

**Valid while looking.** Testing after every look and stopping at the first decision inflates
false claims unless the error is spent over the looks. Here the error a look may spend is the
increment of a Pocock-type spending function (Lan & DeMets 1983, "Discrete sequential boundaries
for clinical trials", Biometrika 70:659; Jennison & Turnbull 2000, *Group Sequential Methods*,
ch. 7): α(t) = α·ln(1 + (e − 1)·t) at information fraction t = n / cap, so look k tests at
α_k = α(t_k) − α(t_(k−1)) and Σ α_k = α. By the union bound over looks, the chance that a cell ever
makes a false claim is at most Σ α_k = α, whenever the study stops and however the looks are
correlated — this needs no joint distribution of the looks (exact group-sequential boundaries
would be a little less conservative, and need the scores normal at every look). Across the m cells
of a table each test runs at α_k / m (Bonferroni): the chance of any false claim in the whole
table is at most α. Two kinds of claim are controlled, each at α: a difference claimed where the
variants are equal, and an equivalence claimed where they differ by ``margin`` or more. Each test
is Welch's t (or the paired t, where the seeds pair) on the seed scores at that look, exact for
normal seed scores.

The report replays a cell's looks on its seeds in seed order (:func:`decide`), so the decision it
prints is the one the sweep stopped on; the sweep asks :func:`cell_seeds` how many seeds each
cell needs next (:func:`next_seeds`: the same per side of a table, where no seed is left out). numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .seed_stats import t_quantile

CLAIMS = ("better", "worse", "equivalent", "reproduced", "not reproduced")
OPEN, UNDECIDED = "open", "undecided"


@dataclass(frozen=True)
class Design:
    """How an adaptive study looks: seeds per cell at each look (the last is the cap), the error
    rate of each kind of claim over the whole table (``alpha``), and the equivalence margin."""

    looks: tuple[int, ...] = (3, 6, 10)
    alpha: float = 0.05
    margin: float = 0.5  # points: |difference| below this is "equivalent"

    def __post_init__(self) -> None:
        looks = tuple(self.looks)
        if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
            raise ValueError(f"looks must rise from at least 2 seeds, e.g. [3, 6, 10]; got {list(looks)}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), e.g. 0.05; got {self.alpha}")
        if not self.margin > 0:
            raise ValueError(f"margin must be a positive number of points, e.g. 0.5; got {self.margin}")

    @property
    def cap(self) -> int:
        return self.looks[-1]

    def spent(self, n: int) -> float:
        """α(t) at n seeds: the error spent by the look at n (Pocock-type spending)."""
        t = min(1.0, n / self.cap)
        return self.alpha * math.log(1 + (math.e - 1) * t)

    def level(self, k: int, cells: int) -> float:
        """The level one cell's tests run at in look ``k`` (0-based) of a table of ``cells`` cells."""
        before = self.spent(self.looks[k - 1]) if k else 0.0
        return (self.spent(self.looks[k]) - before) / max(1, cells)


@dataclass
class Cell:
    """One cell's decision and how it was reached."""

    decision: str  # one of CLAIMS, OPEN or UNDECIDED
    look: int | None  # the look (1-based) that decided it; None while open or undecided
    n: int  # seeds a side at that look (or the last one)
    diff: float | None = None  # the difference at that look (variant − baseline, or − the paper)
    low: float | None = None  # the interval the decision read (level 1 − 2·a for TOST)
    high: float | None = None
    history: list[str] = field(default_factory=list)  # the decision after each look

    @property
    def settled(self) -> bool:
        return self.decision != OPEN


def _t_stats(a: np.ndarray, b: np.ndarray | None, paired: bool, se_ref: float) -> tuple[float, float, float]:
    """(difference, its standard error, degrees of freedom): variant ``a`` against baseline ``b``
    (Welch's, or paired), or against a constant of standard error ``se_ref`` (``b`` None)."""
    if b is None:
        n = len(a)
        se2 = a.var(ddof=1) / n
        se = math.sqrt(se2 + se_ref**2)
        return float(a.mean()), se, n - 1.0
    if paired:
        d = a - b
        return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))), len(d) - 1.0
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else len(a) + len(b) - 2.0
    return float(a.mean() - b.mean()), math.sqrt(va + vb), df


def look_decision(diff: float, se: float, df: float, level: float, margin: float, versus_paper: bool) -> tuple[str, float, float]:
    """(decision, low, high) of one look at ``level``: a two-sided test of 0, then TOST of ±margin."""
    df = max(1.0, math.floor(df))  # Welch's df rounded down: a little wider, and the quantiles cached
    if se == 0:  # every seed the same: the difference is known
        if abs(diff) < margin:
            return ("reproduced" if versus_paper else "equivalent"), diff, diff
        return ("not reproduced" if versus_paper else ("better" if diff > 0 else "worse")), diff, diff
    two = t_quantile(1 - level / 2, df) * se
    if abs(diff) > two:
        claim = "not reproduced" if versus_paper else ("better" if diff > 0 else "worse")
        return claim, diff - two, diff + two
    one = t_quantile(1 - level, df) * se
    if diff - one > -margin and diff + one < margin:
        return ("reproduced" if versus_paper else "equivalent"), diff - one, diff + one
    return OPEN, diff - two, diff + two


def decide(
    variant: list[float],
    baseline: list[float] | None,
    design: Design,
    cells: int,
    paired: bool = False,
    paper_se: float = 0.0,
) -> Cell:
    """Replay a cell's looks on its seed scores (in seed order): the first look that decides it, or
    open (fewer seeds than the next look needs) or undecided (the cap reached). ``baseline`` None:
    ``variant`` is the difference from the paper's number already (scores − paper), whose printed
    standard error is ``paper_se``."""
    a = np.asarray(variant, float)
    b = None if baseline is None else np.asarray(baseline, float)
    history: list[str] = []
    last: Cell | None = None
    for k, n in enumerate(design.looks):
        if len(a) < n or (b is not None and len(b) < n):
            return Cell(OPEN, None, last.n if last else min(len(a), len(b) if b is not None else len(a)),
                        last.diff if last else None, last.low if last else None,
                        last.high if last else None, history)  # fmt: skip
        diff, se, df = _t_stats(a[:n], None if b is None else b[:n], paired, paper_se)
        decision, low, high = look_decision(diff, se, df, design.level(k, cells), design.margin, b is None)
        history.append(decision)
        last = Cell(decision, k + 1 if decision != OPEN else None, n, diff, low, high, history)
        if decision != OPEN:
            return last
    last.decision = UNDECIDED
    return last


def cell_seeds(cell: Cell, design: Design) -> int:
    """The seeds a side of ``cell`` needs now: an open cell its next look's, a settled one the
    look's that settled it."""
    if cell.decision == OPEN:
        return design.looks[min(len(cell.history), len(design.looks) - 1)]
    return max(cell.n, design.looks[0])


def next_seeds(cells: dict[tuple, Cell], baseline: str, design: Design) -> dict[tuple[str, str], int]:
    """{(variant, column): the seeds it needs now}, from cells keyed (variant, column) — against the
    baseline — or (variant, column, "paper") — against the paper's number: an open cell's variant
    (and the baseline of its column, for a comparison) go to the cell's next look; a settled cell
    keeps the seeds of the look that settled it. A side runs as many seeds as its most open cell
    needs."""
    want: dict[tuple[str, str], int] = {}
    for key, cell in cells.items():
        variant, column = key[0], key[1]
        n = cell_seeds(cell, design)
        sides = [(variant, column)] + ([(baseline, column)] if len(key) == 2 else [])
        for side in sides:
            want[side] = max(want.get(side, 0), n)
    return want
