"""Training health: stop at the first non-finite step, resume without losing or repeating logs.

`Health` is the Lightning callback every stage adds:

- **divergence**: after the backward pass and before the optimiser step it checks the loss and the
  gradient norm (one fused norm over every gradient). A non-finite one stops training, raising
  `RunDiverged` with the first bad step, the last finite loss and the learning rate, and no
  checkpoint of it or of any later step is ever written. How soon the check reads the device is
  ``check_every``: on a CPU every step (reading is free there), so training stops inside the
  bad step and the weights are never updated with it; on a GPU the check stays on the device
  (a flag and the first bad step, kept by device kernels, so the step queues without waiting
  for the device) and is read every ``check_every`` steps (the stages pass
  ``log_every_n_steps``), before every checkpoint and at the end of training — a diverged run
  is still caught, and never checkpointed or finished. With fp16 AMP the gradient scaler skips
  overflowing steps by design; ``patience`` such steps in a row are tolerated before the run
  counts as diverged (read every step).
- **resume**: it keeps, in every checkpoint, the metrics of the last step and the step of the last
  validation, so a resumed run can report the same final metrics as an uninterrupted one and
  redo a validation its checkpoint predates (a periodic one killed in flight is run again before
  training goes on; the one after the last step is redone by the stage); on train start it drops
  the CSV rows of the steps and validations the resumed run will redo.

`fit` runs ``trainer.fit`` and turns Lightning's ways of stopping on a signal (SIGINT becomes
``sys.exit(1)`` inside Lightning) back into KeyboardInterrupt / RunInterrupted, which the run's
attempt records as ``interrupted``.

**SIGTERM saves, Ctrl-C does not.** SIGTERM is how ``kill``, ``docker stop``, Kubernetes and SLURM
(preemption, ``scancel``) ask a process to stop, with a grace period before SIGKILL. Lightning
stops at the end of the current step; `fit` then saves ``last.ckpt`` there, so the resume loses
at most that step, not everything since the last periodic checkpoint. The save is atomic (a
temporary file renamed into place): a SIGKILL that follows during the save leaves the previous
``last.ckpt``, never a truncated one, so saving can only gain. Ctrl-C (SIGINT) becomes
KeyboardInterrupt in the middle of a step, where the weights and the optimizer state may not agree;
it keeps the last periodic checkpoint and stops at once (use ``kill PID`` to stop after the step).

**SLURM time limit.** Under SLURM (``SLURM_JOB_ID`` set; ``sbatch --signal=USR1@120`` asks for the
warning) ``trainer.requeue_signal`` stops training at the end of the current step, saves
``checkpoints/last.ckpt``, asks ``scontrol requeue`` for this job (array task) and raises
RunInterrupted: the run is recorded ``interrupted`` and the requeued job, running the same
command, resumes the same run from that checkpoint. Lightning's own SLURM auto-requeue is not used
because its fit returns normally after the signal (the run would be recorded finished after a
partial training) and it saves ``hpc_ckpt_*.ckpt`` beside, not in, the run's checkpoints: the
stages pass ``SLURMEnvironment(auto_requeue=False)`` (`convexp.train.common.cluster_plugins`), so
Lightning never installs its handler, whatever the order. It covers ``srun convexp …``
under sbatch.

**submitit jobs** (``launcher=submitit``, on SLURM or on this machine): submitit installs its own
handler for its signal (USR2) before the job runs, and the sweep's job (`convexp.sweep.node_job`)
sets ``trainer.requeue_signal`` to that signal. A handler already installed for the signal means
the job runner requeues: training still stops at the end of the step and saves ``last.ckpt``, then
submitit's handler is called, which asks the job for its next submission (the same node), requeues
it and exits. Only one of the two ever requeues: ``scontrol`` is not called here then.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytorch_lightning as pl
import torch

from ..store.runs import RunDiverged, RunInterrupted, error_line
from .ctrl_c import CtrlC
from .grad_norm import total_norm
from .metrics_csv import AppendingCSVLogger

log = logging.getLogger(__name__)


class Health(pl.Callback):
    def __init__(self, patience: int = 0, requeue_signal: str | None = None, check_every: int = 1):
        self.patience = patience
        self.requeue_signal = requeue_signal  # e.g. "SIGUSR1": SLURM's time-limit warning
        self.check_every = check_every  # read the divergence check every N steps (1: every step)
        self.requeue_requested = False
        self.bad_steps = 0  # non-finite steps in a row (skipped by the AMP gradient scaler)
        self._last_finite: float | torch.Tensor | None = None  # the last finite loss (device: a tensor)
        self._loss: float | torch.Tensor | None = None  # this step's loss (accumulated micro-batches: the last)
        self._loss_bad: torch.Tensor | bool = False
        self._first_bad: torch.Tensor | None = None  # device check: first non-finite step, -1 if none
        self._bad_norm: torch.Tensor | None = None  # ... and its gradient norm
        self.val_step = -1  # global step of the last completed validation
        self.restored = False  # a checkpoint was loaded
        self.restored_step = 0
        self.restored_metrics: dict[str, float] = {}
        self.exception: BaseException | None = None
        self.stopped_in_validation = False  # the exception came inside fit's periodic validation

    # ---------------------------------------------------------------- divergence
    def on_fit_start(self, trainer, pl_module) -> None:
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            self.check_every = 1  # fp16: skipped steps are counted as they come (patience)

    @property
    def last_finite_loss(self) -> float | None:
        """The last finite training loss before the first non-finite step (reads the device)."""
        if isinstance(self._last_finite, torch.Tensor):
            value = float(self._last_finite)
            return value if math.isfinite(value) else None
        return self._last_finite

    @last_finite_loss.setter
    def last_finite_loss(self, value: float | None) -> None:
        self._last_finite = value

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        loss = loss.detach().float()
        if self.check_every == 1:
            value = float(loss)
            self._loss, self._loss_bad = value, not math.isfinite(value)
            return
        self._loss, self._loss_bad = loss, ~torch.isfinite(loss)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        norm = getattr(pl_module, "captured_grad_norm", None)  # a captured step computed it (captured.py)
        if norm is None:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            norm = total_norm(grads)
        if hasattr(pl_module, "step_grad_norm"):  # common.OptimizerStep: its clipping reuses it
            pl_module.step_grad_norm = norm
        if self.check_every > 1:
            self._track_on_device(trainer, norm)
            step = trainer.global_step + 1
            if step % self.check_every == 0 or step == trainer.max_steps:
                self.check(trainer, optimizer)
            return
        norm = float(norm)
        loss_bad, self._loss_bad = self._loss_bad, False
        bad = loss_bad or not math.isfinite(norm)
        if not bad:
            self.bad_steps = 0
            self.last_finite_loss = self._loss
            return
        self.bad_steps += 1
        scaler = getattr(trainer.precision_plugin, "scaler", None)  # fp16 AMP: this step is skipped
        if scaler is not None and self.bad_steps <= self.patience:
            return
        self._diverged(trainer.global_step + 1, loss_bad, norm, optimizer)

    def _track_on_device(self, trainer, norm: torch.Tensor) -> None:
        """The check without reading the device: keep the first bad step, its gradient norm and
        the last finite loss before it in device tensors."""
        bad = self._loss_bad | ~torch.isfinite(norm)
        if self._first_bad is None:
            self._first_bad = torch.full((), -1, dtype=torch.long, device=norm.device)
            self._bad_norm = torch.zeros((), device=norm.device)
            last = self._last_finite if isinstance(self._last_finite, float) else float("nan")
            self._last_finite = torch.full((), last, device=norm.device)
        first = (self._first_bad < 0) & bad
        self._first_bad = torch.where(first, trainer.global_step + 1, self._first_bad)
        self._bad_norm = torch.where(first, norm, self._bad_norm)
        fine = (self._first_bad < 0) & ~bad
        self._last_finite = torch.where(fine, self._loss, self._last_finite)

    def check(self, trainer, optimizer=None) -> None:
        """Read the device check (a GPU run); raise RunDiverged if any step so far was non-finite."""
        if self._first_bad is None:
            return
        step = int(self._first_bad)
        if step >= 0:
            optimizer = optimizer or trainer.optimizers[0]
            self._diverged(step, None, float(self._bad_norm), optimizer)

    def _diverged(self, step: int, loss_bad: bool | None, norm: float, optimizer) -> None:
        lr = float(optimizer.param_groups[0]["lr"])  # a tensor where the optimizer keeps one
        what = "loss" if loss_bad else "gradient norm" if loss_bad is not None else "loss or gradient norm"
        raise RunDiverged(
            f"training diverged: non-finite {what} at step {step} (last finite loss {self.last_finite_loss}, "
            f"learning rate {lr:.3g}); checkpoints of earlier steps are kept. Lower the learning rate",
            step=step,
            last_finite_loss=self.last_finite_loss,
            lr=lr,
            grad_norm=norm if math.isfinite(norm) else str(norm),
        )

    def on_train_end(self, trainer, pl_module) -> None:
        self.check(trainer)  # the steps after the last read

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.exception = exception
        # read now: Lightning clears the stage before the SIGTERM checkpoint is written
        self.stopped_in_validation = trainer.validating and not trainer.sanity_checking

    # ---------------------------------------------------------------- resume
    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.val_step = trainer.global_step

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self.check(trainer)  # before the file is written: a diverged state is never saved
        if self.stopped_in_validation:  # SIGTERM inside a periodic validation: saved after it stopped
            _as_before_validation(checkpoint)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        checkpoint["convexp_health"] = {
            "metrics": {**self.restored_metrics, **metrics},
            "val_step": self.val_step,
            "last_finite_loss": self.last_finite_loss,
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self.restored_step = int(checkpoint.get("global_step", 0))
        state = checkpoint.get("convexp_health", {})
        self.restored_metrics = state.get("metrics", {})
        self.val_step = state.get("val_step", -1)
        self.last_finite_loss = state.get("last_finite_loss")
        if self._validation_after(trainer, self.restored_step) and self.val_step < self.restored_step:
            _validation_in_flight(checkpoint)
        self._drop_redone_rows(trainer)  # here: a run resumed at its last step does not start training
        self.restored = True

    @staticmethod
    def _validation_after(trainer, step: int) -> bool:
        """Whether a periodic validation follows optimizer step ``step`` in the middle of training
        (validation every N steps; the stage redoes the one after the last step itself)."""
        every = trainer.val_check_interval  # batches (optimizer steps x accumulation)
        return (
            trainer.check_val_every_n_epoch is None
            and isinstance(every, int)
            and 0 < step
            and (trainer.max_steps < 0 or step < trainer.max_steps)
            and step * trainer.accumulate_grad_batches % every == 0
        )

    def on_train_start(self, trainer, pl_module) -> None:
        if not self.restored:  # a fresh start: the rows of an attempt killed before its first checkpoint
            self._drop_redone_rows(trainer)

    def _drop_redone_rows(self, trainer) -> None:
        # Lightning logs the rows of optimizer step s (1-based), and of the validation after it,
        # with step s - 1. A checkpoint at global step K holds steps 1..K and the validations up
        # to val_step: this attempt redoes the rows with step >= K and the validation rows with
        # step >= val_step (a validation after step K that the checkpoint predates).
        K, v = self.restored_step, self.val_step

        def redone(row: dict) -> bool:
            step = int(row["step"])
            return step >= K or (step >= v and any(row[k] != "" for k in row if k.startswith("val/")))

        for logger in trainer.loggers if trainer.is_global_zero else []:
            if isinstance(logger, AppendingCSVLogger):
                logger.drop_rows(redone)

    def final_metrics(self, trainer: pl.Trainer) -> dict[str, float]:
        """The metrics at the end of training: those restored from the checkpoint, overwritten
        by those this attempt logged."""
        return {**self.restored_metrics, **{k: float(v) for k, v in trainer.callback_metrics.items()}}


# Lightning's checkpoint loop state ("loops" -> "fit_loop") is private and may change in any minor
# release: the two functions below edit it only for the minors whose layout they were tested on
# (pyproject.toml bounds Lightning to them; tests/test_lightning_public.py checks both agree).
LOOP_STATE_MINORS = ("2.6",)


def fit_loop_state(checkpoint: dict) -> dict:
    """The checkpoint's fit-loop state, to edit in place, when both the Lightning that wrote it and
    the one running are of a minor in ``LOOP_STATE_MINORS``; otherwise an empty dict (nothing is
    edited), with a warning: a validation interrupted mid-way is then not redone on resume."""
    versions = {str(checkpoint.get("pytorch-lightning_version", "unknown")), pl.__version__}
    unknown = sorted(v for v in versions if ".".join(v.split(".")[:2]) not in LOOP_STATE_MINORS)
    if unknown:
        log.warning(
            "Lightning %s: convexp knows the checkpoint loop state of Lightning %s only; a validation "
            "interrupted mid-way is not redone on resume",
            ", ".join(unknown),
            ", ".join(LOOP_STATE_MINORS),
        )
        return {}
    return checkpoint.get("loops", {}).get("fit_loop", {})


def _as_before_validation(checkpoint: dict) -> None:
    """Make a checkpoint saved inside the validation that follows a step (SIGTERM there: the
    weights are those of the step's end) read as the step checkpoint written just before that
    validation: the training batch not yet counted complete, the validation's batches not begun.
    On resume :func:`_validation_in_flight` then has the whole validation run once, with its
    logged step — Lightning's own mid-validation restart would log it one step early and score
    only the batches that were left."""
    fit_loop = fit_loop_state(checkpoint)
    train, val = fit_loop.get("epoch_loop.batch_progress"), fit_loop.get("epoch_loop.val_loop.batch_progress")
    if not train or not val:
        return
    for counts in (train["current"], train["total"]):
        counts["completed"] -= 1
    done = dict(val["current"])  # this validation's batches so far
    for key, n in done.items():
        val["total"][key] -= n
        val["current"][key] = 0


def _validation_in_flight(checkpoint: dict) -> None:
    """Mark the restored validation loop as stopped inside a validation, so that Lightning runs
    that validation again before training on. A step checkpoint is written at the end of the step,
    before the validation that follows it; a run killed inside that validation resumes from it,
    and Lightning, which counts the validation as done, would skip it (no ``val/loss`` for that
    step)."""
    fit_loop = fit_loop_state(checkpoint)
    progress, epoch = fit_loop.get("epoch_loop.val_loop.batch_progress"), fit_loop.get("epoch_loop.state_dict")
    if not progress or not epoch:
        return
    total = progress["total"]
    total["ready"] = total["started"] = total["completed"] + 1  # one batch started, none processed
    total["processed"] = total["completed"]
    progress["current"].update(ready=1, started=1, processed=0, completed=0)
    # the restart counts the step's logging as done (+1) and the redone validation counts it again
    epoch["_batches_that_stepped"] -= 1


def fit(trainer: pl.Trainer, module: pl.LightningModule, **kwargs) -> Health:
    """``trainer.fit`` (its Health callback required); returns the callback. Ctrl-C raises
    KeyboardInterrupt, SIGTERM RunInterrupted (after saving ``last.ckpt`` at the step it stopped
    at), divergence RunDiverged; the time-limit signal checkpoints, requeues and raises
    RunInterrupted."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    [health] = [c for c in trainer.callbacks if isinstance(c, Health)]
    main = threading.current_thread() is threading.main_thread()
    # inside fit, Lightning's own SIGTERM handling stops at the end of the step (graceful)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL) if main else None
    requeue = getattr(signal, health.requeue_signal) if health.requeue_signal else None
    runner = signal.getsignal(requeue) if main and requeue is not None else None
    runner = runner if callable(runner) else None  # submitit's handler: it requeues the job
    slurm = main and requeue is not None and ("SLURM_JOB_ID" in os.environ or runner is not None)
    if slurm:

        def on_time_limit(signum, frame):
            health.requeue_requested = True
            trainer.should_stop = True  # the loop stops after the current step

        previous_requeue = signal.signal(requeue, on_time_limit)
    ctrl_c = CtrlC()  # a Ctrl-C recorded as it comes: never lost, whatever swallows its exception
    trainer.callbacks.append(ctrl_c)
    try:
        with ctrl_c.installed():
            trainer.fit(module, **kwargs)
            ctrl_c.stop_if_seen()  # training returned although a Ctrl-C came
        if health.requeue_requested:
            _checkpoint_and_requeue(trainer, health.requeue_signal, runner)
    except SIGTERMException:  # raised at the end of a step: the state is consistent, keep it
        ctrl_c.stop_if_seen()  # a Ctrl-C too: it stops at once, saving nothing
        _save_last(trainer)
        raise RunInterrupted(f"SIGTERM after step {trainer.global_step} (checkpointed)") from None
    except SystemExit:
        if ctrl_c.seen or isinstance(health.exception, KeyboardInterrupt):  # Lightning made it exit(1)
            raise KeyboardInterrupt from None
        raise
    except Exception as e:
        if not (trainer.received_sigterm or health.requeue_requested):
            raise
        # broken by the stop itself: SLURM signals every process of the job, so W&B's service or a
        # loader worker may die before the step ends; the run stopped all the same
        _stopped_while_stopping(trainer, health, runner, e)
    finally:
        trainer.callbacks.remove(ctrl_c)
        if main:
            signal.signal(signal.SIGTERM, previous)
        if slurm:
            signal.signal(requeue, previous_requeue)
    return health


def slurm_job_id() -> str:
    """This job's id as ``scontrol requeue`` takes it (``ARRAYID_TASK`` for a job array task)."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ["SLURM_JOB_ID"]


def _save_last(trainer: pl.Trainer) -> None:
    """Save ``last.ckpt`` where the run's ModelCheckpoint writes, atomically (a kill during the save
    leaves the previous one)."""
    path = Path(trainer.checkpoint_callback.dirpath) / "last.ckpt"
    partial = path.with_name("last.ckpt.partial")  # not *.ckpt: never taken for a checkpoint
    trainer.save_checkpoint(str(partial), weights_only=False)  # the whole state, said (no Lightning line)
    if trainer.is_global_zero:
        os.replace(partial, path)


def _stopped_while_stopping(trainer: pl.Trainer, health: Health, runner, error: Exception) -> None:
    """A stop signal came, then ``error`` (something the signal also reached broke the step): no
    checkpoint of that step (the last periodic one stays), the job requeued as the signal asked,
    and RunInterrupted naming both, so the attempt is ``interrupted``, never ``failed``."""
    broke = error_line(error)
    if health.requeue_requested:
        _checkpoint_and_requeue(trainer, health.requeue_signal, runner, save=False, why=broke)
    step = trainer.global_step
    raise RunInterrupted(f"SIGTERM at step {step} ({broke} while stopping; the last checkpoint is kept)")


def _checkpoint_and_requeue(
    trainer: pl.Trainer, signame: str, runner=None, save: bool = True, why: str = ""
) -> None:
    """Save ``last.ckpt`` where the run's ModelCheckpoint writes, have the job requeued (by the job
    runner's handler ``runner`` when there is one, else ``scontrol requeue``) and raise
    RunInterrupted so the attempt is recorded ``interrupted``, exiting with the runner's code.
    ``save=False``: the step did not end cleanly (``why``), its last periodic checkpoint is kept."""
    if save:
        _save_last(trainer)
    saved = "checkpointed" if save else f"{why} while stopping, the last checkpoint kept"
    if runner is not None:
        code = None
        try:
            runner(getattr(signal, signame), None)  # submitit: checkpoint() -> requeue -> sys.exit
        except SystemExit as e:
            code = e.code
        raise RunInterrupted(
            f"{signame} (time limit) at step {trainer.global_step}: {saved}, requeued by the job runner",
            exit_code=code,
        )
    job = slurm_job_id()
    if trainer.is_global_zero:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"warning: scontrol requeue {job} failed: {done.stderr.strip()}", file=sys.stderr)
    step = trainer.global_step
    raise RunInterrupted(f"{signame} (SLURM time limit) at step {step}: {saved}, job {job} requeued")
