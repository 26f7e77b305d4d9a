"""GPU placement for ``launcher=local``: which of this machine's GPUs each worker's job runs on.

A machine with G GPUs (``CUDA_VISIBLE_DEVICES`` or all that CUDA sees; ``launcher.gpu_ids``
narrows them) runs its sweep's jobs side by side:

* a job that trains on one GPU takes the least-loaded GPU that has room: at most
  ``launcher.per_gpu`` jobs share a card (1: a card each; fine-tunes of small models leave most of
  an H100 idle, so a few of them may share one);
* a job with ``trainer.devices=k`` (DDP) waits for k GPUs that nothing else runs on, and takes
  them whole;
* a job on the CPU (``trainer.accelerator=cpu``, as ``scale=smoke`` sets) takes none.

Each worker process sees only its own GPUs (``CUDA_VISIBLE_DEVICES``), so ``trainer.devices: 1``
means "my GPU" in every one of them, and a job never touches another's card. Workers get
``cores / workers`` threads each.

``launcher.workers=auto``: G x per_gpu where there are GPUs (every slot busy), else 1.

``CONVEXP_GPU_COUNT`` (an environment variable) says how many GPUs there are instead of asking
CUDA: for tests, and for machines where the parent process should not initialise CUDA.
"""

from __future__ import annotations

import dataclasses
import os

from .spec import SweepError

COUNT_ENV = "CONVEXP_GPU_COUNT"


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
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


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
    """The GPUs jobs may use and how many jobs each holds now."""

    ids: list[int]
    per_gpu: int = 1
    load: dict[int, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.load = {i: 0 for i in self.ids}

    def need(self, wanted: int) -> int:
        """A job's GPU count, -1 (every GPU) made concrete."""
        return len(self.ids) if wanted == -1 else wanted

    def fits(self, wanted: int) -> bool:
        """Whether a job wanting ``wanted`` GPUs can ever run here."""
        return self.need(wanted) <= len(self.ids) and (self.need(wanted) == 0 or bool(self.ids))

    def take(self, wanted: int, alone: bool = False) -> list[int] | None:
        """GPU indices for a job wanting ``wanted`` GPUs, now, or None if they are busy. One GPU: the
        least-loaded card with room. Several (DDP), or ``alone``: that many empty cards, held whole
        (nothing else is put on them until :meth:`give`)."""
        n = self.need(wanted)
        if n == 0:
            return []
        if n == 1 and not alone:
            free = [i for i in self.ids if self.load[i] < self.per_gpu]
            if not free:
                return None
            chosen, slots = [min(free, key=lambda i: (self.load[i], self.ids.index(i)))], 1
        else:
            empty = [i for i in self.ids if self.load[i] == 0]
            if len(empty) < n:
                return None
            chosen, slots = empty[:n], self.per_gpu
        for i in chosen:
            self.load[i] += slots
        return chosen

    def give(self, ids: list[int], alone: bool = False) -> None:
        """Hand back what :meth:`take` gave (the same ``alone``)."""
        slots = self.per_gpu if alone or len(ids) > 1 else 1
        for i in ids:
            self.load[i] -= slots


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
    return GpuPool(ids, per_gpu=int(launcher.get("per_gpu", 1)))


def workers_for(launcher, pool: GpuPool) -> int:
    """``launcher.workers`` as a number (``auto``: every GPU slot, else 1)."""
    workers = launcher.get("workers", 1)
    if workers == "auto":
        return max(1, len(pool.ids) * pool.per_gpu)
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
