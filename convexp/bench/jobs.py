"""What ``convexp bench finetune`` and ``bench squad`` share: timing whole jobs, each in its own process,
and reading where each job's time went.

  timed(cmd, env, log)            one child: wall and CPU time, peak RSS (os.wait4), its start and end
                                  on the wall clock, exit code, stdout
  run_repeats(...)                every job of every repeat, the jobs taking turns; each run's metric
                                  and step times (``score``)
  summarize(runs, ...)            per setting: medians per tool, convexp's ratios to each contender,
                                  and ``loop``: each tool's steps against its job (below)
  print_tables(console, summary)  the tables

Settings: ``default`` runs every tool with random batches, as every author's code and convexp's
``scale=paper`` do; ``grouped`` with length-grouped batches (convexp's ``group_by_length=true``, the
Trainer's ``group_by_length`` flag; the plain loop has no such flag and runs once, in ``default``).

Each job reports when its first training step began and its last one ended (convexp's run: its
metrics.json ``timing``, train/clock.py; the scripts: their JSON line); with the child's start and
end this splits its wall time into what comes before the first step (imports, configuration, data,
model, loggers), the steps, and what comes after the last (evaluation, saving, exit): the job's
fixed cost beside its steps. ``bare`` (bare_step.py) times convexp's bare step on the stage's own
batches: the stage's steps per second over the bare step's is the share of the step's speed the
stage's loop keeps.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import time
from pathlib import Path

from ..errors import UserError

SETTINGS = {"default": "random batches, as at scale=paper", "grouped": "length-grouped batches"}
LABELS = {"convexp": "convexp", "bare": "bare step", "plain": "plain loop", "trainer": "Trainer"}


def job_key(tool: str, setting: str) -> str:
    """A job's name in a repeat: ``convexp``, ``trainer-grouped``, ..."""
    return tool if setting == "default" else f"{tool}-{setting}"


def timed(cmd: list[str], env: dict, log: Path) -> dict:
    """Run ``cmd``; its wall time, CPU time and peak RSS (os.wait4), its start and end on the wall
    clock (unix seconds), exit code, stdout. Stopped (the bench's other children too) when the wait
    ends otherwise: Ctrl-C, SIGTERM (scratch.py)."""
    from . import scratch

    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        started = time.time()
        start = time.perf_counter()
        proc = scratch.start(cmd, env=env, stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            scratch.stop_children()
            raise
        finally:
            scratch.forget(proc)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    return {
        "returncode": proc.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux: KiB
        "started": started,
        "ended": started + wall,
        "stdout": log.with_suffix(".out").read_text(),
        "stderr_tail": log.with_suffix(".err").read_text()[-2000:],
    }


def script_result(stdout: str) -> dict | None:
    """The JSON line a contender script (or the bare step) prints last."""
    lines = [x for x in stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def convexp_result(outputs: Path, metric: str, read) -> dict:
    """A convexp job's ``metric`` (``read(metrics.json's content)``) and its step times (train/clock.py)."""
    found = sorted(outputs.glob("runs/*/*/metrics.json"))
    if not found:
        return {metric: None}
    m = json.loads(found[0].read_text())
    t = m.get("timing") or {}
    return {metric: read(m), **{k: t.get(k) for k in ("first_step", "last_step", "train_s", "steps")}}


def script_steps(result: dict | None, metric: str) -> dict:
    """A script's ``metric`` and step times from its JSON line (``first_step``, ``last_step``, ``steps``)."""
    if result is None:
        return {metric: None}
    out = {metric: result.get(metric), **{k: result.get(k) for k in ("first_step", "last_step", "steps")}}
    if out["first_step"] is not None:
        out["train_s"] = out["last_step"] - out["first_step"]
    return out


def bare_result(stdout: str) -> dict:
    result = script_result(stdout) or {}
    return {"train_s": result.get("seconds"), "steps": result.get("steps")}


def run_repeats(commands, seeds: list[int], work: Path, console, metric: str, label: str, score,
                between=None) -> list[dict]:  # fmt: skip
    """Run ``commands(seed)`` (job key -> command, job_key) for every seed, the jobs taking turns;
    each run's timing and ``score(tool, its outputs folder, its stdout)`` (a dict: ``metric`` and
    the step times), printed as it ends; ``between()``, where given, after every seed's turn but the
    last (the floor's rate samples)."""
    runs = []
    for i, seed in enumerate(seeds):
        if i and between is not None:
            between()
        for key, cmd in commands(seed).items():
            tool, _, setting = key.partition("-")
            outputs = work / f"{key}-{i}"
            env = {**os.environ, "CONVEXP_OUTPUTS": str(outputs)}
            console.print(f"[{i + 1}/{len(seeds)}] {key} ...", end=" ")
            r = timed(cmd, env, work / f"{key}-{i}")
            if r["returncode"] != 0:
                raise UserError(f"{key} failed (exit {r['returncode']}): {r['stderr_tail'][-600:]}")
            got = score(tool, outputs, r["stdout"])
            runs.append({"tool": tool, "setting": setting or "default", "repeat": i, "seed": seed, **got,
                         **drop_keys(r, "stdout", "stderr_tail")})  # fmt: skip
            value = got.get(metric)
            console.print(f"{r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} CPU-s, {r['peak_rss_mib']:.0f} MiB"
                          + (f", {label} {value:.2f}" if value is not None else ""))  # fmt: skip
    return runs


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def loop_summary(mine: list[dict], bare: list[dict]) -> dict:
    """A tool's steps against its job, medians over its repeats: seconds in training steps, steps
    per second, seconds from the process's start to the first step and from the last step to its
    exit; ``vs_bare``: steps per second over the bare step's on the same batches (repeat by repeat)."""
    out = {
        "train_s": _median(r.get("train_s") for r in mine),
        "steps_per_s": _median(r["steps"] / r["train_s"] for r in mine if r.get("train_s")),
        "to_first_step_s": _median(r["first_step"] - r["started"] for r in mine if r.get("first_step")),
        "after_last_step_s": _median(r["ended"] - r["last_step"] for r in mine if r.get("last_step")),
    }
    bare_rate = {r["repeat"]: r["steps"] / r["train_s"] for r in bare if r.get("train_s")}
    if bare_rate:
        out["bare_steps_per_s"] = _median(bare_rate.values())
        pairs = [r["steps"] / r["train_s"] / bare_rate[r["repeat"]] for r in mine
                 if r.get("train_s") and r["repeat"] in bare_rate]  # fmt: skip
        out["vs_bare"] = _median(pairs)
        out["vs_bare_per_repeat"] = pairs
    return out


def summarize(runs: list[dict], examples: int, metric: str = "dev_accuracy", rate: str = "examples_per_s",
              within: float = 1.0) -> dict:  # fmt: skip
    """Per setting: medians per tool (``rate``: ``examples`` / the median wall time); ``ratio[contender]``:
    convexp / that contender (below 1: convexp is faster or smaller), per repeat too (the interleaved
    runs shared the machine's load); the dev ``metric``'s differences and whether they are within
    ``within`` points; ``loop[tool]``: :func:`loop_summary` (convexp's against the bare step)."""
    out: dict = {}
    for setting in dict.fromkeys(r["setting"] for r in runs):
        here = [r for r in runs if r["setting"] == setting]
        bare = [r for r in here if r["tool"] == "bare"]
        block: dict = {}
        for tool in dict.fromkeys(r["tool"] for r in here if r["tool"] != "bare"):
            mine = [r for r in here if r["tool"] == tool]
            med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "cpu_s", "peak_rss_mib")}
            block[tool] = {**med, rate: examples / med["wall_s"], metric: _median(r[metric] for r in mine)}
            block.setdefault("loop", {})[tool] = loop_summary(mine, bare if tool == "convexp" else [])
        a = block.get("convexp")
        for other in [t for t in block if t not in ("convexp", "loop", "ratio")] if a else []:
            b = block[other]
            ratio = {k: a[k] / b[k] for k in ("wall_s", "cpu_s", "peak_rss_mib")}
            mine, theirs = ({r["repeat"]: r for r in here if r["tool"] == t} for t in ("convexp", other))
            ratio["wall_s_per_pair"] = [mine[i]["wall_s"] / theirs[i]["wall_s"] for i in sorted(mine) if i in theirs]
            if a[metric] is not None and b[metric] is not None:
                ratio[f"{metric}_difference"] = a[metric] - b[metric]
                ratio[f"{metric}_within_{within:g}_point{'s' if within != 1 else ''}"] = abs(a[metric] - b[metric]) <= within
            block.setdefault("ratio", {})[other] = ratio
        out[setting] = block
    return out


def print_tables(console, summary: dict, job: str, metric: str = "dev_accuracy",
                 metric_label: str = "dev accuracy (%)", rate: str = "examples_per_s",
                 rate_label: str = "train examples / wall s") -> None:  # fmt: skip
    """Per setting the tools' medians and convexp's ratios, then every tool's steps against its job."""
    for setting, block in summary.items():
        _print_setting(console, block, f"{job}, {SETTINGS[setting]}", metric, metric_label, rate, rate_label)
    _print_loops(console, summary)


def _print_setting(console, block: dict, title: str, metric: str, metric_label: str, rate: str,
                   rate_label: str) -> None:  # fmt: skip
    from rich.table import Table

    tools = [t for t in LABELS if t in block]
    others = list(block.get("ratio", {}))
    table = Table(title=f"{title}: medians (ratio = convexp / the other; below 1 is better)")
    table.add_column("")
    for t in tools:
        table.add_column(LABELS[t], justify="right")
    for t in others:
        table.add_column(f"vs {LABELS[t]}", justify="right")
    for key, label, fmt in (
        ("wall_s", "wall time (s)", ".1f"),
        ("cpu_s", "CPU time (s)", ".1f"),
        (rate, rate_label, ".1f"),
        ("peak_rss_mib", "peak RSS (MiB)", ".0f"),
        (metric, metric_label, ".2f"),
    ):
        cells = [format(block[t][key], fmt) if block[t][key] is not None else "-" for t in tools]
        for t in others:
            r = block["ratio"][t]
            if key == metric:
                d = r.get(f"{metric}_difference")
                cells.append(f"{d:+.2f} pt" if d is not None else "")
            else:
                cells.append(f"{r[key]:.2f}" if key in r else f"{block['convexp'][key] / block[t][key]:.2f}")
        table.add_row(label, *cells)
    console.print(table)


def _print_loops(console, summary: dict) -> None:
    from rich.table import Table

    table = Table(title="Steps against the job: medians (stage / bare: the stage's steps per second over "
                  "convexp's bare step's, same batches)")  # fmt: skip
    for col in ("job", "to first step (s)", "steps (s)", "steps/s", "stage / bare", "after last step (s)"):
        table.add_column(col, justify="right" if col != "job" else "left")

    def cell(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for setting, block in summary.items():
        for tool, loop in block.get("loop", {}).items():
            name = LABELS[tool] + ("" if setting == "default" else f", {setting}")
            table.add_row(name, cell(loop["to_first_step_s"], ".1f"), cell(loop["train_s"], ".1f"),
                          cell(loop["steps_per_s"], ".2f"), cell(loop.get("vs_bare"), ".3f"),
                          cell(loop["after_last_step_s"], ".1f"))  # fmt: skip
    console.print(table)


def write_record(record: dict, out: str | None) -> None:
    """The JSON record to ``out``, or printed."""
    text = json.dumps(record, indent=1)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    else:
        print(text)


def hf_contenders(hf: bool, console) -> list[str]:
    """The Hugging Face contenders that can run here: the plain loop needs transformers, the
    Trainer also accelerate; what is missing is said in one line."""
    if not hf:
        return []
    from .step import transformers_available

    if not transformers_available():
        console.print(
            "transformers is not installed: timing convexp alone "
            '(`pip install "convexp\\[bench]"` adds the plain loop and the Trainer)'
        )
        return []
    if importlib.util.find_spec("accelerate") is None:
        console.print('accelerate is not installed: no Trainer (`pip install "convexp\\[bench]"` adds it)')
        return ["plain"]
    return ["plain", "trainer"]


def settings_of(grouping: str) -> list[str]:
    """``--grouping``: default, grouped or both."""
    if grouping not in ("default", "grouped", "both"):
        raise UserError(f"--grouping {grouping}: use default (random batches), grouped or both")
    return ["default", "grouped"] if grouping == "both" else [grouping]


def wants_cuda(device: str) -> bool:
    """``--device``: cpu, cuda, or auto (cuda where a GPU is visible)."""
    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device}: use cpu, cuda or auto")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA GPU is visible here; use --device cpu")
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def drop_keys(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def machine_info() -> dict:
    import torch

    import datetime as dt

    info = {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),  # the plots' date
        "cpus": os.cpu_count(),
        "cpu": cpu_name(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def cpu_name() -> str:
    """The CPU's model (/proc/cpuinfo, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"
