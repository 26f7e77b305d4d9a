"""A run's id and name: the hash of what it computes, and the tokens that show what varies.

    <slug>[+<token>...]-<hash>      e.g. convbert_small-mlm+kernel_size9-0123456789

The slug says what the run is (model preset, objective, task, seed, ``name``), ``+<key><value>``
tokens what varies (:func:`name_token`, :func:`run_name`), the hash (:func:`run_hash` of the
config without the EXECUTION_KEYS) which run it is. Another run's id that names this one hashes
its :func:`run_key` (its name without the tokens), so naming a run never changes another's id.
The run store (runs.py) finds a run by its hash whatever its name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..atomic import config_hash


# Keys that change how a run is executed or logged, not what it computes.
EXECUTION_KEYS = (
    "logger",
    "resume",
    "retry_diverged",
    "outputs",
    "trainer.accelerator",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.num_workers",
    "trainer.threads",
    "trainer.log_every_n_steps",
    "trainer.nonfinite_patience",
    "trainer.lock_wait",
    "trainer.requeue_signal",
    "trainer.tf32",  # the speed options (convexp/train/accel.py)
    "trainer.fused_adamw",
    "trainer.pin_memory",
    "trainer.compile",
    "trainer.gradient_checkpointing",
    "data.num_proc",  # processes of the prepared build: the rows do not depend on it
    "data.store_chunks",  # where a streaming corpus's rows are kept, not what they are
    "choices",
    "invocation",
)


def run_hash(cfg: DictConfig | dict, ignore: tuple[str, ...] = EXECUTION_KEYS) -> str:
    """Hash of the configuration without the execution-only keys (10 hex digits)."""
    d = (
        OmegaConf.to_container(cfg, resolve=True)
        if isinstance(cfg, DictConfig)
        else json.loads(json.dumps(cfg))
    )
    return config_hash(_without(d, ignore), length=HASH_LENGTH)


def _without(d: dict, ignore: tuple[str, ...]) -> dict:
    """``d`` (plain, changed in place) without the keys ``ignore`` names (dotted: nested)."""
    for *parents, leaf in _split(ignore):
        node = d
        for p in parents:
            node = node.get(p, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return d


@functools.cache
def _split(keys: tuple[str, ...]) -> tuple[list[str], ...]:
    return tuple(key.split(".") for key in keys)


_ENCODE = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":")).encode  # config_hash's JSON


class SharedHash:
    """:func:`run_hash` of many plain configs that share most of their keys, the shared part
    serialised once: ``SharedHash(shared).digest(own) == run_hash({**own, **shared})`` (a key in
    both is ``shared``'s). A sweep names thousands of fine-tuning runs from a few task configs."""

    def __init__(self, shared: dict, ignore: tuple[str, ...] = EXECUTION_KEYS):
        self.ignore = ignore
        self.tops = {key.split(".")[0] for key in ignore}  # the top-level keys ``ignore`` reaches into
        self.parts = self._parts(shared)

    def _parts(self, d: dict) -> dict[str, str]:
        """Each top-level key's value as :func:`~convexp.atomic.config_hash` writes it."""
        plain = _without(json.loads(json.dumps(d)), self.ignore)
        return {k: _ENCODE(v) for k, v in plain.items()}

    def digest(self, own: dict) -> str:
        # own plain values with no ignored key (a run's task, seed, hp...): encoded as they are, as
        # the JSON round trip of _parts would give them (once per run of a sweep: thousands)
        mine = self._parts(own) if own.keys() & self.tops else {k: _ENCODE(v) for k, v in own.items()}
        parts = {**mine, **self.parts}
        # config_hash((d,)) of the merged dict: a one-item list of the dict, its keys sorted
        blob = "[{" + ",".join(f"{_ENCODE(k)}:{parts[k]}" for k in sorted(parts)) + "}]"
        return hashlib.sha256(blob.encode()).hexdigest()[:HASH_LENGTH]


HASH_LENGTH = 10  # hex digits of run_hash at the end of every run name
VARIED_MAX = 40  # characters of one run of ``+<key><value>`` tokens in a name
NAME_MAX = 80  # characters of a whole name (unless its slug alone is longer): names stay short
MORE = "+..."  # ends the tokens when some were left out to keep the name short
_UNSAFE = re.compile(r"[^A-Za-z0-9_.]+")  # a token holds these only ('+' and '-' delimit)
_VARIED = re.compile(rf"(?:\+[A-Za-z0-9_.]+)+(?=-[0-9a-f]{{{HASH_LENGTH}}}(?:-|$))")


def name_token(key: str, value: Any) -> str:
    """``model.kernel_size``, 9 -> ``kernel_size9``: the key's last component and the value, with
    every run of other characters than letters, digits, ``_`` and ``.`` made one ``_``."""
    if isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, (list, tuple)):
        value = "_".join(map(str, value))
    text = _UNSAFE.sub("_", f"{key.rsplit('.', 1)[-1]}{value}").strip("_.")
    return text or "_"


def run_name(slug: str, tokens: list[str], digest: str) -> str:
    """``<slug>+<token>+<token>-<hash>``: the tokens of :func:`name_token` in their order, whole,
    as many as fit in VARIED_MAX characters and the name in NAME_MAX, then MORE if any was left
    out (a value is never cut: ``lr0.00`` would name another value). A slug that holds another
    run's name with its tokens (a fine-tune's init) and leaves no room shows MORE for those. The
    hash, not the name, says which run it is."""
    if len(slug) + 1 + HASH_LENGTH > NAME_MAX:
        slug = _VARIED.sub(MORE, slug)
    room = min(VARIED_MAX, NAME_MAX - len(slug) - 1 - HASH_LENGTH)
    out = ""
    for i, token in enumerate(tokens):
        more = len(MORE) if i < len(tokens) - 1 else 0  # room for MORE after it, unless it is the last
        if len(out) + 1 + len(token) + more > room:
            out += MORE if len(out) + len(MORE) <= room else ""
            break
        out += "+" + token
    return f"{slug}{out}-{digest}"


def run_key(name: str) -> str:
    """The name a run had before names showed what varies (its ``+`` tokens left out): what
    another run's id hashes when it names this run (a fine-tune its init, a distillation its
    teacher), so that naming a run never changes another run's id."""
    return _VARIED.sub("", name)
