"""Which fine-tuning runs keep their weights (``model/``: fp32 encoder and head, with the
tokenizer), and getting them back for a finished run that did not keep them.

A fine-tuned model's weights are by far the largest thing a fine-tuning run writes (ConvBERT-base:
425 MB a run; a paper sweep runs thousands), and its results are its metrics, predictions and
submissions, which every run keeps. What reads the weights: a distillation teacher's student, an
intermediate task (Chang et al.'s RTE, STS-B and MRPC start from the same seed's MNLI run),
``convexp export`` and a user. ``keep_weights`` (conf/finetune.yaml; not in the run id):

    auto   a command's runs keep them (a user may read them); in a sweep, the planner gives each
           node ``all`` when a node that has yet to run reads its weights, else ``none``
    all    every run keeps them; a finished run that did not is trained again for them
    none   only a run another run of the same command starts from keeps them

A finished run whose weights are wanted again is trained again in a folder of its own inside its
run directory (``<run>/<id>-weights``: its own lock, checkpoints and W&B run), and only that
training's ``model/`` is moved into the run: the run's recorded results are never touched, and a
kill half-way resumes that training.
"""

from __future__ import annotations

import dataclasses
import shutil

from omegaconf import DictConfig

from ..models.files import is_model_dir
from ..store.rundirs import FinetuneRun
from ..store.runs import Run

CHOICES = ("auto", "all", "none")


def has_weights(run: Run) -> bool:
    return is_model_dir(run.model_dir)


def keeps_weights(cfg: DictConfig, planned: FinetuneRun) -> bool:
    """Whether the run writes ``model/`` when it finishes."""
    return str(cfg.get("keep_weights", "auto")) != "none" or planned.read_later


def wants_weights_again(cfg: DictConfig, planned: FinetuneRun) -> bool:
    """A finished run without its weights that must have them now: ``keep_weights=all`` asks for
    every run's, and another run of this command starts from it."""
    run = planned.run
    wanted = str(cfg.get("keep_weights", "auto")) == "all" or planned.read_later
    return wanted and run.finished and not has_weights(run)


def has_work(cfg: DictConfig, planned: FinetuneRun) -> bool:
    """Not finished, or finished without the weights it must have now."""
    return not planned.run.finished or wants_weights_again(cfg, planned)


def weights_run(planned: FinetuneRun) -> FinetuneRun:
    """The same run, trained again in its own folder inside the finished run (see the module doc)."""
    run = planned.run
    return dataclasses.replace(planned, run=Run(run.dir / f"{run.id}-weights"), read_later=True)


def say_training_again(planned: FinetuneRun) -> None:
    print(
        f"{planned.run.id}: finished without its weights (keep_weights), which are read now: "
        "training it again to keep them",
        flush=True,
    )


def adopt_weights(planned: FinetuneRun, again: FinetuneRun) -> None:
    """Move the weights trained again into the finished run; say how the score compares."""
    run = planned.run
    if not has_weights(run):
        again.run.model_dir.replace(run.model_dir)  # one rename: the run has whole weights or none
    ours = (again.run.read_json("metrics.json") or {}).get("score")
    recorded = (run.read_json("metrics.json") or {}).get("score")
    shutil.rmtree(again.run.dir, ignore_errors=True)
    print(f"{run.id}: weights kept (score trained again {ours}, recorded {recorded})", flush=True)
