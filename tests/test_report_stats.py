"""The report's decisions on synthetic seed scores with known answers: bootstrap differences (no
difference found where there is none, a real shift found, pairing by seed), Holm–Bonferroni,
agreement with a paper's number, and the seeds-needed formula against a simulation."""

import numpy as np
import pytest
from scipy import stats as scipy_stats

from convexp import seed_stats as stats
from convexp.report.decide import decide
from convexp.report.tables import Cell, Row


def test_student_t_matches_scipy():
    for df in (2, 2.7, 4, 9, 30, 400):
        for x in (0.05, 1.0, 2.2, 8.0, 300.0):
            assert stats.t_cdf(x, df) == pytest.approx(scipy_stats.t.cdf(x, df), abs=1e-9)
            assert stats.t_cdf(-x, df) == pytest.approx(scipy_stats.t.cdf(-x, df), abs=1e-9)
        for q in (0.6, 0.975, 0.999):
            assert stats.t_quantile(q, df) == pytest.approx(scipy_stats.t.ppf(q, df), rel=1e-8)


@pytest.mark.parametrize("paired", [True, False])
def test_two_variants_from_one_distribution_are_no_difference_95_percent_of_the_time(paired):
    """400 repetitions of 5 seeds per variant, the same distribution (paired: seeds share a large
    seed effect, as fine-tuning seeds do): the 95% interval holds 0 in ≥ 95% of them, up to the
    repetitions' own noise (2 standard errors of a proportion: 0.022)."""
    rng = np.random.default_rng(0)
    n, kept = 5, 0
    for i in range(400):
        seed_effect = rng.normal(0, 3, n) if paired else 0
        a, b = seed_effect + rng.normal(70, 1, n), seed_effect + rng.normal(70, 1, n)
        kept += not stats.difference(a, b, paired, reps=1000, seed=i).excludes_zero
    assert kept / 400 >= 0.95 - 0.022


def test_percentile_intervals_would_miss_the_level_with_three_seeds():
    """Why the interval is studentised: three paired seeds resampled can never leave the range of
    the three differences, which holds 0 only 75% of the time; ours holds it ~95%."""
    rng = np.random.default_rng(1)
    in_range = ours = 0
    for i in range(400):
        d = rng.normal(0, 1, 3)
        in_range += d.min() <= 0 <= d.max()
        ours += not stats.difference(d, np.zeros(3), True, reps=1000, seed=i).excludes_zero
    assert in_range / 400 < 0.8 and ours / 400 >= 0.95 - 0.022


@pytest.mark.parametrize("paired", [True, False])
def test_a_shift_of_three_standard_errors_is_found(paired):
    """Scores whose observed difference is exactly 3 standard errors of the difference: the interval
    excludes 0 and holds the shift; the reported standard error is the analytic one."""
    base = np.array([70.1, 68.4, 71.9, 69.0, 70.6, 69.8, 71.2, 68.9, 70.3, 69.7])
    n, s = len(base), base.std(ddof=1)
    if paired:  # each seed's difference: the shift plus noise of s.d. s
        noise = np.array([0.4, -1.1, 0.9, -0.2, 1.3, -0.8, 0.1, -0.6, 0.7, -0.7])
        se = noise.std(ddof=1) / np.sqrt(n)
        variant = base + 3 * se + noise - noise.mean()
    else:
        se = np.sqrt(2 * s**2 / n)
        variant = base[::-1] + 3 * se
    d = stats.difference(variant, base, paired)
    assert d.diff == pytest.approx(3 * se)
    assert d.se == pytest.approx(se, rel=0.03)  # 10,000 resamples: ~1% Monte-Carlo error
    assert d.excludes_zero and d.low < 3 * se < d.high and d.p < 0.05


def test_pairing_by_seed_narrows_the_interval_when_seeds_share_noise():
    rng = np.random.default_rng(2)
    seed_effect = rng.normal(0, 2.0, 6)  # each seed moves both variants alike
    base = 80 + seed_effect + rng.normal(0, 0.3, 6)
    variant = 80.5 + seed_effect + rng.normal(0, 0.3, 6)
    paired, unpaired = stats.difference(variant, base, True), stats.difference(variant, base, False)
    assert paired.diff == pytest.approx(unpaired.diff)
    assert (paired.high - paired.low) < (unpaired.high - unpaired.low) / 3
    assert paired.excludes_zero and not unpaired.excludes_zero


def test_holm_on_hand_computed_cases():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Holm rejects both where Bonferroni (x2: 0.02, 0.06) rejects one
    assert stats.holm([0.03, 0.01]) == pytest.approx([0.03, 0.02])
    assert stats.holm([0.5, 0.9, 0.02]) == pytest.approx([1.0, 1.0, 0.06])  # capped at 1
    assert stats.holm([0.04]) == [0.04] and stats.holm([]) == []


@pytest.mark.parametrize("paired, delta", [(False, 1.3), (True, 0.9)])
def test_seeds_needed_against_a_simulation(paired, delta):
    """sd = 1: the formula's power at n and n − 1 seeds matches the detection rate of the report's
    own comparison on simulated scores (1,000 sweeps each, ±0.04), and n is the first with ≥ 80%."""
    n = stats.seeds_needed(delta, 1.0, paired)
    assert stats.power(n, delta, 1.0, paired) >= 0.8 > stats.power(n - 1, delta, 1.0, paired)
    rng = np.random.default_rng(3)
    for m in (n - 1, n):
        found = 0
        for i in range(1000):
            # paired: each seed's difference (s.d. 1) against zeros; unpaired: two variants' seeds
            a, b = rng.normal(delta, 1, m), (np.zeros(m) if paired else rng.normal(0, 1, m))
            found += stats.difference(a, b, paired, reps=1000, seed=i).excludes_zero
        assert found / 1000 == pytest.approx(stats.power(m, delta, 1.0, paired), abs=0.04)


def test_seeds_needed_scales_with_the_spread():
    # the normal approximation n = 2 (z₀.₉₇₅ + z₀.₈)² σ² / δ² = 62.8 for σ/δ = 2, plus the t correction
    assert stats.seeds_needed(0.5, 1.0, False) in (63, 64)
    assert stats.seeds_needed(0.5, 1.0, True) == pytest.approx(stats.seeds_needed(0.5, 1.0, False) / 2, abs=2)
    assert stats.seeds_needed(0.5, 0.0, True) == 2
    assert stats.seeds_needed(0.001, 50.0, False) is None  # beyond 10,000


def test_agreement_with_the_paper():
    ours = [66.0, 67.0, 65.0, 66.5, 65.5]  # mean 66, s.e. 0.35; t(0.975, 4) = 2.78: margin 0.98
    assert stats.agreement(ours, 66.5, "mean").verdict == "within"
    low = stats.agreement(ours, 67.8, "mean")
    assert low.verdict == "below" and low.gap == pytest.approx(-1.8) and low.phrase() == "↓ 1.8 below (beyond noise)"
    assert stats.agreement(ours, 64.0, "mean").text() == "↑ 2.0"
    # the paper's printed ± widens the noise: 1.8 is within t·√(0.35² + 0.7²)
    assert stats.agreement(ours, 67.8, "mean", paper_se=0.7).phrase() == "✓ within noise"
    assert stats.agreement(ours[:2], 60.0, "mean").phrase() == "? too few seeds"
    assert stats.agreement(ours, 66.0, "median").verdict == "within"


def _row(variant, scores, paper=None):
    """A table row with seed scores {column: {seed: score}} (cells: their means)."""
    ours = {c: Cell(float(np.mean(list(s.values()))), n=len(s)) for c, s in scores.items()}
    return Row(variant, variant.title(), ours, paper or {}, {}, scores)


def test_decide_pairs_only_same_seeds_from_the_same_pretraining_seed():
    base = _row("base", {"rte": {1: 60.0, 2: 62.0, 3: 61.0}, "glue": {1: 70.0, 2: 71.0, 3: 70.5}})
    same = _row("same", {"rte": {1: 61.0, 2: 63.5, 3: 62.0}, "glue": {1: 70.2, 2: 71.1, 3: 70.9}})
    other = _row("other", {"rte": {1: 61.0, 2: 63.0, 4: 62.0}, "glue": {1: 70.0, 2: 71.0}})
    seeds = {"base": 42, "same": 42, "other": 42}
    dec = decide([base, same, other], ["rte", "glue"], "mean", None, 0.5, seeds, {})
    assert dec.baseline == "base" and not dec.baseline_note
    assert dec.differences["same", "rte"].paired and not dec.differences["other", "rte"].paired
    assert dec.differences["other", "glue"] is None  # two seeds: too few
    assert list(dec.holm) == [("same", "rte"), ("other", "rte")]  # the task cells, not GLUE
    assert not dec.paired  # the seeds-needed table then assumes unpaired comparisons
    dec = decide([base, same], ["rte"], "mean", None, 0.5, {"base": 42, "same": 7}, {})
    assert not dec.differences["same", "rte"].paired  # another pre-training seed
    # the sweep's baseline, and a baseline that was not run
    dec = decide([base, same], ["rte"], "mean", "same", 0.5, seeds, {})
    assert dec.baseline == "same" and dec.differences["base", "rte"].diff == pytest.approx(-7 / 6)
    dec = decide([base, same], ["rte"], "mean", "gone", 0.5, seeds, {})
    assert dec.baseline == "base" and "'gone' was not run" in dec.baseline_note


def test_decide_gives_verdicts_only_where_the_paper_prints_a_number_beside_a_full_cell():
    row = _row("base", {"rte": {1: 60.0, 2: 62.0, 3: 61.0}, "glue": {1: 70.0, 2: 71.0, 3: 70.5}},
               paper={"rte": 61.0, "glue": 80.0, "params": "13M"})  # fmt: skip
    row.ours["glue"].note = "*"  # our GLUE averages fewer tasks than the paper's
    dec = decide([row], ["params", "rte", "glue"], "mean", None, 0.5, {"base": 1}, {"base": {"rte": 0.5}})
    assert set(dec.verdicts) == {("base", "rte")} and dec.verdicts["base", "rte"].paper_se
    assert dec.columns == ["rte", "glue"] and not dec.differences
    assert dec.spread["rte"] == pytest.approx(1.0) and dec.needed["rte"] == stats.seeds_needed(0.5, 1.0, False)


def test_only_scores_are_compared_and_only_against_numbers_on_our_split():
    from convexp.report.tables import variant_row
    from convexp.sweep.spec import Variant

    runs = [
        {"task": "rte", "seed": s, "run": f"r{s}", "hp": {}, "score": 60.0 + s, "remaining_weights": 10.0,
         "dev": {"validation": {"accuracy": 60.0 + s}}}
        for s in (1, 2, 3)
    ]  # fmt: skip
    columns = ["rte", "rte.accuracy", "rte.remaining_weights"]
    row = variant_row(Variant("v", "V", paper={"rte": 70.0}), "chang", "mean", columns, None, runs)
    assert row.seeds == {"rte": {1: 61.0, 2: 62.0, 3: 63.0}, "rte.accuracy": {1: 61.0, 2: 62.0, 3: 63.0}}
    assert row.ours["rte.remaining_weights"].value == 10.0  # shown, not compared
    assert decide([row], columns, "mean", None, 0.5, {"v": 1}, {}).verdicts["v", "rte"].verdict == "below"
    assert not decide([row], columns, "mean", None, 0.5, {"v": 1}, {}, versus_paper=False).verdicts
