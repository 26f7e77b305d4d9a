"""How a training run says how far it is: optimizer steps done / steps in the whole run.

On a terminal, a rich bar (:class:`StepProgressBar`); anywhere else (a pipe, ``nohup``, ``| tee``,
a SLURM ``.out`` file, a sweep worker's log) plain lines (:class:`PlainProgress`), which a bar
cannot give: it draws only on a terminal, so such a log said nothing until the run ended.
:func:`step_progress` picks one. Lightning's bar counts the batches of one epoch and, for runs
bounded by steps, reads "Epoch 0/-2"; a researcher wants to see how far the run is, across epochs
and across a resume.
"""

from __future__ import annotations

import sys
import time

from pytorch_lightning.callbacks import RichProgressBar
from pytorch_lightning.callbacks.progress import ProgressBar
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


def step_progress(every: int = 1, speed: bool = True) -> ProgressBar:
    """The rich bar on a terminal, plain lines anywhere else (``every``: :func:`refresh_every`;
    ``speed``: the bar's batches/s column)."""
    return StepProgressBar(every, speed) if sys.stdout.isatty() else PlainProgress()


LINE_EVERY_S = 60.0  # a plain line at least this often
LINES = 10  # and one at every tenth of the run
WIDTH = 80  # columns a line fits


class PlainProgress(ProgressBar):
    """Plain lines for a log: at every tenth of the run's steps and at least once a minute (in a
    long validation too), e.g. ``step 1200/3000 40% loss 6.214 48.2k tok/s elapsed 14m05s ETA 21m08s``,
    within 80 columns. The rate is tokens/s where batches count their tokens (pre-training), else
    examples/s, over the steps since the last line. Device values (the loss) are read only when a
    line is due: at most one read a line, never one a step."""

    def __init__(self):
        super().__init__()
        self._enabled = True
        self._started = self._said = 0.0  # when training started, when the last line was printed
        self._first_step = 0  # the step this attempt started at (a resume counts on from there)
        self._window = (0.0, 0, 0)  # the rate's window since the last training line: start, step, items
        self._total: int | None = None  # optimizer steps of the whole run (None: unbounded)
        self._unit = "examples/s"

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_start(self, trainer, pl_module) -> None:
        self._started = self._said = time.monotonic()
        self._first_step = trainer.global_step
        self._window = (self._started, trainer.global_step, 0)
        self._total = _total(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        start, from_step, items = self._window
        tokens = batch.get("num_tokens") if isinstance(batch, dict) else None
        if tokens is not None:  # host numbers: counting them reads nothing from the device
            self._unit = "tok/s"
            items += int(tokens)
        elif isinstance(batch, dict) and "input_ids" in batch:
            items += len(batch["input_ids"])
        self._window = (start, from_step, items)
        if not (self._enabled and trainer.is_global_zero):
            return
        step, total = trainer.global_step, self._total
        now = time.monotonic()
        tenth = total is not None and _tenths(step, total) > _tenths(from_step, total)
        if tenth or now - self._said >= LINE_EVERY_S or step == total:
            loss = self.get_metrics(trainer, pl_module).get("train/loss")  # the one device read of a line
            rate = items / (now - start) if now > start else 0.0
            done, elapsed = step - self._first_step, now - self._started
            eta = (total - step) * elapsed / done if total is not None and done > 0 else None
            self._window = (now, step, 0)
            self._say(progress_line(step, total, loss, rate, self._unit, elapsed, eta), now)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        now = time.monotonic()
        if self._enabled and trainer.is_global_zero and now - self._said >= LINE_EVERY_S:
            batches = trainer.num_val_batches[dataloader_idx] if trainer.num_val_batches else None
            of = f"/{batches}" if isinstance(batches, int) else ""
            line = f"validating at step {trainer.global_step}: batch {batch_idx + 1}{of}, elapsed {duration(now - self._started)}"
            self._say(line[:WIDTH], now)

    def _say(self, line: str, now: float) -> None:
        self._said = now
        print(line, flush=True)


def _total(trainer) -> int | None:
    total = trainer.estimated_stepping_batches
    return None if total == float("inf") else int(total)


def _tenths(step: int, total: int) -> int:
    return step * LINES // max(total, 1)


def progress_line(step: int, total: int | None, loss, rate: float, unit: str, elapsed: float,
                  eta: float | None) -> str:  # fmt: skip
    """``step 1200/3000 40% loss 6.214 48.2k tok/s elapsed 14m05s ETA 21m08s``, at most 80 columns."""
    parts = [f"step {step}/{total} {100 * step // max(total, 1)}%" if total else f"step {step}"]
    if isinstance(loss, (int, float)):
        parts.append(f"loss {loss:#.4g}")
    parts += [f"{_count(rate)} {unit}", f"elapsed {duration(elapsed)}"]
    if eta is not None:
        parts.append(f"ETA {duration(eta)}")
    return " ".join(parts)[:WIDTH]


def _count(x: float) -> str:
    """1,234 / 48.2k / 1.31M: three significant figures past ten thousand."""
    if x >= 1e6:
        return f"{x / 1e6:.3g}M"
    if x >= 1e4:
        return f"{x / 1e3:.3g}k"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def duration(seconds: float) -> str:
    """42s, 5m03s, 2h05m, 3d04h."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
