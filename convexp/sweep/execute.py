"""Running one node, and the record of what happened: each node's outcome, kept in the sweep's
ledger (outputs/sweeps/NAME/last.json). Launchers call these; nothing here knows a launcher."""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from pathlib import Path

from ..config.compose import compose_stage, override_key, parse_overrides
from ..errors import UserError
from ..logs import set_verbosity
from ..tasks import command, config_kind
from ..store.record import invocation_record
from ..store.runs import Run, error_line
from .node_state import node_state
from .nodes import Node
from .plan import Plan

STOPPED = ("failed", "blocked", "diverged", "held")  # a dependant of such a node cannot run

def run_node(stage: str, overrides: list[str]) -> None:
    """Run one node: exactly what ``convexp <stage> OVERRIDES`` does, in a process that may run other
    nodes before and after it (node_state.py: what it changes in the process is put back)."""
    with node_state():
        _run_stage(stage, overrides)


def _run_stage(stage: str, overrides: list[str]) -> None:
    """The node's task command (pre-training's command.py, a fine-tuning kind's TaskKind), as the CLI runs it:
    composed, checked, run."""
    cfg = compose_stage(stage, overrides)
    task = command("pretrain" if stage == "pretrain" else config_kind(cfg))
    invocation = task.compose(overrides, cfg)
    task.check(invocation)
    task.check_device(invocation)
    task.run(invocation, summary=False)


def weights_again(path: str | Path) -> None:
    """A finished fine-tuning run that did not keep its weights (keep_weights), which a command
    reads now (``convexp export``): say so in one line and run its recorded command again for its
    task and seed with ``keep_weights=all``, which trains the run again for its weights only
    (train/weights.py). Anything else is left to the reader's own checks."""
    from ..train.weights import has_weights

    run = Run(Path(path).expanduser())
    record = run.read_json("record.json")
    if not record or not run.finished or has_weights(run) or not (run.dir / "config.yaml").is_file():
        return
    config = run.read_config()  # a fine-tuning run's: what its id hashes (task, seed, ...)
    if config.get("stage") != "finetune":
        return
    overrides = list((record.get("created") or {}).get("overrides") or [])
    print(f"{run.id} did not keep its weights (keep_weights); training it again for them", flush=True)
    run_node("finetune", [*overrides, f"task={config.task}", f"seeds=[{config.seed}]", "keep_weights=all"])
    if not has_weights(run):
        raise UserError(
            f"{run.dir}: its command, run again, made another run (this convexp names it otherwise); "
            "fine-tune it again with keep_weights=all and export that run"
        )


@dataclasses.dataclass
class Outcome:
    status: str  # done | cached | failed | diverged | held | blocked | submitted (a SLURM job runs it) | running
    seconds: float = 0.0
    error: str | None = None
    log: str | None = None
    job: str | None = None  # its SLURM job (N or, for an array task, N_T)
    gpus: list[int] | None = None  # launcher=local: the GPUs its worker ran on (gpus.py)


def settled(node: Node) -> Outcome | None:
    """What is known about a node without running it: one of its runs is being written by another
    process (another sweep agent: ``held``, picked up by the next invocation), or diverged (never
    re-run silently, never counted as done: ``retry_diverged=true`` trains it again, as for a stage
    command, or delete the run directory)."""
    for run in node.runs:
        holder = run.locked_by()
        if holder:
            return Outcome("held", error=f"{run.dir} is being written by {holder}")
    retry = any(override_key(o) == "retry_diverged" and o.value() is True for o in parse_overrides(node.overrides))
    for run in node.runs:
        if run.status == "diverged" and not retry:
            why = (run.read_json("status.json") or {}).get("error") or "training diverged"
            return Outcome("diverged", error=f"{why} (retry_diverged=true trains it again, or delete {run.dir})")
    return None


def failure(node: Node, seconds: float, error: str, log: str | None) -> Outcome:
    """A node that raised, classified from the run store (workers and cluster jobs return only
    text): a run of it diverged, or it failed."""
    status = "diverged" if any(run.status == "diverged" for run in node.runs) else "failed"
    return Outcome(status, seconds, error, log)


class Ledger:
    """outputs/sweeps/NAME/last.json: the last invocation's arguments and every node's outcome,
    rewritten (atomically) as nodes finish; ``convexp report NAME`` defaults to these arguments."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.outcomes: dict[str, Outcome] = {}
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.invocation = invocation_record()
        self.previous = read_ledger(plan)  # the ledger this one replaces

    def jobs(self) -> dict[str, str]:
        """Node -> the SLURM job the previous invocation submitted for it."""
        return {k: n["job"] for k, n in self.previous.items() if n.get("job")}

    def record(self, key: str, outcome: Outcome) -> None:
        self.outcomes[key] = outcome
        self.save()

    def save(self) -> None:
        Run(self.plan.home).write_json(
            "last.json",
            {
                "sweep": self.plan.sweep.name,
                "file": str(self.plan.sweep.path),
                "args": self.plan.args,
                "started": self.started,
                "record": self.invocation,  # command line, versions, device (convexp.store.record)
                "nodes": {
                    k: {
                        "command": n.command,
                        "runs": [str(r.dir) for r in n.runs],
                        **dataclasses.asdict(self.outcomes.get(k, Outcome("pending"))),
                    }
                    for k, n in self.plan.nodes.items()
                },
            },
        )


def read_ledger(plan: Plan) -> dict[str, dict]:
    """The nodes of the sweep's last ledger that are the same nodes in ``plan`` (same runs)."""
    data = Run(plan.home).read_json("last.json") or {}
    return {
        k: n
        for k, n in data.get("nodes", {}).items()
        if k in plan.nodes and n.get("runs") == [str(r.dir) for r in plan.nodes[k].runs]
    }


def last_args(outputs: Path, name: str) -> list[str] | None:
    data = Run(Path(outputs) / "sweeps" / name).read_json("last.json")
    return data["args"] if data else None


def blocked_by(node: Node, outcomes: dict[str, Outcome]) -> str | None:
    """The first dependency that failed or was blocked, or None."""
    for d in node.deps:
        if d in outcomes and outcomes[d].status in STOPPED:
            return d
    return None


def ready(node: Node, outcomes: dict[str, Outcome]) -> bool:
    return all(d in outcomes and outcomes[d].status in ("done", "cached") for d in node.deps)


def pool_job(stage: str, overrides: list[str], log: str, threads: int, chosen: dict | None,
              cuda_devices: str | None = None, parent_requeues: str | None = None) -> str | None:  # fmt: skip
    """In a worker process: run one node with its output in ``log``, as verbose as the command
    line chose (``chosen``: logs.verbosity()), on the GPUs ``cuda_devices`` names (its
    ``CUDA_VISIBLE_DEVICES``, in a fresh process; "" none; None: as the parent); the error line or
    None. A CPU sweep's worker runs node after node (:func:`pool_executor`): everything a node
    printed is flushed to its own log before the next begins. ``parent_requeues``: a signal the
    parent process's job runner requeues the job on (a packed SLURM job, node_job.PackJob): here it
    only stops the run at the end of its step, checkpointed (train/health.py: a handler installed
    for the signal means the job runner requeues)."""
    import signal
    import sys

    if parent_requeues is not None:
        signal.signal(getattr(signal, parent_requeues), lambda signum, frame: None)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if cuda_devices is not None:  # before anything initialises CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_devices
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", buffering=1) as f:
        os.dup2(f.fileno(), 1)  # the Trainer's progress and prints go to the log
        os.dup2(f.fileno(), 2)
        if chosen is not None:
            set_verbosity(**chosen)
        import torch

        from ..train.accel import new_log

        torch.set_num_threads(threads)
        new_log()  # the lines said once per log (the threads) are said in this node's too
        try:
            run_node(stage, overrides)
            return None
        except Exception as e:
            f.write(traceback.format_exc())
            return error_line(e)
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
