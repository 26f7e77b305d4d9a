"""One sweep node as a submitit job that survives its time limit: requeued, it resumes the same run.

submitit calls a job's ``checkpoint`` when SLURM (or submitit's local executor) warns of the time
limit or preemption, and requeues the job with the submission it returns. `NodeJob` returns itself
with the same node, so the requeued job runs the same stage command, which resumes the run from its
last checkpoint (run ids are content hashes: the same command finds the same run directory).

The run saves that checkpoint itself: the job sets ``trainer.requeue_signal`` to submitit's signal,
so training stops at the end of the current step, saves ``last.ckpt`` and then hands the signal to
submitit's handler, which calls ``checkpoint`` and requeues (`convexp.train.health`). A signal
outside training (data preparation, export) goes to submitit's handler directly; the requeued job
then redoes that part.
"""

from __future__ import annotations

import os

from submitit.helpers import Checkpointable, DelayedSubmission

from ..logs import set_verbosity
from .execute import run_node


def preempt_signal() -> str:
    """The signal submitit warns a job with (``SUBMITIT_PREEMPT_SIGNAL``, default USR2), as a
    ``trainer.requeue_signal`` value."""
    return "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2").removeprefix("SIG")


class NodeJob(Checkpointable):
    """``NodeJob(chosen)(stage, overrides)`` runs one node: what ``convexp <stage> OVERRIDES``
    does, as verbose as the submitting command line chose (``chosen``: logs.verbosity())."""

    def __init__(self, chosen: dict | None = None) -> None:
        self.chosen = chosen

    def __call__(self, stage: str, overrides: list[str]) -> None:
        if self.chosen is not None:
            set_verbosity(**self.chosen)
        run_node(stage, [*overrides, f"trainer.requeue_signal={preempt_signal()}"])

    def checkpoint(self, stage: str, overrides: list[str]) -> DelayedSubmission:
        """The submission of the requeued job: the same node (it resumes from its checkpoint)."""
        return DelayedSubmission(NodeJob(self.chosen), stage, overrides)
