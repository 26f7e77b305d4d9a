"""Content digests of local input files, so that a run's id changes when its data does.

A run id hashes the configuration, and a configuration names a local file by its path: editing
the file in place would reuse the old run's result as if it were the new one. The stages add
``inputs: {key: digest}`` to what a run id hashes, for every config value that names a local
file or folder (a folder: every file under it, by relative name and content).

Hashing a corpus of gigabytes takes seconds, so digests are cached in
``$CONVEXP_CACHE/digests.json`` (default ``~/.cache/convexp``; outside the outputs folder, which a
refused command leaves untouched) by (absolute path, size, modification time in ns): a file
rewritten with other bytes has a new modification time and is hashed again; a hub name or a
path that does not exist has no digest (it is not a local input).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..atomic import atomic_write
from .errors import DataPathError



def cache_file() -> Path:
    root = os.environ.get("CONVEXP_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "convexp"
    return Path(root).expanduser() / "digests.json"

_CHUNK = 1 << 20


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    """A folder's files in a stable order (hidden files and folders left out: .git, editor swaps)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".")]
    return out


class Digests:
    """Digests of local paths, read from and written back to one cache file."""

    def __init__(self):
        self.path = cache_file()
        try:
            self.cache: dict = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.cache = {}
        self.changed = False

    def file(self, path: Path) -> str:
        st = path.stat()
        key = str(path)
        stamp = [st.st_size, st.st_mtime_ns]
        hit = self.cache.get(key)
        if hit and hit[:2] == stamp:
            return hit[2]
        try:
            digest = _file_digest(path)
        except OSError as e:  # e.g. no permission to read it: one line, before any run is made
            raise DataPathError(f"{path} cannot be read ({e.strerror}); fix its permissions or the path") from None
        self.cache[key] = [*stamp, digest]
        self.changed = True
        return digest

    def of(self, value) -> str | None:
        """The digest of a local file or folder named by ``value``; None for anything else."""
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            return None
        path = Path(value).expanduser().resolve()
        if path.is_file():
            return self.file(path)
        if path.is_dir():
            h = hashlib.blake2b(digest_size=16)
            for f in _files(path):
                h.update(f"{f.relative_to(path).as_posix()}\0{self.file(f)}\0".encode())
            return h.hexdigest()
        return None

    def save(self) -> None:
        if self.changed:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(self.path, json.dumps(self.cache))
            except OSError:  # a read-only home: digests are computed again next time
                pass
            self.changed = False


def input_digests(values: dict) -> dict[str, str]:
    """``{key: digest}`` of the values of ``values`` ({config key: value}) that name local files
    or folders, in key order; the others (hub names, null) are left out."""
    digests = Digests()
    out = {k: d for k in sorted(values) if (d := digests.of(values[k])) is not None}
    digests.save()
    return out
