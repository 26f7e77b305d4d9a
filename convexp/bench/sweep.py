"""``convexp bench sweep``: the fine-tuning part of a small sweep (issue 41, item 4) — N GLUE
fine-tunes of one checkpoint (``bench finetune``'s job: SST-2, 1 epoch, batch 32, max length 64,
job i with seed 42 + i) — run three ways (four on a CPU) in one invocation:

1. ``sequential``: convexp, one job at a time, each in its own process;
2. ``packed``: convexp, K jobs at once (a pool: the next starts when one ends). On CUDA all K share
   one GPU (each child gets the same ``CUDA_VISIBLE_DEVICES``); on both devices each child gets
   cores // K threads (``OMP_NUM_THREADS`` and ``trainer.threads``), as ``launcher=local`` gives its
   workers, so packed jobs share the cores instead of oversubscribing them;
3. ``workers`` (CPU only): convexp as a sweep runs them, K worker processes each running job after
   job in one process (``launcher=local``'s CPU workers, sweep/launchers.py), with packed's threads;
4. ``trainer``: the same jobs one at a time through the ``transformers`` Trainer
   (trainer_finetune.py).

A way's wall time runs from its first child's start to its last child's end. Its device-seconds per
fine-tune: on CUDA GPU-seconds, wall x 1 GPU / jobs; on a CPU core-seconds, wall x cores / jobs;
jobs per device-hour is 3600 over that. Each convexp child writes to its own outputs folder
(``CONVEXP_OUTPUTS``), with ``WANDB_MODE=disabled``. A job's fixed cost is its wall time less its
training steps' (convexp: the run's ``timing``, train/clock.py; the Trainer: its step times): what
packed (a fresh process per job) and workers (the imports paid once per worker) differ by.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import UserError
from .scratch import stop_children, work_folder
from .finetune import SEED, SHAPES, job_commands, job_inputs, score
from .jobs import cpu_name, drop_keys, hf_contenders, machine_info, timed, wants_cuda, write_record

WAYS = {"sequential": "convexp", "packed": "convexp ×{k}", "workers": "sweep ×{k}", "trainer": "Trainer"}  # row labels


def device_name(cuda: bool) -> str:
    """The GPU's name, or the CPU's model."""
    if cuda:
        import torch

        return torch.cuda.get_device_name()
    return cpu_name()


def run_pool(cmds: list[list[str]], per_device: int, envs: list[dict], logs: list[Path], console, way: str) -> dict:
    """Run ``cmds`` at most ``per_device`` at once (the next starts when one ends), each timed by
    finetune.timed; the wall time from the first start to the last end, and each job's result."""
    def one(i: int) -> dict:
        r = timed(cmds[i], envs[i], logs[i])
        console.print(f"[{way} {i + 1}/{len(cmds)}] {r['wall_s']:.1f} s wall, exit {r['returncode']}", markup=False)
        return r

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=per_device) as pool:
        try:
            results = list(pool.map(one, range(len(cmds))))
        except BaseException:  # Ctrl-C, SIGTERM: the jobs waiting do not start, the running ones stop
            pool.shutdown(wait=False, cancel_futures=True)
            stop_children()
            raise
    wall = time.perf_counter() - start
    for r in results:
        if r["returncode"] != 0:
            raise UserError(f"{way} job failed (exit {r['returncode']}): {r['stderr_tail'][-600:]}")
    return {"wall_s": wall, "jobs": results}


def worker_job(overrides: list[str], log: str, threads: int, env: dict) -> dict:
    """In a worker process of :func:`run_workers`: one convexp fine-tune as ``launcher=local``'s CPU
    worker runs a node (its output in ``log``), timed; ``error``: its error line or None."""
    from ..sweep.launchers import pool_job

    os.environ.update(env)
    started, start = time.time(), time.perf_counter()
    error = pool_job("finetune", overrides, log, threads, None)
    wall = time.perf_counter() - start
    return {"returncode": 0 if error is None else 1, "wall_s": wall, "started": started, "ended": started + wall,
            "pid": os.getpid(), "error": error}  # fmt: skip


def run_workers(overrides: list[list[str]], k: int, threads: int, env: dict, logs: list[Path], console) -> dict:
    """The jobs as a CPU sweep runs its nodes: ``k`` worker processes (launchers.pool_executor), each
    running job after job with ``threads`` threads; the wall time from the first start to the last end,
    and each job's timing (``first_in_process``: the first its worker ran, which paid the imports)."""
    from ..sweep.launchers import pool_executor

    start = time.perf_counter()
    with pool_executor(k, gpus=False) as pool:
        futures = [pool.submit(worker_job, o, str(log), threads, env) for o, log in zip(overrides, logs)]
        results = []
        for i, future in enumerate(futures):
            r = future.result()
            console.print(f"[workers {i + 1}/{len(futures)}] {r['wall_s']:.1f} s wall, pid {r['pid']}", markup=False)
            results.append(r)
    wall = time.perf_counter() - start
    for r in results:
        if r["error"] is not None:
            raise UserError(f"workers job failed: {r['error']}")
    seen: set[int] = set()
    for r in sorted(results, key=lambda r: r["started"]):
        r["first_in_process"] = r["pid"] not in seen
        seen.add(r["pid"])
    return {"wall_s": wall, "jobs": results}


def summarize_sweep(walls: dict[str, float], accuracies: dict[str, list], jobs: int, devices: int,
                    fixed: dict[str, list] | None = None) -> dict:  # fmt: skip
    """Per way: wall seconds, device-seconds per fine-tune (wall x ``devices`` / ``jobs``), jobs per
    device-hour, the median dev accuracy, the median fixed cost per job (``fixed``: each job's wall
    less its training steps, None where unknown); ``ratio``: packed over the others in jobs per
    device-hour."""
    out: dict = {}
    for way, wall in walls.items():
        per_job = wall * devices / jobs
        scores = [a for a in accuracies.get(way, []) if a is not None]
        costs = [f for f in (fixed or {}).get(way, []) if f is not None]
        out[way] = {"wall_s": wall, "device_s_per_job": per_job, "jobs_per_device_hour": 3600 / per_job,
                    "dev_accuracy": statistics.median(scores) if scores else None,
                    "fixed_s_per_job": statistics.median(costs) if costs else None}  # fmt: skip
    out["ratio"] = {f"packed/{w}": out["packed"]["jobs_per_device_hour"] / out[w]["jobs_per_device_hour"]
                    for w in walls if w != "packed" and "packed" in walls}  # fmt: skip
    return out


def bench_sweep(
    jobs: int | None = None,
    per_device: int | None = None,
    rows: int | None = None,
    shape: str = "minilm",
    dev_rows: int = 872,
    epochs: int = 1,
    batch_size: int = 32,
    max_len: int = 64,
    device: str = "auto",
    out: str | None = None,
    workdir: str | None = None,
    hf: bool = True,
) -> dict:
    """Run the sweep's fine-tunes the three ways (four on a CPU); the JSON record (written to ``out`` or printed)
    and a table. Defaults: 16 jobs, 4 per GPU, 10000 rows on CUDA; 4 jobs, 2 at once, 2000 rows on a CPU."""
    from rich.console import Console

    console = Console()
    cuda = wants_cuda(device)
    jobs = jobs or (16 if cuda else 4)
    per_device = per_device or (4 if cuda else 2)
    rows = rows or (10000 if cuda else 2000)
    contenders = [c for c in hf_contenders(hf, console) if c == "trainer"]
    cores = os.cpu_count() or 1
    devices, unit = (1, "GPU") if cuda else (cores, "core")
    threads = max(1, cores // min(per_device, jobs))  # each packed job's share of the cores
    with work_folder(workdir, "convexp-bench-sweep-") as work:  # a temporary one: removed however the bench ends
        data_dir, model_dir = job_inputs(work, rows, dev_rows, shape, hf=bool(contenders))  # the Trainer: HF layout
        seeds = [SEED + i for i in range(jobs)]
        base = {**os.environ, "WANDB_MODE": "disabled"}
        if cuda:  # every child on the same (first visible) GPU
            base["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]

        def cmd(tool: str, seed: int, extra: list[str]) -> list[str]:
            return [*job_commands(model_dir, data_dir, epochs, batch_size, max_len, seed, cuda, (tool,))[tool], *extra]

        plans = {  # way -> (tool, at once, extra convexp overrides, extra environment)
            "sequential": ("convexp", 1, [], {}),
            "packed": ("convexp", per_device, [f"trainer.threads={threads}"], {"OMP_NUM_THREADS": str(threads)}),
            **({} if cuda else {"workers": ("convexp", per_device, [], {"OMP_NUM_THREADS": str(threads)})}),
            **({"trainer": ("trainer", 1, [], {})} if contenders else {}),
        }
        ways, accuracies, fixed = {}, {}, {}
        for way, (tool, k, extra, env) in plans.items():
            outputs = [work / f"{way}-{i}" for i in range(jobs)]
            if way == "workers":  # the jobs' overrides (after `convexp finetune glue`), each its outputs
                res = run_workers([[*cmd(tool, s, extra)[5:], f"outputs={o}"] for s, o in zip(seeds, outputs)], k,
                                  threads, {"WANDB_MODE": "disabled"}, [o.with_suffix(".log") for o in outputs],
                                  console)  # fmt: skip
            else:
                res = run_pool([cmd(tool, s, extra) for s in seeds], k,
                               [{**base, **env, "CONVEXP_OUTPUTS": str(o)} for o in outputs], outputs, console, way)  # fmt: skip
            got = [score(tool, o, r.get("stdout", "")) for o, r in zip(outputs, res["jobs"])]
            accuracies[way] = [g["dev_accuracy"] for g in got]
            fixed[way] = [r["wall_s"] - g["train_s"] if g.get("train_s") is not None else None
                          for r, g in zip(res["jobs"], got)]  # fmt: skip
            first = cmd(tool, SEED, extra)  # runnable as written: convexp ..., python trainer_finetune.py ...
            ways[way] = {
                "tool": tool,
                "at_once": k,
                "wall_s": res["wall_s"],
                "command": ["convexp", *first[3:]] if tool == "convexp" else ["python", *first[1:]],
                "environment": env,
                "runs": [{"seed": s, "dev_accuracy": g["dev_accuracy"], "train_s": g.get("train_s"), "fixed_s": f,
                          **drop_keys(r, "stdout", "stderr_tail")}
                         for s, g, f, r in zip(seeds, got, fixed[way], res["jobs"])],  # fmt: skip
            }
            if way == "workers":  # the jobs after each worker's first: the imports paid already
                later = [f for f, r in zip(fixed[way], res["jobs"]) if not r["first_in_process"] and f is not None]
                ways[way]["fixed_s_after_first"] = statistics.median(later) if later else None
        record = {
            "benchmark": "sweep",
            "command": " ".join(["convexp", *sys.argv[1:]]) if sys.argv[1:3] == ["bench", "sweep"] else None,
            "device": "cuda" if cuda else "cpu",
            "device_name": device_name(cuda),
            "device_unit": unit,
            "devices": devices,  # device-seconds = wall x devices (1 GPU, or the CPU's cores)
            "jobs": jobs,
            "per_device": per_device,
            "threads_per_packed_job": threads,
            "cuda_visible_devices": base.get("CUDA_VISIBLE_DEVICES") if cuda else None,  # every child's
            "job": {"task": "sst2", "train_rows": rows, "dev_rows": dev_rows, "model": f"random {shape}",
                    "shape": SHAPES[shape], "epochs": epochs, "batch_size": batch_size, "max_len": max_len,
                    "precision": "bf16-mixed" if cuda else "fp32", "seeds": seeds},  # fmt: skip
            "machine": machine_info(),
            "ways": ways,
            "summary": summarize_sweep({w: v["wall_s"] for w, v in ways.items()}, accuracies, jobs, devices, fixed),
        }
        write_record(record, out)
        print_sweep_table(console, record)
        return record


def print_sweep_table(console, record: dict) -> None:
    from rich.table import Table

    s, unit, k = record["summary"], record["device_unit"], record["per_device"]
    where = record["device_name"] + ("" if unit == "GPU" else f", {record['devices']} cores")
    table = Table(title=f"{record['jobs']} SST-2 fine-tunes of one checkpoint on {where}",
                  caption=f"×{k}: {k} jobs at once (sweep: {k} worker processes, job after job), else one at a time; "
                  "acc: the jobs' median dev accuracy; fixed: a job's wall less its training steps, median; "
                  f"packed ×: packed's jobs/{unit}-h over the row's")  # fmt: skip
    for col in ("", "wall s", f"{unit}-s/job", f"jobs/{unit}-h", "acc %", "fixed s", "packed ×"):
        table.add_column(col, justify="right" if col else "left", no_wrap=True)
    for way, label in WAYS.items():
        if way not in s:
            continue
        r, ratio = s[way], s["ratio"].get(f"packed/{way}")
        acc = "-" if r["dev_accuracy"] is None else f"{r['dev_accuracy']:.2f}"
        fixed = "-" if r.get("fixed_s_per_job") is None else f"{r['fixed_s_per_job']:.1f}"
        table.add_row(label.format(k=k), f"{r['wall_s']:.1f}", f"{r['device_s_per_job']:.1f}",
                      f"{r['jobs_per_device_hour']:.1f}", acc, fixed, f"{ratio:.2f}" if ratio else "")  # fmt: skip
    console.print(table)
    later = record.get("ways", {}).get("workers", {}).get("fixed_s_after_first")
    if later is not None:
        console.print(f"sweep ×{k}: {later:.1f} s fixed cost a job after each worker's first (which paid the imports)")
