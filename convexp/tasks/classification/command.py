"""``convexp finetune glue`` and ``convexp finetune probing``: the commands this task owns, called
by the CLI, a sweep's planner and a sweep's worker alike (see tasks/pretraining/command.py).

  compose  the invocation's config and, for every other task it fine-tunes (``task=all``, MNLI
           before the tasks that start from it), the same command's (finetune_runs.py)
  check    the fine-tuning inputs every task has (the outputs folder, ``init=``,
           ``distill.teacher=``, the tokenizer; ``init=none``: the model and every task's
           ``task.max_len``), the grid against the command line's values, and each task's data on
           disk (loading.py: a GLUE or SentEval folder, a saved dataset, a custom task's files), in
           one pass before the stage's heavy imports; the first problem as one line
  plan     the runs, named before any of them runs (finetune_runs.py): from the init's name and
           width alone, so a sweep's planner lays out runs of models it has yet to pre-train
  run      open the init (what only the opened model says: train/finetune.open_init), plan, and
           fine-tune the runs with work left (stage.py)
"""

from __future__ import annotations

from omegaconf import DictConfig

from .. import Invocation
from ...train.inputs import check_finetune_inputs
from ..finetune_runs import TASK_SETS, check_grid, classification_runs, compose_finetune, probing_overrides
from .loading import check_task

STAGE = "finetune"


def arguments(overrides: list[str], kind: str) -> list[str]:
    """``probing``: task=all is the ten probing tasks, BERMO's protocol and seeds
    (finetune_runs.probing_overrides)."""
    return probing_overrides(overrides) if kind == "probing" else list(overrides)


def compose(overrides: list[str], cfg: DictConfig) -> Invocation:
    return Invocation(*compose_finetune(overrides, cfg))


def check(inv: Invocation, planned: bool = False) -> None:
    """``planned``: a sweep's plan: what the config alone decides (its init and teachers may be runs
    it has yet to make; the data files are checked when its node runs)."""
    cfgs = (inv.cfg, *inv.task_cfgs.values())
    check_finetune_inputs(inv.cfg, inv.task_cfgs.values(), planned=planned)
    for c in cfgs:
        check_grid(c)
    for c in cfgs if not planned else ():
        if c.task.name not in TASK_SETS:  # task=all: each of its tasks is among task_cfgs
            check_task(c.task, c.glue, bool(c.both_orders))


def plan(inv: Invocation, start, tokens: list[str] | None = None) -> list:
    """The invocation's runs (store/rundirs.FinetuneRun), MNLI before the tasks that start from it.
    ``start``: the init's ``slug`` and ``width``; ``tokens``: the names' tokens (a sweep's; None:
    the command's)."""
    return classification_runs(inv.cfg, start.slug, start.width, inv.task_cfgs, tokens)


def run(inv: Invocation, summary: bool = True) -> None:
    from ...train.finetune import open_init
    from .stage import fine_tune

    init = open_init(inv.cfg, [inv.cfg, *inv.task_cfgs.values()])
    fine_tune(inv.cfg, inv.task_cfgs, init, plan(inv, init), summary=summary)
