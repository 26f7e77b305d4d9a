"""``convexp finetune glue`` and ``convexp finetune probing``: the commands this task owns, called
by the CLI, a sweep's planner and a sweep's worker alike (see tasks/pretraining/command.py).

  compose  the invocation's config and, for every other task it fine-tunes (``task=all``, MNLI
           before the tasks that start from it), the same command's (finetune_runs.py)
  check    the fine-tuning inputs every task has (the outputs folder, ``init=``,
           ``distill.teacher=``, the tokenizer; ``init=none``: the model and every task's
           ``task.max_len``), and each task's data on disk (loading.py: a GLUE or SentEval folder,
           a saved dataset, a custom task's files), in one pass before the stage's heavy imports;
           the first problem as one line
  run      plan the runs (finetune_runs.py) and fine-tune them (stage.py)
"""

from __future__ import annotations

from omegaconf import DictConfig

from .. import Invocation
from ...train.inputs import check_finetune_inputs
from ..finetune_runs import TASK_SETS, compose_finetune, probing_overrides
from .loading import check_source

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
    check_finetune_inputs(inv.cfg, inv.task_cfgs.values(), planned=planned)
    for c in (inv.cfg, *inv.task_cfgs.values()) if not planned else ():
        if c.task.name not in TASK_SETS:  # task=all: each of its tasks is among task_cfgs
            check_source(c.task, c.glue)


def run(inv: Invocation, summary: bool = True) -> None:
    from .stage import run_classification

    run_classification(inv.cfg, inv.task_cfgs, summary=summary)
