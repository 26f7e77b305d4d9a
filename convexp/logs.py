"""What ``convexp -v`` / ``--quiet`` show: Python logging through one rich handler on stderr.

Without either flag nothing is installed: warnings reach stderr through Python's last-resort
handler, INFO lines (data cached or loaded from the cache, rows truncated, checkpoint tensors
ignored) are dropped, and the third-party lines that ask nothing of the user are silenced
(``convexp/noise.py``). ``-v`` shows them all, ``-vv`` debug lines too; ``--quiet`` keeps warnings
and errors only, Lightning's INFO lines included. Warnings are shown in every case.
"""

from __future__ import annotations

import logging

# Lightning's loggers: set to WARNING by --quiet (they log their device and tip lines at INFO)
LIGHTNING = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric")


_INSTALLED: list[logging.Handler] = []  # the handler show_logs installed last


def show_logs(verbose: int = 0, quiet: bool = False) -> logging.Handler:
    """Install the rich handler on the root logger: INFO with ``verbose`` 1, DEBUG with 2 or more,
    WARNING with ``quiet``; returns it."""
    from rich.console import Console
    from rich.logging import RichHandler

    level = logging.WARNING if quiet else logging.DEBUG if verbose > 1 else logging.INFO
    handler = RichHandler(console=Console(stderr=True), show_path=verbose > 1, rich_tracebacks=False)
    handler.setLevel(level)
    root = logging.getLogger()
    for old in _INSTALLED:  # called again in one process (a sweep's next node): one handler still
        root.removeHandler(old)
    _INSTALLED[:] = [handler]
    root.addHandler(handler)
    root.setLevel(min(root.level or logging.WARNING, level))
    logging.getLogger("convexp").setLevel(level)
    for name in LIGHTNING if quiet else ():
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler


_CHOSEN: dict = {}  # the command line's -v / --quiet (set_verbosity), for the processes a sweep starts


def set_verbosity(verbose: int = 0, quiet: bool = False) -> None:
    """This process shows what the command line's ``-v`` / ``--quiet`` choose: :func:`show_logs`
    with either flag, and the third parties silenced unless ``-v`` (convexp/noise.py). A sweep's
    worker processes and SLURM jobs are handed the same choice (:func:`verbosity`)."""
    _CHOSEN.update(verbose=verbose, quiet=quiet)
    if verbose or quiet:
        show_logs(verbose, quiet)
    from .noise import quiet as quiet_third_parties

    quiet_third_parties(verbose=bool(verbose))  # -v: every third-party line too


def verbosity() -> dict | None:
    """The choice :func:`set_verbosity` made in this process (keyword arguments for it), None when
    the command line made none (convexp used as a library: its caller's logging is left alone)."""
    return dict(_CHOSEN) or None
