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

A built-in part is built the same way (``part(cfg, layer)``) and describes itself beside its
module, without torch (attention_part.py, ffn_part.py): ``check(cfg, bad)`` its options' rules,
``label(cfg)``, ``count(cfg, layer)`` its parameters and FLOPs, ``hf_keys(cfg, hf, cx)`` its
``transformers`` keys; a mixer also ``heads(cfg)`` (its self-attention heads), ``fixed_heads(cfg)``
(whether per-layer head counts can be rebuilt), ``extra_saved`` (what the backward keeps beyond
self-attention's), ``table3_extra`` (ConvBERT Table 3's FLOPs beyond it), ``hf_model_type`` and
``hf_refusals``. models/config.py, stats.py, hf_keys.py, hf_export.py and sweep/memory.py ask it;
a new built-in mixer is its module, its part object, its line in :data:`BUILTIN` and a preset. A
user's part is measured instead (stats.measured_layer) and exported in convexp's format only.

A module is found in the folders of ``convexp --user-dir DIR`` or as an installed package
(convexp/user_code.py: the folders, the import, the source digest a run id hashes). Nothing here
imports torch until a part is built, so run ids and plans are made without it.
"""

from __future__ import annotations

import inspect
import re
from typing import Callable

from ..errors import UserError
from ..user_code import import_object, source_digest, source_files, split
from .attention_part import MIXED_ATTENTION, SELF_ATTENTION
from .ffn_part import FEEDFORWARD

KINDS = ("mixer", "ffn")


class PartError(UserError):
    """A user's mixer or feed-forward that cannot be used (not found, not a module, bad options,
    wrong output); one line naming what was looked for and the fix."""


# --- the table of built-in parts: each a part object of its own module (attention_part.py,
# ffn_part.py), which builds its nn.Module and describes itself without torch


BUILTIN: dict[str, dict[str, object]] = {
    "mixer": {"attention": SELF_ATTENTION, "mixed": MIXED_ATTENTION},
    "ffn": {"feedforward": FEEDFORWARD},
}
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*$")


def is_import_path(name: str) -> bool:
    """Whether ``name`` has the form of ``module:Class`` or ``module.Class`` (a user's part)."""
    return bool(_IMPORT_PATH.match(name))


def is_builtin(kind: str, name: str) -> bool:
    return name in BUILTIN[kind]


def builtin_part(cfg, kind: str):
    """The built-in part object of ``cfg``'s ``kind`` (``mixer``, ``ffn``), or None for a user's."""
    return BUILTIN[kind].get(getattr(cfg, kind))


def user_parts(cfg) -> dict[str, str]:
    """{kind: import path} of the parts that are not built in ({} for every paper preset) of a
    ModelConfig or of a composed model node (whose parts may be left at their defaults)."""
    names = {kind: (cfg.get(kind) if hasattr(cfg, "get") else getattr(cfg, kind)) for kind in KINDS}
    return {kind: str(name) for kind, name in names.items() if name and not is_builtin(kind, str(name))}


def resolve(kind: str, name: str) -> Callable:
    """The factory or class that builds part ``kind`` (``mixer`` / ``ffn``) named ``name``."""
    if is_builtin(kind, name):
        return BUILTIN[kind][name]
    key = f"model.{kind}"
    if not is_import_path(name):
        choices = " or ".join(BUILTIN[kind])
        raise PartError(f"{key}={name!r}: not a built-in {kind} ({choices}) nor an import path module:Class")
    module_name, attr = split(name)
    found = import_object(f"{key}={name}", module_name, attr, error=PartError)
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


# --- identity: a user's part by its source (user_code.source_digest) --------------------------------------------------------------


def code_digests(cfg) -> dict[str, dict]:
    """{kind: {"import": path, "digest": hash of its source}} of each user part of a ModelConfig or
    a composed model node: what a run id hashes, so that an edited module makes a new run and the
    same module finds the same run. The digest covers the files' contents and their names relative
    to the module's folder, not where that folder lies. {} for the papers' presets."""
    out = {}
    for kind, name in user_parts(cfg).items():
        files = source_files(split(name)[0])
        if not files:
            resolve(kind, name)  # says why it cannot be found
            raise PartError(f"model.{kind}={name}: its source file cannot be found to hash")
        out[kind] = {"import": name, "digest": source_digest(files)}
    return out


def code_record(cfg) -> dict[str, dict]:
    """:func:`code_digests` with each part's files (for a run's record)."""
    digests = code_digests(cfg)
    for kind, entry in digests.items():
        entry["files"] = [str(f) for f in source_files(split(entry["import"])[0])]
    return digests
