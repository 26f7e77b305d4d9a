"""What SLURM says about a sweep's jobs (``squeue`` for those it still holds, ``sacct`` for the
rest where accounting is kept) and cancelling them (``scancel``). Job ids are SLURM's: ``N`` or,
for an array task, ``N_T``."""

from __future__ import annotations

import dataclasses
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
