"""What each SLURM job asks for: its GPUs, tasks, CPUs, memory and time, from its own node's composed
config and estimates, so that a pre-training on eight GPUs asks for eight and a fine-tune for one,
and a stage trained on the CPU for none.

* GPUs: ``trainer.devices`` on each of ``trainer.num_nodes`` nodes (nodes.py: ``Node.gpus``); none
  for a stage on the CPU (``trainer.accelerator=cpu``). A DDP job runs one task a device.
* CPUs a task: its loader workers + 2 (the training process and its helper threads: pinning, W&B);
  a task trained on the CPU: its ``trainer.threads`` (auto: ``CPU_JOB_THREADS``) + its workers.
* Memory: the node's estimated host peak (memory.host_mib, with its margin).
* Time: the job's estimated hours at its rate (schedule.py: rates.py's measured table) x
  ``TIME_MARGIN`` + ``STARTUP_MIN``, in whole ``STEP_MIN`` minutes, at least ``MIN_TIME_MIN``; at
  most ``launcher.timeout_min`` and the partition's time limit. A job that reaches its limit is
  warned, checkpoints and is requeued (node_job.py): a short estimate costs a requeue, not the work.

The launcher's keys (``launcher.nodes``, ``gpus_per_node``, ``tasks_per_node``, ``cpus_per_task``,
``mem_gb``) override what every job would ask, where set. Fine-tunes that share their dependencies
and that nothing reads pack several to a GPU job with ``launcher.per_gpu`` K or ``auto``, as the
local pool packs them (gpus.py): one job on one GPU runs them side by side (node_job.PackJob); it
asks for their CPUs and memory together, and for their hours one after another divided by what
sharing a card was measured to gain (rates.pack_gain: x3.2 for four small fine-tunes on an H100, x3.8
for eight; 1 for a model wider than any pack measured).

Whether the partition can hold a job is asked of SLURM (slurm.partitions: ``sinfo``): a GPU job sent
to a partition without GPUs, or asking more GPUs or CPUs than its nodes have, is refused before
anything is submitted; memory and time beyond a node's are capped at it.
"""

from __future__ import annotations

import dataclasses
import math
import os

from omegaconf import DictConfig

from .gpus import MEMORY_ENV, MOST_PER_GPU, GpuPool
from .nodes import Node
from .rates import CARD_MIB, pack_gain
from .schedule import Throughput, Unit
from .slurm import Partition
from .spec import SweepError

TIME_MARGIN = 1.5  # x the estimated hours
STARTUP_MIN = 10  # imports, data, the first compile, evaluation and the final save
STEP_MIN = 5  # --time in whole 5 minutes
MIN_TIME_MIN = 15
CPU_JOB_THREADS = 8  # a task trained on the CPU with trainer.threads=auto
UNKNOWN_MEM_GB = 16  # a job whose model is not known before it runs (a hub checkpoint not yet fetched)
OVERRIDES = ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb")


@dataclasses.dataclass(frozen=True)
class Request:
    """One SLURM job's resources (sbatch's --nodes, --gpus-per-node, --ntasks-per-node,
    --cpus-per-task, --mem, --time)."""

    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    cpus_per_task: int
    mem_gb: int  # on each node
    time_min: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def params(self) -> dict:
        """As submitit's executor takes them."""
        return dict(nodes=self.nodes, gpus_per_node=self.gpus_per_node, tasks_per_node=self.tasks_per_node,
                    cpus_per_task=self.cpus_per_task, mem_gb=self.mem_gb, timeout_min=self.time_min)  # fmt: skip

    def text(self) -> str:
        """"2 nodes x 8 GPUs, 8 tasks a node, 4 CPUs a task, 64 GB a node, 1-12:00"."""
        where = f"{self.nodes} nodes x " if self.nodes > 1 else ""
        gpus = f"{self.gpus_per_node} GPU{'s' if self.gpus_per_node != 1 else ''}" if self.gpus_per_node else "no GPU"
        tasks = f"{self.tasks_per_node} tasks{' a node' if self.nodes > 1 else ''}, " if self.tasks_per_node > 1 else ""
        mem = f"{self.mem_gb} GB{' a node' if self.nodes > 1 else ''}"
        cpus = f"{self.cpus_per_task} CPU{'s' if self.cpus_per_task != 1 else ''} a task"
        return f"{where}{gpus}, {tasks}{cpus}, {mem}, {clock(self.time_min)}"


def clock(minutes: int) -> str:
    """SLURM's [D-]HH:MM."""
    days, rest = divmod(int(minutes), 1440)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}"


@dataclasses.dataclass
class Job:
    """One SLURM job: a node, or fine-tunes packed on one GPU."""

    nodes: list[Node]
    request: Request
    hours: float  # estimated, at its rate (a pack's: its members' summed, over the measured gain)
    capped: tuple[str, ...] = ()  # what the partition or launcher.timeout_min cut: "time", "memory"

    @property
    def key(self) -> str:
        first = self.nodes[0].key
        return first if len(self.nodes) == 1 else f"{first}+{len(self.nodes) - 1}"

    @property
    def stage(self) -> str:
        return self.nodes[0].key.split("/")[0]

    @property
    def deps(self) -> list[str]:
        mine = {n.key for n in self.nodes}
        return list(dict.fromkeys(d for n in self.nodes for d in n.deps if d not in mine))

    def unit(self) -> Unit:
        return Unit(self.key, self.deps, self.hours, self.request.gpus)

    @property
    def requeues(self) -> int:
        """The time limits it reaches at its estimate (each one requeues it, node_job.py)."""
        if self.hours <= 0:
            return 0
        return max(0, math.ceil((self.hours * 60 * TIME_MARGIN + STARTUP_MIN) / self.request.time_min) - 1)


def time_min(hours: float, ceiling: int) -> tuple[int, bool]:
    """(--time in minutes for a job of ``hours``, whether the ceiling cut it); unknown hours (0):
    the ceiling."""
    if hours <= 0:
        return ceiling, False
    wanted = math.ceil((hours * 60 * TIME_MARGIN + STARTUP_MIN) / STEP_MIN) * STEP_MIN
    wanted = max(MIN_TIME_MIN, wanted)
    return min(wanted, ceiling), wanted > ceiling


def node_request(node: Node, hours: float, ceiling: int) -> tuple[Request, bool]:
    """What ``node``'s job would ask for by itself (the launcher's overrides not applied)."""
    if node.gpus < 0:
        raise SweepError(
            f"{node.key}: trainer.devices=auto on SLURM: a job asks for a number of GPUs; "
            "give trainer.devices=N (N GPUs a node)"
        )
    cpus = node.workers + (2 if node.gpus else (node.threads or CPU_JOB_THREADS))
    mem = math.ceil(node.host_mib / 1024) if node.host_mib else UNKNOWN_MEM_GB
    minutes, cut = time_min(hours, ceiling)
    return Request(max(1, node.num_nodes), node.gpus, max(1, node.tasks), cpus, max(1, mem), minutes), cut


def _overridden(r: Request, launcher: DictConfig) -> Request:
    """The launcher's keys that are set, in place of the job's own."""
    given = {k: int(launcher[k]) for k in OVERRIDES if launcher.get(k) is not None}
    return dataclasses.replace(r, **given)


def _ceiling(launcher: DictConfig, partition: Partition | None) -> int:
    ceiling = int(launcher.timeout_min)
    if partition is not None and partition.max_min is not None:
        ceiling = min(ceiling, partition.max_min)
    return ceiling


def packable(node: Node, read: set[str]) -> bool:
    """A fine-tune on one GPU of one node that no other node depends on or reads."""
    return node.stage == "finetune" and node.gpus == 1 and node.num_nodes == 1 and node.key not in read


def card_mib(card: str) -> int:
    """Memory of one card of the cluster: CONVEXP_GPU_MEMORY_MIB, else launcher.device's."""
    value = os.environ.get(MEMORY_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else CARD_MIB[card]


def plan_jobs(todo: list[Node], all_nodes: list[Node], tp: Throughput, launcher: DictConfig,
              partition: Partition | None = None) -> list[Job]:  # fmt: skip
    """The SLURM jobs of the nodes ``todo`` (in the plan's order): each node its own job, or packed
    (``launcher.per_gpu``); each job's request, the launcher's overrides applied, capped by the
    partition (``partition``: sinfo's, None where SLURM was not asked)."""
    ceiling = _ceiling(launcher, partition)
    read = {d for n in all_nodes for d in n.deps}  # nodes another one waits for
    per_gpu = launcher.get("per_gpu", 1)
    groups: dict[tuple, list[Node]] = {}  # packable fine-tunes by their dependencies
    singles: list[Node] = []
    for n in todo:
        if per_gpu != 1 and packable(n, read):
            groups.setdefault(tuple(sorted(n.deps)), []).append(n)
        else:
            singles.append(n)
    packs: dict[str, list[Node]] = {}  # first member's key -> the members
    for members in groups.values():
        pool = GpuPool([0], per_gpu, card_mib(tp.card) if per_gpu == "auto" else 0)
        pack: list[Node] = []
        for n in members:
            full = len(pack) >= (MOST_PER_GPU if per_gpu == "auto" else int(per_gpu))
            if pack and (full or pool.take(1, n.memory_mib) is None):
                packs[pack[0].key] = pack
                pool = GpuPool([0], per_gpu, pool.card_mib)
                pack = []
            if not pack:
                pool.take(1, n.memory_mib)
            pack.append(n)
        packs[pack[0].key] = pack
    in_pack = {n.key: first for first, members in packs.items() for n in members}
    jobs: list[Job] = []
    for n in todo:  # the plan's order: a pack where its first member is
        if n.key in in_pack and in_pack[n.key] != n.key:
            continue
        members = packs.get(n.key, [n])
        hours = pack_hours(members, tp)
        requests = [node_request(m, tp.hours(m), ceiling)[0] for m in members]
        r = requests[0]
        if len(members) > 1:
            r = dataclasses.replace(r, cpus_per_task=sum(q.cpus_per_task for q in requests),
                                    mem_gb=sum(q.mem_gb for q in requests))  # fmt: skip
        minutes, cut = time_min(hours, ceiling)
        r = _overridden(dataclasses.replace(r, time_min=minutes), launcher)
        capped = ("time",) if cut else ()
        if partition is not None and partition.mem_mb and r.mem_gb * 1024 > partition.mem_mb:
            r, capped = dataclasses.replace(r, mem_gb=max(1, partition.mem_mb // 1024)), (*capped, "memory")
        jobs.append(Job(members, r, hours, capped))
    return jobs


def pack_hours(members: list[Node], tp: Throughput) -> float:
    """Hours of a job running ``members`` side by side on one GPU: theirs summed, over what sharing
    the card was measured to gain (rates.pack_gain); a node alone: its own."""
    hours = sum(tp.hours(m) for m in members)
    if len(members) > 1 and members[0].workload is not None:
        hours /= pack_gain(len(members), members[0].workload.width)[0]
    return hours


def check_requeues(jobs: list[Job], launcher: DictConfig) -> None:
    """Refuse a job that would reach its time limit more often than ``launcher.max_requeues`` lets it
    be requeued (it would end unfinished)."""
    for job in jobs:
        if job.requeues > int(launcher.max_requeues):
            raise SweepError(
                f"{job.key} needs ~{job.hours:,.0f} h: {job.requeues} requeues at its --time of "
                f"{clock(job.request.time_min)}, more than launcher.max_requeues={launcher.max_requeues}; raise "
                "launcher.max_requeues, or train it on more GPUs (trainer.devices, trainer.num_nodes)"
            )


def check_partition(jobs: list[Job], launcher: DictConfig, partitions: dict[str, Partition] | None) -> Partition | None:
    """The partition the jobs go to, refusing (SweepError) a job it cannot hold: a GPU job where its
    nodes have no GPUs, more GPUs or CPUs than a node has. ``partitions`` None (SLURM not asked): None."""
    if partitions is None:
        return None
    name = launcher.get("partition")
    if name is None:
        default = [p for p in partitions.values() if p.default]
        if not default:
            raise SweepError(
                f"SLURM has no default partition; name one: launcher.partition=NAME ({', '.join(partitions)})"
            )
        part, where = default[0], f"the default partition {default[0].name!r} (launcher.partition=null)"
    elif name not in partitions:
        raise SweepError(
            f"launcher.partition={name!r}: SLURM has no such partition; sinfo lists: {', '.join(partitions)}"
        )
    else:
        part, where = partitions[name], f"launcher.partition={name}"
    for job in jobs:
        r = job.request
        if r.gpus_per_node and not part.gpus_per_node:
            with_gpus = [p.name for p in partitions.values() if p.gpus_per_node]
            fix = f"launcher.partition={with_gpus[0]}" if with_gpus else "a partition with GPUs"
            raise SweepError(
                f"{where} has no GPUs (sinfo: no gpu in its nodes' GRES), but {job.key} trains on "
                f"{r.gpus} GPU{'s' if r.gpus > 1 else ''}: send it to {fix}, or train on the CPU "
                "(trainer.accelerator=cpu)"
            )
        if r.gpus_per_node > part.gpus_per_node:
            raise SweepError(
                f"{job.key} asks for {r.gpus_per_node} GPUs a node but {where}'s nodes have {part.gpus_per_node}: "
                f"lower trainer.devices (and raise trainer.num_nodes), or choose another partition"
            )
        if part.cpus and r.cpus_per_task * r.tasks_per_node > part.cpus:
            raise SweepError(
                f"{job.key} asks for {r.cpus_per_task * r.tasks_per_node} CPUs a node ({r.tasks_per_node} tasks x "
                f"{r.cpus_per_task}) but {where}'s nodes have {part.cpus}: lower trainer.num_workers, "
                "or set launcher.cpus_per_task"
            )
    return part


def units(jobs: list[Job]) -> list[Unit]:
    return [j.unit() for j in jobs]


def cluster_throughput(plan, nodes: list | None = None) -> Throughput:
    """The rates of the plan's jobs (schedule.Throughput): launcher.device's measured table, and,
    where a job among ``nodes`` trains on the CPU, the rate measured on this machine's CPU."""
    from ..train.cpu_rate import cpu_rate
    from .schedule import throughput

    cpu = None
    first = next(iter(plan.pretrain_cfgs.values()), None)
    if first is not None and any(n.gpus == 0 for n in nodes or []):
        cpu = cpu_rate(first)[0]
    return throughput(plan.settings, cpu)


def slurm_jobs(plan, todo: list, asked: bool = True) -> tuple[list[Job], Partition | None, Throughput]:
    """(the SLURM jobs of ``todo`` with their requests, the partition they go to or None, the
    throughput): what a submission would ask for; ``asked``: SLURM is asked (sinfo) where it runs,
    and a job its partition cannot hold is refused (SweepError)."""
    from . import slurm

    launcher = plan.settings.launcher
    tp = cluster_throughput(plan, todo)
    partitions = slurm.partitions() if asked and slurm.on_slurm(launcher) else None
    jobs = plan_jobs(todo, plan.order(), tp, launcher)
    part = check_partition(jobs, launcher, partitions)
    if part is not None:  # capped by the partition's limits
        jobs = plan_jobs(todo, plan.order(), tp, launcher, part)
    check_requeues(jobs, launcher)
    return jobs, part, tp
