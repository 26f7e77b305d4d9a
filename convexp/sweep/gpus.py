"""GPU placement for ``launcher=local``: which of this machine's GPUs each worker's job runs on.

A machine with G GPUs (``CUDA_VISIBLE_DEVICES`` or all that CUDA sees; ``launcher.gpu_ids``
narrows them) runs its sweep's jobs side by side:

* a job that trains on one GPU takes the least-loaded GPU that has room for it. ``launcher.per_gpu``
  says what room is: K, at most K jobs share a card (1: a card each; fine-tunes of small models
  leave most of an H100 idle, so a few of them may share one); ``auto``, by memory: the jobs'
  estimated peaks (sweep/memory.py) on a card add up to at most ``SAFETY`` of its memory (the
  smallest card's, from nvidia-smi), so small fine-tunes pack several to a card and a large
  pre-training gets one to itself. A job whose estimate is unknown or more than that room runs
  alone on a card (never refused: the estimate may be pessimistic; an out-of-memory error says the
  truth, and a packed job that meets one runs again alone, sweep/launchers.py);
* a job with ``trainer.devices=k`` (DDP) waits for k GPUs that nothing else runs on, and takes
  them whole;
* a job on the CPU (``trainer.accelerator=cpu``, as ``scale=smoke`` sets) takes none.

Each worker process sees only its own GPUs (``CUDA_VISIBLE_DEVICES``), so ``trainer.devices: 1``
means "my GPU" in every one of them, and a job never touches another's card. Workers get
``cores / workers`` threads each.

``launcher.workers=auto``: every slot busy where there are GPUs, else 1. With per_gpu=K: G x K.
With per_gpu=auto: G x how many of the sweep's smallest one-GPU jobs fit a card, at most
``MOST_PER_GPU`` (8) a card: every process on a card holds its own CUDA context and time-slices
the GPU with the others (no MPS), so beyond a few a card no throughput is gained, and each worker's
CPU threads and data loaders shrink with their number.

``CONVEXP_GPU_COUNT`` (an environment variable) says how many GPUs there are instead of asking
CUDA, and ``CONVEXP_GPU_MEMORY_MIB`` how much memory each has instead of asking nvidia-smi: for
tests, and for machines where the parent process should not initialise CUDA.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess

from ..train.devices import gpu_driver
from .spec import SweepError

COUNT_ENV = "CONVEXP_GPU_COUNT"
MEMORY_ENV = "CONVEXP_GPU_MEMORY_MIB"
SAFETY = 0.9  # per_gpu=auto fills a card's memory up to this fraction (fragmentation, estimates' error)
MOST_PER_GPU = 8  # workers=auto with per_gpu=auto: at most this many jobs a card


def machine_gpus() -> list[int]:
    """The GPU indices this process may hand out: 0..G-1 of what it sees (``CUDA_VISIBLE_DEVICES``
    renumbers the cards it names from 0, so an index here is always a visible one)."""
    if os.environ.get(COUNT_ENV, "").strip():
        value = os.environ[COUNT_ENV].strip()
        if not value.isdigit():
            raise SweepError(f"{COUNT_ENV}={value!r}: give the number of GPUs, e.g. {COUNT_ENV}=4")
        return list(range(int(value)))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return []  # CUDA_VISIBLE_DEVICES="": no GPU
    if not gpu_driver():
        return []  # no GPU driver on this machine: torch (seconds to import) would find none
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def card_mib() -> int:
    """Memory of this machine's smallest GPU, in MiB (``CONVEXP_GPU_MEMORY_MIB``, else nvidia-smi,
    which needs no torch in this process). per_gpu=auto packs every card as if it were that one."""
    value = os.environ.get(MEMORY_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) == 0:
            raise SweepError(
                f"{MEMORY_ENV}={value!r}: give each GPU's memory in MiB, e.g. {MEMORY_ENV}=81559"
            )
        return int(value)
    query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
        return min(int(float(line)) for line in out.split() if line.strip())
    except (OSError, subprocess.SubprocessError, ValueError):  # no nvidia-smi, it failed, or no number
        raise SweepError(
            f"launcher.per_gpu=auto: could not read the GPUs' memory with nvidia-smi; "
            f"set {MEMORY_ENV}=<MiB a card>, or give launcher.per_gpu=K"
        ) from None


def job_gpus(cfg) -> int:
    """How many GPUs a stage's composed config trains on: 0 on the CPU, else ``trainer.devices``
    (``auto`` or -1: every GPU, given as -1; fine-tuning has no such key: one)."""
    t = cfg.trainer
    if str(t.accelerator) in ("cpu", "mps", "tpu"):
        return 0
    devices = t.get("devices", 1)  # fine-tuning trains on one device (conf/trainer/finetune.yaml)
    if isinstance(devices, int) and not isinstance(devices, bool):
        return -1 if devices == -1 else devices
    if str(devices) == "auto":
        return -1
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        return int(devices)
    return len(list(devices))  # a list of indices: that many GPUs, wherever the pool puts them


@dataclasses.dataclass
class GpuPool:
    """The GPUs jobs may use and what each holds now: a count of jobs (``per_gpu`` K) or their
    estimated MiB (``per_gpu`` ``"auto"``, against ``card_mib``)."""

    ids: list[int]
    per_gpu: int | str = 1
    card_mib: int = 0  # per_gpu=auto: each card's memory
    load: dict[int, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.load = {i: 0 for i in self.ids}

    @property
    def by_memory(self) -> bool:
        return self.per_gpu == "auto"

    @property
    def room(self) -> int:
        """What one card holds: K jobs, or SAFETY x its memory in MiB."""
        return int(self.card_mib * SAFETY) if self.by_memory else int(self.per_gpu)

    def share(self, mib: int) -> int:
        """What a one-GPU job takes of its card: 1 (a job), its estimate, or the whole card (an
        estimate unknown, 0, or beyond the room: the job runs alone)."""
        if not self.by_memory:
            return 1
        return mib if 0 < mib <= self.room else self.room

    def shares(self, mib: int) -> bool:
        """Whether a one-GPU job of estimate ``mib`` may have company on its card."""
        return self.share(mib) < self.room

    def need(self, wanted: int) -> int:
        """A job's GPU count, -1 (every GPU) made concrete."""
        return len(self.ids) if wanted == -1 else wanted

    def fits(self, wanted: int) -> bool:
        """Whether a job wanting ``wanted`` GPUs can ever run here."""
        return self.need(wanted) <= len(self.ids) and (self.need(wanted) == 0 or bool(self.ids))

    def take(self, wanted: int, mib: int = 0, alone: bool = False) -> list[int] | None:
        """GPU indices for a job wanting ``wanted`` GPUs (one-GPU jobs: of estimate ``mib``), now,
        or None if they are busy. One GPU: the least-loaded card with room for :meth:`share`.
        Several (DDP), or ``alone``: that many empty cards, held whole (nothing else is put on
        them until :meth:`give`, with the same arguments)."""
        n = self.need(wanted)
        if n == 0:
            return []
        part = self.room if alone or n > 1 else self.share(mib)
        free = [i for i in self.ids if self.load[i] + part <= self.room]
        if len(free) < n:
            return None
        chosen = sorted(free, key=lambda i: (self.load[i], self.ids.index(i)))[:n]
        for i in chosen:
            self.load[i] += part
        return chosen

    def give(self, ids: list[int], mib: int = 0, alone: bool = False) -> None:
        """Hand back what :meth:`take` gave (the same ``mib`` and ``alone``)."""
        part = self.room if alone or len(ids) > 1 else self.share(mib)
        for i in ids:
            self.load[i] -= part


def pool_from_settings(launcher) -> GpuPool:
    """The pool ``launcher.gpu_ids`` and ``launcher.per_gpu`` describe on this machine; a GPU index
    the machine does not have is refused."""
    machine = machine_gpus()
    chosen = launcher.get("gpu_ids")
    if chosen is None:
        ids = machine
    else:
        ids = [int(i) for i in chosen]
        missing = [i for i in ids if i not in machine]
        if missing:
            have = f"GPUs 0-{len(machine) - 1}" if machine else "no GPU"
            raise SweepError(
                f"launcher.gpu_ids={list(chosen)}: this machine has {have}; "
                f"give indices among them, or null for every GPU"
            )
    per_gpu = launcher.get("per_gpu", 1)
    if per_gpu == "auto":
        return GpuPool(ids, "auto", card_mib() if ids else 0)
    return GpuPool(ids, per_gpu=int(per_gpu))


def one_gpu_jobs(pool: GpuPool, nodes) -> list:
    """The nodes among ``nodes`` whose job trains on one GPU here (the ones that may share a card)."""
    return [n for n in nodes if pool.need(n.gpus) == 1]


def jobs_a_card(pool: GpuPool, nodes) -> int:
    """How many jobs one card runs at once at most: K, or (per_gpu=auto) how many of the smallest
    one-GPU job among ``nodes`` (its estimate known) fit its room, 1 to MOST_PER_GPU (1 where none
    is known)."""
    if not pool.by_memory:
        return pool.room
    known = [n.memory_mib for n in one_gpu_jobs(pool, nodes) if n.memory_mib > 0]
    return max(1, min(MOST_PER_GPU, pool.room // min(known))) if known else 1


def workers_for(launcher, pool: GpuPool, nodes=()) -> int:
    """``launcher.workers`` as a number (``auto``: every GPU slot, else 1); ``nodes``: the jobs to
    run (per_gpu=auto sizes a slot by their estimates)."""
    workers = launcher.get("workers", 1)
    if workers == "auto":
        return max(1, len(pool.ids) * jobs_a_card(pool, list(nodes)))
    return int(workers)


def check_placeable(nodes, pool: GpuPool, gpus_of) -> None:
    """Refuse, before anything runs, a job that needs more GPUs than the pool has."""
    for node in nodes:
        wanted = gpus_of(node)
        if not pool.fits(wanted):
            have = f"{len(pool.ids)} GPU{'s' if len(pool.ids) != 1 else ''}" if pool.ids else "no GPU"
            raise SweepError(
                f"{node.key} trains on {wanted} GPUs (trainer.devices={wanted}) but the sweep may use {have} here; "
                "lower trainer.devices, or widen launcher.gpu_ids"
            )
