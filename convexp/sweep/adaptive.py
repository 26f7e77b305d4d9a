"""Adaptive seeds in a sweep (``convexp ablate NAME adaptive.looks=[3,6,10]``): the plan of every
seed up to the cap, cut to the seeds each cell needs now, from the results already in the run store.

A *cell* is a variant against the baseline (``report.baseline``, else the first variant) on one
column of the report's table (a task's; MNLI's matched and mismatched each), the report's family,
or a variant's column against the paper's number; convexp/sequential.py decides it after each
look, with its error spent over looks and cells. Seeds are the sweep's fixed seeds in their order
(the first n are a cell's at n seeds): a run has the id it has in the fixed sweep, so an adaptive
study and a fixed one share their runs, and a re-run goes on from what is finished. Scores are each
run's columns as the report reads them (its kind's ``score_columns``, the report's style, on dev);
a task runs the seeds its most open column needs. Seeds pair as the report pairs them: a variant
fine-tuned from the baseline's pre-training seed (or checkpoint, ``Plan.origins``) is tested on
its per-seed differences (the paired t), whose spread leaves out what a seed does to both sides
alike; otherwise on both sides' scores (Welch's t). A collapsed run counts as the report counts it:
where ``report.exclude_diverged`` (BERMO's sweeps) it is left out, its seed skipped on both sides of
the comparison, and the task runs one more seed in its place.
"""

from __future__ import annotations

import dataclasses

from ..sequential import OPEN, UNDECIDED, Cell, Design, cell_seeds, decide
from ..tasks import kind as kind_by_name
from ..tasks import task_kind
from .plan import Plan, planned_tasks
from .requests import Request


def design_of(plan: Plan) -> Design | None:
    """The sweep's adaptive design, or None (the fixed seeds)."""
    a = plan.settings.get("adaptive") or {}
    if a.get("looks") is None:
        return None
    return Design(tuple(int(n) for n in a.looks), float(a.alpha), float(a.margin))


def seed_order(plan: Plan) -> list[int]:
    """The planned fine-tuning seeds, in the order the sweep lists them."""
    from .nodes import sweep_seeds

    listed = sweep_seeds(plan.sweep, plan.settings, plan.settings.scale) or []
    planned = {n.seed for n in plan.order() if n.stage == "finetune"}
    return [s for s in listed if s in planned] or sorted(planned)


def baseline(plan: Plan) -> str:
    b = plan.sweep.report.baseline if plan.sweep.report else None
    return b if b in plan.variants else plan.variants[0]


def _style(plan: Plan) -> tuple[str, str]:
    """(the report's style, its split)."""
    spec = plan.sweep.report
    return (spec.style, spec.split) if spec else ("convbert", "dev")


def _kind(node_or_task) -> object:
    return task_kind(getattr(node_or_task, "kind", None) or kind_by_name(getattr(node_or_task, "task", node_or_task)))


def columns(plan: Plan, tasks: list[str]) -> dict[str, str]:
    """{column: its task}: the report's columns each task fills (MNLI two: matched and mismatched),
    known before any result, so a table's cells (and its error's share per cell) are fixed from the
    first look."""
    style = _style(plan)[0]
    kinds = {n.task: n for n in plan.order() if n.stage == "finetune"}
    return {c: t for t in tasks for c in _kind(kinds.get(t, t)).columns(t, style)}


def scores(plan: Plan) -> tuple[dict[tuple[str, str], dict[int, float]], dict[tuple[str, str], set[int]]]:
    """({(variant, column): {seed: score}} of the finished fine-tuning runs of the plan, each column
    scored as the report scores it (its kind's ``score_columns``, the report's style, on dev);
    {(variant, task): seeds left out}: collapsed runs, where ``report.exclude_diverged``)."""
    style, split = _style(plan)
    exclude = bool(plan.sweep.report and plan.sweep.report.exclude_diverged)
    out: dict[tuple[str, str], dict[int, float]] = {}
    dropped: dict[tuple[str, str], set[int]] = {}
    for node in plan.order():
        if node.stage != "finetune" or not node.runs or not node.runs[0].finished:
            continue
        m = node.runs[0].read_json("metrics.json") or {}
        if m.get("diverged") and exclude:  # left out, as the report leaves them out (BERMO's sweeps)
            dropped.setdefault((node.variant, node.task), set()).add(node.seed)
            continue
        for column, score in _kind(node).score_columns({**m, "task": node.task}, style, split).items():
            if score is not None:
                out.setdefault((node.variant, column), {})[node.seed] = float(score)
    return out, dropped


def _usable(order: list[int], skip: set[int]) -> list[int]:
    """The seeds of ``order`` a cell reads: those not left out."""
    return [s for s in order if s not in skip]


def _planned(order: list[int], skip: set[int], n: int) -> int:
    """How many of ``order``'s first seeds give ``n`` a cell can read (those left out made up)."""
    usable = 0
    for i, s in enumerate(order):
        if usable == n:
            return i
        usable += s not in skip
    return len(order)


def cells(plan: Plan, design: Design, results: tuple | None = None) -> dict[tuple, Cell]:
    """Every cell's decision now: its looks replayed on the seeds finished so far, in seed order (a
    seed missing ends a side's sequence: later seeds wait for it). Cells: (variant, column) against
    the baseline, one per column of the table (a task's, MNLI's two); (variant, column, "paper")
    against the paper's number where the sweep prints one on the report's split (its ± the paper's
    standard error). ``results``: :func:`scores` of the plan, where the caller has read them."""
    order, base = seed_order(plan), baseline(plan)
    got, dropped = results or scores(plan)
    tasks = planned_tasks(plan.sweep, plan.settings) if plan.sweep.finetune else []  # the table's (not MNLI's start)
    task_of = columns(plan, tasks)
    cols = list(task_of)
    others = [v for v in plan.variants if v != base]

    def in_order(variant: str, column: str, partner: str | None = None) -> list[float]:
        """The side's scores in seed order, up to its first seed not finished; a seed left out (a
        collapsed run) is skipped, on both sides of a comparison (``partner``: the other side)."""
        t = task_of[column]
        skip = dropped.get((variant, t), set()) | (dropped.get((partner, t), set()) if partner else set())
        values = []
        for s in _usable(order, skip):
            if s not in got.get((variant, column), {}):
                break
            values.append(got[variant, column][s])
        return values

    spec = plan.sweep.report
    same_split = spec is None or spec.paper_split in (None, spec.split)
    papers = {(v, c): plan.sweep.variants[v] for v in plan.variants for c in cols
              if same_split and isinstance(plan.sweep.variants[v].paper.get(c), (int, float))}  # fmt: skip
    family = len(others) * len(cols) + len(papers)
    origins = plan.origins()
    out: dict[tuple, Cell] = {(v, c): decide(in_order(v, c, base), in_order(base, c, v), design, family,
                                             paired=origins[v] == origins[base])
                              for v in others for c in cols}  # fmt: skip
    for (v, c), variant in papers.items():
        mine = [x - float(variant.paper[c]) for x in in_order(v, c)]
        out[v, c, "paper"] = decide(mine, None, design, family, paper_se=float(variant.paper_se.get(c) or 0.0))
    return out


def wanted(plan: Plan, design: Design, decided: dict[tuple, Cell], results: tuple | None = None) -> dict[tuple[str, str], int]:
    """{(variant, task): seeds} the cells need now: a task as many as its most open column, and as
    many more as its collapsed runs left out (on either side of a comparison); the first look before
    any result."""
    tasks = sorted({n.task for n in plan.order() if n.stage == "finetune"})
    task_of = columns(plan, tasks)
    order, base = seed_order(plan), baseline(plan)
    dropped = (results or scores(plan))[1]
    want: dict[tuple[str, str], int] = {}
    for key, cell in decided.items():
        v, t = key[0], task_of.get(key[1], key[1])
        sides = [v] if len(key) == 3 else [v, base]
        skip = set().union(*(dropped.get((side, t), set()) for side in sides))
        n = _planned(order, skip, cell_seeds(cell, design))
        for side in sides:
            want[side, t] = max(want.get((side, t), 0), n)
    for v in plan.variants:  # a variant with no cell (a sweep of one variant): its first look
        for t in {task_of.get(k[1], k[1]) for k in decided} or set(tasks):
            want.setdefault((v, t), design.looks[0])
    return want


def cut(plan: Plan, want: dict[tuple[str, str], int]) -> Plan:
    """The plan with the fine-tuning nodes of the first ``want[(variant, task)]`` seeds, the nodes
    they read (an intermediate task's MNLI run, a teacher) and every pre-training."""
    order = seed_order(plan)
    index = {s: i for i, s in enumerate(order)}
    keep = {k for k, n in plan.nodes.items()
            if n.stage != "finetune" or index.get(n.seed, len(order)) < want.get((n.variant, n.task), 0)}  # fmt: skip
    stack = list(keep)
    while stack:  # what a kept node reads is kept
        for dep in plan.nodes[stack.pop()].deps:
            if dep in plan.nodes and dep not in keep:
                keep.add(dep)
                stack.append(dep)
    return dataclasses.replace(plan, nodes={k: n for k, n in plan.nodes.items() if k in keep})


def current(plan: Plan, design: Design) -> tuple[Plan, dict[tuple, Cell]]:
    """(the plan cut to what the cells need now, the cells' decisions). With ``adaptive.budget``
    (GPU-hours for the whole study), a look that would take the study beyond it is not started:
    the open cells keep the seeds they have (the first look beyond the budget is refused)."""
    results = scores(plan)  # every finished run's metrics, read once a look
    decided = cells(plan, design, results)
    now = cut(plan, wanted(plan, design, decided, results))
    budget = (plan.settings.get("adaptive") or {}).get("budget")
    if budget is None or gpu_hours(now) <= float(budget):
        return now, decided
    have = {(n.variant, n.task): 0 for n in plan.order() if n.stage == "finetune"}
    index = {s: i for i, s in enumerate(seed_order(plan))}
    for n in plan.order():  # the seeds each side has finished: no new look
        if n.stage == "finetune" and n.done and (n.variant, n.task) in have:
            have[n.variant, n.task] = max(have[n.variant, n.task], index.get(n.seed, -1) + 1)
    held = cut(plan, have)
    if not any(n.done for n in held.order() if n.stage == "finetune"):
        from .spec import SweepError

        raise SweepError(
            f"adaptive.budget={budget:g} GPU-hours is below the first look's {gpu_hours(now):.3g}; raise it "
            f"or lower adaptive.looks[0]"
        )
    for c in decided.values():
        if c.decision == OPEN:
            c.decision = "open (budget)"
    return held, decided


def gpu_hours(plan: Plan) -> float:
    """GPU-hours of every job of the plan at the dry run's rates (sweep/schedule.py; CPU jobs: 0)."""
    from .schedule import job_gpus, throughput

    tp = throughput(plan.settings)
    return sum(tp.hours(n) * job_gpus(n) for n in plan.order() if n.gpus)


def summary(plan: Plan, design: Design, decided: dict[tuple, Cell]) -> list[str]:
    """Lines for the terminal: each cell's state, and the runs against the fixed count."""
    lines = [f"adaptive seeds: looks at {', '.join(map(str, design.looks))} seeds, alpha {design.alpha} "
             f"over {len(decided)} cells, margin ±{design.margin}; baseline {baseline(plan)}"]  # fmt: skip
    lines += [f"  {_cell_text(key, c, baseline(plan))}" for key, c in decided.items()]
    open_ = sum(c.decision.startswith(OPEN) for c in decided.values())
    undecided = sum(c.decision == UNDECIDED for c in decided.values())
    lines.append(f"  {len(decided) - open_ - undecided} decided, {open_} open, {undecided} undecided at the cap")
    return lines


def bill(plan: Plan, design: Design) -> tuple[int, int]:
    """(fine-tuning runs at the least: every cell decided at its first look, at the most: the cap)."""
    least, most = extremes(plan, design)
    return _runs(least), _runs(most)


def extremes(plan: Plan, design: Design) -> tuple[Plan, Plan]:
    """(the plan if every cell settles at its first look, the plan of the cap: the fixed sweep's)."""
    return cut(plan, {(n.variant, n.task): design.looks[0] for n in plan.order() if n.stage == "finetune"}), plan


def bill_line(plan: Plan, design: Design) -> str:
    """The dry run's line: fine-tuning runs and training FLOPs at the least and at the most."""
    least, most = extremes(plan, design)
    flops = lambda p: sum(n.flops for n in p.order() if n.stage == "finetune")  # noqa: E731  (a node: its settings)
    return (f"  fine-tuning at the least (every cell settled at its first look): {_runs(least)} runs, "
            f"{flops(least):.3g} training FLOPs; at the most (the cap, the fixed count): {_runs(most)} runs, "
            f"{flops(most):.3g} FLOPs; the bill above is this look's")  # fmt: skip


def _runs(plan: Plan) -> int:
    return sum(len(n.runs) for n in plan.order() if n.stage == "finetune")


def report_lines(full: Plan, plan: Plan, design: Design, decided: dict[tuple, Cell]) -> list[str]:
    """The report's account of an adaptive study: each cell's decision and the look that made it,
    the runs against the fixed count, the method."""
    settled = [c for c in decided.values() if c.look]
    lines = [
        f"Adaptive seeds: looks at {', '.join(map(str, design.looks))} seeds; {len(settled)} of {len(decided)} "
        f"cells decided, {sum(c.decision == UNDECIDED for c in decided.values())} undecided at the cap, "
        f"{sum(c.decision.startswith(OPEN) for c in decided.values())} open; {_runs(plan)} fine-tuning runs of the fixed "
        f"{_runs(full)}. Pocock-type error spending over looks and Bonferroni over the {len(decided)} cells: "
        f"at most {design.alpha:g} chance of any false difference claim, and of any false equivalence "
        f"claim (±{design.margin:g} points), in this table; each look a t test, paired where the seeds pair "
        f"(variants from one pre-training seed, as the differences above) (convexp/sequential.py)."
    ]
    return lines + [f"- {_cell_text(key, c, baseline(full))}" for key, c in decided.items()]


def _cell_text(key: tuple, c: Cell, base: str) -> str:
    """"b vs a on rte: better at look 1 (3 seeds), difference +1.20 [+0.40, +2.00]" (against the
    baseline) or "b on rte vs the paper: ..."."""
    name = f"{key[0]} on {key[1]} vs the paper" if len(key) == 3 else f"{key[0]} vs {base} on {key[1]}"
    at = f" at look {c.look} ({c.n} seeds)" if c.look else f" after {c.n} seeds" if c.history else ""
    diff = f", difference {c.diff:+.2f} [{c.low:+.2f}, {c.high:+.2f}]" if c.diff is not None else ""
    return f"{name}: {c.decision}{at}{diff}"


def to_json(full: Plan, plan: Plan, design: Design, decided: dict[tuple, Cell]) -> dict:
    """report.json's ``adaptive``: the design, each cell, the runs against the fixed count."""
    return {
        "looks": list(design.looks), "alpha": design.alpha, "margin": design.margin,
        "baseline": baseline(full), "runs": _runs(plan), "fixed_runs": _runs(full),
        "cells": [{"variant": k[0], "task": k[1], "versus": "paper" if len(k) == 3 else baseline(full),
                   "decision": c.decision, "look": c.look, "seeds": c.n, "difference": c.diff, "low": c.low,
                   "high": c.high, "history": c.history}
                  for k, c in decided.items()],
    }  # fmt: skip


# ----------------------------------------------------------------------------- on this machine


def run_looks(sweep, args: list[str], full: Plan, design: Design) -> dict:
    """Adaptive seeds on this machine (``launcher=local``): run a look (the seeds each open cell
    needs), read its results, decide, and run the next, until no cell needs a seed it lacks; say
    each look and, at the end, the runs against the fixed count. Returns the nodes' outcomes."""
    from .launchers import run_plan
    from .plan import build_plan

    outcomes: dict = {}
    plan, decided = current(full, design)
    for look in range(1, len(design.looks) + 2):
        todo = [n for n in plan.nodes.values() if not n.done]
        print(f"look {look}: {len(todo)} node(s) to run", flush=True)
        if not todo:
            break
        outcomes.update(run_plan(plan))
        if any(o.status in ("failed", "diverged", "held", "blocked") for o in outcomes.values()):
            break  # the sweep's summary says which; the next look waits for its seed
        full = build_plan(sweep, args)
        plan, decided = current(full, design)
        print("\n".join(summary(plan, design, decided)), flush=True)
    fixed = _runs(full)
    print(f"adaptive seeds: {_runs(plan)} fine-tuning runs; the fixed count: {fixed} ({fixed - _runs(plan)} saved)",
          flush=True)  # fmt: skip
    return outcomes


# ----------------------------------------------------------------------------- SLURM: submit and leave

PLANNER = Request(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, mem_gb=4, time_min=30)


def submit_planner(plan: Plan, outcomes: dict, name: str, args: list[str]) -> str | None:
    """After a look's jobs are submitted, one small CPU job that waits for all of them (afterany: a
    failed seed does not strand the study) and then plans and submits the next look — and its own
    planner — from their results (:func:`next_look`): the study runs to its end with nobody logged
    in. Returns its job id (None: nothing was submitted, nothing to wait for)."""
    from .launchers import _ask, make_executor

    waits = sorted({o.job.split("_")[0] for o in outcomes.values() if o.status == "submitted" and o.job})
    if not waits:
        return None
    executor = make_executor(plan, plan.settings.launcher)
    extra = {"open-mode": "append", **dict(plan.settings.launcher.additional or {}),
             "dependency": "afterany:" + ":".join(waits)}  # fmt: skip
    _ask(executor, PLANNER, extra)
    job = executor.submit(next_look, name, list(args))
    print(f"submitted the next look's planner ({job.job_id}; {PLANNER.text()}) after {', '.join(waits)}", flush=True)
    return job.job_id


def next_look(name: str, args: list[str]) -> str:
    """The planner job's work (and what `convexp ablate NAME ARGS` does again by hand): decide the
    cells from the results so far; submit the seeds the open ones need, and a planner after them."""
    from .launchers import run_plan
    from .plan import build_plan
    from .spec import load_sweep

    full = build_plan(load_sweep(name), args)
    design = design_of(full)
    plan, decided = current(full, design)
    print("\n".join(summary(plan, design, decided)), flush=True)
    if not any(not n.done for n in plan.nodes.values()):
        print(f"adaptive seeds: done; {_runs(plan)} fine-tuning runs of the fixed {_runs(full)}", flush=True)
        return "done"
    outcomes = run_plan(plan)
    submit_planner(plan, outcomes, name, args)
    return "submitted"
