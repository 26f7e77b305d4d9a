"""Run records: what made a run — the command line, the overrides, the versions and the device.

Every run directory holds ``record.json``::

    {"created": {...}, "resumed": [{...}, ...]}

each entry being :func:`invocation_record` at the time (command, overrides, convexp version and
git commit when run from a checkout, Python / torch / Lightning versions, device, host, time, and
the hub datasets read: each hub source's ``revision`` setting (null: the default branch) and
what this process read, with the commit when the hub could be asked: ``data/hub.py``; a user's
mixer or FFN: its import path, files and source digest, ``model_code``). A
finished run reused by another convexp version says so in one line (:func:`warn_if_other_version`):
results are never reused silently across versions, and never retrained without being asked.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..data.hub import hub_reads
from ..models.parts import code_record
from .runs import secondary_rank

RECORD = "record.json"


@functools.lru_cache(maxsize=1)
def convexp_version() -> str:
    try:
        return metadata.version("convexp")
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return "unknown"


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes) when convexp runs from one."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _versions() -> dict:
    out = {"convexp": convexp_version(), "python": platform.python_version()}
    for pkg in ("torch", "pytorch-lightning", "hydra-core", "transformers"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _device(accelerator: str | None) -> str:
    import torch

    if accelerator in (None, "auto", "gpu", "cuda") and torch.cuda.is_available():
        n = torch.cuda.device_count()
        return f"cuda: {torch.cuda.get_device_name(0)} x{n}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def command_line() -> str:
    """This process's command line as a user would type it again."""
    head = "convexp" if Path(sys.argv[0]).name == "convexp" else shlex.join([sys.executable, sys.argv[0]])
    return " ".join([head, shlex.join(sys.argv[1:])]).strip()


def invocation_record(cfg: DictConfig | None = None, model=None) -> dict:
    """This process's invocation: command line, overrides (from the composed config), versions,
    git commit, device, host, pid and time; a user's mixer or FFN in ``model`` (the model the run
    trains; None: the config's ``model``, as pre-training's) as ``model_code``."""
    inv = (cfg.get("invocation") if cfg is not None else None) or {}
    accelerator = OmegaConf.select(cfg, "trainer.accelerator") if cfg is not None else None
    record = {
        "command": inv.get("command") or command_line(),
        "overrides": list(inv.get("overrides") or []),
        "versions": _versions(),
        "device": _device(accelerator),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    commit = git_commit()
    if commit:
        record["git_commit"] = commit
    revisions = hub_revisions(cfg) if cfg is not None else {}
    if revisions:
        record["hub_revisions"] = revisions
    read = hub_reads()
    if read:
        record["hub_read"] = read
    if model is None:
        model = cfg.get("model") if cfg is not None else None
    code = code_record(model) if model is not None else {}
    if code:  # a user's mixer or FFN: its import path, files and the digest the run id holds
        record["model_code"] = code
    return record


def hub_revisions(cfg: DictConfig) -> dict:
    """The ``revision`` setting of each hub source a config names: ``data``, ``data.parts.N``,
    ``glue``, ``squad`` (null: the repository's default branch)."""
    out = {}
    data = cfg.get("data") or {}
    if data.get("source") == "hub":
        parts = data.get("parts") or []
        for i, part in enumerate(parts):
            out[f"data.parts.{i}"] = {"path": part.get("path"), "revision": part.get("revision")}
        if not parts:
            out["data"] = {"path": data.get("path"), "revision": data.get("revision")}
    if cfg.get("stage") == "finetune":  # SQuAD's tasks have a version; GLUE's and probing's read glue:
        key = "squad" if (cfg.get("task") or {}).get("version") else "glue"
        source = cfg.get(key) or {}
        if source.get("source") == "hub":
            out[key] = {"path": source.get("path"), "revision": source.get("revision")}
    return out


def write_record(run, cfg: DictConfig | None = None, model=None) -> None:
    """Add this invocation to ``run``'s record: ``created`` the first time, ``resumed`` after (by
    the main process of a multi-process job only: the other ranks re-run the same command).
    ``model``: the model the run trains where its config does not hold it (a fine-tune's init)."""
    if secondary_rank():
        return
    record = run.read_json(RECORD) or {}
    entry = invocation_record(cfg, model)
    if "created" not in record:
        record["created"] = entry
    else:
        record.setdefault("resumed", []).append(entry)
    run.write_json(RECORD, record)


def made_by_version(run) -> str | None:
    record = run.read_json(RECORD) or {}
    entries = [record.get("created") or {}, *record.get("resumed", [])]
    versions = [e.get("versions", {}).get("convexp") for e in entries if e]
    return versions[-1] if versions else None


def warn_if_other_version(run) -> str | None:
    """One line (printed to stderr, and returned) when finished ``run`` was made by another
    convexp version than this one; None when it was made by this one or has no record."""
    made = made_by_version(run)
    if made is None or made == convexp_version():
        return None
    line = (
        f"warning: reusing {run.id}, finished by convexp {made} (this is convexp {convexp_version()}); "
        "delete its directory to run it again"
    )
    print(line, file=sys.stderr)
    return line
