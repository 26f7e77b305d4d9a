"""What ``convexp ablate`` prints: the named sweeps (--list), a plan with its cache state and
compute (--dry-run), and the end-of-sweep summary."""

from __future__ import annotations

import time

from ..tasks import GLUE
from .cards import Card, Grid, recipe_cards
from .compute import pretrain_tokens
from ..train.cpu_rate import cpu_rate, runs_on_cpu
from .execute import Outcome
from .requests import cluster_throughput, slurm_jobs
from .rates import pack_gain
from .schedule import job_gpus
from .slurm import on_slurm
from .plan import Plan
from .spec import load_sweep
from ..width import fold_command, fold_items, terminal_width


def _console():
    """A console that folds to the terminal's width (160 columns into a file or a pipe)."""
    from rich.console import Console

    return Console(width=terminal_width())



def print_sweeps() -> None:
    """One line per named sweep, 100 columns at most; ``--dry-run`` prints a sweep's description."""
    import shutil

    from rich.console import Console
    from rich.table import Table

    from ..config.compose import group_sources, is_builtin

    sweeps = group_sources("sweep")
    table = Table(title="named sweeps: convexp ablate NAME (* = yours)", title_justify="left", box=None)
    table.add_column("sweep", no_wrap=True, min_width=max(len(n) + 1 for n in sweeps))
    # every column bounded (rich drops a column rather than shrink an unbounded no-wrap one)
    table.add_column("source", no_wrap=True, overflow="ellipsis", max_width=30)
    table.add_column("variants", no_wrap=True, justify="right", min_width=8)
    table.add_column("stages", no_wrap=True, overflow="ellipsis", max_width=30)
    for name, path in sweeps.items():
        s = load_sweep(name)
        name = name if is_builtin(path) else f"{name}*"
        paper = str(s.source.get("paper", "?")).split(",")[0].split(" (")[0]  # "ConvBERT", "Chang et al."
        tasks = "GLUE" if s.finetune and set(s.finetune.tasks) == set(GLUE) else None
        tasks = tasks or (",".join(s.finetune.tasks) if s.finetune else None)
        stages = (s.init or "pretrain") + (f" → {tasks}" if tasks else "")
        table.add_row(name, f"{paper}, {s.source.get('ref', '?')}", str(len(s.variants)), stages)
    console = Console(width=min(100, shutil.get_terminal_size((100, 24)).columns))
    console.print(table)
    for name in sweeps:  # what a sweep assumes where its paper is silent
        if assumed := load_sweep(name).source.get("assumption"):
            console.print(f"{name}: assumption: {assumed}", highlight=False)
    print("convexp ablate NAME --dry-run: what the sweep reproduces, its plan, compute and recipe cards")


def _ago(seconds: float) -> str:
    return f"{seconds / 3600:.2g} h" if seconds < 86_400 else f"{seconds / 86_400:.2g} days"


def _flops(x: float) -> str:
    return f"{x:.2e}" if x else "-"


def _value(v) -> str:
    """A card's value as printed: 1,000,000 steps, 3e-04, yes/no, a grid as a | b."""
    if isinstance(v, Grid):
        return " | ".join(_value(x) for x in v)
    if isinstance(v, tuple):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.0e}" if 0 < abs(v) < 1e-2 and float(f"{v:.0e}") == v else f"{v:.4g}"
    return str(v)


def print_cards(cards: list[Card]) -> None:
    """The recipe cards (sweep/cards.py): a card's settings on one line where the terminal is wide
    enough, else folded between settings."""
    console = _console()
    for c in cards:
        stage = "pre-training" if c.stage == "pretrain" else "fine-tuning"
        head = f"{stage} recipe {c.title} — variants: {', '.join(c.variants)}"
        rows = [(k, v) for k, v in c.rows if k != "recipe"]
        lines = [*fold_items([head], console.width, indent=""),
                 *fold_items([f"{k} {_value(v)}" for k, v in rows], console.width)]  # fmt: skip
        for note in c.notes:
            lines += fold_items([f"note: {note}"], console.width)
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def print_plan(plan: Plan) -> None:
    """The --dry-run view: every node, what is cached, the recipe cards, and the compute still to do."""
    states: dict[str, int] = {}
    todo, unknown = 0.0, 0
    left = []  # the nodes not cached (a node's state reads its runs' files: once)
    rows = []
    for n in plan.order():
        state = n.state
        states[state] = states.get(state, 0) + 1
        todo += 0 if state == "cached" else n.flops
        unknown += state != "cached" and not n.flops
        left += [n] if state != "cached" else []
        rows.append((n.key, state, _flops(n.flops), [r.id for r in n.runs]))
    console = _console()
    cluster = []  # first: a job SLURM's partition cannot hold is refused before anything is printed
    if plan.settings.launcher.name == "submitit" or plan.settings.launcher.get("gpus"):
        cluster = cluster_lines(plan, left, console.width)
    if note := plan.sweep.source.get("note"):  # what the sweep reproduces (ablate --list leaves it out)
        console.print(f"{plan.sweep.title}: {note}", highlight=False)
    title = f"convexp ablate {plan.sweep.name} ({plan.sweep.title}), scale={plan.settings.scale}"
    print("\n".join([*fold_items([title], console.width, indent=""), *plan_table(rows, console.width)]), flush=True)
    print_cards(recipe_cards(plan))
    counts = ", ".join(f"{v} {k}" for k, v in sorted(states.items()))
    parts = [f"{len(plan.nodes)} runs ({counts})"]
    n_runs = sum(len(n.runs) for n in plan.order())
    if n_runs != len(plan.nodes):  # ConvBERT's grid: a fine-tuning node runs every setting
        parts.append(f"{n_runs} run directories (a fine-tuning node with a grid runs every setting; its FLOPs count them all)")
    cpu = next(iter(plan.pretrain_cfgs.values()), None)
    here = not on_slurm(plan.settings.launcher)  # SLURM's jobs run on its nodes, not on this CPU
    if todo and cpu is not None and here and runs_on_cpu(cpu):  # no stated rate fits a CPU: measure this one
        rate, when = cpu_rate(cpu)
        ago = time.time() - when
        at = "now" if ago < 60 else f"{_ago(ago)} ago (kept a month)"
        parts.append(
            f"to do: {_flops(todo)} training FLOPs ≈ {_minutes(todo / rate / 60)} on this CPU (a rough "
            f"estimate: {rate / 1e9:.3g} GFLOP/s measured on the first blocks of {cpu.model.name} {at})"
        )
    elif todo:
        tp = cluster_throughput(plan, left)
        gpu_h = sum(tp.hours(n) * job_gpus(n) for n in left)
        cpu_h = sum(tp.hours(n) for n in left if not job_gpus(n))
        spent = [f"{_hours(gpu_h)} GPU-hours ({tp.source})"] if gpu_h or not cpu_h else []
        spent += [f"{_hours(cpu_h)} of jobs on the CPU (the rate measured on this machine's CPU, rough)"] if cpu_h else []
        parts.append(f"to do: {_flops(todo)} training FLOPs ≈ {' + '.join(spent)}")
    if plan.pretrain_cfgs:  # real tokens (sentence pairs hold fewer than seq_len: compute.example_tokens)
        tokens = sum(map(pretrain_tokens, plan.pretrain_cfgs.values()))
        parts.append(f"pre-training reads {tokens:.3g} tokens")
    if unknown:
        parts.append(f"{unknown} runs of unknown compute (their checkpoint's config is not on disk)")
    elif not todo:
        parts.append("nothing to do")
    console.print("; ".join(parts))
    for line in bill_lines(plan, console.width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in cluster:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    launcher = f"launcher: {plan.settings.launcher.name}; first command:"
    command = plan.order()[0].command
    if len(launcher) + 1 + len(command) <= console.width:
        console.print(f"{launcher} {command}", markup=False, highlight=False, soft_wrap=True)
    else:  # folded between its words, still runnable when pasted
        for line in [launcher, *fold_command(command, console.width)]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if plan.settings.launcher.name == "local":
        for line in placement_lines(plan, console.width, left):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def bill_lines(plan: Plan, width: int) -> list[str]:
    """The sweep's bill per stage and in total (sweep/disk.py): runs, training FLOPs, the largest
    job's estimated peak GPU memory, and the disk the runs keep when the sweep has run; the
    pre-training data (tokens, documents, its cache, prepared examples and the time to prepare
    them); the total, and what it would be with every fine-tuning run's weights kept."""
    from .disk import bill_total, size, sweep_bill

    stages, data = sweep_bill(plan)
    lines = ["bill (estimates; disk as the sweep leaves it):"]
    for stage, label in (("pretrain", "pre-training"), ("finetune", "fine-tuning")):
        b = stages[stage]
        if not b.runs:
            continue
        parts = [f"{label}: {b.runs:,} run{'s' if b.runs > 1 else ''}", f"{_flops(b.flops)} training FLOPs"]
        parts += [f"peak ~{_gib(b.memory_mib)} a job (GPU)"] if b.memory_mib else []
        if stage == "pretrain":
            parts.append(f"disk {size(b.disk)} (each run's last resumable checkpoint and final model)")
        else:
            parts.append(f"disk {size(b.disk)}: results, and the weights of {b.kept_runs:,} run{'s' if b.kept_runs != 1 else ''} (keep_weights)")
            if b.read_weights:
                parts.append(f"{size(b.read_weights)} more while intermediate tasks read them")
            if b.unknown:
                parts.append(f"the weights of {b.unknown:,} runs not counted (their model is not on disk)")
        lines += fold_items(parts, width, sep=", ")
    for d in data:
        c, x = d.corpus, d.examples
        parts = [f"data {d.name}: " + (f"{c.tokens:.3g} tokens" if c else "size unknown")]
        if c is not None and c.documents:
            parts.append(f"{c.documents:,.0f} documents")
        parts += [f"datasets cache {size(d.cache_bytes)}"] if d.cache_bytes else []
        if x is not None:
            took = f"{x.seconds:.0f} s" if x.seconds < 120 else _minutes(x.seconds / 60)
            cores = f"on {x.processes} cores (data.num_proc)" if x.processes > 1 else "on one core (data.num_proc cores divide it)"
            rows = f"{x.rows:.3g} examples, {size(x.bytes)}"
            if not x.streamed:
                parts += [f"prepared{'' if x.kept else ' (not kept: data.cache=false)'}: {rows}", f"~{took} {cores}"]
            elif x.kept:  # the chunk store: the prepared rows, made as the first pass reads the corpus
                parts += [f"streamed into its chunk store (data.store_chunks): {rows}",
                          f"prepared instead (data.streaming=false): ~{took} {cores}"]  # fmt: skip
            else:
                parts += ["streamed, nothing stored (data.store_chunks=false)",
                          f"prepared instead (data.streaming=false): {rows}", f"~{took} {cores}"]  # fmt: skip
            parts += [f"and its datasets cache {size(c.cache_bytes)}"] if x.streamed and c.cache_bytes else []
        lines += fold_items(parts, width, sep=", ")
    total, every = bill_total(stages, data), bill_total(stages, data, every_weight=True)
    tail = [f"disk in total {size(total)}"]
    if every > total:
        tail.append(f"with every fine-tuning run's weights kept (keep_weights=all) {size(every)}")
    return lines + fold_items(tail, width, sep="; ")


def plan_table(rows: list[tuple[str, str, str, list[str]]], width: int) -> list[str]:
    """The plan's rows (node, state, train FLOPs, run ids) as aligned plain lines: a row's run ids
    after its other columns where they fit ``width``, else on the lines below it, folded between
    ids (an id wider than a line is folded, never cut). Plain text: a table of thousands of rows
    prints at once (rich's took seconds)."""
    head = ("node", "state", "train FLOPs", "run")
    wn = max([len(head[0]), *(len(r[0]) for r in rows)])
    ws = max([len(head[1]), *(len(r[1]) for r in rows)])
    wf = max([len(head[2]), *(len(r[2]) for r in rows)])

    def lead(node: str, state: str, flops: str) -> str:
        return f"{node:<{wn}}  {state:<{ws}}  {flops:>{wf}}  "

    out = [lead(*head[:3]) + head[3]]
    for node, state, flops, runs in rows:
        first, ids = lead(node, state, flops), ", ".join(runs)
        if len(first) + len(ids) <= width:
            out.append(first + ids)
            continue
        out.append(first.rstrip())
        out += fold_items(runs, width, indent="    ", sep=", ", hang="    ")
    return out


def placement_lines(plan: Plan, width: int, todo: list | None = None) -> list[str]:
    """launcher=local on this machine: its workers, the GPUs they share and what each job takes
    (a job that cannot be placed is refused here, as when the sweep runs), folded to ``width``
    between its parts. ``todo``: the nodes not cached, where the caller knows them."""
    from .gpus import check_placeable, pool_from_settings, workers_for

    launcher = plan.settings.launcher
    pool = pool_from_settings(launcher)
    todo = [n for n in plan.order() if n.state != "cached"] if todo is None else todo
    workers = workers_for(launcher, pool, todo)
    if not pool.ids:
        return [f"placement: {workers} worker{'s' if workers > 1 else ''} on this machine's CPU (no GPU visible)"]
    check_placeable(todo, pool, lambda n: n.gpus)
    needs: dict[str, int] = {}
    for n in todo:
        k = pool.need(n.gpus)
        label = "on the CPU" if k == 0 else "on 1 GPU" if k == 1 else f"on {k} GPUs (DDP, cards held whole)"
        needs[label] = needs.get(label, 0) + 1
    gpus = ",".join(map(str, pool.ids))
    jobs = [f"{v} job{'s' if v > 1 else ''} {k}" for k, v in needs.items()] or ["nothing to run"]
    head = f"placement: {workers} worker{'s' if workers > 1 else ''} on GPUs {gpus}"
    head += f" ({_gib(pool.card_mib)} cards)" if pool.by_memory else ""
    if pool.by_memory:
        rule = _packing(pool, todo)
    else:
        rule = [f"at most {pool.per_gpu} job{'s' if pool.per_gpu > 1 else ''} a GPU (launcher.per_gpu)"]
    tail = ["each worker sees only its own GPUs (CUDA_VISIBLE_DEVICES)", "--status names them"]
    return fold_items([head, *rule, *jobs, *tail], width, indent="", sep="; ")


def _gib(mib: float) -> str:
    return f"{mib / 1024:.2g} GiB"


def _packing(pool, todo: list) -> list[str]:
    """per_gpu=auto's parts of the placement line: the cards, each stage's estimates (a range where
    they differ), how many jobs a card holds at most, and how many run alone."""
    from .gpus import SAFETY, jobs_a_card, one_gpu_jobs

    one_gpu = one_gpu_jobs(pool, todo)
    sizes = []
    for stage, label in (("pretrain", "pre-training"), ("finetune", "fine-tunes")):
        known = [n.memory_mib for n in one_gpu if n.stage == stage and n.memory_mib]
        if known:
            low, high = _gib(min(known)), _gib(max(known))
            sizes.append(f"{label} ~{high}" if low == high else f"{label} ~{low} to {high}")
    parts = [
        f"per_gpu=auto: each card filled to {SAFETY:.0%} by the jobs' estimated peak memory",
        ", ".join([*sizes, f"→ up to {jobs_a_card(pool, todo)} a card"]).replace(", →", " →"),
    ]
    alone = sum(not pool.shares(n.memory_mib) for n in one_gpu)
    if alone:
        parts.append(f"{alone} alone on a card (estimate unknown or beyond a card)")
    return parts


def _minutes(m: float) -> str:
    return f"{m:.0f} min" if m < 120 else _hours(m / 60)


def _hours(h: float) -> str:
    return f"{h:,.0f} h" if h >= 10 else f"{h:.2g} h"


def cluster_lines(plan: Plan, todo: list, width: int) -> list[str]:
    """The cluster part of --dry-run: on SLURM (launcher=submitit) each class of job with what it
    asks for (requests.py: the numbers the submission uses), how many, and its GPU-hours; the rates
    behind them (rates.py); GPU-hours per stage and the wall-clock on launcher.gpus GPUs, with SLURM
    dependencies and in waves (schedule.py)."""
    from .requests import units as job_units
    from .schedule import makespan, units

    launcher = plan.settings.launcher
    lines: list[str] = []
    if launcher.name == "submitit":
        jobs, part, tp = slurm_jobs(plan, todo)
        where = "SLURM not asked (no srun here)" if not on_slurm(launcher) else "sinfo did not answer"
        if part is not None:
            limit = "no time limit" if part.max_min is None else f"{_clock_or_none(part.max_min)} at most"
            gpus = f"{part.gpus_per_node} GPUs" if part.gpus_per_node else "no GPU"
            where = f"partition {part.name}: {gpus}, {part.cpus} CPUs, {part.mem_mb // 1024} GB a node, {limit} (sinfo)"
        lines.append(f"jobs on SLURM ({where}; each job asks for what its node trains on):")
        lines += _class_lines(jobs, width)
        sched = job_units(jobs)
    else:
        tp = cluster_throughput(plan, todo)
        sched = units(todo, tp)
    m = makespan(sched, tp.gpus, sum(not n.flops for n in todo))
    lines.append(f"rates ({tp.source}):")
    lines += _rate_lines(plan, todo, tp, width)
    total = sum(m.gpu_hours.values())
    stages = " · ".join(f"{k} {_hours(v)}" for k, v in m.gpu_hours.items())
    lines.append(f"  GPU-hours: {stages} · total {_hours(total)}")
    if tp.gpus is None:
        lines.append(f"  wall-clock: set launcher.gpus=N (critical path {_hours(m.critical)} with unlimited GPUs)")
    else:
        saved = m.waves - m.dependencies  # FIFO starts are not optimal: waves can win by a little
        gain = f"{_hours(saved)} saved" if saved >= 0 else f"{_hours(-saved)} lost"
        lines += fold_items([
            f"  wall-clock on {tp.gpus} GPU{'s' if tp.gpus > 1 else ''}: {_hours(m.dependencies)} with dependencies "
            f"(SLURM afterok) vs {_hours(m.waves)} in waves", f"{gain} ({m.dependencies / 24:.1f} vs "
            f"{m.waves / 24:.1f} days)", f"critical path {_hours(m.critical)}"], width, sep="; ", indent="")  # fmt: skip
    if m.unknown:
        lines.append(f"  {m.unknown} jobs of unknown compute count as 0 h")
    return lines


def _clock_or_none(minutes) -> str:
    from .requests import clock

    return "no limit" if minutes is None else clock(minutes)


def _span(values: list, fmt) -> str:
    low, high = min(values), max(values)
    return fmt(low) if low == high else f"{fmt(low)} to {fmt(high)}"


def _class_lines(jobs: list, width: int) -> list[str]:
    """One line per class of job (stage, GPUs, tasks, CPUs), memory and time as ranges."""
    from .requests import clock

    classes: dict[tuple, list] = {}
    for j in jobs:
        r = j.request
        classes.setdefault((j.stage, r.nodes, r.gpus_per_node, r.tasks_per_node, r.cpus_per_task), []).append(j)
    out = []
    label = {"pretrain": "pre-training", "continue": "continued pre-training", "finetune": "fine-tuning"}
    order = {"pretrain": 0, "continue": 1, "finetune": 2}
    for (stage, nodes, gpn, tasks, cpus), js in sorted(classes.items(), key=lambda c: order.get(c[0][0], 3)):
        head = js[0].request.text().rsplit(", ", 2)[0]  # GPUs, tasks and CPUs: the class's own
        mem = _span([j.request.mem_gb for j in js], lambda g: f"{g} GB")
        time = _span([j.request.time_min for j in js], clock)
        packed = [len(j.nodes) for j in js if len(j.nodes) > 1]
        parts = [f"  {label.get(stage, stage)}: {len(js):,} job{'s' if len(js) > 1 else ''}", head,
                 f"{mem}{' a node' if nodes > 1 else ''}", f"--time {time}",
                 f"{sum(j.hours * j.request.gpus for j in js):,.1f} GPU-hours" if gpn else
                 f"{sum(j.hours for j in js):,.2g} h on the CPU in all"]  # fmt: skip
        if packed:
            parts.append(f"{sum(packed):,} fine-tunes packed {_span(packed, str)} a GPU (launcher.per_gpu)")
            biggest = max((j for j in js if len(j.nodes) > 1), key=lambda j: len(j.nodes))
            if biggest.nodes[0].workload is not None:
                parts.append("their hours " + pack_gain(len(biggest.nodes), biggest.nodes[0].workload.width)[1])
        capped = sorted({c for j in js for c in j.capped})
        if capped:
            parts.append(f"{' and '.join(capped)} capped at the limit")
        requeues = max(j.requeues for j in js)
        if requeues:
            parts.append(f"up to {requeues} requeue{'s' if requeues > 1 else ''} a job at its time limit (each resumes)")
        out += fold_items(parts, width, sep=", ", indent="", hang="      ")
    return out


def _rate_lines(plan: Plan, todo: list, tp, width: int) -> list[str]:
    """Each distinct rate the jobs are billed at, with the measurement it comes from and what the
    jobs at it do differently (rates.py); pre-training's as tokens/s a GPU too."""
    groups: dict[tuple, tuple[dict, dict, dict]] = {}  # (rate, source) -> stages, widths, notes (as sets)
    tokens: dict[str, float] = {}
    for n in todo:
        r = tp.rate(n)
        if r is None:
            continue
        stages, widths, notes = groups.setdefault((round(r.flops_s / 1e9), r.source), ({}, {}, {}))
        stages["pre-training" if n.stage == "pretrain" else "fine-tuning"] = None
        widths.update({n.workload.width: None} if n.workload else {})
        notes.update(dict.fromkeys(r.notes))
        cfg = plan.pretrain_cfgs.get(n.variant) if n.stage == "pretrain" and n.gpus else None
        if cfg is not None and tp.hours(n):
            steps = cfg.trainer.max_steps * cfg.trainer.batch_size * cfg.seq_len
            tokens.setdefault(cfg.model.get("name") or n.variant, steps / (tp.hours(n) * 3600) / job_gpus(n))
    out = []
    for (gflops, source), (stages, widths, notes) in groups.items():
        each = "a GPU" if "CPU" not in source else "a job on the CPU"
        what = " and ".join(stages) + (f", {' and '.join(map(str, widths))} wide" if widths else "")
        items = [f"  {what}: {gflops / 1e3:.3g} TFLOP/s {each}", source, *notes]
        out += fold_items(items, width, indent="", sep="; ", hang="      ")
    if tokens:
        out.append("  tokens/s a GPU: " + ", ".join(f"{k} {v:,.0f}" for k, v in tokens.items()))
    return out


def print_status(plan: Plan) -> None:
    """``--status``: each node's state, the GPU-hours spent and left, and the estimated finish."""
    import time

    from .status import sweep_progress

    p = sweep_progress(plan)
    console = _console()
    console.print(f"sweep {plan.sweep.name} at {time.strftime('%Y-%m-%d %H:%M')}:", markup=False)
    width = max(map(len, p.states), default=0)
    counts: dict[str, int] = {}
    for st in p.states.values():
        counts[st.state] = counts.get(st.state, 0) + 1
        console.print(f"  {st.key:<{width}}  {st.line}", markup=False, soft_wrap=True)
    console.print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())), markup=False)
    gpus = f"on {p.tp.gpus} GPU{'s' if p.tp.gpus > 1 else ''}" if p.tp.gpus else "with every job running at once (set launcher.gpus=N)"
    line = f"GPU-hours: {p.spent_gpu_h:.3g} spent, ≈ {p.left_gpu_h:.3g} left ({p.tp.source})"
    if p.finish_h is not None:
        end = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() + p.finish_h * 3600))
        line += f"; estimated finish {end} (in {p.finish_h:.3g} h {gpus})"
    else:
        line += "; nothing left to run"
    console.print(line, markup=False, soft_wrap=True)
    console.print(disk_line(plan), markup=False, soft_wrap=True)


def disk_line(plan: Plan) -> str:
    """``--status``: the disk the sweep's runs and the run store's cache use now, beside the bill."""
    from .disk import bill_total, size, sweep_bill, used_bytes

    used: dict[str, int] = {}
    seen: set = set()
    for node in plan.order():
        for run in node.runs:
            if run.dir not in seen:
                seen.add(run.dir)
                used[node.stage] = used.get(node.stage, 0) + used_bytes(run.dir)
    cache = used_bytes(plan.outputs / "cache")
    parts = [f"{label} {size(used.get(stage, 0))}" for stage, label in (("pretrain", "pre-training"), ("finetune", "fine-tuning"))]
    expected = bill_total(*sweep_bill(plan))
    return (f"disk: {size(sum(used.values()) + cache)} used ({', '.join(parts)}, {size(cache)} in {plan.outputs / 'cache'}); "
            f"≈ {size(expected)} when the sweep has run (--dry-run's bill)")  # fmt: skip


def _dir_flags() -> str:
    """The command's --config-dir and --user-dir flags (where its sweep and code were found), for a
    command line it tells the user to type next."""
    import os

    from ..config.compose import CONFIG_PATH_ENV
    from ..user_code import USER_DIR_ENV

    flags = []
    for flag, env in (("--config-dir", CONFIG_PATH_ENV), ("--user-dir", USER_DIR_ENV)):
        flags += [f"{flag} {p} " for p in os.environ.get(env, "").split(os.pathsep) if p]
    return "".join(flags)


def print_outcomes(plan: Plan, outcomes: dict[str, Outcome]) -> int:
    """The end-of-sweep summary; returns the number of nodes that failed or diverged."""
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o.status] = counts.get(o.status, 0) + 1
    console = _console()
    console.print(f"sweep {plan.sweep.name}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    failed = {k: o for k, o in outcomes.items() if o.status in ("failed", "diverged", "held", "blocked")}
    for k, o in failed.items():
        console.print(f"  {o.status}: {k}: {o.error}" + (f" (log: {o.log})" if o.log else ""), markup=False, soft_wrap=True)
    if any(o.status == "submitted" for o in outcomes.values()):
        console.print(f"submitted to SLURM; where it stands: convexp {_dir_flags()}ablate {plan.sweep.name} --status",
                      markup=False, soft_wrap=True)  # fmt: skip  (a command to copy is never folded)
    elif not failed:
        console.print(f"report: convexp {_dir_flags()}report {plan.sweep.name}", markup=False, soft_wrap=True)
    return sum(o.status in ("failed", "diverged") for o in outcomes.values())
