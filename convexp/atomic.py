"""Content hashes and atomic writes: a file or directory that exists is complete.

Files and directories are built under a temporary sibling name and renamed into place in one
step, so a crash never leaves a half-written result that a later run or report would read as
real. If two processes build the same directory, the first rename wins and the other build is
dropped (the cache's semantics). A process killed mid-write leaves only its temporary name
behind (``.NAME.*`` for a file, ``.tmp-NAME-*`` for a directory); `leftovers` finds them.

An entry that many processes need at once (every DDP rank of a run started by torchrun or SLURM
asks for the same prepared data) is built by one of them: :func:`building` holds the entry's lock
(``.lock-NAME`` beside it, ``filelock.FileLock``: an ``flock``, which the kernel drops when its
holder dies, so a crashed builder blocks no one) while one process builds; the others wait, then
find the entry built.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

def atomic_write(path: Path, text: str | bytes) -> None:
    """Write a text (or binary) file via a temporary sibling and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_file_prefix(path.name))
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def config_hash(*parts, length: int = 16) -> str:
    """A stable hex digest of JSON-serialisable parts (dict keys sorted)."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary directory; on success it becomes ``final`` (unless ``final`` appeared
    meanwhile, in which case the temporary one is discarded). On error nothing is left behind."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_dir_prefix(final.name), dir=final.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:  # someone else finished the same entry first
            if not final.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def entry_lock(final: Path) -> Iterator[None]:
    """Hold the lock of entry ``final`` (``.lock-NAME`` beside it) for the block, waiting as long as
    another process holds it (logging once that it waits). A block that fails without ``final``
    made (a refused input) leaves nothing: the lock file and the folders made for it are removed
    (a process waiting on it then builds too, and fails the same way). On a filesystem without
    ``flock`` (filelock < 4 refuses it there; 4 falls back to a lock file of its own) the block runs
    unlocked: each process then builds, and ``atomic_dir`` keeps the first."""
    from filelock import FileLock, Timeout

    final = Path(final)
    made = [d for d in (final.parent, *final.parent.parents) if not d.exists()]  # deepest first
    final.parent.mkdir(parents=True, exist_ok=True)
    path = final.parent / f".lock-{final.name}"
    lock = FileLock(str(path))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("waiting for another process building %s", final)
            lock.acquire()
    except NotImplementedError:  # no flock here (filelock < 4)
        log.warning("cannot lock %s (no flock on this filesystem): building it in this process too", final)
        yield
        return
    try:
        yield
    except BaseException:
        if not final.exists():
            path.unlink(missing_ok=True)
            for d in made:
                try:
                    d.rmdir()
                except OSError:  # not empty: another entry's
                    break
        raise
    finally:
        lock.release()


@contextmanager
def building(final: Path) -> Iterator[Path | None]:
    """Build the directory ``final`` once among processes: yields None when it exists (built
    before, or by the process this one waited for), else a temporary directory that becomes
    ``final`` on success (:func:`atomic_dir`), the entry's lock (:func:`entry_lock`) held throughout."""
    final = Path(final)
    if final.exists():
        yield None
        return
    with entry_lock(final):
        if final.exists():
            yield None
            return
        with atomic_dir(final) as tmp:
            yield tmp


def _file_prefix(name: str) -> str:
    return f".{name}."


def _dir_prefix(name: str) -> str:
    return f".tmp-{name}-"


def leftovers(folder: Path, names: tuple[str, ...]) -> list[Path]:
    """The temporary files and directories that `atomic_write` / `atomic_dir` of ``names`` in
    ``folder`` left behind (their writer was killed); only the writer of ``folder`` may remove them."""
    folder = Path(folder)
    found = []
    for name in names:
        found += folder.glob(_file_prefix(name) + "*")
        found += folder.glob(_dir_prefix(name) + "*")
    return sorted(found)
