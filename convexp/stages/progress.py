"""The terminal progress bar of a training run: optimizer steps done / steps in the whole run.

Lightning's bar counts the batches of one epoch and, for runs bounded by steps, reads "Epoch 0/-2";
a researcher wants to see how far the run is, across epochs and across a resume.
"""

from __future__ import annotations

from pytorch_lightning.callbacks import RichProgressBar


class StepProgressBar(RichProgressBar):
    """Rich progress bar whose training task is ``global_step / estimated_stepping_batches``."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"steps (epoch {current_epoch + 1})"

    def _show_steps(self, trainer) -> None:
        if self.progress is None or self.train_progress_bar_id is None:
            return
        total = trainer.estimated_stepping_batches
        self.progress.update(
            self.train_progress_bar_id,
            total=None if total == float("inf") else int(total),
            completed=trainer.global_step,
        )

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        if not self.is_disabled:
            self._show_steps(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if not self.is_disabled:
            self._show_steps(trainer)
            self.refresh()
