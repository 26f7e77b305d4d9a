"""Where a sweep on SLURM stands (``convexp ablate NAME --status``, ``--follow``): each node's state
from the ledger (its job), the run store (finished, diverged, its attempts) and SLURM (queued,
running, ended), the GPU-hours spent and left, and the estimated finish.

A node whose dependency failed is blocked; its job, if SLURM still holds it (waiting on a
dependency that can never be satisfied), is cancelled and the ledger records why."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ..store.runs import Run
from . import slurm
from .execute import Ledger, Outcome, read_ledger
from .nodes import Node
from .plan import Plan
from .requests import pack_hours
from .schedule import Throughput, Unit, dependency_makespan, job_gpus, throughput

ENDED_BADLY = ("failed", "blocked", "diverged")
SLURM_SAYS = ("srun: ", "slurmstepd")  # SLURM's own lines in a job's log ("srun: error: ... exit code 1")


@dataclasses.dataclass
class NodeState:
    key: str
    state: str  # cached | done | queued | pending | running | failed | diverged | blocked | held | not submitted
    detail: str = ""  # "pending on pretrain/a", "running for 3.0 h (job 12_3)", "failed: ...", "blocked by ..."
    job: str | None = None
    requeues: int = 0  # attempts of its runs interrupted (and requeued) so far
    spent_s: float = 0.0  # wall seconds of its runs' attempts
    running_s: float = 0.0  # seconds its job has run so far (running only)

    @property
    def line(self) -> str:
        """What --status prints after the node: "done", "running for 2.0 h (job 7); requeued 1 time"."""
        again = f"; requeued {self.requeues} time{'s' if self.requeues > 1 else ''}" if self.requeues else ""
        return (self.detail or self.state) + again


def _seconds(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def _attempts(node: Node) -> list[dict]:
    return [a for r in node.runs for a in (r.read_json("status.json") or {}).get("attempts", [])]


def _spent(node: Node, now: float) -> float:
    """Wall seconds its runs' attempts took (a running attempt: until now)."""
    total = 0.0
    for a in _attempts(node):
        if a.get("started"):
            end = _seconds(a["ended"]) if a.get("ended") else now if a.get("status") == "running" else None
            total += max(0.0, end - _seconds(a["started"])) if end else 0.0
    return total


def _error(node: Node, log: str | None) -> str:
    """The failure's line: a run's recorded error, else the last line of the job's log that is not
    SLURM's own."""
    for run in node.runs:
        error = (run.read_json("status.json") or {}).get("error")
        if error:
            return error
    if log and Path(log).exists():
        text = Path(log).read_text(errors="replace")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(SLURM_SAYS)]
        if lines:
            return lines[-1][-300:]
    return "the job ended without a result"


def _hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:.1f} h" if h >= 0.1 else f"{seconds / 60:.0f} min"


def node_states(plan: Plan, recorded: dict[str, dict], jobs: dict[str, slurm.Job], now: float) -> dict[str, NodeState]:
    """Each node's state, in dependency order (a dependant sees its dependencies' states)."""
    out: dict[str, NodeState] = {}
    for node in plan.order():
        rec = recorded.get(node.key, {})
        job_id = rec.get("job")
        job = jobs.get(job_id) if job_id else None
        requeues = sum(a.get("status") == "interrupted" for a in _attempts(node))
        st = NodeState(node.key, "", job=job_id, requeues=requeues, spent_s=_spent(node, now))
        bad = next((d for d in node.deps if out[d].state in ENDED_BADLY), None)
        if node.done:
            st.state = "done" if job_id or rec.get("status") == "done" else "cached"
            if rec.get("gpus"):
                st.detail = f"{st.state} (ran on GPU {','.join(map(str, rec['gpus']))})"
        elif any(r.status == "diverged" for r in node.runs):
            st.state, st.detail = "diverged", f"diverged: {_error(node, None)}"
        elif bad:
            st.state, st.detail = "blocked", f"blocked by {bad}"
        elif job is None and rec.get("status") == "running" and any(r.locked_by() for r in node.runs):
            where = f"GPU {','.join(map(str, rec['gpus']))}" if rec.get("gpus") else "the CPU"
            st.state, st.detail = "running", f"running on {where} (a local worker)"
        elif job is None:
            if rec.get("status") in ("failed", "blocked"):
                st.state, st.detail = rec["status"], f"{rec['status']}: {rec.get('error')}"
            else:
                st.state, st.detail = "not submitted", "not submitted (convexp ablate submits it)"
        elif job.state == "RUNNING":
            st.state, st.running_s = "running", job.elapsed
            st.detail = f"running for {_hours(job.elapsed)} (job {job_id})"
        elif job.active:
            waiting = [d for d in node.deps if out[d].state not in ("done", "cached")]
            if job.reason == "Dependency" and waiting:
                st.state, st.detail = "pending", f"pending on {', '.join(waiting)} (job {job_id})"
            else:
                st.state, st.detail = "queued", f"queued ({job.reason or job.state}; job {job_id})"
        elif job.state == "CANCELLED" and not any(out[d].state not in ("done", "cached") for d in node.deps):
            st.state, st.detail = "not submitted", f"cancelled (job {job_id}); convexp ablate submits it again"
        else:  # ended without finishing its runs
            st.state, st.detail = "failed", f"failed: {_error(node, rec.get('log'))} (job {job_id}: {job.state})"
        out[node.key] = st
    return out


@dataclasses.dataclass
class Progress:
    states: dict[str, NodeState]
    spent_gpu_h: float
    left_gpu_h: float
    finish_h: float | None  # hours from now to the sweep's end (None: nothing left)
    tp: Throughput


def sweep_progress(plan: Plan, cancel: bool = True) -> Progress:
    """The sweep's state now; with ``cancel``, blocked nodes' jobs that SLURM still holds are
    cancelled and the ledger records every node's state."""
    now = time.time()
    recorded = read_ledger(plan)
    jobs = slurm.jobs([n["job"] for n in recorded.values() if n.get("job")])
    states = node_states(plan, recorded, jobs, now)
    stale = [s.job for s in states.values() if s.state == "blocked" and s.job in jobs and jobs[s.job].active]
    if cancel and stale:
        slurm.cancel(stale)
    if cancel and recorded:
        _record(plan, recorded, states)
    tp = throughput(plan.settings)
    spent = spent_gpu_hours(plan.order(), recorded, states)
    jobs = jobs_left(plan.order(), recorded, states, tp)
    finish = dependency_makespan(jobs, tp.gpus) if jobs else None
    return Progress(states, spent, sum(u.hours * u.gpus for u in jobs), finish, tp)


def _packs(nodes: list[Node], recorded: dict[str, dict]) -> dict[str, list[Node]]:
    """SLURM job id -> the nodes it runs, for the jobs that run several (a pack on one GPU)."""
    by_job: dict[str, list[Node]] = {}
    for n in nodes:
        job = recorded.get(n.key, {}).get("job")
        if job:
            by_job.setdefault(job, []).append(n)
    return {j: members for j, members in by_job.items() if len(members) > 1}


def spent_gpu_hours(nodes: list[Node], recorded: dict[str, dict], states: dict[str, NodeState]) -> float:
    """GPU-hours the sweep's runs took: each node's attempts x its GPUs; a pack's members ran side by
    side on its one GPU, so a pack counts its longest member once."""
    packs = _packs(nodes, recorded)
    packed = {n.key for members in packs.values() for n in members}
    alone = sum(states[n.key].spent_s * job_gpus(n) for n in nodes if n.key not in packed)
    shared = sum(max(states[n.key].spent_s * job_gpus(n) for n in members) for members in packs.values())
    return (alone + shared) / 3600


def jobs_left(nodes: list[Node], recorded: dict[str, dict], states: dict[str, NodeState], tp: Throughput) -> list[Unit]:
    """What is left to run, as the schedule's units: a node's hours at its rate less what its running
    job has done; a pack's members one unit on its GPU, their hours summed over what sharing the card
    gains (rates.pack_gain, as the dry run bills it)."""
    left = [n for n in nodes if states[n.key].state not in ("done", "cached", *ENDED_BADLY)]
    keys = {n.key for n in left}
    units, packed = [], set()
    for job, members in _packs(left, recorded).items():
        hours = pack_hours(members, tp) - max(states[n.key].running_s for n in members) / 3600
        deps = [d for n in members for d in n.deps if d in keys and d not in {m.key for m in members}]
        units.append(Unit(members[0].key, list(dict.fromkeys(deps)), max(0.0, hours), job_gpus(members[0])))
        packed |= {n.key for n in members}
    for n in left:
        if n.key not in packed:
            units.append(Unit(n.key, [d for d in n.deps if d in keys],
                              max(0.0, tp.hours(n) - states[n.key].running_s / 3600), job_gpus(n)))  # fmt: skip
    return units


def _record(plan: Plan, recorded: dict[str, dict], states: dict[str, NodeState]) -> None:
    """Rewrite the ledger with what the sweep's jobs came to (the job ids are kept)."""
    ledger = Ledger(plan)
    old = Run(plan.home).read_json("last.json") or {}
    ledger.started, ledger.invocation = old.get("started", ledger.started), old.get("record", ledger.invocation)
    for key, st in states.items():
        rec = recorded.get(key, {})
        status = {"done": "done", "cached": "cached", "failed": "failed", "diverged": "diverged", "blocked": "blocked"}
        outcome = status.get(st.state, "submitted" if st.job else "pending")
        error = st.detail.split(": ", 1)[1] if outcome in ("failed", "diverged") else st.detail or None
        ledger.outcomes[key] = Outcome(outcome, rec.get("seconds", 0.0), error, rec.get("log"), st.job)
    ledger.save()


def follow(plan: Plan, poll_s: float) -> dict[str, Outcome]:
    """Watch the sweep until no job is left queued or running, printing each node's changes of
    state; the outcomes as the ledger records them."""
    seen: dict[str, str] = {}
    while True:
        progress = sweep_progress(plan)
        for key, st in progress.states.items():
            if seen.get(key) != st.state and st.state != "cached":
                print(f"{key}: {st.line}", flush=True)
            seen[key] = st.state
        if not any(st.state in ("queued", "pending", "running") for st in progress.states.values()):
            break
        time.sleep(poll_s)
    return {k: Outcome(**{f: n.get(f) for f in ("status", "error", "log", "job")}) for k, n in read_ledger(plan).items()}
