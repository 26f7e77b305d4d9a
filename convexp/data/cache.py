"""Content hashes of configurations and atomic cache directories.

A cache entry is a directory ``<cache_dir>/<prefix><hash>``. It is built in a temporary
sibling directory and renamed into place in one step, so an entry that exists is complete;
if two processes build the same entry, the first rename wins and the other build is dropped.
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
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
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
