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


class PackJob(Checkpointable):
    """Fine-tunes packed on one GPU (``launcher.per_gpu``, sweep/requests.py):
    ``PackJob(chosen)(stages, overrides, logs)`` runs each node side by side in a process of its own
    on the job's GPU (as the local pool's workers run, sweep/launchers.pool_job), its output in its
    own log, with the job's CPUs shared among them. The job fails if one of them failed, once all
    have ended (the others' results are kept).

    Warned of its time limit or pre-empted, every process of the job gets submitit's signal: each
    member stops at the end of its step and saves ``last.ckpt`` (a handler of the member's own stands
    for the job runner, so no member requeues the job itself), and submitit's handler in this process
    calls :meth:`checkpoint`, which waits for them before the job is requeued with the same nodes:
    each resumes its run, a finished one is cached."""

    WAIT_S = 75.0  # checkpoint(): how long the members may take to save (submitit warns 90 s ahead)

    def __init__(self, chosen: dict | None = None) -> None:
        self.chosen = chosen
        self._members: list = []

    def __call__(self, stages: list[str], overrides: list[list[str]], logs: list[str]) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        from .execute import pool_job

        cpus = int(os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1)
        threads = max(1, cpus // len(stages))
        signame = preempt_signal()
        with ProcessPoolExecutor(len(stages), mp_context=mp.get_context("spawn"), max_tasks_per_child=1) as pool:
            self._members = [
                pool.submit(pool_job, stage, [*args, f"trainer.requeue_signal={signame}"], log, threads, self.chosen,
                            None, signame)
                for stage, args, log in zip(stages, overrides, logs)
            ]  # fmt: skip
            errors = [f.result() for f in self._members]
        failed = [f"{log}: {e}" for log, e in zip(logs, errors) if e is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(stages)} packed fine-tunes failed: " + "; ".join(failed))

    def checkpoint(self, stages: list[str], overrides: list[list[str]], logs: list[str]) -> DelayedSubmission:
        """The submission of the requeued job, once the members have saved (or WAIT_S has passed)."""
        from concurrent.futures import wait

        if self._members:
            wait(self._members, timeout=self.WAIT_S)
        return DelayedSubmission(PackJob(self.chosen), stages, overrides, logs)
