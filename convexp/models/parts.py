"""The parts of a block: its token mixer and its feed-forward, from one table or an import path.

Every block is built here (``encoder.Block``): ``ModelConfig.mixer`` names the mixer and
``ModelConfig.ffn`` the feed-forward, either one of the built-in parts below or a researcher's own
``nn.Module`` given by its import path, ``module:Class`` (or ``module.Class``)::

    mixer: attention | mixed | my_mixers:GatedConv        (model.mixer_options: keyword arguments)
    ffn:   feedforward | my_ffns:GLU                       (model.ffn_options: keyword arguments)

The protocol (README "Your own idea"):

* a mixer is ``Class(cfg: ModelConfig, layer: int, **options)``, an ``nn.Module`` whose
  ``forward(x, keep)`` maps ``x`` [B, L, D] to [B, L, D]; ``keep`` is [B, L] bool, True on real
  tokens, or None when nothing is padded. Real positions must not read padding (checked; a mixer
  that means to sets ``model.reads_padding``). A mixer whose ``forward`` also takes ``first_only``
  is asked for position 0 alone ([B, 1, D]) in the last block under a [CLS] head; any other is
  given every position and its position 0 is taken.
* a feed-forward is ``Class(cfg, layer, **options)`` mapping [..., D] to [..., D].

A module is found on ``sys.path``, which holds the folders of ``convexp --user-dir DIR`` (and of
``CONVEXP_USER_DIR``, which the flag sets so that every process of the command sees them: sweep
workers, DDP ranks, SLURM jobs), or as an installed package. Nothing here imports torch until a
part is built, so run ids and plans are made without it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Callable

from ..errors import UserError
from .config import FFNS, MIXERS, is_import_path

USER_DIR_ENV = "CONVEXP_USER_DIR"
KINDS = ("mixer", "ffn")


class PartError(UserError):
    """A user's mixer or feed-forward that cannot be used (not found, not a module, bad options,
    wrong output); one line naming what was looked for and the fix."""


# --- the table of built-in parts -------------------------------------------------------------------


def _self_attention(cfg, layer: int):
    from .attention import SelfAttention

    size = cfg.layer_size(layer)
    return SelfAttention(cfg, size["heads"], size["conv_heads"])


def _mixed_attention(cfg, layer: int):
    from .attention import MixedAttention

    return MixedAttention(cfg, cfg.layer_size(layer)["heads"])


def _feedforward(cfg, layer: int):
    from .ffn import FeedForward

    return FeedForward(cfg, cfg.layer_size(layer)["intermediate"])


BUILTIN: dict[str, dict[str, Callable]] = {
    "mixer": dict(zip(MIXERS, (_self_attention, _mixed_attention), strict=True)),
    "ffn": dict(zip(FFNS, (_feedforward,), strict=True)),
}


def is_builtin(kind: str, name: str) -> bool:
    return name in BUILTIN[kind]


def user_parts(cfg) -> dict[str, str]:
    """{kind: import path} of the parts that are not built in ({} for every paper preset) of a
    ModelConfig or of a composed model node (whose parts may be left at their defaults)."""
    names = {kind: (cfg.get(kind) if hasattr(cfg, "get") else getattr(cfg, kind)) for kind in KINDS}
    return {kind: str(name) for kind, name in names.items() if name and not is_builtin(kind, str(name))}


# --- where a user's code is found ----------------------------------------------------------------------


def user_dirs() -> list[Path]:
    """The folders of ``CONVEXP_USER_DIR`` (``os.pathsep``-separated), in order."""
    return [Path(p) for p in os.environ.get(USER_DIR_ENV, "").split(os.pathsep) if p]


def add_user_dirs(dirs: list[str | Path]) -> None:
    """Put ``dirs`` first in ``CONVEXP_USER_DIR`` (so every process of the command sees them) and on
    this process's ``sys.path``."""
    for d in dirs:
        if not Path(d).expanduser().is_dir():
            raise PartError(f"--user-dir {str(d)!r}: no such directory")
    given = [str(Path(d).expanduser().resolve()) for d in dirs]
    known = [p for p in os.environ.get(USER_DIR_ENV, "").split(os.pathsep) if p and p not in given]
    os.environ[USER_DIR_ENV] = os.pathsep.join([*given, *known])
    _on_sys_path()


def _on_sys_path() -> None:
    for d in reversed(user_dirs()):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))


def _split(name: str) -> tuple[str, str]:
    """``module:Class`` / ``module.Class`` -> (module, Class)."""
    module, sep, attr = name.rpartition(":")
    if not sep:
        module, _, attr = name.rpartition(".")
    return module, attr


def _where() -> str:
    dirs = user_dirs()
    if not dirs:
        return "no --user-dir given"
    return f"--user-dir / {USER_DIR_ENV}: {os.pathsep.join(map(str, dirs))}"


def resolve(kind: str, name: str) -> Callable:
    """The factory or class that builds part ``kind`` (``mixer`` / ``ffn``) named ``name``."""
    if is_builtin(kind, name):
        return BUILTIN[kind][name]
    key = f"model.{kind}"
    if not is_import_path(name):
        choices = " or ".join(BUILTIN[kind])
        raise PartError(f"{key}={name!r}: not a built-in {kind} ({choices}) nor an import path module:Class")
    module_name, attr = _split(name)
    _on_sys_path()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):  # the module itself, not one it imports
            raise PartError(
                f"{key}={name}: no module {module_name!r} ({_where()}); give the folder holding "
                f"{module_name.replace('.', '/')}.py with `convexp --user-dir DIR` or install its package"
            ) from None
        raise PartError(f"{key}={name}: importing {module_name!r} failed: {e}") from None
    except Exception as e:  # the module's own code fails on import
        raise PartError(f"{key}={name}: importing {module_name!r} failed: {type(e).__name__}: {e}") from None
    found = getattr(module, attr, None)
    if found is None:
        has = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and not n.startswith("_"))
        raise PartError(
            f"{key}={name}: {module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}; "
            f"its classes: {', '.join(has) or 'none'}"
        )
    from torch import nn

    if not (inspect.isclass(found) and issubclass(found, nn.Module)):
        raise PartError(f"{key}={name}: {attr} is not a torch.nn.Module class (got {type(found).__name__})")
    return found


def options(cfg, kind: str) -> dict:
    return dict(getattr(cfg, f"{kind}_options") or {})


def check_options(cfg, kind: str) -> None:
    """The options given to part ``kind`` are ones its class takes (one line otherwise)."""
    name, given = getattr(cfg, kind), options(cfg, kind)
    if is_builtin(kind, name):
        if given:
            raise PartError(
                f"model.{kind}_options: the built-in {kind} {name!r} takes no options (its settings are "
                f"model keys: `convexp pretrain --cfg` lists them); drop model.{kind}_options"
            )
        return
    cls = resolve(kind, name)
    try:
        inspect.signature(cls).bind(cfg, 0, **given)
    except TypeError as e:
        params = [p for p in inspect.signature(cls).parameters][2:]
        raise PartError(
            f"model.{kind}_options for {name}: {e}; it takes {', '.join(params) or 'no options'} "
            f"after (cfg, layer)"
        ) from None


def build(kind: str, cfg, layer: int):
    """Part ``kind`` of block ``layer``: the built-in, or the user's class with its options."""
    factory = resolve(kind, getattr(cfg, kind))
    return factory(cfg, layer, **options(cfg, kind))


def takes_first_only(mixer) -> bool:
    """Whether a mixer's ``forward`` accepts ``first_only`` (every built-in one does)."""
    try:
        return "first_only" in inspect.signature(mixer.forward).parameters
    except (TypeError, ValueError):
        return False


# --- identity: a user's part by its source --------------------------------------------------------------


def source_files(name: str) -> list[Path]:
    """The files a user part's code is in: its module's file, or every ``.py`` file of its package
    folder when the module is a package's ``__init__``. Found without running the module (the
    parent packages of a dotted module are imported, as Python's finder needs)."""
    module_name, _ = _split(name)
    _on_sys_path()
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


def code_digests(cfg) -> dict[str, dict]:
    """{kind: {"import": path, "digest": hash of its source}} of each user part of a ModelConfig or
    a composed model node: what a run id hashes, so that an edited module makes a new run and the
    same module finds the same run. The digest covers the files' contents and their names relative
    to the module's folder, not where that folder lies. {} for the papers' presets."""
    out = {}
    for kind, name in user_parts(cfg).items():
        files = source_files(name)
        if not files:
            resolve(kind, name)  # says why it cannot be found
            raise PartError(f"model.{kind}={name}: its source file cannot be found to hash")
        root = files[0].parent
        h = hashlib.blake2b(digest_size=16)
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        out[kind] = {"import": name, "digest": h.hexdigest()}
    return out


def code_record(cfg) -> dict[str, dict]:
    """:func:`code_digests` with each part's files (for a run's record)."""
    digests = code_digests(cfg)
    for kind, entry in digests.items():
        entry["files"] = [str(f) for f in source_files(entry["import"])]
    return digests
