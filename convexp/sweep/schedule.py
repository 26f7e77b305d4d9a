"""A sweep's time on a cluster: each node's hours at a stated throughput, and the wall-clock of the
whole sweep on N GPUs, scheduled as SLURM does with dependencies (a job starts as soon as its own
dependencies have finished and a GPU is free) or in waves with a barrier (the next wave starts when
every job of the previous one has finished).

Throughput is ``launcher.tflops`` sustained per GPU, or ``launcher.device``'s dense peak times the
MFU measured for convexp (``MFU``); a job runs on ``launcher.nodes x launcher.gpus_per_node`` GPUs
(at least one) and its time scales with their number. Both schedules start the jobs that can start
in submission order (the plan's order: SLURM's FIFO with backfill), so they differ only by the
barrier.
"""

from __future__ import annotations

import dataclasses
import heapq

from omegaconf import DictConfig

from .nodes import Node
from .spec import SweepError

# Dense tensor-core peak of one GPU in TFLOP/s, NVIDIA's datasheets (SXM parts): V100 fp16, A100 and
# H100 bf16 (H100 SXM5: 989 without sparsity)
PEAK_TFLOPS = {"v100": 125.0, "a100": 312.0, "h100": 989.0}
# Model FLOPs utilisation of a training step by model width, measured by `convexp bench` on an H200
# (bf16, eager; README, "On a GPU"): ConvBERT-small (width 256, batch 128 x 128) 3.3% — host-bound,
# so small models gain little from a faster card; ConvBERT-base (width 768, 32 x 512) 19.2%. A model
# up to 512 wide takes the first (medium-small, 384 wide, is not measured), a wider one the second.
MFU = ((512, 0.033), (10**9, 0.192))


def mfu(width: int) -> float:
    return next(m for w, m in MFU if width <= w)


@dataclasses.dataclass
class Throughput:
    tflops: float | None  # sustained TFLOP/s of one GPU (None: the device's peak x mfu(width))
    peak: float | None  # the device's dense peak TFLOP/s
    gpus_per_job: int
    gpus: int | None  # the GPUs the sweep may use at once (None: unknown)
    source: str  # how tflops was found, for the printout

    def rate(self, width: int) -> float:
        """Sustained TFLOP/s of one GPU training a model ``width`` wide."""
        return self.tflops if self.tflops is not None else self.peak * mfu(width)

    @property
    def slots(self) -> int:
        """Jobs running at once."""
        return max(1, (self.gpus or self.gpus_per_job) // self.gpus_per_job)


def throughput(settings: DictConfig) -> Throughput:
    """From the sweep's settings: ``launcher.tflops``, else ``launcher.device``'s peak x MFU, else the
    sweep's ``tflops``; ``launcher.gpus`` and the GPUs of one job (a launcher without them: 1)."""
    launcher = settings.launcher
    per_job = max(1, int(launcher.get("nodes") or 1) * int(launcher.get("gpus_per_node") or 1))
    gpus = launcher.get("gpus")
    for key in ("gpus", "tflops"):
        value = launcher.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise SweepError(f"launcher.{key}={value!r}: give a positive number, or null to leave it out")
    if gpus is not None and gpus < per_job:
        raise SweepError(
            f"launcher.gpus={gpus} is fewer than one job's {per_job} GPUs "
            "(launcher.nodes x launcher.gpus_per_node); raise launcher.gpus"
        )
    if launcher.get("device") is not None and launcher.device not in PEAK_TFLOPS:
        raise SweepError(
            f"launcher.device={launcher.device!r} is not known; use one of {', '.join(PEAK_TFLOPS)} "
            "or give launcher.tflops=<sustained TFLOP/s of one GPU>"
        )
    gpus = int(gpus) if gpus else None
    if launcher.get("tflops"):
        return Throughput(float(launcher.tflops), None, per_job, gpus, f"launcher.tflops={launcher.tflops} a GPU")
    if launcher.get("device"):
        peak = PEAK_TFLOPS[launcher.device]
        mfus = " / ".join(f"{m:.1%}" for _, m in MFU)
        source = f"{launcher.device}: {peak:g} TFLOP/s peak x MFU {mfus} (small / base width, measured)"
        return Throughput(None, peak, per_job, gpus, source)
    return Throughput(float(settings.tflops), None, per_job, gpus, f"tflops={settings.tflops} a GPU")


def job_hours(node: Node, tp: Throughput, width: int) -> float:
    """Wall-clock hours of the node's job, its model ``width`` wide (0 when its compute is unknown)."""
    return node.flops / (tp.rate(width) * 1e12 * tp.gpus_per_job) / 3600


def stage_of(node: Node) -> str:
    """pretrain | continue | finetune: the first part of the node's key."""
    return node.key.split("/")[0]


def gpu_hours(nodes: list[Node], hours: dict[str, float], tp: Throughput) -> dict[str, float]:
    """GPU-hours per stage (in the order stages first appear) of jobs taking ``hours``."""
    out: dict[str, float] = {}
    for n in nodes:
        out[stage_of(n)] = out.get(stage_of(n), 0.0) + hours[n.key] * tp.gpus_per_job
    return out


def _list_schedule(order: list[str], deps: dict[str, list[str]], hours: dict[str, float], slots: int,
                   start: float = 0.0) -> dict[str, float]:  # fmt: skip
    """Each job's finish time: at every moment, start (in ``order``) every job whose dependencies
    have finished while fewer than ``slots`` run."""
    finish: dict[str, float] = {}
    running: list[tuple[float, str]] = []
    waiting = list(order)
    t = start
    while waiting or running:
        for k in list(waiting):
            if len(running) >= slots:
                break
            if all(d in finish for d in deps[k]):
                waiting.remove(k)
                heapq.heappush(running, (t + hours[k], k))
        if not running:
            raise ValueError(f"unreachable dependencies: {waiting[:3]}")
        t, k = heapq.heappop(running)
        finish[k] = t
        while running and running[0][0] == t:
            finish[heapq.heappop(running)[1]] = t
    return finish


def _graph(nodes: list[Node]) -> dict[str, list[str]]:
    """Each node's dependencies among ``nodes`` (others have finished)."""
    keys = {n.key for n in nodes}
    return {n.key: [d for d in n.deps if d in keys] for n in nodes}


def dependency_makespan(nodes: list[Node], hours: dict[str, float], slots: int) -> float:
    """Hours from submission to the last job's end, every job submitted at once with afterok."""
    finish = _list_schedule([n.key for n in nodes], _graph(nodes), hours, slots)
    return max(finish.values(), default=0.0)


def waves(nodes: list[Node]) -> list[list[Node]]:
    """The waves of a barrier launcher: each wave, the nodes whose dependencies are in earlier ones."""
    deps, placed, out = _graph(nodes), set(), []
    left = list(nodes)
    while left:
        wave = [n for n in left if all(d in placed for d in deps[n.key])]
        out.append(wave)
        placed |= {n.key for n in wave}
        left = [n for n in left if n.key not in placed]
    return out


def wave_makespan(nodes: list[Node], hours: dict[str, float], slots: int) -> float:
    """Hours of the same jobs in waves: each wave starts when the previous one has finished."""
    t = 0.0
    for wave in waves(nodes):
        keys = [n.key for n in wave]
        finish = _list_schedule(keys, {k: [] for k in keys}, hours, slots, start=t)
        t = max(finish.values(), default=t)
    return t


def critical_path(nodes: list[Node], hours: dict[str, float]) -> float:
    """The longest chain of dependent jobs: the wall-clock with unlimited GPUs."""
    deps, end = _graph(nodes), {}
    for n in nodes:  # dependency order
        end[n.key] = hours[n.key] + max((end[d] for d in deps[n.key]), default=0.0)
    return max(end.values(), default=0.0)


@dataclasses.dataclass
class Makespan:
    gpu_hours: dict[str, float]  # per stage
    dependencies: float  # wall-clock hours, SLURM dependency scheduling
    waves: float  # wall-clock hours, waves with a barrier
    critical: float  # with unlimited GPUs
    unknown: int  # jobs of unknown compute (counted as 0 h)


def makespan(nodes: list[Node], hours: dict[str, float], tp: Throughput) -> Makespan:
    """The sweep's ``nodes`` (those with work left, in the plan's order), each job taking ``hours``,
    on ``tp.gpus`` GPUs."""
    return Makespan(
        gpu_hours(nodes, hours, tp),
        dependency_makespan(nodes, hours, tp.slots),
        wave_makespan(nodes, hours, tp.slots),
        critical_path(nodes, hours),
        sum(not n.flops for n in nodes),
    )
