"""Sweeps on SLURM: the time estimate of --dry-run (GPU-hours, wall-clock with dependencies vs
waves), and, against the SLURM stand-in (tests/fakeslurm.py), every node submitted at once with
afterok dependencies, --status, requeue on pre-emption, a failure blocking only its dependants, and
the environment a multi-node pre-training gets."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from helpers import TINY, convexp, write_sweep

# ----------------------------------------------------------------------------- the time estimate


def _node(key: str, tflop: float, deps=(), gpus: int = 1, width: int = 256):
    from convexp.sweep.nodes import Node
    from convexp.sweep.rates import Workload

    return Node(key, key.split("/")[0], key.split("/")[1], [], [], list(deps), flops=tflop * 1e12, gpus=gpus,
                workload=Workload(key.split("/")[0], width, "bf16-mixed", "false"))  # fmt: skip


def test_dependencies_let_a_fast_variant_fine_tune_while_a_slow_one_pre_trains():
    """a pre-trains 10 h, b 2 h; b's fine-tuning takes 8 h, a's 1 h, on 3 GPUs at 1 TFLOP/s.
    With dependencies b's fine-tuning runs beside a's pre-training (11 h); in waves it waits for a
    (10 h, then 8 h)."""
    from convexp.sweep.schedule import makespan, throughput, units

    h = 3600  # TFLOP at 1 TFLOP/s = 1 h
    nodes = [
        _node("pretrain/a", 10 * h),
        _node("pretrain/b", 2 * h),
        _node("finetune/a/rte", 1 * h, ["pretrain/a"]),
        _node("finetune/b/rte", 8 * h, ["pretrain/b"]),
    ]
    settings = OmegaConf.create({"tflops": 1, "launcher": {"gpus": 3, "device": "h100"}})
    tp = throughput(settings)
    jobs = units(nodes, tp)
    assert {u.key: u.hours for u in jobs} == {"pretrain/a": 10, "pretrain/b": 2, "finetune/a/rte": 1, "finetune/b/rte": 8}
    m = makespan(jobs, tp.gpus)
    assert m.gpu_hours == {"pretrain": 12, "finetune": 9}
    assert (m.dependencies, m.waves, m.critical) == (11, 18, 11)
    one = makespan(jobs, 1)
    assert (one.dependencies, one.waves) == (21, 21)  # one GPU: nothing runs beside anything
    # a job on 2 nodes x 4 GPUs takes an eighth of the time and holds 8 GPUs: on 8 GPUs nothing beside it
    wide = _node("pretrain/w", 10 * h)
    wide.gpus, wide.num_nodes = 4, 2
    assert tp.hours(wide) == 10 / 8
    both = units([wide, nodes[1]], tp)
    assert makespan(both, 8).dependencies == 10 / 8 + 2 and makespan(both, 9).dependencies == 2
    # a CPU job holds no GPU and takes the CPU's rate
    cpu = _node("finetune/c/rte", 1 * h, gpus=0)
    assert throughput(settings, cpu_flops=0.5e12).hours(cpu) == 2 and units([cpu], tp)[0].gpus == 0


def test_the_measured_rates_give_back_their_own_steps_and_bad_launcher_settings():
    """A measured row's own workload gets back the steps a second that were measured (a stage's and a
    fine-tune's, counted as the bill counts them); another mode or objective takes its class's nearest
    row and says so; another width class takes its class's rows; another card is scaled by the peaks."""
    from convexp.config.compose import model_config
    from convexp.models.stats import flops_per_token
    from convexp.sweep.rates import MEASURED, PEAK_TFLOPS, Workload, pack_gain, rate
    from convexp.sweep.schedule import throughput
    from convexp.sweep.spec import SweepError
    from convexp.tasks.pretraining.cost import pretrain_flops

    row = next(r for r in MEASURED if r.card == "h100" and r.compile == "false" and r.precision == "32-true"
               and r.preset == "convbert_small" and r.what == "stage")  # fmt: skip
    cfg = OmegaConf.create({"seq_len": row.seq_len, "trainer": {"max_steps": 1, "batch_size": row.batch},
                            "objective": {"name": row.objective, "generator_fraction": 0.25}})  # fmt: skip
    small = model_config(row.preset)
    r = rate("h100", Workload("pretrain", small.hidden_size, "32-true", "false", "electra"))
    assert r.measured and pretrain_flops(cfg, small) / r.flops_s == pytest.approx(1 / row.steps_s)
    assert f"{row.steps_s:.3g} steps/s" in r.basis and f"measured {row.when}" in r.basis
    bf16 = rate("h100", Workload("pretrain", small.hidden_size, "bf16-mixed", "false", "electra"))
    graphs = rate("h100", Workload("pretrain", small.hidden_size, "bf16-mixed", "graphs", "electra"))
    assert bf16.measured and graphs.measured and graphs.flops_s > 2 * bf16.flops_s
    fp32_graphs = rate("h100", Workload("pretrain", small.hidden_size, "32-true", "graphs", "electra"))
    assert not fp32_graphs.measured and "32-true compile=graphs not measured" in fp32_graphs.basis
    other = rate("h100", Workload("pretrain", small.hidden_size, "32-true", "false", "tlm"))
    assert not other.measured and "tlm at " in other.basis
    wide = rate("h100", Workload("pretrain", 768, "32-true", "false", "electra"))
    assert wide.measured and "convbert_base" in wide.basis and wide.flops_s > 5 * r.flops_s
    a100 = rate("a100", Workload("pretrain", small.hidden_size, "32-true", "false", "electra"))
    assert a100.flops_s == pytest.approx(r.flops_s * PEAK_TFLOPS["a100"] / PEAK_TFLOPS["h100"])
    assert "no such row measured on a100" in a100.basis and not a100.measured
    # a fine-tune: its own rows, every row at its full length, so the steps come back as timed
    tune = next(t for t in MEASURED if t.what == "fine-tune" and t.preset == "convbert_small")
    tuned = rate("h100", Workload("finetune", small.hidden_size, "32-true", "false"))
    per_step = flops_per_token(small, tune.seq_len) * tune.batch * tune.seq_len
    assert tuned.measured and per_step / tuned.flops_s == pytest.approx(1 / tune.steps_s)
    assert "fine-tune, measured" in tuned.basis and "stage's rate" not in tuned.basis
    # sharing a card: the measured gains, interpolated between, held beyond, none for a wide model
    assert pack_gain(1, 256)[0] == 1 and pack_gain(4, 256)[0] == pytest.approx(3.23)
    assert 1 < pack_gain(2, 256)[0] < 2 and pack_gain(16, 256) == (pytest.approx(3.76), pack_gain(16, 256)[1])
    assert "as 8's" in pack_gain(16, 256)[1] and pack_gain(4, 768)[0] == 1
    with pytest.raises(SweepError, match="launcher.device='tpu' is not known"):
        throughput(OmegaConf.create({"tflops": None, "launcher": {"device": "tpu"}}))


def test_dry_run_prints_gpu_hours_and_the_wall_clock_both_ways(tmp_path):
    sweep = write_sweep(tmp_path / "two.yaml", {"a": {}, "b": {"pretrain": ["model=convbert_small"]}})
    args = [str(sweep), "scale=smoke", "trainer.accelerator=auto", "launcher=submitit", "launcher.cluster=local",
            "launcher.gpus=2", "launcher.device=a100", "--dry-run"]  # fmt: skip
    res = convexp("ablate", *args, outputs=tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert "jobs on SLURM (SLURM not asked" in res.stdout
    assert "pre-training: 2 jobs, 1 GPU, 2 CPUs a task" in res.stdout, res.stdout
    assert "rates (a100: the rates measured on a card" in res.stdout and "scaled to a100" in res.stdout
    assert "GPU-hours: pretrain" in res.stdout and "finetune" in res.stdout
    assert "wall-clock on 2 GPUs:" in res.stdout and "with dependencies (SLURM afterok) vs" in res.stdout
    assert not (tmp_path / "out" / "runs").exists()
    res = convexp("ablate", *args[:-2], "launcher.device=k80", "--dry-run", outputs=tmp_path / "out")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "launcher.device='k80'" in res.stderr and "h100, h200, a100, v100" in res.stderr  # the schema's line


# ----------------------------------------------------------------------------- --status


def test_status_reads_each_node_from_the_ledger_the_run_store_and_slurm(tmp_path):
    """Each state --status names, from a ledger, run directories and what squeue/sacct say."""
    import json
    import types

    from convexp.store.runs import Run
    from convexp.sweep.nodes import Node
    from convexp.sweep.slurm import Job
    from convexp.sweep.status import node_states

    def run(name: str, status: str | None, attempts=()) -> Run:
        r = Run(tmp_path / name)
        r.dir.mkdir()
        if status:
            record = {"status": status, "attempts": list(attempts)}
            record |= {"error": "ValueError: bad corpus"} if status == "failed" else {}
            (r.dir / "status.json").write_text(json.dumps(record))
        if status == "finished":
            (r.dir / "metrics.json").write_text('{"val_loss": 1.0}')
        return r

    a = {"started": "2026-01-01T00:00:00", "ended": "2026-01-01T01:00:00", "status": "interrupted"}
    b = {"started": "2026-01-01T01:00:00", "ended": "2026-01-01T03:00:00", "status": "finished"}
    nodes = [
        Node("pretrain/a", "pretrain", "a", [], [run("pa", "finished", [a, b])]),
        Node("finetune/a/rte", "finetune", "a", [], [run("fa", "running")], ["pretrain/a"]),
        Node("finetune/a/mrpc", "finetune", "a", [], [run("fm", None)], ["pretrain/a"]),
        Node("pretrain/b", "pretrain", "b", [], [run("pb", "failed")]),
        Node("finetune/b/rte", "finetune", "b", [], [run("fb", None)], ["pretrain/b"]),
        Node("pretrain/c", "pretrain", "c", [], [run("pc", None)]),
        Node("finetune/c/rte", "finetune", "c", [], [run("fc", None)], ["pretrain/c"]),
        Node("finetune/c/mrpc", "finetune", "c", [], [run("fcm", None)], ["pretrain/c"]),
    ]
    jobs = {
        "1_0": Job("1_0", "COMPLETED"),
        "2_0": Job("2_0", "RUNNING", elapsed=3 * 3600),
        "2_1": Job("2_1", "CANCELLED"),
        "1_1": Job("1_1", "FAILED"),
        "3": Job("3", "PENDING", "DependencyNeverSatisfied"),
        "1_2": Job("1_2", "PENDING", "Resources"),
        "4_0": Job("4_0", "PENDING", "Dependency"),
    }
    keys = ["1_0", "2_0", "2_1", "1_1", "3", "1_2", "4_0", None]
    recorded = {n.key: {"job": k, "status": "submitted"} for n, k in zip(nodes, keys)}
    plan = types.SimpleNamespace(order=lambda: nodes)
    states = node_states(plan, recorded, jobs, now=0.0)
    assert {k: s.line for k, s in states.items()} == {
        "pretrain/a": "done; requeued 1 time",
        "finetune/a/rte": "running for 3.0 h (job 2_0)",
        "finetune/a/mrpc": "cancelled (job 2_1); convexp ablate submits it again",
        "pretrain/b": "failed: ValueError: bad corpus (job 1_1: FAILED)",
        "finetune/b/rte": "blocked by pretrain/b",
        "pretrain/c": "queued (Resources; job 1_2)",
        "finetune/c/rte": "pending on pretrain/c (job 4_0)",
        "finetune/c/mrpc": "not submitted (convexp ablate submits it)",
    }
    assert states["pretrain/a"].spent_s == 3 * 3600  # both attempts


def test_status_bills_a_pack_as_the_one_gpu_it_held():
    """Fine-tunes packed in one SLURM job ran side by side on its one GPU: --status counts the pack's
    longest member once in the GPU-hours spent (not each member's), and what is left of a pack is
    one job of its members' hours over the measured gain, as the dry run billed it."""
    from convexp.sweep.rates import pack_gain
    from convexp.sweep.schedule import throughput
    from convexp.sweep.status import NodeState, jobs_left, spent_gpu_hours

    h = 3600
    nodes = [_node("finetune/a/rte", 1 * h), _node("finetune/a/mrpc", 1 * h), _node("finetune/b/rte", 1 * h),
             _node("finetune/c/rte", 2 * h), _node("finetune/c/mrpc", 2 * h)]  # fmt: skip
    recorded = {"finetune/a/rte": {"job": "7_0"}, "finetune/a/mrpc": {"job": "7_0"}, "finetune/b/rte": {"job": "7_1"},
                "finetune/c/rte": {"job": "8_0"}, "finetune/c/mrpc": {"job": "8_0"}}  # fmt: skip
    states = {n.key: NodeState(n.key, "done", spent_s=h) for n in nodes[:3]}
    states |= {n.key: NodeState(n.key, "pending") for n in nodes[3:]}
    states["finetune/a/mrpc"].spent_s = 0.5 * h
    assert spent_gpu_hours(nodes, recorded, states) == pytest.approx(2.0)  # the pack's 1 h once, b's 1 h
    tp = throughput(OmegaConf.create({"tflops": 1, "launcher": {"gpus": 4, "device": "h100"}}))
    [pack] = jobs_left(nodes, recorded, states, tp)
    assert pack.gpus == 1 and pack.hours == pytest.approx(4 / pack_gain(2, 256)[0]) and pack.hours < 3


def test_a_failed_job_is_told_by_its_own_last_line_not_srun_s(tmp_path):
    """A real SLURM's job log ends with srun's and slurmstepd's lines about the exit: --status
    names the job's own error instead."""
    from convexp.sweep.nodes import Node
    from convexp.sweep.status import _error

    log = tmp_path / "5_1_log.err"
    log.write_text("W&B: disabled\nerror: data.path: no such file or folder: /x.txt\n"
                   "srun: error: vm: task 0: Exited with exit code 1\nslurmstepd-vm: error: *** STEP 5.0 ***\n")  # fmt: skip
    assert _error(Node("pretrain/b", "pretrain", "b", [], []), str(log)) == "error: data.path: no such file or folder: /x.txt"


# ----------------------------------------------------------------------------- the SLURM stand-in


@pytest.fixture(scope="session")
def real_slurm():
    """A real single-node SLURM (`.ci/slurm`: Debian's slurm-wlm and munge, installed and started
    where this runs as root with apt-get); skipped, with the reason, where it cannot start."""
    import subprocess
    from pathlib import Path

    start = Path(__file__).parents[1] / ".ci" / "slurm"
    done = subprocess.run([str(start)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.skip((done.stderr.strip().splitlines() or [f".ci/slurm exited {done.returncode}"])[-1])
    return {}  # its commands are on PATH


@pytest.fixture
def slurm(tmp_path):
    """The fake SLURM's environment (one job at a time: the machine has 2 cores); stopped after. Its
    minutes are real: submitit warns a job 90 s before its time limit, which must lie ahead."""
    import fakeslurm

    env = fakeslurm.install(tmp_path / "bin", tmp_path / "slurm", slots=1, kill_wait=3)  # minutes of 60 s
    yield env
    fakeslurm.shutdown(tmp_path / "slurm")


@pytest.fixture(params=["stand-in", "real"])
def any_slurm(request):
    """The SLURM stand-in, then the real single-node SLURM (skipped where it cannot start)."""
    return request.getfixturevalue("slurm" if request.param == "stand-in" else "real_slurm")


def _sh(env: dict, *cmd: str) -> str:
    import os
    import subprocess

    return subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout


def _wait(env: dict, ids: list[str], timeout: float = 60) -> dict[str, str]:
    """Wait until no job of ``ids`` is pending or running; their states."""
    import time

    deadline = time.time() + timeout
    while True:
        rows = [ln.split("|") for ln in _sh(env, "sacct", "-n", "--parsable2", "-o", "JobID,State", "-j", ",".join(ids)).splitlines()]
        states = dict(rows)
        if not {"PENDING", "RUNNING"} & set(states.values()) or time.time() > deadline:
            return states
        time.sleep(0.2)


@pytest.mark.slow
def test_fake_slurm_honours_afterok_time_limits_signals_cancel_and_requeue(slurm, tmp_path):
    def script(name: str, body: str) -> str:
        path = tmp_path / f"{name}.sh"
        path.write_text(f"#!/bin/bash\n#SBATCH --job-name={name} --output={tmp_path}/{name}-%j.out\n{body}\n")
        return str(path)

    slurm = {**slurm, "FAKESLURM_SLOTS": "8", "FAKESLURM_MINUTE_S": "2"}  # sleeping jobs at once; minutes of 2 s

    def submit(*args: str) -> str:
        return _sh(slurm, "sbatch", "--parsable", *args).strip()

    ok = submit(script("ok", "echo ran"))
    bad = submit(script("bad", "exit 3"))
    after_ok = submit(f"--dependency=afterok:{ok}", script("after_ok", "echo after"))
    after_bad = submit(f"--dependency=afterok:{bad}", script("after_bad", "echo never"))
    killed = submit(f"--dependency=afterok:{bad}", "--kill-on-invalid-dep=yes", script("killed", "echo never"))
    # 1 "minute" = 2 s: warned (USR2 to the srun task) 1 s before the limit, then TIMEOUT
    trap = "trap 'echo warned; exit 0' USR2; while true; do sleep 0.1; done"
    timed = submit("--time=1", "--signal=USR2@1", script("timed", f"srun bash -c \"{trap}\""))
    slow = submit("--time=1", script("slow", "sleep 30"))
    states = _wait(slurm, [ok, bad, after_ok, killed, timed, slow])
    assert states[ok] == states[after_ok] == "COMPLETED" and states[bad] == "FAILED"
    assert states[killed] == "CANCELLED" and states[timed] == "COMPLETED" and states[slow] == "TIMEOUT"
    assert "warned" in (tmp_path / f"timed-{timed}.out").read_text()
    assert _sh(slurm, "squeue", "-h", "-j", after_bad, "-o", "%i|%T|%r").split() == [f"{after_bad}|PENDING|DependencyNeverSatisfied"]
    # an array whose task requeues itself once runs its script again; scancel ends a pending job
    body = 'echo "run $SLURM_RESTART_COUNT"; [ "$SLURM_RESTART_COUNT" = 0 ] && [ "$SLURM_ARRAY_TASK_ID" = 1 ] && scontrol requeue "${SLURM_ARRAY_JOB_ID}_1"; exit 0'
    array = submit("--array=0-1", script("arr", body))
    _sh(slurm, "scancel", after_bad)
    states = _wait(slurm, [array, after_bad])
    assert states == {f"{array}_0": "COMPLETED", f"{array}_1": "COMPLETED", after_bad: "CANCELLED"}
    assert "Restarts=1" in _sh(slurm, "scontrol", "show", "job", f"{array}_1")
    assert (tmp_path / f"arr-{int(array) + 1}.out").read_text().split("\n")[:2] == ["run 0", "run 1"]


def _status(args: list[str], outputs, env: dict) -> dict[str, str]:
    """``convexp ablate SWEEP --status``: node -> its detail line (state first)."""
    res = convexp("ablate", args[0], "--status", outputs=outputs, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = dict(line.strip().split("  ", 1) for line in res.stdout.splitlines() if line.startswith("  "))
    return {k: v.strip() for k, v in rows.items()}, res.stdout


@pytest.mark.slow
def test_sweep_on_slurm_submits_and_returns_requeues_resumes_and_blocks_only_dependants(any_slurm, tmp_path):
    """Two variants through launcher=submitit on the stand-in and on a real SLURM: the driver exits
    right after submitting; a pre-training array task warned of pre-emption (USR2) requeues and
    resumes to the result of an uninterrupted run; the other variant's pre-training fails and blocks
    only its own fine-tuning; --status tells the truth at each point; running ablate again submits
    only what is missing, never what is queued."""
    slurm = any_slurm
    import json
    import subprocess
    import time

    from helpers import SHRINK, ledger, statuses

    # b's corpus is an empty file: refused by the stage once it has read it, after its imports
    empty = tmp_path / "empty-corpus.txt"
    empty.write_text("")
    sweep = write_sweep(tmp_path / "s.yaml", {"a": {}, "b": {"pretrain": ["data=files", f"data.path={empty}"]}})
    # 2,000 steps of the tiny model (~30 s on a quiet CPU; 200 took 3 s): still running while the test
    # runs ablate again and pre-empts it
    steps = ["pretrain.trainer.max_steps=2000", "pretrain.trainer.checkpoint_every_n_steps=20", "pretrain.trainer.val_every_n_steps=1000"]
    args = [str(sweep), *SHRINK, *steps, "launcher=submitit", "launcher.cluster=slurm", *FITS, "launcher.timeout_min=30"]
    out = tmp_path / "out"
    env = {**slurm, "WANDB_MODE": "disabled"}
    started = time.time()
    res = convexp("ablate", *args, outputs=out, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    jobs = {k: n["job"] for k, n in ledger(out, "s")["nodes"].items()}
    assert set(statuses(out, "s").values()) == {"submitted"} and all(jobs.values())
    assert "submitted 2 jobs" in res.stdout and f"after {jobs['pretrain/a']}: finetune/a/rte/s42" in res.stdout
    assert not list(out.glob("runs/*/*/metrics.json"))  # returned before any run finished

    rows, _ = _status(args, out, env)
    assert rows["finetune/a/rte/s42"].startswith("pending on pretrain/a (job ")
    assert rows["finetune/b/rte/s42"].startswith("pending on pretrain/b (job ")
    # again while a is queued or running: nothing queued or running is submitted twice. b's pre-training
    # may have failed by now (its job refuses the empty corpus as soon as it reads it: how soon depends on
    # the machine's load); a failed node and its blocked dependant are then submitted again, as they should
    res = convexp("ablate", *args, outputs=out, env=env)
    assert res.returncode == 0, res.stdout
    again_submitted = {key for ln in res.stdout.splitlines() if re.match(r"submitted \d+ jobs? \(", ln)
                       for key in ln.split(": ", 1)[1].split(", ")}  # fmt: skip
    assert again_submitted <= {"pretrain/b", "finetune/b/rte/s42"}, res.stdout
    again = ledger(out, "s")["nodes"]
    for key, job in jobs.items():  # each keeps its job (one that has finished meanwhile is cached)
        if key not in again_submitted:
            assert again[key]["job"] == job or again[key]["status"] == "cached", (key, again[key])
    assert again["pretrain/a"]["job"] == jobs["pretrain/a"], "pretrain/a finished before the test could pre-empt it"

    # pre-empt pretrain/a (an array task) once it has a checkpoint: submitit's USR2 to the job's step
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("runs/pretrain/*/checkpoints/last.ckpt")):
        time.sleep(0.05)
    subprocess.run(["scancel", "--signal=USR2", jobs["pretrain/a"]], env={**__import__("os").environ, **slurm}, check=True)
    while time.time() < deadline:
        rows, text = _status(args, out, env)
        if not any(r.startswith(("pending", "queued", "running")) for r in rows.values()):  # fmt: skip
            break
        time.sleep(2)
    assert rows["pretrain/a"] == "done; requeued 1 time", text
    assert rows["finetune/a/rte/s42"] == "done", text
    assert rows["pretrain/b"].startswith("failed: ") and f"{empty} holds only empty files" in rows["pretrain/b"], text
    assert rows["finetune/b/rte/s42"] == "blocked by pretrain/b", text
    assert "GPU-hours:" in text and "nothing left to run" in text
    assert statuses(out, "s") == {
        "pretrain/a": "done", "finetune/a/rte/s42": "done", "pretrain/b": "failed", "finetune/b/rte/s42": "blocked"
    }  # fmt: skip
    [run] = [p for p in out.glob("runs/pretrain/*") if (p / "metrics.json").exists()]
    s = json.loads((run / "status.json").read_text())
    assert [a["status"] for a in s["attempts"]] == ["interrupted", "finished"], s
    assert "requeued by the job runner" in s["attempts"][0]["error"]
    # the same result as an uninterrupted run of the node's command
    node = ledger(out, "s")["nodes"]["pretrain/a"]
    over = [o for o in node["command"].split()[2:] if not o.startswith("outputs=")]
    ref = convexp("pretrain", *[o.strip("'") for o in over], "trainer.requeue_signal=null", outputs=tmp_path / "ref", env=env)
    assert ref.returncode == 0, ref.stderr[-2000:]
    [reference] = (tmp_path / "ref" / "runs" / "pretrain").glob("*")
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, run))
    from convexp.store.run_names import run_key

    # the same run (its hash): the command names it by the overrides it was given, the sweep by the variant's
    assert run_key(reference.name) == run_key(run.name) and b["steps"] == 2000
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)

    # again after the failure, following the jobs: only what is missing is submitted (b's two nodes)
    res = convexp("ablate", *args, "launcher.poll_s=1", "--follow", outputs=out, env=env)
    assert res.returncode == 1, res.stdout[-3000:]
    submitted = [ln for ln in res.stdout.splitlines() if ln.startswith("submitted")]
    assert len(submitted) == 2 and submitted[0].endswith(": pretrain/b") and submitted[1].endswith(": finetune/b/rte/s42")
    assert "pretrain/b: failed: " in res.stdout and "finetune/b/rte/s42: blocked by pretrain/b" in res.stdout
    assert statuses(out, "s") == {
        "pretrain/a": "cached", "finetune/a/rte/s42": "cached", "pretrain/b": "failed", "finetune/b/rte/s42": "blocked"
    }  # fmt: skip
    assert time.time() - started < 900


# what one job asks of a 2-core machine (the defaults, 8 cores and 32 GB, fit no such node)
FITS = ["launcher.cpus_per_task=1", "launcher.mem_gb=1"]
REQUEUE_STEPS = [*TINY, "trainer.max_steps=300", "trainer.checkpoint_every_n_steps=20", "trainer.val_every_n_steps=100",
                 "trainer.deterministic=true"]  # fmt: skip


def _until(check, timeout: float, what: str):
    import time

    deadline = time.time() + timeout
    while not (found := check()):
        assert time.time() < deadline, f"no {what} after {timeout:.0f} s"
        time.sleep(0.5)
    return found


@pytest.mark.slow
def test_scontrol_requeue_of_a_running_pretraining_on_a_real_slurm_resumes_cleanly(real_slurm, tmp_path):
    """`scontrol requeue` of a running `srun convexp pretrain` (W&B offline: SLURM's SIGTERM reaches
    its service process too): the first attempt is recorded interrupted at its step, the job's log
    holds no traceback and no note of the checkpoints folder it resumes from, the requeued job resumes and finishes with an uninterrupted run's metrics."""
    import json
    import sys

    out = tmp_path / "out"
    cmd = " ".join([sys.executable, "-m", "convexp.cli", "pretrain", *REQUEUE_STEPS])
    (tmp_path / "job.sh").write_text(f"#!/bin/bash\nsrun {cmd}\n")
    env = {"CONVEXP_OUTPUTS": str(out), "WANDB_MODE": "offline"}
    job = _sh(env, "sbatch", "--parsable", "--requeue", "--open-mode=append", "--cpus-per-task=1", f"--output={tmp_path}/job-%j.out",
              f"--error={tmp_path}/job-%j.err", str(tmp_path / "job.sh")).strip()  # fmt: skip
    _until(lambda: list(out.glob("runs/pretrain/*/checkpoints/step=*.ckpt")), 600, "checkpoint")
    _sh(env, "scontrol", "requeue", job)
    state = lambda: _sh(env, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T").strip()  # noqa: E731
    _until(lambda: state() in ("COMPLETED", "FAILED", "CANCELLED"), 900, "end of the requeued job")
    log = (tmp_path / f"job-{job}.err").read_text()
    assert state() == "COMPLETED" and "Traceback" not in log, log[-3000:]
    assert "Checkpoint directory" not in log, log[-3000:]  # the requeued attempt resumes from its own folder, quietly
    [run] = out.glob("runs/pretrain/*")
    s = json.loads((run / "status.json").read_text())
    assert [a["status"] for a in s["attempts"]] == ["interrupted", "finished"], s
    assert s["attempts"][0]["error"].startswith("interrupted by SIGTERM after step "), s

    ref = convexp("pretrain", *REQUEUE_STEPS, outputs=tmp_path / "ref", env={"WANDB_MODE": "disabled"})
    assert ref.returncode == 0, ref.stderr[-2000:]
    [reference] = (tmp_path / "ref" / "runs" / "pretrain").glob("*")
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, run))
    assert b["steps"] == 300 and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-5)


@pytest.mark.slow
def test_submitit_time_limit_warning_on_a_real_slurm_requeues_and_resumes(real_slurm, tmp_path):
    """A sweep job of a 3-minute limit, held in its second checkpoint until SLURM has sent
    submitit's USR2 (``--signal=USR2@90``: 90 s before the limit): the run stops at the end of
    that step, checkpoints, submitit requeues the job, and the requeued job resumes the run."""
    import json
    import subprocess

    from helpers import SHRINK, held_at_second_checkpoint, ledger, release, statuses

    from convexp.sweep import slurm

    sweep = write_sweep(tmp_path / "t.yaml", {"a": {}}, finetune=False)
    steps = ["pretrain.trainer.max_steps=60", "pretrain.trainer.checkpoint_every_n_steps=20",
             "pretrain.trainer.val_every_n_steps=30"]  # fmt: skip
    args = [str(sweep), *SHRINK, *steps, "launcher=submitit", "launcher.cluster=slurm", *FITS, "launcher.timeout_min=3"]
    out, hold = tmp_path / "out", tmp_path / "hold"
    proc = held_at_second_checkpoint(["ablate", *args, "launcher.poll_s=2", "--follow"], out, hold, {"WANDB_MODE": "disabled"},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    job = ledger(out, "t")["nodes"]["pretrain/a"]["job"]
    # USR2 goes out once 90 s are left, on SLURM's periodic check (every 30 s at most)
    _until(lambda: slurm.jobs([job]).get(job, slurm.Job(job, "")).elapsed >= 125, 400, "125 s of the job")
    release(hold)
    stdout, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, stdout[-3000:]
    assert statuses(out, "t") == {"pretrain/a": "done"}
    [run] = out.glob("runs/pretrain/*")
    s = json.loads((run / "status.json").read_text())
    kinds = [a["status"] for a in s["attempts"]]
    assert kinds[0] == "interrupted" and kinds[-1] == "finished" and set(kinds[1:-1]) <= {"interrupted"}, s
    assert s["attempts"][0]["error"].startswith("interrupted by SIGUSR2 (time limit) at step 40: checkpointed"), s
    assert json.loads((run / "metrics.json").read_text())["steps"] == 60


# ----------------------------------------------------------------------------- multi-node pre-training

PROBE = """
import json, sys
import pytorch_lightning as pl
from convexp.config.compose import compose_stage
from convexp.train.common import per_device_batch

cfg = compose_stage("pretrain", sys.argv[2:])
t = cfg.trainer
trainer = pl.Trainer(accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes, strategy=t.strategy,
                     logger=False, enable_checkpointing=False)
env = trainer.strategy.cluster_environment
print(json.dumps({"env": type(env).__name__, "global_rank": trainer.global_rank, "world_size": trainer.world_size,
                  "local_rank": trainer.local_rank, "node_rank": trainer.node_rank, "main_address": env.main_address,
                  "batch": t.batch_size, "per_device": per_device_batch(t.batch_size, t)}))
"""


@pytest.mark.slow
def test_docs_multi_node_pretraining_script_gives_each_task_its_rank_and_batch(slurm, tmp_path):
    """The docs' sbatch script (docs/pretraining.md) on 2 nodes x 2 tasks (CPU): the environment
    Lightning derives in each srun task (ranks, world size) and the per-device batch of the
    paper-scale global batch."""
    import json
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "docs" / "pretraining.md").read_text()
    [script] = [b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "#SBATCH" in b and "srun convexp pretrain" in b]
    small = (
        script.replace("--nodes=4", "--nodes=2")
        .replace("--ntasks-per-node=8", "--ntasks-per-node=2")
        .replace("trainer.devices=8", "trainer.devices=2")
        .replace("trainer.num_nodes=4", "trainer.num_nodes=2")
        .replace("trainer.accelerator=gpu", "trainer.accelerator=cpu")
        .replace("trainer.precision=bf16-mixed", "trainer.precision=32-true")
        .replace("srun convexp pretrain", f"srun --output={tmp_path}/task-%t.out python {tmp_path}/probe.py pretrain")
    )
    assert small.count("=2") >= 4 and "probe.py" in small  # the docs' script still has these settings
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "pretrain.sh").write_text(small)
    job = _sh(slurm, "sbatch", "--parsable", f"--output={tmp_path}/job.out", str(tmp_path / "pretrain.sh")).strip()
    assert _wait(slurm, [job], timeout=300) == {job: "COMPLETED"}, (tmp_path / "job.out").read_text()[-3000:]
    tasks = [json.loads((tmp_path / f"task-{t}.out").read_text().strip().splitlines()[-1]) for t in range(4)]
    assert [(t["global_rank"], t["local_rank"], t["node_rank"]) for t in tasks] == [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    assert {t["env"] for t in tasks} == {"SLURMEnvironment"} and {t["world_size"] for t in tasks} == {4}
    assert {t["main_address"] for t in tasks} == {"fake0"}  # the first node of SLURM_NODELIST
    assert {(t["batch"], t["per_device"]) for t in tasks} == {(256, 64)}  # ConvBERT-base's 256, over 4 GPUs


def test_status_and_follow_need_a_submitted_sweep_on_slurm(tmp_path):
    sweep = write_sweep(tmp_path / "never.yaml", {"a": {}})
    res = convexp("ablate", str(sweep), "--status", outputs=tmp_path / "out")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "sweep never has not been run here yet (no ledger)" in res.stderr
    res = convexp("ablate", str(sweep), "scale=smoke", "--follow", outputs=tmp_path / "out")
    assert res.returncode == 2 and "--status and --follow watch SLURM jobs: use launcher=submitit" in res.stderr
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- each job's request, granted


def _granted(env: dict, job: str) -> dict:
    """What SLURM granted a job (``scontrol show job -d``): nodes, tasks, CPUs a task, GPUs a node,
    memory a node (GB) and time limit (minutes)."""
    import subprocess

    text = subprocess.run(["scontrol", "show", "job", "-d", job], capture_output=True, text=True,
                          env={**__import__("os").environ, **env}, check=True).stdout  # fmt: skip
    field = lambda name: re.search(rf"\b{re.escape(name)}=(\S+)", text)  # noqa: E731
    gres = field("TresPerNode")
    mem = field("MinMemoryNode").group(1)
    limit = field("TimeLimit").group(1)
    days, _, clock = limit.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return {
        "nodes": int(field("NumNodes").group(1)),
        "tasks_per_node": int(field("NumTasks").group(1)) // int(field("NumNodes").group(1)),
        "cpus_per_task": int(field("CPUs/Task").group(1)),
        "gpus_per_node": int(gres.group(1).rsplit(":", 1)[1]) if gres else 0,
        "mem_gb": int(mem[:-1]) // (1024 if mem.endswith("M") else 1),
        "timeout_min": int(days or 0) * 1440 + h * 60 + m + (s > 0),
        "partition": field("Partition").group(1),
    }


@pytest.mark.slow
def test_a_paper_shaped_sweep_on_a_real_slurm_is_granted_what_its_dry_run_printed(real_slurm, tmp_path):
    """A DDP pre-training (one node, 2 GPUs: 2 tasks), an ELECTRA pre-training on one GPU and their GLUE
    and SQuAD fine-tunes, sizes shrunk, sent to the test cluster's GPU partition (4 GPUs as GRES; the
    jobs train on the CPU): scontrol shows each job granted exactly what its node trains on and what
    the dry run printed. Sent to the CPU partition, the same sweep is refused, nothing submitted."""
    import subprocess

    from helpers import SHRINK, ledger, statuses

    from convexp.sweep.plan import build_plan
    from convexp.sweep.requests import slurm_jobs
    from convexp.sweep.spec import load_sweep

    env = {**real_slurm, "WANDB_MODE": "disabled"}
    variants = {"ddp": {"pretrain": ["trainer.devices=2", "trainer.strategy=ddp"]},
                "electra": {"pretrain": ["objective=electra"]}}  # fmt: skip
    sweep = write_sweep(tmp_path / "shaped.yaml", variants)
    small = ["tasks=[rte,squad1]", "finetune.squad.synthetic_size=40", "finetune.squad.max_len=64"]
    args = [str(sweep), *SHRINK, *small, "trainer.accelerator=auto", "launcher=submitit", "launcher.cluster=slurm",
            "launcher.timeout_min=60"]  # fmt: skip
    out = tmp_path / "out"
    res = convexp("ablate", *args, "launcher.partition=cpu", outputs=out, env=env)
    assert res.returncode == 2 and "launcher.partition=cpu has no GPUs" in res.stderr, res.stderr
    assert not _sh(env, "squeue", "-h", "-n", "convexp-shaped", "-o", "%i").split() and not (out / "sweeps").exists()

    args.append("launcher.partition=gpu")
    dry = convexp("ablate", *args, "--dry-run", outputs=out, env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "partition gpu: 4 GPUs, 16 CPUs, 62 GB a node, 2-00:00 at most (sinfo)" in dry.stdout
    plan = build_plan(load_sweep(str(sweep)), [*args[1:], f"outputs={out}"])
    jobs, _, _ = slurm_jobs(plan, list(plan.order()))
    for j in jobs:  # the dry run printed each job's class: its GPUs, tasks and CPUs
        assert j.request.text().rsplit(", ", 2)[0] in dry.stdout, (j.key, j.request.text())
    assert {j.request.gpus for j in jobs} == {1, 2}

    res = convexp("ablate", *args, "launcher.poll_s=2", "--follow", outputs=out, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert set(statuses(out, "shaped").values()) == {"done"}, statuses(out, "shaped")
    ids = {k: n["job"] for k, n in ledger(out, "shaped")["nodes"].items()}
    for j in jobs:
        granted = _granted(env, ids[j.key])
        assert granted == {**j.request.params(), "partition": "gpu"}, (j.key, granted, j.request)
    ddp = _granted(env, ids["pretrain/ddp"])
    assert (ddp["gpus_per_node"], ddp["tasks_per_node"]) == (2, 2)  # one task a GPU
    print(subprocess.run(["scontrol", "show", "job", ids["pretrain/ddp"]], capture_output=True, text=True).stdout)


@pytest.mark.slow
def test_fine_tunes_packed_on_one_gpu_job_of_a_real_slurm_each_finish_in_their_own_runs(real_slurm, tmp_path):
    """launcher.per_gpu=2: a variant's two fine-tunes run side by side in one job on one GPU (GRES), each
    in its own process and log, each to its own finished run; the job asked for their CPUs and memory
    together."""
    from helpers import SHRINK, ledger, statuses

    from convexp.sweep.plan import build_plan
    from convexp.sweep.requests import slurm_jobs
    from convexp.sweep.spec import load_sweep

    env = {**real_slurm, "WANDB_MODE": "disabled"}
    sweep = write_sweep(tmp_path / "packed.yaml", {"a": {}})
    args = [str(sweep), *SHRINK, "seeds=[1,2]", "trainer.accelerator=auto", "launcher=submitit", "launcher.cluster=slurm",
            "launcher.partition=gpu", "launcher.per_gpu=2", "launcher.timeout_min=60"]  # fmt: skip
    out = tmp_path / "out"
    res = convexp("ablate", *args, "launcher.poll_s=2", "--follow", outputs=out, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert statuses(out, "packed") == {"pretrain/a": "done", "finetune/a/rte/s1": "done", "finetune/a/rte/s2": "done"}
    nodes = ledger(out, "packed")["nodes"]
    assert nodes["finetune/a/rte/s1"]["job"] == nodes["finetune/a/rte/s2"]["job"] != nodes["pretrain/a"]["job"]
    for key in ("finetune/a/rte/s1", "finetune/a/rte/s2"):  # each its own log
        assert nodes[key]["log"].endswith(key.replace("/", "__") + ".log") and "examples/s" in open(nodes[key]["log"]).read()
    plan = build_plan(load_sweep(str(sweep)), [*args[1:], f"outputs={out}"])
    [pack] = [j for j in slurm_jobs(plan, [n for n in plan.order() if n.stage == "finetune"])[0]]
    granted = _granted(env, nodes["finetune/a/rte/s1"]["job"])
    assert len(pack.nodes) == 2 and granted == {**pack.request.params(), "partition": "gpu"}
    assert granted["gpus_per_node"] == 1 and granted["cpus_per_task"] == 2 * (plan.nodes["finetune/a/rte/s1"].workers + 2)


@pytest.mark.slow
def test_adaptive_seeds_on_a_real_slurm_run_their_looks_with_nobody_watching(real_slurm, tmp_path):
    """`adaptive.looks=[2,3]` submitted once: the first look's jobs and a planner job after them;
    the planner decides the cell from their results and submits the next look (and its own
    planner), which ends the study — every look's runs finished, no job left, and the report says
    the cell's decision and the runs it took."""
    import json
    import time

    from helpers import SHRINK

    env = {**real_slurm, "WANDB_MODE": "disabled"}
    sweep = write_sweep(tmp_path / "adaptive.yaml", {"a": {}, "b": {"finetune": ["weight_decay=0.02"]}})
    args = [str(sweep), *SHRINK, "adaptive.looks=[2,3]", "launcher=submitit", "launcher.cluster=slurm",
            "launcher.partition=cpu", "launcher.timeout_min=30"]  # fmt: skip
    out = tmp_path / "out"
    res = convexp("ablate", *args, outputs=out, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "submitted the next look's planner" in res.stdout
    deadline = time.monotonic() + 1500
    while _sh(env, "squeue", "-h", "-n", "convexp-adaptive", "-o", "%i").split():  # nobody watching
        assert time.monotonic() < deadline, _sh(env, "squeue")
        time.sleep(5)
    finished = sorted(p.parent.name for p in (out / "runs" / "finetune").glob("*/metrics.json"))
    report = convexp("report", *args[:1], *args[1:], "--no-figures", outputs=out, env=env)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    adaptive = json.loads((out / "reports" / "adaptive" / "report.json").read_text())["adaptive"]
    [cell] = adaptive["cells"]
    assert cell["decision"] != "open" and adaptive["fixed_runs"] == 6
    assert len(finished) == adaptive["runs"] == 2 * (cell["seeds"] if cell["look"] else 3)
    assert "Adaptive seeds: looks at 2, 3 seeds" in report.stdout
