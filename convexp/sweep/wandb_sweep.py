"""A sweep as a W&B sweep file: one agent job per variant, for running it across machines with
``wandb agent`` instead of a launcher."""

from __future__ import annotations

from pathlib import Path

import yaml

from .plan import Plan


def wandb_sweep_spec(plan: Plan) -> dict:
    """A W&B sweep: one agent job per variant, each running that variant's whole pipeline with
    the same arguments as this command (``${args_no_hyphens}`` passes them as KEY=VALUE)."""
    sweep = plan.sweep
    fixed = {}
    for a in plan.args:
        key, _, value = a.partition("=")
        if key.lstrip("+~") not in ("variants", "launcher", "launcher.workers"):
            fixed[key] = {"value": value}
    return {
        "name": sweep.name,
        "description": f"convexp ablate {sweep.name}: {sweep.title}",
        "program": "convexp",
        "method": "grid",
        "parameters": {"variants": {"values": plan.variants}, **fixed},
        "command": ["convexp", "ablate", sweep.name, "${args_no_hyphens}"],
    }


def write_wandb_sweep(plan: Plan) -> Path:
    path = plan.home / "wandb-sweep.yaml"
    from ..atomic import atomic_write

    atomic_write(path, yaml.safe_dump(wandb_sweep_spec(plan), sort_keys=False))
    return path
