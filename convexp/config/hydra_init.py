"""Hydra initialised for convexp's compositions (config/compose.py): once per process, over the
built-in ``conf/`` with the user's config directories searched first (a search-path plugin), each
shown to Hydra as its config groups only."""

from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path

_initialized_with: list = []


def initialize_hydra(conf_dir: Path, user_dirs: tuple[Path, ...]) -> None:
    """Initialise Hydra once per process (later composes are fast), again only when the user's
    config directories change: ``initialize_config_dir`` over ``conf_dir`` (the built-in ``conf/``), the user's directories
    first (:func:`_user_dirs_plugin`; ``hydra.searchpath`` would put them after the built-ins, and a
    user's config would no longer shadow a built-in one). Version base 1.1: Hydra's when given none."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins
    from hydra.errors import Hydra14MigrationWarning

    hydra = GlobalHydra.instance()
    if hydra.is_initialized() and _initialized_with == [(conf_dir, user_dirs)]:
        return
    hydra.clear()
    plugin = _user_dirs_plugin()
    Plugins.instance().register(plugin)  # Hydra's public way to add a plugin (again: a no-op)
    plugin.dirs = tuple(_configs_only(d, conf_dir) for d in user_dirs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Hydra14MigrationWarning)
            initialize_config_dir(str(conf_dir), job_name="convexp", version_base="1.1")  # sets GlobalHydra
    finally:
        plugin.dirs = ()  # any other Hydra initialisation in this process keeps its own search path
    _initialized_with[:] = [(conf_dir, user_dirs)]


def _configs_only(d: Path, conf_dir: Path) -> Path:
    """What Hydra sees of a user's directory: its config groups (folders named as the built-in ones)
    and top-level YAML files, linked from ``<a folder of this process's own>/<the directory's path>``.
    Hydra takes every folder of a search-path directory for a group: ``--user-dir .`` would make a
    project's ``outputs/`` (made later, by the run) one, and ``outputs=...`` an unknown default."""
    import atexit, shutil, tempfile  # noqa: E401

    root = Path(tempfile.mkdtemp(prefix="convexp-configs-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    view = root / str(d).lstrip("/")
    view.mkdir(parents=True)
    for entry in d.iterdir():
        group = entry.is_dir() and (conf_dir / entry.name).is_dir()
        if group or (entry.is_file() and entry.suffix == ".yaml"):
            (view / entry.name).symlink_to(entry)
    return view


@lru_cache(maxsize=None)
def _user_dirs_plugin() -> type:
    """A Hydra search-path plugin: its ``dirs`` (set while :func:`initialize_hydra` runs) first,
    provider ``convexp-user``. Made on first use: commands that never compose do not import Hydra."""
    from hydra.core.config_search_path import ConfigSearchPath
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    class UserConfigDirs(SearchPathPlugin):
        dirs: tuple[Path, ...] = ()

        def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
            for d in reversed(self.dirs):
                search_path.prepend(provider="convexp-user", path=f"file://{d}")

    return UserConfigDirs
