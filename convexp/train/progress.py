"""The terminal progress bar of a training run: optimizer steps done / steps in the whole run.

Lightning's bar counts the batches of one epoch and, for runs bounded by steps, reads "Epoch 0/-2";
a researcher wants to see how far the run is, across epochs and across a resume.
"""

from __future__ import annotations

from pytorch_lightning.callbacks import RichProgressBar
from pytorch_lightning.callbacks.progress.rich_progress import ProcessingSpeedColumn, RichProgressBarTheme


def refresh_every(trainer_cfg, cuda: bool) -> int:
    """Steps between reads of device values (the bar's metrics, the divergence check): every step
    on a CPU, where reading costs nothing; every ``log_every_n_steps`` on a GPU, where each read
    waits for the device to finish every step queued before it."""
    return int(trainer_cfg.log_every_n_steps) if cuda else 1


# The bar's metric names: short, so that the whole line fits 80 columns.
SHORT_NAMES = {"train/loss": "loss", "train/tokens_per_s": "tok/s"}


# Redraws per second of the bar's own thread (Lightning's ``refresh_rate``). Stopping the bar (the
# end of every fit) waits for that thread's sleep of 1/rate s: at 1 it was 0.2-0.8 s per run.
REDRAWS_PER_S = 10


class StepProgressBar(RichProgressBar):
    """Rich progress bar whose training task is ``global_step / estimated_stepping_batches``; it is
    updated, and its metrics (device values) read, every ``every`` steps (:func:`refresh_every`),
    and redrawn at most ``REDRAWS_PER_S`` times a second.
    The line fits 80 columns: a short description and bar, short metric names, and no batches/s
    column where the run logs its own rate (``speed=False``: pre-training's tokens/s)."""

    def __init__(self, every: int = 1, speed: bool = True):
        super().__init__(refresh_rate=REDRAWS_PER_S, theme=RichProgressBarTheme(metrics_format=".4g"))
        self.every = every
        self.speed = speed

    def configure_columns(self, trainer) -> list:
        columns = super().configure_columns(trainer)
        for column in columns:
            if hasattr(column, "bar_width"):
                column.bar_width = 10  # Lightning's 40 leaves no room for the metrics in 80 columns
        return [c for c in columns if self.speed or not isinstance(c, ProcessingSpeedColumn)]

    def get_metrics(self, trainer, pl_module) -> dict:
        """The bar's metrics under short names, without Lightning's logger version (``v_num``:
        the run directory names the run)."""
        shown = {}
        for key, value in super().get_metrics(trainer, pl_module).items():
            if key != "v_num":
                shown[SHORT_NAMES.get(key, key.removeprefix("val/"))] = value
        return shown

    def _show_steps(self, trainer) -> None:
        """The training task counts optimizer steps in the whole run (Lightning's: this epoch's
        batches), through rich's own ``Progress.update``."""
        if self.progress is None or self.train_progress_bar_id is None:
            return
        total = trainer.estimated_stepping_batches
        description = f"epoch {trainer.current_epoch + 1}"
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
        # ``every`` steps (a redraw costs the step loop about a millisecond of Python). Its
        # batch index is given as the steps done, which Lightning's bar shows as completed.
        if self.is_disabled:
            return
        if trainer.global_step % self.every == 0 or trainer.global_step == trainer.max_steps:
            resumed = self.train_progress_bar_id is None  # mid-epoch: Lightning's bar adds its task now
            super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)
            if resumed:
                self._show_steps(trainer)
                self.refresh()
