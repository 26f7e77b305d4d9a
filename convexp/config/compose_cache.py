"""Hydra's compositions kept across processes: a sweep's plan composes a config per variant and
task (convbert-sizes at scale=paper: 16, ~0.15 s of CPU each, re-reading every YAML file), and
every ``--dry-run``, ``--status`` and ``report`` of it composes the same ones again.

A composition (Hydra's output, before convexp resolves and checks it) is a function of the
overrides and of the config files: it is kept, pickled, in ``$CONVEXP_CACHE/compose/`` (default
``~/.cache/convexp``) in a file named by the files' state — every YAML file of every config
directory by name, size and modification time, and the versions of convexp, Hydra and OmegaConf —
so an edited, added or removed config file is a new file and composes again. Interpolations
(``${oc.env:...}``, convexp's resolvers) stay unresolved in it: they are resolved as every
composition is, in this process. A refusal is never kept. The few newest files are kept.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig

from ..atomic import atomic_write

KEPT_FILES = 4  # states of the config files kept (other checkouts, other versions)
MOST = 4096  # compositions in one file; beyond it the file starts again

_store: dict[str, dict] = {}  # state of the config files -> {key: pickled composition}
_held: dict[tuple, str] = {}  # inside ``one_state``: config directories -> their state
_holding: list[bool] = []


@contextmanager
def one_state() -> Iterator[None]:
    """The config files' state is read once for the block's compositions (a plan's dozens), not
    once each: they are not edited while a plan is made."""
    _holding.append(True)
    try:
        yield
    finally:
        _holding.pop()
        if not _holding:
            _held.clear()


def _state(dirs: list[Path]) -> str:
    """The config files' state: every YAML file's name, size and modification time, the versions."""
    if tuple(dirs) in _held:
        return _held[tuple(dirs)]
    h = hashlib.sha256()
    for name in ("convexp", "hydra-core", "omegaconf"):
        try:
            h.update(f"{name}={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=?;".encode())
    for d in dirs:
        h.update(f"dir {d};".encode())
        for root, folders, files in os.walk(d):
            folders.sort()
            for f in sorted(files):
                if f.endswith((".yaml", ".yml")):
                    st = os.stat(os.path.join(root, f))
                    h.update(f"{os.path.relpath(os.path.join(root, f), d)}:{st.st_size}:{st.st_mtime_ns};".encode())
    state = h.hexdigest()[:20]
    if _holding:
        _held[tuple(dirs)] = state
    return state


def _folder() -> Path:
    from ..data.digests import cache_file

    return cache_file().parent / "compose"


def _compositions(state: str) -> dict:
    if state not in _store:
        try:
            _store[state] = pickle.loads((_folder() / f"{state}.pkl").read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
            _store[state] = {}
    return _store[state]


def _key(config_name: str | None, overrides: list[str], hydra_node: bool) -> str:
    return repr((config_name, tuple(overrides), hydra_node))


def kept(dirs: list[Path], config_name: str | None, overrides: list[str], hydra_node: bool) -> DictConfig | None:
    """The composition kept for these config directories and overrides (a new object), or None."""
    blob = _compositions(_state(dirs)).get(_key(config_name, overrides, hydra_node))
    return pickle.loads(blob) if blob is not None else None


def keep(dirs: list[Path], config_name: str | None, overrides: list[str], hydra_node: bool, cfg: DictConfig) -> None:
    """Keep a composition for the next process (written at once, atomically; a cache that cannot
    be written is left alone)."""
    state = _state(dirs)
    store = _compositions(state)
    if len(store) >= MOST:
        store.clear()
    folder = _folder()
    try:
        store[_key(config_name, overrides, hydra_node)] = pickle.dumps(cfg)
        atomic_write(folder / f"{state}.pkl", pickle.dumps(store))
        for old in sorted(folder.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)[KEPT_FILES:]:
            old.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):  # not kept: composed again next time
        pass
