"""Launchers: run a sweep's plan here (in this process or N worker processes) or on SLURM, or
run one node of it (a W&B sweep agent's job).

All walk the same dependency graph with the same rules: a node runs once its dependencies are
done or cached; a node whose dependency failed is blocked; a failure never stops the others.
On SLURM the graph is handed to SLURM itself: every node is submitted at once with ``afterok`` on
its dependencies' jobs, and the command returns (`submit_plan`).
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

from omegaconf import DictConfig

from ..logs import verbosity
from ..store.record import warn_if_other_version
from ..store.runs import error_line
from . import slurm
from .slurm import on_slurm
from .execute import Ledger, Outcome, blocked_by, failure, pool_job, ready, run_node, settled
from .gpus import GpuPool, check_placeable, pool_from_settings, workers_for
from .nodes import Node
from .plan import Plan, drop_spent_weights
from .requests import Job, Request, slurm_jobs
from .spec import SweepError


def run_plan(plan: Plan) -> dict[str, Outcome]:
    """Run every node that has work left with the configured launcher (``launcher=node``: one
    node; on SLURM: submit them, ``submitted``); returns the outcomes."""
    launcher = plan.settings.launcher
    if launcher.name == "node":
        if launcher.key in plan.nodes:
            reserve(plan.nodes[launcher.key])
        return {launcher.key: run_one(plan, launcher.key, float(launcher.wait_s))}
    if launcher.name == "submitit":
        require_submitit()
    pool, workers = GpuPool([]), 1
    if launcher.name == "local":  # refused before anything is written: GPUs the job cannot have
        pool = pool_from_settings(launcher)
        todo = [n for n in plan.nodes.values() if not n.done]
        workers = workers_for(launcher, pool, todo)  # per_gpu=auto: sized by their estimates
        if pool.ids:
            check_placeable(todo, pool, lambda n: n.gpus)
    ledger = Ledger(plan)
    if launcher.name == "submitit":  # what each job asks for: refused before anything is written
        slurm_jobs(plan, [n for n in plan.order() if not n.done])
    queued = queued_jobs(ledger) if on_slurm(launcher) else {}
    for key, node in plan.nodes.items():
        if node.done:
            ledger.outcomes[key] = Outcome("cached")
            for run in node.runs:
                warn_if_other_version(run)
        elif key in queued:  # never submitted twice (its run's lock is held by that job, too)
            ledger.outcomes[key] = Outcome("submitted", log=ledger.previous[key].get("log"), job=queued[key])
        elif settled(node):
            ledger.outcomes[key] = settled(node)
    ledger.save()
    for key, node in plan.nodes.items():
        if key not in ledger.outcomes:
            reserve(node)
    if launcher.name == "local" and workers <= 1 and launcher.get("gpu_ids") is None:
        run_sequential(plan, ledger)
    elif launcher.name == "local":
        run_pool(plan, ledger, workers, pool)
    elif launcher.name == "submitit" and on_slurm(launcher):
        submit_plan(plan, ledger, launcher)  # returns at once: the next invocation drops spent weights
    elif launcher.name == "submitit":
        run_submitit(plan, ledger, launcher)
    else:
        raise SweepError(f"unknown launcher {launcher.name!r}; use launcher=local, submitit or node")
    for key in drop_spent_weights(plan):
        print(f"weights deleted: {key} (the intermediate tasks that start from it have finished)", flush=True)
    return ledger.outcomes


def reserve(node: Node) -> None:
    """Make the node's run directories under the names the plan gave them, before its stage
    command runs: the command finds its run by hash (convexp.store.runs.find_run), so it writes there
    instead of naming the run by its own overrides (which hold the sweep's base too). A node that
    fails before writing anything leaves its directory empty; the next attempt uses it."""
    for run in node.runs:
        run.dir.mkdir(parents=True, exist_ok=True)


def _log_path(plan: Plan, node: Node) -> Path:
    return plan.home / "logs" / (node.key.replace("/", "__") + ".log")


def _announce(node: Node, i: int, n: int) -> None:
    print(f"[{i}/{n}] {node.key}: {node.command}", flush=True)


def _block(ledger: Ledger, node: Node, dep: str) -> None:
    ledger.record(node.key, Outcome("blocked", error=f"{dep} did not finish"))
    print(f"blocked: {node.key} ({dep} did not finish)", flush=True)


def run_sequential(plan: Plan, ledger: Ledger) -> None:
    """One node after another, in this process (progress bars in the terminal)."""
    todo = [n for n in plan.order() if n.key not in ledger.outcomes]
    for i, node in enumerate(todo, 1):
        dep = blocked_by(node, ledger.outcomes)
        if dep:
            _block(ledger, node, dep)
            continue
        _announce(node, i, len(todo))
        started = time.time()
        try:
            run_node(node.stage, node.stage_args)
            ledger.record(node.key, Outcome("done", time.time() - started))
        except Exception as e:  # one run failing does not stop the sweep; Ctrl-C does
            log = _log_path(plan, node)
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(traceback.format_exc())
            outcome = failure(node, time.time() - started, error_line(e), str(log))
            ledger.record(node.key, outcome)
            print(f"{outcome.status}: {node.key}: {outcome.error} (traceback: {log})", flush=True)


# ----------------------------------------------------------------------------- one node


def run_one(plan: Plan, key: str | None, wait_s: float, poll_s: float = 10.0) -> Outcome:
    """Run exactly one node (``launcher=node launcher.key=KEY``: a W&B sweep agent's job) once its
    dependencies have finished: a dependency that another job is running (it holds its run's lock)
    is waited for up to ``wait_s`` seconds; one that is not finished and not running is an error,
    and nothing runs (never on a missing or stale input). A finished node is cached, a held or
    diverged one skipped. Agents on many machines do not share the ledger, so none is written."""
    if key not in plan.nodes:
        raise SweepError(
            f"launcher.key={key!r} is not a node of sweep {plan.sweep.name}; "
            f"`convexp ablate {plan.sweep.name} --dry-run` lists them"
        )
    node = plan.nodes[key]
    deadline = time.monotonic() + wait_s
    for dep in (plan.nodes[d] for d in node.deps):
        while not dep.done:
            holder = next((h for h in (r.locked_by() for r in dep.runs) if h), None)
            if holder is None or time.monotonic() >= deadline:
                why = f"is being run by {holder}" if holder else f"has not finished ({dep.state})"
                raise SweepError(
                    f"{key} needs {dep.key}, which {why}; run that node first "
                    f"(launcher.key={dep.key}) or the whole sweep (convexp ablate {plan.sweep.name})"
                )
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    if node.done:
        for run in node.runs:
            warn_if_other_version(run)
        return Outcome("cached")
    known = settled(node)
    if known:
        print(f"{known.status}: {key}: {known.error}", flush=True)
        return known
    _announce(node, 1, 1)
    started = time.time()
    try:
        run_node(node.stage, node.stage_args)
    except Exception as e:
        outcome = failure(node, time.time() - started, error_line(e), None)
        print(f"{outcome.status}: {key}: {outcome.error}", flush=True)
        traceback.print_exc()
        return outcome
    return Outcome("done", time.time() - started)


# ----------------------------------------------------------------------------- worker processes


def pool_executor(workers: int, gpus: bool):
    """The worker processes of :func:`run_pool`. On a machine without GPUs a worker runs node
    after node, so a sweep's fine-tunes pay the imports (torch, Lightning, W&B, datasets: most of
    a smoke fine-tune's fixed cost) once per worker, as ``launcher.workers=1`` runs every node in
    one process; with GPUs every node gets a fresh process, whose ``CUDA_VISIBLE_DEVICES`` is its
    own before CUDA starts."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), max_tasks_per_child=1 if gpus else None)


def cuda_devices(ids: list[int]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a worker given pool indices ``ids``: the parent's own visible
    devices at those positions (it may itself see only some of the machine's)."""
    parent = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [x.strip() for x in parent.split(",")] if parent and parent.strip() else None
    return ",".join(names[i] if names and i < len(names) else str(i) for i in ids)


def _out_of_memory(error: str) -> bool:
    return "out of memory" in error.lower() or "outofmemoryerror" in error.lower()


def run_pool(plan: Plan, ledger: Ledger, workers: int, pool: GpuPool | None = None, executor=None) -> None:
    """Up to ``workers`` nodes at once in worker processes (:func:`pool_executor`), each with
    cores/workers threads and, on a machine with GPUs (``pool``), pinned to the GPUs the pool gives
    it (gpus.py). A node that wants
    GPUs all busy waits, and so do the GPU nodes after it (a k-GPU job is not starved by one-GPU
    jobs); CPU nodes go on. A node that ran out of GPU memory beside others is run again alone on
    its GPU, once. ``executor``: what runs the jobs (default: spawned worker processes)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    pool = pool or GpuPool([])
    threads = max(1, (os.cpu_count() or 1) // workers)
    pending = [n for n in plan.order() if n.key not in ledger.outcomes]
    running: dict = {}
    alone: set[str] = set()  # nodes to run again with a GPU to themselves
    n_total, n_started = len(pending), 0
    executor = executor or pool_executor(workers, bool(pool.ids))
    with executor as pool_:
        while pending or running:
            gpu_wait = False  # an earlier node waits for GPUs: later GPU nodes wait behind it
            for node in list(pending):
                dep = blocked_by(node, ledger.outcomes)
                if dep:
                    pending.remove(node)
                    _block(ledger, node, dep)
                    continue
                if not ready(node, ledger.outcomes) or len(running) >= workers:
                    continue
                wanted = node.gpus if pool.ids else 0
                mib = node.memory_mib  # its estimate: what it takes of a card under per_gpu=auto
                ids = None if gpu_wait and wanted else pool.take(wanted, mib, alone=node.key in alone)
                if ids is None:
                    gpu_wait = True
                    continue
                pending.remove(node)
                n_started += 1
                _announce(node, n_started, n_total)
                if pool.ids:
                    print(f"  on {'GPU ' + ','.join(map(str, ids)) if ids else 'the CPU'}", flush=True)
                log = _log_path(plan, node)
                devices = cuda_devices(ids) if pool.ids else None
                future = pool_.submit(pool_job, node.stage, node.stage_args, str(log), threads, verbosity(), devices)
                running[future] = (node, time.time(), log, ids, node.key in alone)
                ledger.record(node.key, Outcome("running", log=str(log), gpus=ids if pool.ids else None))
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                node, started, log, ids, whole = running.pop(future)
                # it may have had company on its card
                shared = bool(ids) and len(ids) == 1 and not whole and pool.shares(node.memory_mib)
                pool.give(ids, node.memory_mib, alone=whole)
                try:
                    error = future.result()
                except Exception as e:  # the worker process died (killed, out of memory)
                    error = error_line(e)
                seconds = time.time() - started
                gpus = ids if pool.ids else None
                if error is None:
                    ledger.record(node.key, Outcome("done", seconds, log=str(log), gpus=gpus))
                    print(f"done: {node.key} ({seconds:.0f} s)", flush=True)
                elif shared and _out_of_memory(error) and node.key not in alone:
                    alone.add(node.key)
                    pending.insert(0, node)
                    ledger.record(node.key, Outcome("pending", log=str(log)))
                    print(f"out of GPU memory beside other jobs: {node.key} runs again alone on a GPU", flush=True)
                else:
                    outcome = failure(node, seconds, error, str(log))
                    outcome.gpus = gpus
                    ledger.record(node.key, outcome)
                    print(f"{outcome.status}: {node.key}: {error} (log: {log})", flush=True)


# ----------------------------------------------------------------------------- SLURM (submitit)


def require_submitit() -> None:
    """launcher=submitit needs the ``slurm`` extra."""
    import importlib.util

    if importlib.util.find_spec("submitit") is None:
        raise SweepError('launcher=submitit needs submitit: pip install "convexp[slurm]"')


def make_executor(plan: Plan, cfg: DictConfig):
    """A submitit executor from conf/launcher/submitit.yaml (cluster=local runs it here); each
    array's resources are set by :func:`_ask` before it is submitted."""
    import submitit

    folder = Path(cfg.folder) if cfg.folder else plan.home / "submitit"
    executor = submitit.AutoExecutor(
        folder=str(folder / "%j"), cluster=cfg.cluster, slurm_max_num_timeout=int(cfg.max_requeues)
    )
    params = dict(name=f"convexp-{plan.sweep.name}", slurm_array_parallelism=int(cfg.array_parallelism))
    if cfg.partition:
        params["slurm_partition"] = cfg.partition
    executor.update_parameters(**params)
    return executor


def _ask(executor, request: Request, extra: dict) -> None:
    """The executor's next array asks for ``request`` (requests.py) with sbatch's ``extra``."""
    executor.update_parameters(**request.params(), slurm_additional_parameters=extra)


def _grouped(jobs: list[Job], after: dict[str, tuple[str, ...]]) -> dict[tuple, list[Job]]:
    """Jobs with the same dependencies (``after``: job key -> the SLURM jobs it waits for) and the
    same request, kind (a pack or one node) and stage command: one job array each."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault((after[job.key], job.request, len(job.nodes) > 1), []).append(job)
    return groups


def _submit_array(plan: Plan, executor, jobs: list[Job]):
    """Submit ``jobs`` (one request, all packs or all single nodes) as one array; submitit's jobs."""
    from .node_job import NodeJob, PackJob

    chosen = verbosity()
    if len(jobs[0].nodes) > 1:
        stages = [[n.stage for n in j.nodes] for j in jobs]
        args = [[n.stage_args for n in j.nodes] for j in jobs]
        logs = [[str(_log_path(plan, n)) for n in j.nodes] for j in jobs]
        return executor.map_array(PackJob(chosen), stages, args, logs)
    return executor.map_array(NodeJob(chosen), [j.nodes[0].stage for j in jobs], [j.nodes[0].stage_args for j in jobs])


def queued_jobs(ledger: Ledger) -> dict[str, str]:
    """Node -> its job from the previous submission that SLURM still has queued or running. A job
    left waiting on a dependency that failed (DependencyNeverSatisfied) is cancelled: its node is
    blocked, or submitted again when its dependency is."""
    previous = ledger.jobs()
    known = slurm.jobs(list(previous.values()))
    dead = [j for j in previous.values() if j in known and known[j].active and known[j].reason == slurm.NEVER]
    slurm.cancel(dead)
    return {k: j for k, j in previous.items() if j in known and known[j].active and j not in dead}


def submit_plan(plan: Plan, ledger: Ledger, cfg: DictConfig) -> None:
    """Submit every job with work left at once (requests.py: each node's own request, or fine-tunes
    packed on one GPU), each with ``--dependency=afterok:`` on its
    dependencies' jobs (jobs with the same dependencies and request form one job array), record
    the job ids in the ledger and return: SLURM starts each job when its own dependencies have
    finished, and cancels the jobs whose dependency failed (``--kill-on-invalid-dep=yes``)."""
    executor = make_executor(plan, cfg)
    ids = {k: o.job for k, o in ledger.outcomes.items() if o.job}
    pending, _, _ = slurm_jobs(plan, [n for n in plan.order() if n.key not in ledger.outcomes])
    while pending:
        ready: list[Job] = []
        for job in list(pending):
            dep = next((blocked_by(n, ledger.outcomes) for n in job.nodes if blocked_by(n, ledger.outcomes)), None)
            if dep:
                pending.remove(job)
                for node in job.nodes:
                    _block(ledger, node, dep)
            elif all(d in ledger.outcomes for d in job.deps):  # each cached, done or submitted
                pending.remove(job)
                ready.append(job)
        if not ready:
            break
        after = {j.key: tuple(dict.fromkeys(ids[d] for d in j.deps if d in ids)) for j in ready}
        for (waits, request, _), group in _grouped(ready, after).items():
            # open-mode=append: a requeued job's .out and .err keep what its earlier attempts said
            extra = {"open-mode": "append", **dict(cfg.additional or {}), "requeue": True}
            if waits:
                extra |= {"dependency": "afterok:" + ":".join(waits), "kill-on-invalid-dep": "yes"}
            _ask(executor, request, extra)
            submitted = _submit_array(plan, executor, group)
            for job, sub in zip(group, submitted):
                for node in job.nodes:
                    ids[node.key] = sub.job_id
                    log = _log_path(plan, node) if len(job.nodes) > 1 else sub.paths.stderr  # a pack's: each node's own
                    ledger.outcomes[node.key] = Outcome("submitted", log=str(log), job=sub.job_id)
            keys = [n.key for j in group for n in j.nodes]
            print(
                f"submitted {len(submitted)} job{'s' if len(submitted) > 1 else ''} ({submitted[0].job_id.split('_')[0]}; "
                f"{request.text()})" + (f" after {', '.join(waits)}" if waits else "") + ": " + ", ".join(keys),
                flush=True,
            )
        ledger.save()


def run_submitit(plan: Plan, ledger: Ledger, cfg: DictConfig) -> None:
    """Waves of job arrays on this machine (``launcher.cluster=local|debug``): every job whose
    dependencies are done goes into the next wave, asking for its own request; a job warned of its
    time limit checkpoints and is requeued (`convexp.sweep.node_job`)."""
    executor = make_executor(plan, cfg)
    pending, _, _ = slurm_jobs(plan, [n for n in plan.order() if n.key not in ledger.outcomes])
    while pending:
        wave: list[Job] = []
        for job in list(pending):
            dep = next((blocked_by(n, ledger.outcomes) for n in job.nodes if blocked_by(n, ledger.outcomes)), None)
            if dep:
                pending.remove(job)
                for node in job.nodes:
                    _block(ledger, node, dep)
            elif all(d in ledger.outcomes and ledger.outcomes[d].status in ("done", "cached") for d in job.deps):
                pending.remove(job)
                wave.append(job)
        if not wave:
            break
        started = time.time()
        for (_, request, _), group in _grouped(wave, {j.key: () for j in wave}).items():
            _ask(executor, request, dict(cfg.additional or {}))
            submitted = _submit_array(plan, executor, group)
            print(
                f"submitted {len(submitted)} jobs (array {submitted[0].job_id.split('_')[0]}; {request.text()}): "
                + ", ".join(n.key for j in group for n in j.nodes),
                flush=True,
            )
            for job, sub in zip(group, submitted):
                try:
                    sub.result()
                    for node in job.nodes:
                        ledger.record(node.key, Outcome("done", time.time() - started, log=str(sub.paths.stdout)))
                        print(f"done: {node.key}", flush=True)
                except Exception as e:
                    error = _job_error(e)
                    for node in job.nodes:
                        outcome = failure(node, time.time() - started, error, str(sub.paths.stderr))
                        ledger.record(node.key, outcome)
                        print(f"{outcome.status}: {node.key}: {error} (log: {sub.paths.stderr})", flush=True)


def _job_error(e: Exception) -> str:
    """submitit re-raises a job's failure with the remote traceback: keep its last line."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else error_line(e)
