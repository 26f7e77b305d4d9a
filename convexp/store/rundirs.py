"""A planned fine-tuning run (:class:`FinetuneRun`: its task, seed, hyper-parameters and run
directory, known before it runs) and how a checkpoint a run names is identified in run ids
(:func:`checkpoint_identity`). What a run name shows is config/name_tokens.py; the runs themselves are
planned in the task layer: tasks/pretraining/runs.py, tasks/finetune_runs.py (GLUE, probing, custom
tasks) and tasks/squad/runs.py."""

from __future__ import annotations

import dataclasses

from .runs import Run


@dataclasses.dataclass
class FinetuneRun:
    """One planned fine-tuning run of any task (GLUE, probing, custom, SQuAD): (task, seed,
    hyper-parameters), its run directory, and the run it starts from (the same seed's MNLI run, for
    the intermediate tasks) or None. Planned by tasks/finetune_runs.py and tasks/squad/runs.py."""

    task: str
    seed: int
    hp: dict
    run: Run
    run_cfg: dict  # what the run id hashes (tasks/finetune_runs.finetune_run)
    start: "FinetuneRun | None" = None
    read_later: bool = False  # another run of the same command starts from its weights


def checkpoint_identity(path: str) -> str:
    """A teacher or a continued init by what it is: a run's id, or the checkpoint's absolute path
    (or hub name)."""
    from pathlib import Path

    p = Path(path)
    in_store = p.parent.parent.name == "runs"  # a run of the store, planned, maybe not run yet
    if in_store or (p / "model").is_dir() or (p / "metrics.json").exists():
        return p.resolve().name
    return str(p.resolve()) if p.exists() else path
