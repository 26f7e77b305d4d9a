"""The run store: one directory per run, named by a hash of the configuration that matters.

    outputs/runs/<stage>/<slug>[+<varied>...]-<hash>/
        config.yaml      the composed configuration
        status.json      running | finished | failed | diverged | interrupted, the error line of the
                         current status and the history of attempts (start, end, status, host, pid)
        lock             held (flock) by the one process writing the run; names its host and pid
        metrics.json     final metrics (finite numbers only; then status finished)
        checkpoints/     the newest periodic checkpoint and last.ckpt (a link to it, or an interrupt's)
        csv/             Lightning CSV logs;  wandb/  W&B files (offline runs: `wandb sync`)
        model/           the exported model (weights, model config, tokenizer)

The slug says what the run is (model preset, objective, task, seed, ``name``), ``+<key><value>``
tokens what varies (a sweep variant's overrides, or the overrides a command gave that differ from
the defaults; run_names.py), the hash which run it is. A run is found by its hash: a repeated
command finds the same directory, even one named otherwise (before names showed what varies, or by
a sweep where a command names it by its own overrides): a finished run is reused, an unfinished
one resumes.
Every file is written to a temporary name and renamed, so a crash never leaves a half-written
result that a report would read as real. A run is finished only when status.json says so and
metrics.json exists; the outputs of a finishing step that did not complete (exports, metrics) are
removed when the next attempt starts, and redone.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..atomic import atomic_write, leftovers
from ..errors import UserError
from .run_names import run_hash, run_name

# The outputs a finishing step writes; any of them in an unfinished run is a leftover to redo.
FINISH_OUTPUTS = ("metrics.json", "model", "hf", "tokenizer", "predictions", "submission")
LOCK_FILE = "lock"
REWRITTEN = (*FINISH_OUTPUTS, "status.json", "config.yaml")  # written atomically by an attempt


class RunDiverged(UserError):
    """Training produced non-finite losses, gradients or results; ``info`` holds the step, the
    last finite loss and the learning rate (written to status.json)."""

    def __init__(self, message: str, **info: Any):
        super().__init__(message)
        self.info = info


class RunLocked(UserError):
    """Another live process holds the run's lock."""


class RunInterrupted(BaseException):
    """SIGTERM (or SIGINT seen through Lightning): stop, record ``interrupted``, keep checkpoints.
    A BaseException, like KeyboardInterrupt, so that sweeps stop instead of moving on.
    ``exit_code``: the process's exit status (default 143, as SIGTERM; a job runner that requeued
    the job may need its own, e.g. submitit's local executor restarts a job that exits with 144)."""

    def __init__(self, message: str = "SIGTERM", exit_code: int | None = None):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Run:
    dir: Path

    @classmethod
    def for_config(
        cls, outputs: str | Path, stage: str, slug: str, cfg: DictConfig | dict, tokens: list[str] = ()
    ) -> "Run":
        """The run of ``cfg``: the store's run with its hash when there is one (whatever its name),
        else a new directory named :func:`run_name`."""
        return cls.for_digest(outputs, stage, slug, run_hash(cfg), tokens)

    @classmethod
    def for_digest(cls, outputs: str | Path, stage: str, slug: str, digest: str, tokens: list[str] = ()) -> "Run":
        """:meth:`for_config` of a config whose :func:`run_hash` is ``digest``."""
        folder = Path(outputs) / "runs" / stage
        named = cls(folder / run_name(slug, list(tokens), digest))
        if not _names_by_digest(folder).get(digest):  # no run of it yet (a folder listed once: a plan asks thousands)
            return named
        if named.finished:  # the common case of a run that exists
            return named
        return cls(find_run(folder, digest) or named.dir)

    @property
    def id(self) -> str:
        return self.dir.name

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints"

    @property
    def model_dir(self) -> Path:
        return self.dir / "model"

    # --- status ----------------------------------------------------------------------------
    @property
    def status(self) -> str:
        s = self.read_json("status.json")
        return s["status"] if s else "new"

    @property
    def finished(self) -> bool:
        """Status finished and finite metrics (a run recorded before divergence was detected,
        with NaN in its metrics, is not finished: the next command redoes its end and finds it
        diverged)."""
        if self.status != "finished":
            return False
        metrics = self.read_json("metrics.json")
        return metrics is not None and not non_finite(metrics)

    def refuse_diverged(self, retry: bool) -> None:
        """A diverged run is not trained again by a re-run of its command (the same settings
        diverge again) unless ``retry`` (``retry_diverged=true``): the same rule for every stage."""
        if self.status == "diverged" and not retry:
            why = (self.read_json("status.json") or {}).get("error") or "training diverged"
            raise RunDiverged(
                f"{self.dir} diverged before ({why}); not trained again: change a setting (e.g. a lower "
                "learning rate), or pass retry_diverged=true to train it again"
            )

    @contextmanager
    def removed_on_refusal(self) -> Iterator[None]:
        """A run directory that the block makes is removed again when the block refuses the input
        (a UserError before any checkpoint was written: nothing of the run exists yet), with the
        store's folders it made; a diverged run is a result and stays."""
        new = not self.dir.exists()
        try:
            yield
        except UserError as e:
            if new and not isinstance(e, RunDiverged) and not self._checkpoints_newest_first():
                shutil.rmtree(self.dir, ignore_errors=True)
                for folder in (self.dir.parent, self.dir.parent.parent):  # runs/<stage>, runs
                    try:
                        folder.rmdir()  # only when empty
                    except OSError:
                        break
            raise

    def set_status(self, status: str, **info: Any) -> None:
        """Rewrite status.json (atomically) with ``status`` and ``info``; keeps the attempts."""
        prev = self.read_json("status.json") or {}
        now = _now()
        record = {
            **prev,
            "status": status,
            "updated": now,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **info,
        }
        record.setdefault("created", now)
        self.write_json("status.json", record)

    @contextmanager
    def attempt(self, wait: float = 0.0, **info: Any) -> Iterator[bool]:
        """One attempt at the run, holding its lock: status ``running`` (a new entry in the
        attempt history) and, when the body leaves, ``finished`` (the body called `finish`),
        ``diverged``, ``interrupted`` (Ctrl-C, SIGTERM: exits with 130 / 143, checkpoints kept)
        or ``failed`` with the error's one-line summary. Yields False, changing nothing, when the
        run finished while this process waited for the lock. Secondary ranks of a multi-process
        job (which re-run the command) neither lock nor record."""
        if secondary_rank():
            yield True
            return
        with self.exclusive(wait):
            if self.finished:
                yield False
                return
            self._start_attempt(info)
            try:
                with _sigterm_interrupts():
                    yield True
            except RunDiverged as e:
                self._end_attempt("diverged", str(e), diverged=e.info)
                raise
            except (KeyboardInterrupt, RunInterrupted) as e:
                name = "SIGINT" if isinstance(e, KeyboardInterrupt) else str(e) or "SIGTERM"
                self._end_attempt("interrupted", f"interrupted by {name}")
                print(f"interrupted: {self.dir} (the same command resumes it)", file=sys.stderr)
                code = getattr(e, "exit_code", None)
                raise SystemExit(code if code is not None else 130 if name == "SIGINT" else 143) from None
            except BaseException as e:
                self._end_attempt("failed", error_line(e))
                raise
            if self.status == "running":  # the body returned without a result
                self._end_attempt("failed", "the command ended without writing its result")

    def finish(self, metrics: dict) -> None:
        """The last step of an attempt: metrics.json (finite numbers only, else the run
        diverged), then status ``finished`` with the current error cleared."""
        bad = non_finite(metrics)
        if bad:
            raise RunDiverged(
                f"non-finite result {bad[0][0]}={bad[0][1]} in {self.dir}; the run diverged "
                "(lower the learning rate or check the data)",
                result=dict(bad),
            )
        self.write_json("metrics.json", metrics)
        self._end_attempt("finished", None)

    def _start_attempt(self, info: dict) -> None:
        record = self.read_json("status.json") or {}
        attempts = record.get("attempts", [])
        for a in attempts:  # an attempt that never recorded its end: the process was killed
            if a.get("status") == "running":
                a.update(status="failed", error="the process ended without recording its status (killed?)")
        # leftovers of a finishing step that did not complete, and of writes killed half-way
        for path in [self.dir / n for n in FINISH_OUTPUTS] + leftovers(self.dir, REWRITTEN):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        me = {"started": _now(), "status": "running", "host": socket.gethostname(), "pid": os.getpid()}
        for key in ("error", "diverged"):
            record.pop(key, None)
        self.write_json("status.json", record)
        self.set_status("running", attempts=[*attempts, me], **info)

    def _end_attempt(self, status: str, error: str | None, **info: Any) -> None:
        record = self.read_json("status.json") or {}
        attempts = record.get("attempts") or [{}]
        attempts[-1] = {**attempts[-1], "ended": _now(), "status": status, "error": error}
        for key in ("error", "diverged"):
            record.pop(key, None)
        self.write_json("status.json", record)
        extra = {"error": error} if error else {}
        self.set_status(status, attempts=attempts, **extra, **info)

    # --- one writer per run ---------------------------------------------------------------
    @contextmanager
    def exclusive(self, wait: float = 0.0) -> Iterator[None]:
        """Hold the run's lock (flock on ``lock``, which names the holder's host and pid) for the
        block. A lock whose holder died is free (the kernel drops it) and is taken over; a live
        holder makes this wait up to ``wait`` seconds, then raise RunLocked naming it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait
        try:
            while not _flock(fd, fcntl.LOCK_EX):
                if time.monotonic() >= deadline:
                    raise RunLocked(
                        f"{self.dir} is being written by {_holder(fd)}; wait for it to end or stop it "
                        "(trainer.lock_wait=<seconds> waits)"
                    )
                time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
            os.ftruncate(fd, 0)
            me = {"host": socket.gethostname(), "pid": os.getpid(), "since": _now()}
            os.pwrite(fd, json.dumps(me).encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def locked_by(self) -> str | None:
        """``host pid N`` of the live process writing this run, or None (for sweep runners: skip
        a run that another agent holds)."""
        path = self.dir / LOCK_FILE
        if not path.exists():
            return None
        fd = os.open(path, os.O_RDONLY)
        try:
            if _flock(fd, fcntl.LOCK_SH):
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
            return _holder(fd)
        finally:
            os.close(fd)

    # --- checkpoints ----------------------------------------------------------------------
    def last_checkpoint(self) -> Path | None:
        """The newest intact checkpoint: last.ckpt, else the step checkpoint with the highest
        step (a truncated file has no zip directory and is passed over)."""
        for path in self._checkpoints_newest_first():
            if _intact(path):
                return path
        return None

    def resume_checkpoint(self) -> Path | None:
        """The checkpoint to resume from; newer ones that are corrupt are renamed to
        ``*.corrupt`` (kept for inspection) with a one-line warning."""
        for path in self._checkpoints_newest_first():
            if _intact(path):
                if all(os.environ.get(k, "0") == "0" for k in ("RANK", "SLURM_PROCID", "LOCAL_RANK")):
                    print(f"resuming {self.dir.name} from {path.relative_to(self.dir)}", file=sys.stderr, flush=True)
                return path
            bad = path.with_name(path.name + ".corrupt")
            path.rename(bad)
            print(
                f"warning: {path} is truncated or corrupt (moved to {bad.name}); trying an older checkpoint",
                file=sys.stderr,
            )
        return None

    def keep_last_checkpoint(self) -> None:
        """Delete every checkpoint but the newest intact one (and ``last.ckpt`` when it links to
        it): what a finished pre-training keeps to be resumed or continued, one file's disk."""
        newest = self.last_checkpoint()
        if newest is None:
            return
        last = self.checkpoints / "last.ckpt"
        for path in [*self._checkpoints_newest_first(), *([last] if last.is_symlink() else [])]:
            if path.resolve() != newest.resolve():  # last.ckpt linking to the newest resolves to it
                path.unlink(missing_ok=True)

    def _checkpoints_newest_first(self) -> list[Path]:
        if not self.checkpoints.is_dir():
            return []
        steps = [p for p in self.checkpoints.glob("*.ckpt") if p.name != "last.ckpt"]

        def step(p: Path) -> tuple[int, float]:
            m = re.search(r"step=(\d+)", p.name)
            return (int(m.group(1)) if m else -1, p.stat().st_mtime)

        last = self.checkpoints / "last.ckpt"
        return ([last] if last.exists() else []) + sorted(steps, key=step, reverse=True)

    # --- files -----------------------------------------------------------------------------
    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.dir / name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, name: str) -> Any:
        p = self.dir / name
        return json.loads(p.read_text()) if p.exists() else None

    def write_config(self, cfg: DictConfig) -> None:
        atomic_write(self.dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))

    def read_config(self) -> DictConfig:
        return OmegaConf.load(self.dir / "config.yaml")


def said(label: str, run_dir: Path, note: str = "", width: int = 80) -> str:
    """``<label>: <run dir> <note>`` for the terminal: when that is wider than ``width`` columns,
    the run's name on the first line and ``  in <its folder>`` on the next (a name shows what
    varies, so it may be long; the output fits 80 columns)."""
    note = f" {note}" if note else ""
    line = f"{label}: {run_dir}{note}"
    if len(line) <= width:
        return line
    return f"{label}: {run_dir.name}\n  in {run_dir.parent}{note}"


_LISTINGS: dict[str, tuple[int, dict[str, list[str]]]] = {}  # folder -> (its mtime, hash -> names)


def _names_by_digest(folder: Path) -> dict[str, list[str]]:
    """The run names in ``folder`` by their hash, listed once while the folder is unchanged (a
    folder's modification time moves when an entry is added or removed): planning a sweep looks
    up thousands of runs in one folder. A folder changed in the last two seconds is listed anew each
    time: two changes within the clock's tick can leave it the same time."""
    try:
        stamp = folder.stat().st_mtime_ns
    except OSError:
        return {}
    hit = _LISTINGS.get(str(folder))
    if hit is None or hit[0] != stamp or time.time_ns() - stamp < 2_000_000_000:
        names: dict[str, list[str]] = {}
        for entry in os.scandir(folder):
            if not entry.name.startswith(".") and "-" in entry.name:
                names.setdefault(entry.name.rsplit("-", 1)[1], []).append(entry.name)
        hit = _LISTINGS[str(folder)] = (stamp, names)
    return hit[1]


def find_run(folder: Path, digest: str) -> Path | None:
    """The directory in ``folder`` (``outputs/runs/<stage>``) of the run with hash ``digest``,
    whatever the rest of its name; None when there is none. Two of them (made at the same time
    under two names) are ranked: finished first, then one with a checkpoint, then one that ran."""
    found = [folder / name for name in _names_by_digest(folder).get(digest, ())]
    found = [p for p in found if p.is_dir()]
    if len(found) <= 1:
        return found[0] if found else None

    def rank(p: Path) -> tuple:
        run = Run(p)
        return (run.finished, bool(run._checkpoints_newest_first()), run.status != "new", p.name)

    return max(found, key=rank)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def error_line(e: BaseException) -> str:
    """The one-line summary of an exception: a user error's message, else its type and the
    first line of its message."""
    text = str(e).strip() if isinstance(e, UserError) else f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0] if text else type(e).__name__


def non_finite(data: Any, path: str = "") -> list[tuple[str, float]]:
    """(key path, value) of every NaN or infinite number in nested dicts and lists."""
    if isinstance(data, dict):
        return [hit for k, v in data.items() for hit in non_finite(v, f"{path}.{k}" if path else str(k))]
    if isinstance(data, (list, tuple)):
        return [hit for i, v in enumerate(data) for hit in non_finite(v, f"{path}[{i}]")]
    if isinstance(data, float) and not math.isfinite(data):
        return [(path, data)]
    return []


def _intact(path: Path) -> bool:
    """A checkpoint (a torch zip archive) whose central directory can be read: not truncated."""
    try:
        with zipfile.ZipFile(path) as z:
            return bool(z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _holder(fd: int) -> str:
    try:
        who = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"host {who['host']} pid {who['pid']} (since {who['since']})"
    except (ValueError, KeyError):
        return "another process"


def secondary_rank() -> bool:
    """True in the non-zero ranks of a multi-process job (torchrun, SLURM, Lightning's ddp)."""
    ranks = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "NODE_RANK")
    return any(os.environ.get(k, "0") not in ("", "0") for k in ranks)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises RunInterrupted (instead of killing the process without a record)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise RunInterrupted("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
