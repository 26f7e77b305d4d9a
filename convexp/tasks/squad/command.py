"""``convexp finetune squad``: the command this task owns, called by the CLI, a sweep's planner and
a sweep's worker alike (see tasks/pretraining/command.py for the three steps).

  check    the task and protocol (runs.py), the fine-tuning inputs every task has (the outputs
           folder, ``init=``, ``distill.teacher=``, the tokenizer, ``init=none``'s model), and the
           data source (data.py: a local folder holds both official files), in one pass before the
           stage's heavy imports; the first problem as one line
  plan     the runs, one per seed, named before any of them runs (runs.py)
  run      open the init (train/finetune.open_init), plan, and fine-tune each seed with work left
           (stage.py)
"""

from __future__ import annotations

from omegaconf import DictConfig

from .. import Invocation
from ...train.inputs import check_finetune_inputs
from .data import check_source
from .runs import check_squad_config, squad_runs, squad_source

STAGE = "finetune"


def arguments(overrides: list[str], kind: str) -> list[str]:
    """SQuAD v1.1 unless ``task=`` is given."""
    return list(overrides) if any(o.startswith("task=") for o in overrides) else ["task=squad1", *overrides]


def compose(overrides: list[str], cfg: DictConfig) -> Invocation:
    return Invocation(cfg, {})


def check(inv: Invocation, planned: bool = False) -> None:
    """``planned``: a sweep's plan: what the config alone decides (its init and teacher may be runs
    it has yet to make; the files are checked when its node runs)."""
    check_squad_config(inv.cfg)
    check_finetune_inputs(inv.cfg, planned=planned)
    source = squad_source(inv.cfg)
    if not planned:
        check_source(source)


def plan(inv: Invocation, start, tokens: list[str] | None = None) -> list:
    """The invocation's runs (store/rundirs.FinetuneRun): ``start``, ``tokens`` as for
    classification/command.py's ``plan``."""
    return squad_runs(inv.cfg, start.slug, start.width, tokens)


def run(inv: Invocation, summary: bool = True) -> None:
    from ...train.finetune import open_init
    from .stage import fine_tune

    init = open_init(inv.cfg)  # SQuAD's windows are checked against the model by each run
    fine_tune(inv.cfg, init, plan(inv, init))
