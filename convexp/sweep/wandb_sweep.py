"""A sweep as a W&B sweep file, for running it across machines with ``wandb agent`` instead of a
launcher: a grid over the plan's nodes, so that each agent job runs exactly one stage command."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..atomic import atomic_write
from ..config.compose import group_sources
from .plan import Plan


def wandb_sweep_spec(plan: Plan) -> dict:
    """A W&B grid sweep whose values are the plan's node keys in `waves` (W&B runs a grid in
    order: every pre-training before the fine-tuning that starts from it). Each agent job runs
    ``convexp ablate NAME launcher=node launcher.key=KEY`` with this command's other arguments
    (``${args_no_hyphens}`` passes them as KEY=VALUE); a job whose node's dependencies have not
    finished waits for them or runs nothing (`convexp.sweep.launchers.run_one`)."""
    sweep = plan.sweep
    fixed = {}
    for a in plan.args:
        key, _, value = a.partition("=")
        if key.lstrip("+~").split(".")[0] != "launcher":
            fixed[key] = {"value": value}
    return {
        "name": sweep.name,
        "description": f"convexp ablate {sweep.name}: {sweep.title}",
        "program": "convexp",
        "method": "grid",
        "parameters": {
            **fixed,
            "launcher": {"value": "node"},
            "launcher.key": {"values": waves(plan)},
        },
        "command": ["convexp", "ablate", _sweep_argument(plan), "${args_no_hyphens}"],
    }


def waves(plan: Plan) -> list[str]:
    """The node keys, those without dependencies first, then those whose dependencies are all in
    the first wave, and so on (parallel agents start every pre-training before any fine-tuning)."""
    level: dict[str, int] = {}
    for n in plan.order():  # dependency order: a node's dependencies have their level already
        level[n.key] = 1 + max((level[d] for d in n.deps), default=-1)
    return sorted(level, key=level.__getitem__)


def _sweep_argument(plan: Plan) -> str:
    """How the agent's command names the sweep: by name if that finds this file, else its path."""
    named = group_sources("sweep").get(plan.sweep.name)
    return plan.sweep.name if named and Path(named).resolve() == Path(plan.sweep.path).resolve() else str(plan.sweep.path)


def write_wandb_sweep(plan: Plan) -> Path:
    path = plan.home / "wandb-sweep.yaml"
    atomic_write(path, yaml.safe_dump(wandb_sweep_spec(plan), sort_keys=False))
    return path
