"""The tasks, one folder each: its data, its Lightning stage, its evaluation.

  pretraining/      MLM or ELECTRA pre-training (``convexp pretrain``)
  classification/   GLUE, SentEval probing and custom sentence(-pair) tasks (``convexp finetune glue|probing``)
  squad/            extractive question answering, SQuAD v1.1 / v2.0 (``convexp finetune squad``)

What every stage shares is in ``convexp/train/``, the data every task shares in ``convexp/data/``.

This module is the task table: which object each kind of fine-tuning task is (:data:`KINDS`, by
import path: a :class:`~convexp.tasks.kind.TaskKind` in its folder, which owns its command, its
estimates and its report columns), pre-training's command (:data:`PRETRAIN`), and which kind a
composed config's task is (:func:`config_kind`, from its conf/task file's ``kind:``). A kind that
is not built in is a user's module (``--user-dir``) defining ``KIND`` (``module:NAME``: another
attribute), named by its task files' ``kind:`` and by ``convexp finetune <module>``. It imports
only tasks/kind.py (no more) at import time, so it can be asked before torch is imported.

Adding a GLUE-like task: its entry in ``classification/registry.py`` (files, labels, metrics) and
its ``conf/task/<name>.yaml``. Adding a kind of task: a :class:`~convexp.tasks.kind.TaskKind` in
its folder, its conf/task files (``kind: <its kind>``), and its line in :data:`KINDS` -- or, for a
user, the module and the task files alone (tasks/kind.py says how).
"""

from __future__ import annotations

import importlib

from .kind import Invocation, TaskKind

__all__ = ["Invocation", "TaskKind", "KINDS", "PRETRAIN", "task_kind", "command", "check_kind", "config_kind", "kind"]

# GLUE's eight tasks that the papers report, in ConvBERT's column order (WNLI, the ninth, is in
# classification/registry.py for its files and submissions, and no table reports it)
GLUE = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
# SentEval's ten probing tasks, in BERMO Table 1's column order
PROBING = ("sentlen", "wc", "treedepth", "topconst", "bshift", "tense", "subjnum", "objnum", "somo", "coordinv")
# SQuAD: task name (conf/task/<name>.yaml) -> dataset version
SQUAD = {"squad1": "v1.1", "squad2": "v2.0"}


# kind -> its TaskKind object (the module that owns `convexp finetune <kind>`); pre-training's command
KINDS = {
    "glue": "convexp.tasks.classification.kinds:GLUE_KIND",
    "probing": "convexp.tasks.classification.kinds:PROBING_KIND",
    "squad": "convexp.tasks.squad.kind:SQUAD_KIND",
}
PRETRAIN = "convexp.tasks.pretraining.command"


def task_kind(kind: str):
    """The :class:`~convexp.tasks.kind.TaskKind` of ``kind``: a built-in one (:data:`KINDS`) or a
    user's module's ``KIND`` (``module:NAME``: its ``NAME``), imported on first use; one line where
    it cannot be found or is not a TaskKind."""
    from ..user_code import import_object, split

    path = KINDS.get(kind) or (kind if ":" in kind else f"{kind}:KIND")
    key = f"kind {kind}" if kind in KINDS else f"task kind {kind!r}"
    found = import_object(key, *split(path))
    if not isinstance(found, TaskKind):
        from ..errors import UserError

        raise UserError(f"{key}: {path} is a {type(found).__name__}, not a convexp.tasks.kind.TaskKind; "
                        "subclass TaskKind and make KIND an instance of it")
    return found


def command(kind: str):
    """What runs ``convexp pretrain`` (``kind="pretrain"``: its command module) or ``convexp finetune
    KIND`` (its :class:`~convexp.tasks.kind.TaskKind`): both have STAGE, arguments, compose, check,
    plan and run."""
    if kind == "pretrain":
        return importlib.import_module(PRETRAIN)
    return task_kind(kind)


def check_kind(kind: str, cfg) -> None:
    """``convexp finetune KIND task=T``: T's task file is of kind KIND where either is a user's (the
    built-in kinds refuse each other's tasks in their own checks); one line otherwise."""
    own = config_kind(cfg)
    if own != kind and (own not in KINDS or kind not in KINDS):
        from ..errors import UserError

        raise UserError(
            f"task={cfg.task.name} is of kind {own} (its task file's kind:), not {kind}: "
            f"run it with `convexp finetune {own}`"
        )


def config_kind(cfg) -> str:
    """The kind of a composed fine-tuning config's task: its conf/task file's ``kind:`` (unset:
    glue), so that a task of a kind added with its own conf/task files is routed by its config."""
    return cfg.task.get("kind") or "glue"


def kind(task: str) -> str:
    """The kind of a task the package ships, by its name: ``squad``, ``probing`` or ``glue`` (every
    other: GLUE's, custom ones). A user's task: its composed config's (:func:`config_kind`)."""
    if task in SQUAD:
        return "squad"
    return "probing" if task in PROBING or task == "probing_all" else "glue"
