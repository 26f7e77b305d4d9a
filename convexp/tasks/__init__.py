"""The tasks, one folder each: its data, its Lightning stage, its evaluation.

  pretraining/      MLM or ELECTRA pre-training (``convexp pretrain``)
  classification/   GLUE, SentEval probing and custom sentence(-pair) tasks (``convexp finetune glue|probing``)
  squad/            extractive question answering, SQuAD v1.1 / v2.0 (``convexp finetune squad``)

What every stage shares is in ``convexp/train/``, the data every task shares in ``convexp/data/``.

This module is the task table: which command each kind of task is (:data:`COMMANDS`: the
``command.py`` that owns it), and which fine-tuning task is of which kind (a composed config's:
:func:`config_kind`, from its conf/task file's ``kind:``; a paper task's by name: :func:`kind`,
:func:`is_squad`). Every other module asks it
instead of testing names. It imports nothing of convexp, so it can be asked before torch is imported.

A task's ``command.py`` owns its command, called alike by the CLI, a sweep's planner and a sweep's
worker, in this order:

  STAGE                              pretrain or finetune: the config it composes
  arguments(overrides, kind)         the command's own defaults
  compose(overrides, cfg)            -> Invocation: its config, and every other task's it fine-tunes
  check(invocation, planned=False)   everything the runs will read, one pass, before the heavy
                                     imports: the first problem as one line
  plan(invocation, start, tokens)    -> its runs, named before any runs (``start``: the init's
                                     ``slug`` and ``width``; pre-training: None)
  run(invocation, summary=True)      open what it starts from, plan, train what has work left

A sweep's planner calls check(planned=True) and plan; the CLI and a sweep's worker check and run.

Adding a GLUE-like task: its entry in ``classification/registry.py`` (files, labels, metrics) and
its ``conf/task/<name>.yaml``. Adding a kind of task: its folder here with a ``command.py``, its
conf/task files (``kind: <its kind>``), and its line in :data:`COMMANDS`.
"""

from __future__ import annotations

import importlib
from typing import Mapping, NamedTuple

# GLUE's eight tasks that the papers report, in ConvBERT's column order (WNLI, the ninth, is in
# classification/registry.py for its files and submissions, and no table reports it)
GLUE = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
# SentEval's ten probing tasks, in BERMO Table 1's column order
PROBING = ("sentlen", "wc", "treedepth", "topconst", "bshift", "tense", "subjnum", "objnum", "somo", "coordinv")
# SQuAD: task name (conf/task/<name>.yaml) -> dataset version
SQUAD = {"squad1": "v1.1", "squad2": "v2.0"}


# kind -> the module that owns its command (`convexp pretrain`, `convexp finetune <kind>`)
COMMANDS = {
    "pretrain": "convexp.tasks.pretraining.command",
    "glue": "convexp.tasks.classification.command",
    "probing": "convexp.tasks.classification.command",
    "squad": "convexp.tasks.squad.command",
}


class Invocation(NamedTuple):
    """One command's composed configs: its own, and for every other task it fine-tunes
    (``task=all``) the same command's, by task name (empty for a single task)."""

    cfg: object  # DictConfig
    task_cfgs: Mapping[str, object]


def command(kind: str):
    """The ``command.py`` module of a kind of task (:data:`COMMANDS`)."""
    return importlib.import_module(COMMANDS[kind])


def is_squad(task: str) -> bool:
    """Whether ``task`` is extractive question answering (``convexp finetune squad``)."""
    return task in SQUAD


def config_kind(cfg) -> str:
    """The kind of a composed fine-tuning config's task: its conf/task file's ``kind:`` (unset:
    glue), so that a task of a kind added with its own conf/task files is routed by its config."""
    return cfg.task.get("kind") or "glue"


def kind(task: str) -> str:
    """``squad``, ``probing`` or ``glue`` (every other fine-tuning task: GLUE's, custom ones):
    which ``convexp finetune`` command runs it."""
    if task in SQUAD:
        return "squad"
    return "probing" if task in PROBING or task == "probing_all" else "glue"
