"""Adaptive seeds (issue 66): the sequential procedure's error rates under simulation, from seed
spreads like the papers' (Chang et al. Table 6: mean ± s.e. over ten runs, so a seed's s.d. is
s.e. x √10), and a sweep's plan cut to what its cells need. Simulations are seeded: each test
gives the same numbers every run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from convexp.sequential import OPEN, UNDECIDED, Cell, Design, decide, look_decision, next_seeds

# Chang et al. Table 6 (GLUE dev, ten runs): "No convolution + abs position" (the baseline) and
# "Composite (Equation 6)": (mean, s.e.) per task
ABS = {"cola": (33.5, 0.7), "mnli-m": (75.8, 0.1), "mrpc": (83.3, 0.4), "qnli": (78.2, 0.2),
       "qqp": (84.9, 0.2), "rte": (64.4, 0.9), "sst2": (85.0, 0.1), "stsb": (82.4, 0.1)}  # fmt: skip
COMPOSITE = {"cola": (40.9, 0.7), "mnli-m": (77.9, 0.1), "mrpc": (86.2, 0.3), "qnli": (83.0, 0.1),
             "qqp": (87.3, 0.0), "rte": (66.1, 0.7), "sst2": (86.9, 0.1), "stsb": (85.9, 0.1)}  # fmt: skip


def sd(se: float) -> float:
    return max(se, 0.05) * math.sqrt(10)  # a printed 0.0 read as < 0.05


def simulate(effects: dict[str, float], design: Design, reps: int, seed: int = 0):
    """(family-wise rate of a false difference claim, share of cells decided, share of the fixed
    count's fine-tuning runs used, decisions) over ``reps`` studies of the eight tasks."""
    rng = np.random.default_rng(seed)
    m = len(ABS)
    false_any, decided, used, decisions = 0, 0, 0, []
    for _ in range(reps):
        wrong = False
        for t, (mu, se) in ABS.items():
            b = rng.normal(mu, sd(se), design.cap)
            a = rng.normal(mu + effects[t], sd(COMPOSITE[t][1]) if effects[t] else sd(se), design.cap)
            c = decide(list(a), list(b), design, m)
            decisions.append(c.decision)
            decided += c.decision not in (OPEN, UNDECIDED)
            used += 2 * (c.n if c.decision != UNDECIDED else design.cap)
            wrong |= effects[t] == 0 and c.decision in ("better", "worse")
        false_any += wrong
    return false_any / reps, decided / (reps * m), used / (reps * m * 2 * design.cap), decisions


def test_equal_variants_make_a_false_difference_claim_at_most_alpha_of_the_time():
    design = Design((3, 6, 10), alpha=0.05, margin=0.5)
    rate, _, _, decisions = simulate({t: 0.0 for t in ABS}, design, reps=500)
    assert rate <= 0.05  # family-wise, over eight cells and three looks
    assert "better" not in decisions or decisions.count("better") < 0.05 * len(decisions)


def test_looking_after_every_seed_is_valid_here_and_not_without_spending():
    """One cell, a look after every seed from 2 to 10, equal variants: testing each look at α
    (what a researcher does by hand) claims a difference far more often than α; the spent error
    keeps it under α."""
    design = Design(tuple(range(2, 11)), alpha=0.05, margin=0.5)
    rng = np.random.default_rng(1)
    naive = ours = 0
    reps = 1500
    for _ in range(reps):
        a, b = rng.normal(0, 1, 10), rng.normal(0, 1, 10)
        ours += decide(list(a), list(b), design, cells=1).decision in ("better", "worse")
        for n in design.looks:  # the same Welch test at the full α at every look
            va, vb = a[:n].var(ddof=1) / n, b[:n].var(ddof=1) / n
            df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
            diff, se = a[:n].mean() - b[:n].mean(), math.sqrt(va + vb)
            if look_decision(diff, se, df, 0.05, 1e-9, False)[0] in ("better", "worse"):
                naive += 1
                break
    assert naive / reps > 0.10  # the inflation the procedure exists for
    assert ours / reps <= 0.05


def test_a_false_equivalence_claim_at_most_alpha_of_the_time():
    """Variants that differ by exactly the margin: "equivalent" is a false claim."""
    design = Design((3, 6, 10), alpha=0.05, margin=0.5)
    rng = np.random.default_rng(2)
    reps, claims = 2000, 0
    for _ in range(reps):
        a, b = rng.normal(0.5, 0.3, 10), rng.normal(0.0, 0.3, 10)
        claims += decide(list(a), list(b), design, cells=1).decision == "equivalent"
    assert claims / reps <= 0.05


def test_the_papers_effects_are_found_with_fewer_runs():
    """Chang et al.'s composite attention against absolute positions (Table 6's differences and
    spreads): most cells settle before the cap, with far fewer runs than ten seeds each, and the
    differences found point the paper's way."""
    design = Design((3, 6, 10), alpha=0.05, margin=0.5)
    effects = {t: COMPOSITE[t][0] - ABS[t][0] for t in ABS}
    _, decided, used, decisions = simulate(effects, design, reps=300, seed=3)
    assert decided >= 0.8  # power: cells settled by the cap
    assert used <= 0.75  # runs against the fixed count of ten seeds a cell
    assert decisions.count("worse") == 0  # no claim against the paper's direction


def test_a_cell_is_replayed_look_by_look_and_open_until_its_next_look():
    design = Design((3, 6, 10), alpha=0.05, margin=0.5)
    base = [80.0, 80.2, 79.9, 80.1, 80.0, 79.8]
    far = [90.0, 90.1, 89.9]
    c = decide(far, base[:3], design, cells=1)
    assert c.decision == "better" and c.look == 1 and c.n == 3
    c = decide([80.5, 79.1], base[:2], design, cells=1)
    assert c.decision == OPEN and c.history == []  # no look yet: fewer seeds than the first needs
    close = decide([80.3, 79.2, 81.0, 80.9], base[:4], design, cells=1)
    assert close.decision == OPEN and close.history == [OPEN]
    want = next_seeds({("v", "rte"): close, ("w", "rte"): c}, "base", design)
    assert want == {("v", "rte"): 6, ("base", "rte"): 6, ("w", "rte"): 3}


def test_a_column_against_the_papers_number_is_reproduced_or_not():
    """Scores minus the paper's number, with its printed standard error: within the margin is
    reproduced, clearly off is not; the paper's side never runs seeds."""
    design = Design((3, 6, 10), alpha=0.05, margin=1.0)
    near = decide([0.1, -0.05, 0.02, 0.08, -0.1, 0.0], None, design, cells=2, paper_se=0.05)
    assert near.decision == "reproduced" and near.look == 1 and near.n == 3
    off = decide([-4.1, -3.9, -4.0], None, design, cells=2, paper_se=0.1)
    assert off.decision == "not reproduced" and off.look == 1
    want = next_seeds({("v", "rte", "paper"): decide([0.3, -0.2, 0.1], None, design, 2, paper_se=0.5)}, "b", design)
    assert want == {("v", "rte"): 6}


def test_the_design_refuses_what_cannot_be_a_study():
    for bad in ({"looks": (3, 3)}, {"looks": (1, 4)}, {"alpha": 0.0}, {"margin": 0.0}):
        with pytest.raises(ValueError):
            Design(**bad)
    assert Cell("better", 1, 3).settled and not Cell(OPEN, None, 3).settled


def test_a_sweep_plans_only_the_seeds_its_cells_need(tmp_path, monkeypatch):
    """conv-injection at scale=smoke with adaptive.looks=[3,6,10]: before any result each cell's
    variant and baseline run the first three of the papers' ten seeds, with the MNLI runs the
    intermediate tasks start from; every run has the id it has in the fixed plan; the dry run's
    bill spans three seeds to ten."""
    from convexp.sweep import adaptive
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    sweep = load_sweep("conv-injection")
    args = ["scale=smoke", "adaptive.looks=[3,6,10]", "variants=[abs,composite]", "tasks=[rte,sst2]"]
    full = build_plan(sweep, args)
    design = adaptive.design_of(full)
    plan, cells = adaptive.current(full, design)
    # against the baseline, and each variant against Table 6's numbers (its ± the printed s.e.)
    assert set(cells) == {("composite", "rte"), ("composite", "sst2"), *((v, t, "paper") for v in ("abs", "composite")
                                                                          for t in ("rte", "sst2"))}  # fmt: skip
    assert all(c.decision == OPEN for c in cells.values())
    seeds = adaptive.seed_order(full)
    assert seeds == [42, 97, 834, 622, 329, 75, 213, 101, 123, 57]
    tuned = [n for n in plan.order() if n.stage == "finetune"]
    assert {n.seed for n in tuned} == set(seeds[:3])
    assert {n.task for n in tuned} == {"rte", "sst2", "mnli"}  # RTE starts from MNLI's same seed
    assert all(plan.nodes[k].runs[0].dir == full.nodes[k].runs[0].dir for k in plan.nodes)
    assert adaptive.bill(full, design) == (2 * 3 * 3, 2 * 3 * 10)


def test_the_dry_run_bills_the_least_and_the_most(tmp_path):
    from helpers import SHRINK, convexp, write_sweep

    sweep = write_sweep(tmp_path / "two.yaml", {"a": {}, "b": {"finetune": ["weight_decay=0.02"]}})
    res = convexp("ablate", str(sweep), *SHRINK, "adaptive.looks=[2,3]", "--dry-run", outputs=tmp_path / "out")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "b vs a on rte: open" in res.stdout
    assert "at the least (every cell settled at its first look): 4 runs" in res.stdout
    assert "at the most (the cap, the fixed count): 6 runs" in res.stdout
    bad = convexp("ablate", str(sweep), *SHRINK, "adaptive.looks=[3,2]", "--dry-run", outputs=tmp_path / "out")
    assert bad.returncode == 2 and "adaptive.looks=[3, 2]" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_adaptive_seeds_on_this_machine_run_look_after_look_and_the_report_says_so(tmp_path):
    """Two variants, looks at 2 and 3 seeds, trained here: the first look runs 2 seeds a side, the
    cell is decided or gets its third seed, the command ends saying the runs against the fixed
    count, and the report prints each cell's decision; run again, nothing is trained."""
    import json

    from helpers import SHRINK, convexp, write_sweep

    sweep = write_sweep(tmp_path / "two.yaml", {"a": {}, "b": {"finetune": ["weight_decay=0.02"]}})
    args = [str(sweep), *SHRINK, "adaptive.looks=[2,3]"]
    out = tmp_path / "out"
    res = convexp("ablate", *args, outputs=out, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "look 1: " in res.stdout and "adaptive seeds: " in res.stdout and "the fixed count: 6" in res.stdout
    report = convexp("report", *args, "--no-figures", outputs=out, env={"WANDB_MODE": "disabled"})
    assert report.returncode == 0, report.stderr[-2000:]
    adaptive = json.loads((out / "reports" / "two" / "report.json").read_text())["adaptive"]
    [cell] = adaptive["cells"]
    assert cell["decision"] != "open" and adaptive["runs"] in (4, 6)
    assert len(list((out / "runs" / "finetune").glob("*/metrics.json"))) == adaptive["runs"]
    again = convexp("ablate", *args, outputs=out, env={"WANDB_MODE": "disabled"})
    assert "look 1: 0 node(s) to run" in again.stdout


def test_a_budget_below_the_first_look_is_refused_and_a_large_one_changes_nothing(tmp_path):
    """adaptive.budget: GPU-hours for the whole study at the dry run's rates (a paper-scale plan: its
    jobs ask for GPUs). Below the first look: one line, exit 2, nothing written; above it: the look
    as without a budget."""
    from helpers import convexp

    args = ["conv-injection", "scale=paper", "variants=[abs,composite]", "tasks=[rte]", "adaptive.looks=[3,6,10]",
            "launcher=submitit", "--dry-run"]  # fmt: skip
    out = tmp_path / "out"
    low = convexp("ablate", *args, "adaptive.budget=1", outputs=out)
    assert low.returncode == 2 and "adaptive.budget=1 GPU-hours is below the first look's" in low.stderr
    assert len(low.stderr.strip().splitlines()) == 1 and not out.exists()
    high = convexp("ablate", *args, "adaptive.budget=100000", outputs=out)
    plain = convexp("ablate", *args, outputs=out)
    assert high.returncode == plain.returncode == 0, high.stderr[-2000:]
    assert high.stdout.splitlines()[-1] == plain.stdout.splitlines()[-1]
    assert "at the least (every cell settled at its first look): 12 runs" in high.stdout


def test_paired_seeds_keep_the_error_rate_and_decide_sooner_where_a_seed_moves_both_sides():
    """Where a fine-tuning seed moves both variants alike (data order, classifier start: here 80% of
    a seed's variance, shared), the paired t on per-seed differences keeps false claims under alpha
    and settles a real difference (one seed's s.d.) with fewer seeds and more power than Welch's t
    on the same scores (measured: 6.8 seeds a side and 95% against 9.5 and 31%)."""
    design = Design((3, 6, 10), alpha=0.05, margin=0.5)
    rng = np.random.default_rng(4)
    reps, shared, own = 1000, math.sqrt(0.8), math.sqrt(0.2)
    false_paired = seeds_paired = seeds_welch = found_paired = found_welch = 0
    for _ in range(reps):
        s = rng.normal(0, shared, 10)  # what seed i does to both sides
        b = s + rng.normal(0, own, 10)
        equal = s + rng.normal(0, own, 10)
        false_paired += decide(list(equal), list(b), design, cells=1, paired=True).decision in ("better", "worse")
        better = s + 1.0 + rng.normal(0, own, 10)
        p, w = decide(list(better), list(b), design, 1, paired=True), decide(list(better), list(b), design, 1)
        seeds_paired += p.n if p.decision != UNDECIDED else design.cap
        seeds_welch += w.n if w.decision != UNDECIDED else design.cap
        found_paired += p.decision == "better"
        found_welch += w.decision == "better"
    assert false_paired / reps <= 0.05
    assert seeds_paired < 0.8 * seeds_welch and found_paired / reps >= 0.9 and found_paired > 2 * found_welch


def test_a_cell_pairs_its_seeds_where_the_report_does(tmp_path, monkeypatch):
    """Variants pre-trained from the same seed pair their fine-tuning seeds in the report; the
    adaptive cells test them paired too (Plan.origins, one rule for both)."""
    from convexp.sweep import adaptive
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    full = build_plan(load_sweep("conv-injection"), ["scale=smoke", "adaptive.looks=[3,6,10]",
                                                     "variants=[abs,composite]", "tasks=[rte]"])  # fmt: skip
    seen = []
    real = adaptive.decide
    monkeypatch.setattr(adaptive, "decide", lambda *a, **k: seen.append(k.get("paired")) or real(*a, **k))
    origins = full.origins()
    assert origins["abs"] == origins["composite"] is not None
    adaptive.cells(full, adaptive.design_of(full))
    assert seen[0] is True  # the cell against the baseline; the paper's cells have no pairing


def test_a_look_beyond_the_budget_is_not_started_and_its_cells_say_so(tmp_path, monkeypatch):
    """adaptive.budget between the first look and the second: with the first look's runs finished
    and its cell still open, the plan keeps the seeds already run (nothing new is started) and the
    open cells are marked "open (budget)"."""
    import json

    from convexp.sweep import adaptive
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    args = ["scale=paper", "variants=[abs,composite]", "tasks=[rte]", "adaptive.looks=[3,6,10]", "launcher=submitit"]
    full = build_plan(load_sweep("conv-injection"), args)
    design = adaptive.design_of(full)
    first, _ = adaptive.current(full, design)
    order = adaptive.seed_order(full)
    scores = {"abs": [64.0, 66.0, 62.0], "composite": [65.0, 63.0, 66.0]}  # close and noisy: open at look 1
    for n in first.order():
        if n.stage == "finetune" and n.task == "rte":
            score = scores[n.variant][order.index(n.seed)]
            n.runs[0].dir.mkdir(parents=True, exist_ok=True)
            (n.runs[0].dir / "status.json").write_text(json.dumps({"status": "finished"}))
            (n.runs[0].dir / "metrics.json").write_text(json.dumps(
                {"task": "rte", "score": score, "convbert_score": score, "dev": {"validation": {"accuracy": score}}}))
    second, cells = adaptive.current(full, design)
    assert cells["composite", "rte"].decision == "open" and adaptive._runs(second) > adaptive._runs(first)
    budget = (adaptive.gpu_hours(first) + adaptive.gpu_hours(second)) / 2
    capped = build_plan(load_sweep("conv-injection"), [*args, f"adaptive.budget={budget}"])
    held, cells = adaptive.current(capped, design)
    assert set(held.nodes) == set(first.nodes) and cells["composite", "rte"].decision == "open (budget)"
    assert any("open (budget)" in line for line in adaptive.summary(capped, design, cells))


def test_mnli_is_two_cells_and_its_task_runs_what_the_more_open_one_needs(tmp_path, monkeypatch):
    """A table's MNLI columns (matched and mismatched, in Chang et al.'s style) are a cell each, with
    the paper's number of each where Table 6 prints it; the fine-tunes of MNLI run for both."""
    from convexp.sweep import adaptive
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    sweep = load_sweep("conv-injection")
    full = build_plan(sweep, ["scale=smoke", "adaptive.looks=[3,6,10]", "variants=[abs,composite]", "tasks=[mnli]"])
    plan, cells = adaptive.current(full, adaptive.design_of(full))
    assert {("composite", "mnli-m"), ("composite", "mnli-mm")} <= set(cells)
    printed = {c for c in ("mnli-m", "mnli-mm") if isinstance(sweep.variants["composite"].paper.get(c), (int, float))}
    assert printed and {("composite", c, "paper") for c in printed} <= set(cells)
    tuned = {(n.variant, n.seed) for n in plan.order() if n.stage == "finetune" and n.task == "mnli"}
    assert len(tuned) == 6  # three seeds of each variant, for both columns


def test_a_collapsed_run_left_out_is_made_up_by_the_next_seed(tmp_path, monkeypatch):
    """Where the report leaves collapsed runs out (report.exclude_diverged, BERMO's sweeps), a
    collapsed seed is skipped on both sides of its comparison and the task runs one more seed in its
    place, so the cell reaches its look instead of waiting for a seed that will never count."""
    import dataclasses
    import json

    from convexp.sweep import adaptive
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    sweep = load_sweep("conv-injection")
    sweep = dataclasses.replace(sweep, report=dataclasses.replace(sweep.report, exclude_diverged=True))
    full = build_plan(sweep, ["scale=smoke", "adaptive.looks=[3,6,10]", "variants=[abs,composite]", "tasks=[rte]"])
    design = adaptive.design_of(full)
    order = adaptive.seed_order(full)

    def finish(plan, seeds: int, collapsed=()):
        for n in plan.order():
            i = order.index(n.seed) if n.stage == "finetune" else None
            if i is None or i >= seeds or n.runs[0].finished:
                continue
            score = 60.0 + i + (5.0 if n.variant == "composite" else 0.0)
            n.runs[0].dir.mkdir(parents=True, exist_ok=True)
            (n.runs[0].dir / "status.json").write_text(json.dumps({"status": "finished"}))
            (n.runs[0].dir / "metrics.json").write_text(json.dumps(
                {"task": "rte", "score": score, "convbert_score": score, "dev": {"validation": {"accuracy": score}},
                 "diverged": (n.variant, i) in collapsed}))  # fmt: skip

    first, _ = adaptive.current(full, design)
    finish(first, 3, collapsed={("composite", 1)})
    again, cells = adaptive.current(full, design)
    assert cells["composite", "rte"].history == []  # two seeds usable on each side: no look yet
    fourth = {(n.variant, order.index(n.seed)) for n in again.order() if n.stage == "finetune"}
    assert {("abs", 3), ("composite", 3)} <= fourth and ("composite", 4) not in fourth
    finish(again, 4)
    _, cells = adaptive.current(full, design)
    assert cells["composite", "rte"].history and cells["composite", "rte"].n == 3
