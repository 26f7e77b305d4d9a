"""The Hugging Face datasets cache left as it was when reading a user's files fails.

``datasets.load_dataset`` writes its Arrow copy of a local csv/json/text file, and lock files,
into ``HF_DATASETS_CACHE`` before convexp can look at the columns; a refused file (a missing label
column, a malformed JSON line) would leave that behind. :func:`kept_on_refusal` removes whatever
the failed read added (entries a few levels deep: builder, config, version, fingerprint)."""

from __future__ import annotations

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
def kept_on_refusal():
    """Run a read of local files through ``datasets``; on any exception, remove what it added to
    the datasets cache (shallowest first: a new folder goes whole), then re-raise."""
    from datasets import config

    root = Path(config.HF_DATASETS_CACHE)
    existed, before = root.exists(), _entries(root)
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
