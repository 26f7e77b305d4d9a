"""Where a fine-tuning run's time goes: its training steps against everything around them.

`StepClock` (a Lightning callback every fine-tuning run adds) times the training loop from the
start of its first batch to the end of its last, less the validation passes inside it, and notes
the wall-clock times of the first step's start and the last step's end; the host's clock only, so
nothing waits for a device. A run's ``metrics.json`` keeps it as ``timing`` (:meth:`record`), and
its ``examples_per_s`` is the loop's own rate: training rows over ``train_s``, not over the whole
attempt (data, model, W&B and Lightning's setup are the attempt's ``setup_s``).

  timing = {"started", "first_step", "last_step", "written": unix times (the attempt's start, the
            first step's start, the last step's end, the results written),
            "setup_s": first_step - started, "train_s": seconds in training steps,
            "steps": optimizer steps of this attempt, "validation_s": validation inside the fit}

``convexp bench finetune`` / ``bench squad`` read it to set the stage's rate beside its bare step's,
and a job's fixed cost (process start to first step, last step to exit) beside its steps'.
"""

from __future__ import annotations

import time

import pytorch_lightning as pl


class StepClock(pl.Callback):
    """The training loop's own time (see the module docstring)."""

    def __init__(self, started: float | None = None):
        self.started = time.time() if started is None else started  # the attempt's start (unix)
        self.first_step: float | None = None
        self.last_step: float | None = None
        self.steps = 0
        self.validation_s = 0.0  # validations between two training steps (inside the loop)
        self._pending = 0.0  # validation since the last step: inside the loop once another step follows
        self._validation_from: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.first_step is None:
            self.first_step = time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.last_step = time.time()
        self.steps += 1
        self.validation_s += self._pending
        self._pending = 0.0

    def on_validation_start(self, trainer, pl_module) -> None:
        self._validation_from = time.time()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._validation_from is not None and self.first_step is not None:
            self._pending += time.time() - self._validation_from
        self._validation_from = None

    def record(self, written: float | None = None) -> dict:
        """The run's ``timing`` (module docstring); ``written``: when its results are written (now)."""
        written = time.time() if written is None else written
        if self.first_step is None:  # resumed at its last step: no training this attempt
            return {"started": self.started, "written": written, "steps": 0, "train_s": 0.0}
        return {
            "started": self.started,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "written": written,
            "setup_s": self.first_step - self.started,
            "train_s": self.last_step - self.first_step - self.validation_s,
            "steps": self.steps,
            "validation_s": self.validation_s,
        }
