"""What SLURM says about a sweep's jobs (``squeue`` for those it still holds, ``sacct`` for the
rest where accounting is kept) and cancelling them (``scancel``). Job ids are SLURM's: ``N`` or,
for an array task, ``N_T``."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

# states of a job that has not ended (it may still run, or run again)
ACTIVE = {
    "PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
    "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT",
}  # fmt: skip
NEVER = "DependencyNeverSatisfied"  # the reason of a job whose dependency failed


@dataclasses.dataclass
class Job:
    id: str
    state: str  # SLURM's: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY...
    reason: str = ""  # squeue's, for a job not running: Dependency, DependencyNeverSatisfied, Resources...
    elapsed: float = 0.0  # seconds the job has run (its current or last run)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def _clock(text: str) -> float:
    """SLURM's [D-]HH:MM:SS, MM:SS or M:SS as seconds."""
    days, _, rest = text.strip().rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def _lines(command: list[str]) -> list[str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def jobs(ids: list[str]) -> dict[str, Job]:
    """SLURM's view of the jobs ``ids`` (ids it no longer knows are left out)."""
    wanted = set(ids)
    base = sorted({i.split("_")[0] for i in ids})  # an array id lists every task
    if not base:
        return {}
    out: dict[str, Job] = {}
    for line in _lines(["sacct", "-X", "-n", "--parsable2", "-o", "JobID,State,ElapsedRaw", "-j", ",".join(base)]):
        job, state, elapsed = (line.split("|") + ["", "", ""])[:3]
        if job in wanted:  # a pending array's tasks show as N_[0-9]: squeue lists them one by one
            out[job] = Job(job, state.split()[0] if state else "UNKNOWN", "", float(elapsed or 0))
    # every state: a cluster without accounting (sacct refuses) still lists an ended job for a
    # while (its MinJobAge), and it is the only place its end is seen
    for line in _lines(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(base), "-o", "%i|%T|%r|%M"]):
        job, state, reason, used = (line.split("|") + ["", "", "", ""])[:4]
        if job in wanted:
            out[job] = Job(job, state, reason, _clock(used) if ":" in used else 0.0)
    return out


def cancel(ids: list[str]) -> None:
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=120)


@dataclasses.dataclass
class Partition:
    """What ``sinfo`` says of a partition's nodes (the largest where they differ)."""

    name: str
    gpus_per_node: int  # GPUs in a node's GRES (0: none)
    cpus: int  # CPUs of a node
    mem_mb: int  # memory of a node (MB, as SLURM counts: MiB)
    max_min: int | None  # the partition's time limit in minutes (None: infinite)
    default: bool = False


def _gres_gpus(gres: str) -> int:
    """GPUs in sinfo's GRES column: "gpu:4", "gpu:a100:8(S:0-1)", "gpu:2,shard:8"; "(null)": 0."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _limit(text: str) -> int | None:
    """sinfo's time limit ([D-]HH:MM:SS, MM:SS, "infinite") in minutes."""
    text = text.strip()
    if not text or text in ("infinite", "UNLIMITED", "n/a"):
        return None
    return int(_clock(text) // 60)


def partitions() -> dict[str, Partition] | None:
    """Every partition SLURM lists (``sinfo``), or None where it does not answer."""
    lines = _lines(["sinfo", "-h", "-o", "%P|%G|%l|%c|%m"])
    if not lines:
        return None
    out: dict[str, Partition] = {}
    for line in lines:
        fields = (line.split("|") + [""] * 5)[:5]
        name, gres, limit, cpus, mem = (f.strip() for f in fields)
        default = name.endswith("*")
        name = name.rstrip("*")
        p = Partition(name, _gres_gpus(gres), _number(cpus), _number(mem), _limit(limit), default)
        if name in out:  # nodes of several kinds: the largest of each
            q = out[name]
            p = Partition(name, max(p.gpus_per_node, q.gpus_per_node), max(p.cpus, q.cpus),
                          max(p.mem_mb, q.mem_mb), p.max_min, p.default or q.default)  # fmt: skip
        out[name] = p
    return out


def _number(text: str) -> int:
    """sinfo's "16", "16+" (nodes of several sizes) or "N/A": the number, 0 where none."""
    digits = text.rstrip("+")
    return int(digits) if digits.isdigit() else 0


def on_slurm(launcher) -> bool:
    """launcher=submitit on SLURM: ``launcher.cluster=slurm``, or unset where ``srun`` exists (as
    submitit decides)."""
    cluster = launcher.get("cluster")
    return launcher.name == "submitit" and (cluster == "slurm" or (cluster is None and bool(shutil.which("srun"))))
