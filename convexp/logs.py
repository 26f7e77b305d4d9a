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


def show_logs(verbose: int = 0, quiet: bool = False) -> logging.Handler:
    """Install the rich handler on the root logger: INFO with ``verbose`` 1, DEBUG with 2 or more,
    WARNING with ``quiet``; returns it."""
    from rich.console import Console
    from rich.logging import RichHandler

    level = logging.WARNING if quiet else logging.DEBUG if verbose > 1 else logging.INFO
    handler = RichHandler(console=Console(stderr=True), show_path=verbose > 1, rich_tracebacks=False)
    handler.setLevel(level)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(min(root.level or logging.WARNING, level))
    logging.getLogger("convexp").setLevel(level)
    for name in LIGHTNING if quiet else ():
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler
