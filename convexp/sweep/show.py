"""What ``convexp ablate`` prints: the named sweeps (--list), a plan with its cache state and
compute (--dry-run), and the end-of-sweep summary."""

from __future__ import annotations

from .cards import Card, Grid, recipe_cards
from .compute import pretrain_tokens
from .execute import Outcome
from .plan import Plan
from .spec import load_sweep


def _console():
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


GLUE_TASKS = {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"}  # the 8 every GLUE sweep runs


def print_sweeps() -> None:
    """One line per named sweep, 100 columns at most; ``--dry-run`` prints a sweep's description."""
    import shutil

    from rich.console import Console
    from rich.table import Table

    from ..config import group_sources, is_builtin

    sweeps = group_sources("sweep")
    table = Table(title="named sweeps: convexp ablate NAME (* = yours)", title_justify="left", box=None)
    table.add_column("sweep", no_wrap=True, min_width=max(len(n) + 1 for n in sweeps))
    # every column bounded (rich drops a column rather than shrink an unbounded no-wrap one)
    table.add_column("source", no_wrap=True, overflow="ellipsis", max_width=30)
    table.add_column("variants", no_wrap=True, justify="right", min_width=8)
    table.add_column("stages", no_wrap=True, overflow="ellipsis", max_width=30)
    for name, path in sweeps.items():
        s = load_sweep(name)
        name = name if is_builtin(path) else f"{name}*"
        paper = str(s.source.get("paper", "?")).split(",")[0].split(" (")[0]  # "ConvBERT", "Chang et al."
        tasks = "GLUE" if s.finetune and set(s.finetune.tasks) == GLUE_TASKS else None
        tasks = tasks or (",".join(s.finetune.tasks) if s.finetune else None)
        stages = (s.init or "pretrain") + (f" → {tasks}" if tasks else "")
        table.add_row(name, f"{paper}, {s.source.get('ref', '?')}", str(len(s.variants)), stages)
    Console(width=min(100, shutil.get_terminal_size((100, 24)).columns)).print(table)
    print("convexp ablate NAME --dry-run: what the sweep reproduces, its plan, compute and recipe cards")


def _flops(x: float) -> str:
    return f"{x:.2e}" if x else "-"


def _value(v) -> str:
    """A card's value as printed: 1,000,000 steps, 3e-04, yes/no, a grid as a | b."""
    if isinstance(v, Grid):
        return " | ".join(_value(x) for x in v)
    if isinstance(v, tuple):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.0e}" if 0 < abs(v) < 1e-2 and float(f"{v:.0e}") == v else f"{v:.4g}"
    return str(v)


def print_cards(cards: list[Card]) -> None:
    """The recipe cards (sweep/cards.py): one line of settings per distinct recipe."""
    console = _console()
    for c in cards:
        stage = "pre-training" if c.stage == "pretrain" else "fine-tuning"
        head = f"{stage} recipe {c.title} — variants: {', '.join(c.variants)}"
        rows = [(k, v) for k, v in c.rows if k != "recipe"]
        console.print(head, markup=False, soft_wrap=True)
        console.print("  " + " · ".join(f"{k} {_value(v)}" for k, v in rows), markup=False, soft_wrap=True)
        for note in c.notes:
            console.print(f"  note: {note}", markup=False, soft_wrap=True)


def print_plan(plan: Plan) -> None:
    """The --dry-run view: every node, what is cached, the recipe cards, and the compute still to do."""
    from rich.table import Table

    table = Table(title=f"convexp ablate {plan.sweep.name} ({plan.sweep.title}), scale={plan.settings.scale}")
    for col in ("node", "state", "run", "train FLOPs"):
        table.add_column(col, justify="right" if col == "train FLOPs" else "left")
    states: dict[str, int] = {}
    todo, unknown = 0.0, 0
    for n in plan.order():
        state = n.state
        states[state] = states.get(state, 0) + 1
        todo += 0 if state == "cached" else n.flops
        unknown += state != "cached" and not n.flops
        table.add_row(n.key, state, ", ".join(r.id for r in n.runs), _flops(n.flops))
    console = _console()
    if note := plan.sweep.source.get("note"):  # what the sweep reproduces (ablate --list leaves it out)
        console.print(f"{plan.sweep.title}: {note}", highlight=False)
    console.print(table)
    print_cards(recipe_cards(plan))
    counts = ", ".join(f"{v} {k}" for k, v in sorted(states.items()))
    parts = [f"{len(plan.nodes)} runs ({counts})"]
    n_runs = sum(len(n.runs) for n in plan.order())
    if n_runs != len(plan.nodes):  # ConvBERT's grid: a fine-tuning node runs every setting
        parts.append(f"{n_runs} run directories (a fine-tuning node with a grid runs every setting; its FLOPs count them all)")
    if todo:
        hours = todo / (plan.settings.tflops * 1e12) / 3600
        parts.append(
            f"to do: {_flops(todo)} training FLOPs ≈ {hours:.3g} h at {plan.settings.tflops} TFLOP/s "
            "sustained (set tflops=...)"
        )
    if plan.pretrain_cfgs:  # real tokens (sentence pairs hold fewer than seq_len: compute.example_tokens)
        tokens = sum(map(pretrain_tokens, plan.pretrain_cfgs.values()))
        parts.append(f"pre-training reads {tokens:.3g} tokens")
    if unknown:
        parts.append(f"{unknown} runs of unknown compute (their checkpoint's config is not on disk)")
    elif not todo:
        parts.append("nothing to do")
    console.print("; ".join(parts))
    console.print(
        f"launcher: {plan.settings.launcher.name}; first command: {plan.order()[0].command}",
        markup=False,
        soft_wrap=True,
    )


def print_outcomes(plan: Plan, outcomes: dict[str, Outcome]) -> int:
    """The end-of-sweep summary; returns the number of nodes that failed or diverged."""
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o.status] = counts.get(o.status, 0) + 1
    console = _console()
    console.print(f"sweep {plan.sweep.name}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    failed = {k: o for k, o in outcomes.items() if o.status in ("failed", "diverged", "held", "blocked")}
    for k, o in failed.items():
        console.print(f"  {o.status}: {k}: {o.error}" + (f" (log: {o.log})" if o.log else ""), markup=False)
    if not failed:
        console.print(f"report: convexp report {plan.sweep.name}")
    return sum(o.status in ("failed", "diverged") for o in outcomes.values())
