"""A benchmark's scratch: its work folder and the child processes that run in it.

  work_folder(workdir, prefix)   context manager: ``--workdir`` (made, kept: the user's), or a
                                 temporary folder removed however the benchmark ends: at its end,
                                 on an error, Ctrl-C, or SIGTERM (``kill``, ``timeout``, a
                                 scheduler), its children stopped first
  start(cmd, **popen)            a child process (``subprocess.Popen``), known until ``forget``
  stop_children()                SIGTERM to every known child, SIGKILL to those still running
                                 after ``GRACE_S``; no new child starts after it

Python ends on SIGTERM without running ``finally`` clauses or ``with`` exits, so a timed-out
``convexp bench squad`` once left its 88 MB temporary folder behind: inside ``work_folder``
SIGTERM raises ``SystemExit`` in the main thread instead (where no other handler was set).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GRACE_S = 5.0  # how long a child has to end on SIGTERM before it is killed

_children: set[subprocess.Popen] = set()
_lock = threading.Lock()
_stopping = threading.Event()


@contextmanager
def work_folder(workdir: str | None, prefix: str) -> Iterator[Path]:
    """The benchmark's folder: ``workdir``, or a temporary one that does not outlive the bench."""
    _stopping.clear()
    if workdir:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with _sigterm_exits(), tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp:
        try:
            yield Path(tmp)
        finally:
            stop_children()  # nothing may write into the folder while it is removed


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while inside, where it had Python's default action (ended
    the process at once); the handler before is restored after."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def exit_on_sigterm(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(cmd: list[str], **popen) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen)``, known to :func:`stop_children` until :func:`forget`."""
    with _lock:
        if _stopping.is_set():
            raise SystemExit("the benchmark is stopping")
        proc = subprocess.Popen(cmd, **popen)
        _children.add(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    with _lock:
        _children.discard(proc)


def stop_children() -> None:
    """End every known child (SIGTERM, then SIGKILL after ``GRACE_S``) and reap it; no child
    starts after this (until the next :func:`work_folder`)."""
    with _lock:
        _stopping.set()
        procs = list(_children)
    for proc in procs:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        while _running(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(proc):
            _signal(proc, signal.SIGKILL)
            _reap(proc, 0)
        forget(proc)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:  # already reaped
        pass


def _running(proc: subprocess.Popen) -> bool:
    return not _reap(proc, os.WNOHANG)


def _reap(proc: subprocess.Popen, flags: int) -> bool:
    """Whether ``proc`` has ended (reaped here, or by its own waiter in another thread)."""
    try:
        pid, _ = os.waitpid(proc.pid, flags)
    except ChildProcessError:  # reaped already
        return True
    if pid:
        proc.returncode = -1  # reaped here: Popen must not wait for it again
    return pid != 0
