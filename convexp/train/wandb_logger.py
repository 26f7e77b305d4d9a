"""Lightning's W&B logger that cannot fail a run: W&B's failure is one line, then W&B is left alone.

SLURM signals every process of a job it stops or requeues, W&B's service process (wandb-core)
included: between the signal and the end of the step, logging the step's metrics to it raises
``ConnectionResetError: Connection lost`` (seen on a real SLURM's ``scontrol requeue``), which
would end the run as ``failed`` instead of checkpointing the step and recording ``interrupted``.
A service that died, a full disk under ``wandb/``: the run itself is fine, so `SturdyWandbLogger`
says once what W&B could not do and logs nothing more to W&B in that process (the CSV logger and
the run's records carry on); `convexp.train.common.finish_wandb` then finishes what it can.
"""

from __future__ import annotations

import sys

from pytorch_lightning.loggers import WandbLogger

from ..store.runs import error_line


class SturdyWandbLogger(WandbLogger):
    broken = False  # W&B failed once: nothing more is sent to it

    def _guarded(self, call, *args, **kwargs) -> None:
        if self.broken:
            return
        try:
            call(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - W&B's failure is not the run's
            self.broken = True
            print(f"warning: W&B stopped logging this run: {error_line(e)}", file=sys.stderr, flush=True)

    def log_metrics(self, metrics, step=None) -> None:
        self._guarded(super().log_metrics, metrics, step)

    def log_hyperparams(self, params) -> None:
        self._guarded(super().log_hyperparams, params)

    def after_save_checkpoint(self, checkpoint_callback) -> None:
        self._guarded(super().after_save_checkpoint, checkpoint_callback)

    def finalize(self, status: str) -> None:
        self._guarded(super().finalize, status)
