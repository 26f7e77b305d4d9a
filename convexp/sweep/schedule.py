"""A sweep's time on a cluster: each job's hours at its measured rate, and the wall-clock of the
whole sweep on N GPUs, scheduled as SLURM does with dependencies (a job starts as soon as its own
dependencies have finished and its GPUs are free) or in waves with a barrier (the next wave starts
when every job of the previous one has finished).

A job's rate is the measured one of its card and mode (sweep/rates.py: ``launcher.device``, the
job's width, precision and ``trainer.compile``), or ``tflops=`` where the sweep states one; a job on
k GPUs (``trainer.devices x trainer.num_nodes``) holds k and takes 1/k of the time. A job trained on
the CPU takes the rate measured on this machine's CPU (train/cpu_rate.py) where one is given, and
holds no GPU. Both schedules start the jobs that can start in submission order (the plan's order:
SLURM's FIFO with backfill), so they differ only by the barrier.
"""

from __future__ import annotations

import dataclasses
import heapq

from omegaconf import DictConfig

from .nodes import Node
from .rates import PEAK_TFLOPS, Rate, rate, stated

DEFAULT_CARD = "h100"  # the card the rates are for when launcher.device names none


@dataclasses.dataclass
class Throughput:
    card: str  # launcher.device: the card every GPU job's rate is read for
    tflops: float | None  # tflops=: a stated rate instead of the table's
    gpus: int | None  # the GPUs the sweep may hold at once (None: unknown)
    cpu_flops: float | None = None  # FLOP/s measured on this machine's CPU, for jobs trained on the CPU

    def rate(self, node: Node) -> Rate | None:
        """One GPU's rate on ``node`` (its CPU's, for a job on the CPU); None: unknown."""
        if node.gpus == 0:
            return Rate(self.cpu_flops, "measured on this machine's CPU (train/cpu_rate.py; rough)") if self.cpu_flops else None
        if self.tflops is not None:
            return stated(self.tflops)
        return rate(self.card, node.workload) if node.workload is not None else None

    def hours(self, node: Node) -> float:
        """Wall-clock hours of the node's job on its own GPUs (0 when its compute or rate is unknown)."""
        r = self.rate(node)
        return node.flops / (r.flops_s * max(1, job_gpus(node))) / 3600 if r and node.flops else 0.0

    @property
    def source(self) -> str:
        if self.tflops is not None:
            return f"tflops={self.tflops:g} a GPU (stated)"
        return f"{self.card}: the rates measured on a card (sweep/rates.py)"


def job_gpus(node: Node) -> int:
    """The GPUs a node's job holds (its devices on each of its nodes; -1, every GPU, counts one)."""
    return max(1, node.gpus) * max(1, node.num_nodes) if node.gpus else 0


def throughput(settings: DictConfig, cpu_flops: float | None = None) -> Throughput:
    """From the sweep's settings: ``launcher.device`` (the card), ``tflops``, ``launcher.gpus``."""
    from .spec import SweepError

    launcher = settings.launcher
    card = launcher.get("device") or DEFAULT_CARD
    if card not in PEAK_TFLOPS:
        raise SweepError(f"launcher.device={card!r} is not known; use one of {', '.join(PEAK_TFLOPS)}")
    gpus = launcher.get("gpus")
    tflops = settings.get("tflops")
    return Throughput(card, float(tflops) if tflops else None, int(gpus) if gpus else None, cpu_flops)


def stage_of(node: Node) -> str:
    """pretrain | continue | finetune: the first part of the node's key."""
    return node.key.split("/")[0]


@dataclasses.dataclass
class Unit:
    """One job to schedule: a node, or fine-tunes packed on one GPU (requests.py)."""

    key: str
    deps: list[str]
    hours: float
    gpus: int


def units(nodes: list[Node], tp: Throughput) -> list[Unit]:
    """Each node as its own job."""
    return [Unit(n.key, list(n.deps), tp.hours(n), job_gpus(n)) for n in nodes]


def _list_schedule(order: list[Unit], deps: dict[str, list[str]], capacity: int | None,
                   start: float = 0.0) -> dict[str, float]:  # fmt: skip
    """Each job's finish time: at every moment, start (in ``order``) every job whose dependencies
    have finished while its GPUs are free (``capacity``: GPUs in all; None: unlimited; a job needing
    more than there are runs alone)."""
    finish: dict[str, float] = {}
    running: list[tuple[float, str, int]] = []
    waiting = list(order)
    t, free = start, capacity
    while waiting or running:
        for u in list(waiting):
            if not all(d in finish for d in deps[u.key]):
                continue
            need = min(u.gpus, capacity) if capacity is not None else 0
            if capacity is not None and need > free:
                break  # a job waiting for GPUs holds back the ready ones after it (never starved)
            waiting.remove(u)
            free = free - need if capacity is not None else None
            heapq.heappush(running, (t + u.hours, u.key, need))
        if not running:
            raise ValueError(f"unreachable dependencies: {[u.key for u in waiting[:3]]}")
        t, k, need = heapq.heappop(running)
        finish[k] = t
        free = free + need if capacity is not None else None
        while running and running[0][0] == t:
            _, k, need = heapq.heappop(running)
            finish[k] = t
            free = free + need if capacity is not None else None
    return finish


def _graph(jobs: list[Unit]) -> dict[str, list[str]]:
    """Each job's dependencies among ``jobs`` (others have finished)."""
    keys = {u.key for u in jobs}
    return {u.key: [d for d in u.deps if d in keys] for u in jobs}


def dependency_makespan(jobs: list[Unit], capacity: int | None) -> float:
    """Hours from submission to the last job's end, every job submitted at once with afterok."""
    finish = _list_schedule(jobs, _graph(jobs), capacity)
    return max(finish.values(), default=0.0)


def waves(jobs: list[Unit]) -> list[list[Unit]]:
    """The waves of a barrier launcher: each wave, the jobs whose dependencies are in earlier ones."""
    deps, placed, out = _graph(jobs), set(), []
    left = list(jobs)
    while left:
        wave = [u for u in left if all(d in placed for d in deps[u.key])]
        out.append(wave)
        placed |= {u.key for u in wave}
        left = [u for u in left if u.key not in placed]
    return out


def wave_makespan(jobs: list[Unit], capacity: int | None) -> float:
    """Hours of the same jobs in waves: each wave starts when the previous one has finished."""
    t = 0.0
    for wave in waves(jobs):
        finish = _list_schedule(wave, {u.key: [] for u in wave}, capacity, start=t)
        t = max(finish.values(), default=t)
    return t


def critical_path(jobs: list[Unit]) -> float:
    """The longest chain of dependent jobs: the wall-clock with unlimited GPUs."""
    deps, end = _graph(jobs), {}
    for u in jobs:  # dependency order
        end[u.key] = u.hours + max((end[d] for d in deps[u.key]), default=0.0)
    return max(end.values(), default=0.0)


def gpu_hours(jobs: list[Unit]) -> dict[str, float]:
    """GPU-hours per stage (in the order stages first appear): each job's hours x the GPUs it holds."""
    out: dict[str, float] = {}
    for u in jobs:
        stage = u.key.split("/")[0]
        out[stage] = out.get(stage, 0.0) + u.hours * u.gpus
    return out


@dataclasses.dataclass
class Makespan:
    gpu_hours: dict[str, float]  # per stage
    dependencies: float  # wall-clock hours, SLURM dependency scheduling
    waves: float  # wall-clock hours, waves with a barrier
    critical: float  # with unlimited GPUs
    unknown: int  # jobs of unknown compute (counted as 0 h)


def makespan(jobs: list[Unit], gpus: int | None, unknown: int = 0) -> Makespan:
    """The sweep's ``jobs`` (those with work left, in the plan's order) on ``gpus`` GPUs."""
    return Makespan(gpu_hours(jobs), dependency_makespan(jobs, gpus), wave_makespan(jobs, gpus),
                    critical_path(jobs), unknown)  # fmt: skip
