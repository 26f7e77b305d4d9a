"""A kind of fine-tuning task, one object: :class:`TaskKind`.

Every ``convexp finetune KIND`` is an instance of a subclass, kept in its task's folder
(classification/kinds.py: ``glue`` and ``probing``; squad/kind.py: ``squad``) or in a user's
module (``--user-dir``). Everything outside the task folders asks the object, never the papers'
task names: the CLI and a sweep's worker run its command's steps, a sweep's planner its check and
plan, the dry run its cost estimates, the report its score columns.

The command's steps, in order (called alike by the CLI, a sweep's planner and its worker)::

  arguments(overrides)               the command's own defaults (probing: BERMO's protocol and seeds)
  compose(overrides, cfg)            -> Invocation: its config, and every other task's it fine-tunes
  check(invocation, planned=False)   everything the runs will read, one pass, before torch: the
                                     first problem as one line (``planned``: a sweep's plan, what
                                     the config alone decides)
  check_device(invocation)           where it is about to run: scale=paper without a GPU refused
  plan(invocation, start, tokens)    -> its runs (store/rundirs.FinetuneRun), named before any runs
                                     (``start``: the init's ``slug`` and ``width``)
  run(invocation, summary=True)      open what it starts from, plan, train what has work left

What a sweep's dry run estimates from it (sweep/compute.py, memory.py, disk.py), for one task::

  train_examples(cfg, task)   rows of one training epoch (None: unknown, no FLOPs estimate)
  sequence_length(cfg)        tokens of one row as it is trained (SQuAD: the window)
  kept_bytes(cfg, task)       what one run keeps beyond its small files (predictions, submissions)

And what the report reads from one run's ``metrics.json`` (report/tables.py)::

  score_columns(m, style, split)  {column: value}: the task's score column(s)
  score(m, style, split)          the run's one score (a seed's cell), or None
  columns(task, style)            the columns a run of the task fills, before any result

A user's kind subclasses :class:`TaskKind` in a module on ``--user-dir`` and defines ``KIND``; a
task file of theirs says ``kind: <module>`` (``<module>:<name>`` for another attribute), and
``convexp --user-dir DIR finetune <module>`` runs it. Its runs are fine-tuning runs like any
(tasks/finetune_runs.py names them), so sweeps, ``--status`` and reports take them as they are.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple


class Invocation(NamedTuple):
    """One command's composed configs: its own, and for every other task it fine-tunes
    (``task=all``) the same command's, by task name (empty for a single task)."""

    cfg: object  # DictConfig
    task_cfgs: Mapping[str, object]


class TaskKind:
    """A kind of fine-tuning task (the module docstring lists what it answers). Subclasses set
    ``name`` and write ``check``, ``plan`` and ``run``; the rest has defaults for a task that
    fine-tunes one task per invocation on rows of ``task.max_len`` tokens."""

    STAGE = "finetune"  # the config it composes (conf/finetune.yaml)
    name = "?"  # ``convexp finetune NAME`` for a built-in kind; a user's: its module's name
    title = "?"  # how a report's header names its tasks (GLUE, SQuAD...)
    continues = False  # its tasks start from a sweep's longer-sequence continuation (squad_continuation)
    help = ""  # ``convexp finetune --help``'s line

    # --- the command ------------------------------------------------------------------------------

    def arguments(self, overrides: list[str]) -> list[str]:
        return list(overrides)

    def task_names(self, cfg) -> list[str]:
        """The tasks one invocation fine-tunes, in execution order (its own task, by default)."""
        return [cfg.task.name]

    def compose(self, overrides: list[str], cfg) -> Invocation:
        """``cfg`` (composed by the caller) and the same command's config for each other task of
        :meth:`task_names`."""
        from ..config.compose import compose_stage

        others = [t for t in self.task_names(cfg) if t != cfg.task.name]
        return Invocation(cfg, {t: compose_stage(self.STAGE, [*overrides, f"task={t}"]) for t in others})

    def check(self, inv: Invocation, planned: bool = False) -> None:
        raise NotImplementedError

    def check_device(self, inv: Invocation) -> None:
        """Where the command is about to run (after :meth:`check`; a sweep's node checks where its
        job runs): ``scale=paper`` where no GPU is visible is refused (train/inputs.py)."""
        from ..train.inputs import check_finetune_device

        check_finetune_device(inv.cfg, inv.task_cfgs.values())

    def plan(self, inv: Invocation, start, tokens: list[str] | None = None) -> list:
        raise NotImplementedError

    def run(self, inv: Invocation, summary: bool = True) -> None:
        raise NotImplementedError

    # --- a sweep's estimates ----------------------------------------------------------------------

    def train_examples(self, cfg, task: str) -> int | None:
        return None

    def sequence_length(self, cfg) -> int:
        return int(cfg.task.max_len)

    def kept_bytes(self, cfg, task: str) -> float:
        return 0.0

    # --- the report -------------------------------------------------------------------------------

    def score(self, m: dict, style: str, split: str = "dev") -> float | None:
        """The run's ``score`` where its metrics.json has one, else the first metric of the split."""
        results = m.get(split) or {}
        if not results:
            return None
        if isinstance(m.get("score"), (int, float)):
            return float(m["score"])
        first = next(iter(results.values()), {}) or {}
        return next((float(v) for v in first.values() if isinstance(v, (int, float))), None)

    def score_columns(self, m: dict, style: str, split: str = "dev") -> dict[str, float]:
        value = self.score(m, style, split)
        return {} if value is None else {m["task"]: value}

    def columns(self, task: str, style: str) -> tuple[str, ...]:
        """The report's columns a run of ``task`` fills (``score_columns``'s keys), known before any
        result: the task's own, by default."""
        return (task,)

    def __repr__(self) -> str:
        return f"<task kind {self.name}>"
