"""Reading a user's local files through ``datasets``, so that a refused file leaves no trace.

``datasets.load_dataset`` writes its Arrow copy of a local csv/json/text file, and lock files,
into ``HF_DATASETS_CACHE`` before convexp can look at the columns, and logs its own error lines
for a malformed file; a refused file (a missing label column, a malformed JSON line) would leave
the copy behind and print more than convexp's one line. Inside :func:`local_read` datasets logs
nothing below CRITICAL, and a failure removes whatever the read added to the cache (entries a few
levels deep: builder, config, version, fingerprint)."""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

DEPTH = 4  # <cache>/<builder>/<config>/<version>/<fingerprint ...>


def _entries(root: Path, depth: int = DEPTH) -> set[Path]:
    out: set[Path] = set()
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        level = len(Path(dirpath).relative_to(root).parts)
        out.update(Path(dirpath) / n for n in (*dirnames, *filenames))
        if level + 1 >= depth:
            dirnames[:] = []
    return out


@contextmanager
def local_read():
    """Run a read of local files through ``datasets`` without its log lines; on any exception,
    remove what it added to the datasets cache (shallowest first: a new folder goes whole), then
    re-raise (the caller's one-line error says what is wrong)."""
    from datasets import config

    root = Path(config.HF_DATASETS_CACHE)
    existed, before = root.exists(), _entries(root)
    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(root, ignore_errors=True)
        else:
            for p in sorted(_entries(root) - before, key=lambda p: len(p.parts)):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                elif p.exists() or p.is_symlink():
                    p.unlink(missing_ok=True)
        raise
    finally:
        log.setLevel(level)
