"""Seed statistics that decide: differences between variants, agreement with a paper, seeds needed.

Every number here is a statistic over fine-tuning seeds (one score per seed and column).

* **Differences** (:func:`difference`): variant − baseline of the seed means, with a 95% interval
  from a bootstrap over seeds. Paired (both ran the same seeds from the same pre-training seed) the
  per-seed differences are resampled together; unpaired each variant's seeds are resampled on their
  own. The bootstrap gives the standard error of the difference (rescaled by √(n/(n−1)), its
  plug-in bias); the interval is difference ± t·se with Student's t at n − 1 degrees of freedom
  (paired) or Welch–Satterthwaite's (unpaired). A percentile interval of 3–10 seeds cannot reach
  its level (it never leaves the range of the data: 75% coverage for three paired seeds), the
  studentised one is exact for normal scores and keeps the bootstrap's pairing.
* **Holm–Bonferroni** (:func:`holm`) over the tasks of one table: adjusted p-values.
* **Agreement with a paper** (:func:`agreement`): our aggregate ± its bootstrap standard error
  against the paper's number ± its printed standard error (0 where it prints none), within
  t·√(se_ours² + se_paper²).
* **Seeds needed** (:func:`seeds_needed`): the smallest number of seeds per variant at which the
  same comparison detects a difference δ with the given power, from the observed spread.

numpy only (Student's t is integrated here; scipy is not a runtime dependency).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95  # confidence level of every interval
REPS = 10_000  # bootstrap resamples
MIN_SEEDS = 3  # fewer seeds per variant: no interval, no verdict ("? too few seeds")
POWER = 0.8  # seeds_needed's default power


# ----------------------------------------------------------------------------- Student's t


def t_cdf(x: float, df: float) -> float:
    """P(T ≤ x) for Student's t with ``df`` > 0 degrees of freedom. With t = √df·tan θ the density
    becomes c·cos^(df−1) θ on [0, π/2), integrated by Simpson's rule (error < 1e-9 for df ≥ 2,
    1e-6 below)."""
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    theta = math.atan(abs(x) / math.sqrt(df))
    grid = np.linspace(0.0, theta, 801)
    f = np.cos(grid) ** (df - 1)
    h = theta / 800
    area = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    half = min(float(c * area), 0.5)
    return 0.5 + half if x >= 0 else 0.5 - half


def t_density(x: float, df: float) -> float:
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    return c * (1 + x * x / df) ** (-(df + 1) / 2)


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t: Newton's method from the normal quantile, which lies
    below it; the CDF is concave above 0, so the steps rise monotonically to the root."""
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_quantile(1 - q, df)
    x = statistics.NormalDist().inv_cdf(q)
    for _ in range(100):
        step = (q - t_cdf(x, df)) / t_density(x, df)
        x += step
        if step < 1e-12 * max(1.0, x):
            break
    return x


# ----------------------------------------------------------------------------- differences


@dataclass(frozen=True)
class Difference:
    """mean(variant) − mean(baseline) over seeds, its 95% interval and two-sided p-value."""

    diff: float
    low: float
    high: float
    se: float
    p: float
    paired: bool
    n: int  # seeds of the variant (paired: common seeds)
    n_baseline: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def difference(
    variant: list[float],
    baseline: list[float],
    paired: bool,
    level: float = LEVEL,
    reps: int = REPS,
    seed: int = 0,
) -> Difference | None:
    """The difference of seed means with a bootstrap-t interval (module docstring); None with
    fewer than MIN_SEEDS seeds on either side. ``paired``: ``variant[i]`` and ``baseline[i]``
    are the same seed's scores."""
    a, b = np.asarray(variant, float), np.asarray(baseline, float)
    if min(len(a), len(b)) < MIN_SEEDS:
        return None
    rng = np.random.default_rng(seed)
    if paired:
        if len(a) != len(b):
            raise ValueError("paired scores need one per seed on both sides")
        d = a - b
        n = len(d)
        boot = d[rng.integers(0, n, (reps, n))].mean(axis=1)
        se = float(boot.std(ddof=1)) * math.sqrt(n / (n - 1))
        df = n - 1.0
    else:
        na, nb = len(a), len(b)
        boot = a[rng.integers(0, na, (reps, na))].mean(axis=1)
        boot -= b[rng.integers(0, nb, (reps, nb))].mean(axis=1)
        va, vb = a.var(ddof=1) / na, b.var(ddof=1) / nb  # each side's squared standard error
        plug_in = a.var(ddof=0) / na + b.var(ddof=0) / nb  # what the bootstrap estimates
        se = float(boot.std(ddof=1)) * (math.sqrt((va + vb) / plug_in) if plug_in > 0 else 1.0)
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)) if va + vb > 0 else na + nb - 2.0
    diff = float(a.mean() - b.mean())
    if se == 0:  # every seed the same difference
        return Difference(diff, diff, diff, 0.0, 0.0 if diff else 1.0, paired, len(a), len(b))
    half = t_quantile((1 + level) / 2, df) * se
    p = 2 * (1 - t_cdf(abs(diff) / se, df))
    return Difference(diff, diff - half, diff + half, se, min(p, 1.0), paired, len(a), len(b))


def holm(pvalues: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order: the i-th smallest of m is multiplied
    by m − i + 1, then made non-decreasing and capped at 1. Reject where adjusted < α."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# ----------------------------------------------------------------------------- agreement with a paper


def statistic(values, how: str) -> np.ndarray | float:
    """mean, median or best (max) along the last axis."""
    return {"mean": np.mean, "median": np.median, "best": np.max}[how](values, axis=-1)


def aggregate_se(values: list[float], how: str, reps: int = REPS, seed: int = 0) -> float:
    """The standard error of a seed aggregate: s/√n for the mean, the bootstrap's (rescaled by
    √(n/(n−1))) for the median and best."""
    x = np.asarray(values, float)
    n = len(x)
    if how == "mean":
        return float(x.std(ddof=1) / math.sqrt(n))
    boot = statistic(x[np.random.default_rng(seed).integers(0, n, (reps, n))], how)
    return float(np.std(boot, ddof=1) * math.sqrt(n / (n - 1)))


@dataclass(frozen=True)
class Agreement:
    """Ours against the paper's number: gap = ours − paper, within t·se or beyond it."""

    verdict: str  # within | below | above | too few seeds
    gap: float | None = None
    margin: float | None = None  # the largest gap that is within noise
    paper_se: bool = False  # the paper's ± was used

    def text(self) -> str:
        """The table's cell: ✓, ↓ 1.8, ↑ 0.9 or ?."""
        if self.verdict in ("below", "above"):
            return f"{'↓' if self.gap < 0 else '↑'} {abs(self.gap):.1f}"
        return "✓" if self.verdict == "within" else "?"

    def phrase(self) -> str:
        """In words: ``✓ within noise``, ``↓ 1.8 below (beyond noise)``, ``? too few seeds``."""
        if self.verdict == "within":
            return "✓ within noise"
        if self.verdict == "too few seeds":
            return "? too few seeds"
        return f"{self.text()} {self.verdict} (beyond noise)"


def agreement(
    ours: list[float], paper: float, how: str, paper_se: float | None = None, level: float = LEVEL
) -> Agreement:
    """Whether our aggregate (``how`` over the seeds ``ours``) is consistent with the paper's number.
    The noise is our standard error and the paper's (its printed ±; none: ours alone)."""
    if len(ours) < MIN_SEEDS:
        return Agreement("too few seeds", paper_se=paper_se is not None)
    gap = float(statistic(np.asarray(ours, float), how)) - paper
    se = math.hypot(aggregate_se(ours, how), paper_se or 0.0)
    margin = t_quantile((1 + level) / 2, len(ours) - 1) * se
    verdict = "within" if abs(gap) <= margin else "below" if gap < 0 else "above"
    return Agreement(verdict, gap, margin, paper_se is not None)


# ----------------------------------------------------------------------------- seeds needed


def power(n: int, delta: float, sd: float, paired: bool, level: float = LEVEL) -> float:
    """The approximate power of the comparison with ``n`` seeds per variant to detect a true
    difference ``delta`` when one seed's score (paired: one seed's difference) has spread ``sd``:
    Φ(δ/se − t) + Φ(−δ/se − t), se = sd/√n paired or sd·√(2/n) unpaired, t at n − 1 or 2n − 2
    degrees of freedom."""
    se = sd / math.sqrt(n) if paired else sd * math.sqrt(2 / n)
    if se == 0:
        return 1.0
    t = t_quantile((1 + level) / 2, n - 1 if paired else 2 * n - 2)
    phi = statistics.NormalDist().cdf
    return phi(delta / se - t) + phi(-delta / se - t)


def seeds_needed(
    delta: float, sd: float, paired: bool, target: float = POWER, level: float = LEVEL, most: int = 10_000
) -> int | None:
    """The fewest seeds per variant (≥ 2) whose comparison detects ``delta`` with ``target`` power;
    None beyond ``most``."""
    n = 2
    while power(n, delta, sd, paired, level) < target:
        n *= 2
        if n > 2 * most:
            return None
    lo, hi = n // 2, n  # power(lo) < target ≤ power(hi) (or hi == 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(mid, delta, sd, paired, level) < target else (lo, mid)
    return hi if hi <= most else None


def pooled_sd(groups: list[list[float]]) -> float | None:
    """√(Σ (n_i − 1) s_i² / Σ (n_i − 1)) over the groups with two or more values."""
    groups = [np.asarray(g, float) for g in groups if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return None
    return math.sqrt(sum(g.var(ddof=1) * (len(g) - 1) for g in groups) / dof)
