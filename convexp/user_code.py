"""A user's own code: the folders it is found in (``--user-dir``), an object named by its import
path, and the digest of its source that run ids hash.

``convexp --user-dir DIR`` (or ``CONVEXP_USER_DIR``, which the flag sets so that every process of
the command sees it: sweep workers, DDP ranks, SLURM jobs) puts DIR on ``sys.path``; an import path
``module:Name`` (or ``module.Name``) then names a user's mixer or feed-forward (models/parts.py) or
a user's kind of task (tasks/__init__.py). Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path

from .errors import UserError

USER_DIR_ENV = "CONVEXP_USER_DIR"


def user_dirs() -> list[Path]:
    """The folders of ``CONVEXP_USER_DIR`` (``os.pathsep``-separated), in order."""
    return [Path(p) for p in os.environ.get(USER_DIR_ENV, "").split(os.pathsep) if p]


def add_user_dirs(dirs: list[str | Path]) -> None:
    """Put ``dirs`` first in ``CONVEXP_USER_DIR`` (so every process of the command sees them) and on
    this process's ``sys.path``."""
    for d in dirs:
        if not Path(d).expanduser().is_dir():
            raise UserError(f"--user-dir {str(d)!r}: no such directory")
    given = [str(Path(d).expanduser().resolve()) for d in dirs]
    known = [p for p in os.environ.get(USER_DIR_ENV, "").split(os.pathsep) if p and p not in given]
    os.environ[USER_DIR_ENV] = os.pathsep.join([*given, *known])
    on_sys_path()


def on_sys_path() -> None:
    """The user's folders first on ``sys.path`` (a worker process inherits only the variable)."""
    for d in reversed(user_dirs()):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))


def split(name: str) -> tuple[str, str]:
    """``module:Name`` / ``module.Name`` -> (module, Name)."""
    module, sep, attr = name.rpartition(":")
    if not sep:
        module, _, attr = name.rpartition(".")
    return module, attr


def where() -> str:
    """Where a user's module was looked for, for a message."""
    dirs = user_dirs()
    if not dirs:
        return "no --user-dir given"
    return f"--user-dir / {USER_DIR_ENV}: {os.pathsep.join(map(str, dirs))}"


def import_module(key: str, module_name: str, error: type[UserError] = UserError):
    """The module ``module_name`` (``key``: the option that named it, for the one-line error)."""
    on_sys_path()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):  # the module itself, not one it imports
            raise error(
                f"{key}: no module {module_name!r} ({where()}); give the folder holding "
                f"{module_name.replace('.', '/')}.py with `convexp --user-dir DIR` or install its package"
            ) from None
        raise error(f"{key}: importing {module_name!r} failed: {e}") from None
    except Exception as e:  # the module's own code fails on import
        raise error(f"{key}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None


def import_object(key: str, module_name: str, attr: str, error: type[UserError] = UserError):
    """``module_name``'s attribute ``attr``, or one line naming what the module has instead."""
    module = import_module(key, module_name, error)
    found = getattr(module, attr, None)
    if found is None:
        has = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and not n.startswith("_"))
        raise error(
            f"{key}: {module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}; "
            f"its classes: {', '.join(has) or 'none'}"
        )
    return found


def source_files(module_name: str) -> list[Path]:
    """The files a user module's code is in: its file, or every ``.py`` file of its package folder
    when the module is a package's ``__init__``. Found without running the module (the parent
    packages of a dotted module are imported, as Python's finder needs)."""
    on_sys_path()
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return []
    origin = Path(spec.origin)
    if origin.name == "__init__.py":
        return sorted(p for p in origin.parent.rglob("*.py") if "__pycache__" not in p.parts)
    return [origin]


def source_digest(files: list[Path]) -> str:
    """A hash of the files' contents and their names relative to the first one's folder (not where
    that folder lies): an edited module makes a new run, the same module finds the same run."""
    root = files[0].parent
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
