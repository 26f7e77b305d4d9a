"""Content hashes and atomic writes: a file or directory that exists is complete.

Files and directories are built under a temporary sibling name and renamed into place in one
step, so a crash never leaves a half-written result that a later run or report would read as
real. If two processes build the same directory, the first rename wins and the other build is
dropped (the cache's semantics). A process killed mid-write leaves only its temporary name
behind (``.NAME.*`` for a file, ``.tmp-NAME-*`` for a directory); `leftovers` finds them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
