"""Ctrl-C is never lost: a SIGINT during training stops the run, wherever it lands.

Python turns SIGINT into a KeyboardInterrupt raised in whatever the main thread runs at that
moment. Most of the time that ends the run (Lightning turns it into ``sys.exit(1)``, which
`convexp.train.health.fit` turns back into KeyboardInterrupt). But a KeyboardInterrupt raised
inside a finalizer (a ``__del__``, a weakref callback, a generator closed by the garbage
collector, which a checkpoint save or a step can trigger at any point) is printed as "Exception
ignored in ..." and dropped, and so is one raised under a library's ``except BaseException`` that
does not re-raise it: the run then trains on and finishes as if no Ctrl-C had come.

`CtrlC` records the signal itself before raising, so the record survives whatever swallows the
exception: every hook of a step (batch start, before and after the backward pass, before the
optimizer step, batch end, a validation batch's start and end, before a checkpoint is written)
raises KeyboardInterrupt again while it is set, so the run stops at the next of them at the latest
— never writing a checkpoint after the Ctrl-C — and `fit` raises it if training returned anyway.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

import pytorch_lightning as pl


class CtrlC(pl.Callback):
    """Installed (``with guard.installed():``) around ``trainer.fit``; ``seen`` once SIGINT came."""

    def __init__(self) -> None:
        self.seen = False

    def _on_sigint(self, signum, frame) -> None:
        self.seen = True
        raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator["CtrlC"]:
        """SIGINT recorded and raised while inside (main thread only: elsewhere nothing changes);
        the previous handler back after, whatever Lightning set meanwhile (it ignores SIGINT
        while it shuts down after one)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)

    def stop_if_seen(self, *_args, **_kwargs) -> None:
        if self.seen:
            raise KeyboardInterrupt

    on_train_batch_start = stop_if_seen
    on_before_backward = stop_if_seen
    on_after_backward = stop_if_seen
    on_before_optimizer_step = stop_if_seen
    on_train_batch_end = stop_if_seen
    on_validation_batch_start = stop_if_seen
    on_validation_batch_end = stop_if_seen
    on_save_checkpoint = stop_if_seen
    on_train_end = stop_if_seen
