"""The terminal progress bar of a training run: optimizer steps done / steps in the whole run.

Lightning's bar counts the batches of one epoch and, for runs bounded by steps, reads "Epoch 0/-2";
a researcher wants to see how far the run is, across epochs and across a resume.
"""

from __future__ import annotations

from pytorch_lightning.callbacks import RichProgressBar


def refresh_every(trainer_cfg, cuda: bool) -> int:
    """Steps between reads of device values (the bar's metrics, the divergence check): every step
    on a CPU, where reading costs nothing; every ``log_every_n_steps`` on a GPU, where each read
    waits for the device to finish every step queued before it."""
    return int(trainer_cfg.log_every_n_steps) if cuda else 1


class StepProgressBar(RichProgressBar):
    """Rich progress bar whose training task is ``global_step / estimated_stepping_batches``; it is
    redrawn, and its metrics (device values) read, every ``refresh_rate`` steps (:func:`refresh_every`)."""

    def __init__(self, refresh_rate: int = 1):
        super().__init__(refresh_rate=refresh_rate)

    def _show_steps(self, trainer) -> None:
        """The training task counts optimizer steps in the whole run (Lightning's: this epoch's
        batches), through rich's own ``Progress.update``."""
        if self.progress is None or self.train_progress_bar_id is None:
            return
        total = trainer.estimated_stepping_batches
        description = f"steps (epoch {trainer.current_epoch + 1})"
        self.progress.update(
            self.train_progress_bar_id,
            total=None if total == float("inf") else int(total),
            completed=trainer.global_step,
            description=f"[{self.theme.description}]{description}" if self.theme.description else description,
        )

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        if not self.is_disabled:
            self._show_steps(trainer)
            self.refresh()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Lightning's own bar reads the metrics and redraws after every batch: here every
        # refresh_rate steps (a redraw costs the step loop about a millisecond of Python). Its
        # batch index is given as the steps done, which Lightning's bar shows as completed.
        if self.is_disabled:
            return
        if trainer.global_step % self.refresh_rate == 0 or trainer.global_step == trainer.max_steps:
            resumed = self.train_progress_bar_id is None  # mid-epoch: Lightning's bar adds its task now
            super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)
            if resumed:
                self._show_steps(trainer)
                self.refresh()
