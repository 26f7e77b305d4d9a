"""Nothing lost, nothing pretended: run status and attempts, one writer per run, divergence,
checkpoint fallback, CSV logs across a resume, Ctrl-C."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY, convexp, held_at_second_checkpoint, held_in_phase, kill_between_checkpoints, release, run_dirs

from convexp.store.runs import Run, RunDiverged, RunLocked

QUIET = {"WANDB_MODE": "disabled"}


def status(run: Path | Run) -> dict:
    return json.loads(((run.dir if isinstance(run, Run) else run) / "status.json").read_text())


# ----------------------------------------------------------------------------- status lifecycle


def test_status_transitions_and_attempt_history(tmp_path):
    run = Run(tmp_path / "r")
    with pytest.raises(ValueError):
        with run.attempt(stage="pretrain"):
            assert status(run)["status"] == "running"
            raise ValueError("bad thing\nsecond line")
    s = status(run)
    assert s["status"] == "failed" and s["error"] == "ValueError: bad thing" and s["stage"] == "pretrain"
    # a killed attempt (running, never ended) left half a finishing step behind
    run.set_status("running", attempts=[*s["attempts"], {"started": "t", "status": "running", "pid": 1}])
    (run.dir / "model").mkdir()
    run.write_json("metrics.json", {"val_loss": 1.0})
    assert not run.finished
    with run.attempt(stage="pretrain") as started:
        assert started
        assert not (run.dir / "model").exists() and not (run.dir / "metrics.json").exists()
        assert "error" not in status(run)
        run.finish({"val_loss": 2.0})
    s = status(run)
    assert s["status"] == "finished" and "error" not in s and run.finished
    assert [a["status"] for a in s["attempts"]] == ["failed", "failed", "finished"]
    assert "killed" in s["attempts"][1]["error"]
    assert s["attempts"][0]["error"] == "ValueError: bad thing"
    assert all({"started", "ended", "host", "pid"} <= a.keys() for a in (s["attempts"][0], s["attempts"][2]))
    # a finished run: a later attempt (e.g. after waiting for the lock) does nothing
    with run.attempt() as started:
        assert not started
    assert status(run)["attempts"] == s["attempts"]


def test_non_finite_result_is_diverged_not_finished(tmp_path):
    run = Run(tmp_path / "r")
    with pytest.raises(RunDiverged, match="dev.accuracy=nan"):
        with run.attempt():
            run.finish({"dev": {"accuracy": float("nan")}, "steps": 3})
    s = status(run)
    assert s["status"] == "diverged" and not run.finished and not (run.dir / "metrics.json").exists()


def test_a_finished_run_with_nan_metrics_is_not_reused(tmp_path):
    run = Run(tmp_path / "r")
    run.set_status("finished")
    (run.dir / "metrics.json").write_text('{"val_loss": NaN}')  # written before divergence was checked
    assert not run.finished
    run.write_json("metrics.json", {"val_loss": 1.5})
    assert run.finished


def test_interrupt_is_recorded_and_the_next_attempt_clears_it(tmp_path):
    run = Run(tmp_path / "r")
    with pytest.raises(SystemExit) as exit_:
        with run.attempt():
            raise KeyboardInterrupt
    assert exit_.value.code == 130
    assert status(run)["status"] == "interrupted" and "SIGINT" in status(run)["error"]
    with run.attempt():
        run.finish({"x": 1})
    s = status(run)
    assert s["status"] == "finished" and "error" not in s
    assert [a["status"] for a in s["attempts"]] == ["interrupted", "finished"]


# ----------------------------------------------------------------------------- divergence


def _step(health, trainer, optimizer, loss: float, grad: float) -> None:
    """One optimiser step as Lightning calls the callback: backward, then before the update."""
    for p in optimizer.param_groups[0]["params"]:
        p.grad = torch.full_like(p, grad)
    health.on_before_backward(trainer, None, torch.tensor(loss))
    health.on_before_optimizer_step(trainer, None, optimizer)
    trainer.global_step += 1


def test_amp_skipped_steps_are_tolerated_up_to_the_patience():
    from types import SimpleNamespace

    from convexp.train.health import Health

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.5)
    amp = SimpleNamespace(global_step=0, precision_plugin=SimpleNamespace(scaler=object()))
    health = Health(patience=2)
    _step(health, amp, opt, 2.0, 0.1)
    _step(health, amp, opt, 2.0, float("inf"))  # overflow: the scaler skips the step
    _step(health, amp, opt, 2.0, float("inf"))
    _step(health, amp, opt, 1.5, 0.1)  # healthy again: the count restarts
    _step(health, amp, opt, float("nan"), float("nan"))
    _step(health, amp, opt, float("nan"), float("nan"))
    with pytest.raises(RunDiverged, match="non-finite loss at step 7") as e:
        _step(health, amp, opt, float("nan"), float("nan"))
    assert e.value.info["last_finite_loss"] == 1.5 and e.value.info["lr"] == 0.5
    # without a gradient scaler nothing skips the update: the first bad step is the divergence
    fp32 = SimpleNamespace(global_step=0, precision_plugin=SimpleNamespace())
    health = Health(patience=5)
    _step(health, fp32, opt, 2.0, 0.1)
    with pytest.raises(RunDiverged, match="non-finite gradient norm at step 2"):
        _step(health, fp32, opt, 2.0, float("inf"))


def test_the_device_check_reads_every_n_steps_and_before_every_checkpoint():
    """A GPU run keeps the check on the device (check_every = log_every_n_steps): a non-finite step
    is caught at the next read, reported as the first bad step, and no checkpoint of it is saved."""
    from types import SimpleNamespace

    from convexp.train.health import Health

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.5)
    trainer = SimpleNamespace(global_step=0, precision_plugin=SimpleNamespace(), max_steps=100, optimizers=[opt],
                              callback_metrics={})
    health = Health(check_every=4)
    _step(health, trainer, opt, 2.0, 0.1)
    _step(health, trainer, opt, 1.5, 0.1)
    health.on_save_checkpoint(trainer, None, {})  # healthy so far: saved
    _step(health, trainer, opt, float("nan"), 0.1)  # step 3: not read yet
    with pytest.raises(RunDiverged, match="step 3"):
        health.on_save_checkpoint(trainer, None, {})  # a checkpoint now would hold step 3
    with pytest.raises(RunDiverged, match="step 3") as e:
        _step(health, trainer, opt, 1.0, float("inf"))  # step 4: the periodic read
    assert e.value.info["last_finite_loss"] == 1.5 and e.value.info["step"] == 3
    healthy = Health(check_every=4)
    for _ in range(8):
        _step(healthy, trainer, opt, 1.0, 0.1)
    assert healthy.last_finite_loss == 1.0
    healthy.on_train_end(trainer, None)  # nothing to report


# ----------------------------------------------------------------------------- one writer per run

HOLD = """
import sys, time
from pathlib import Path
from convexp.store.runs import Run
with Run(Path(sys.argv[1])).exclusive():
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_refuses_a_second_writer(tmp_path):
    run = Run(tmp_path / "r")
    proc = _holder(run.dir, 30)
    try:
        assert f"pid {proc.pid}" in run.locked_by()
        with pytest.raises(RunLocked, match=f"pid {proc.pid}"):
            with run.attempt():
                pass
        assert not (run.dir / "status.json").exists()  # the refused command recorded nothing
    finally:
        proc.kill()
        proc.wait()
    assert run.locked_by() is None  # the holder died: its lock is gone


def test_waiting_for_the_holder_then_taking_the_lock(tmp_path):
    run = Run(tmp_path / "r")
    proc = _holder(run.dir, 1.0)
    with run.exclusive(wait=30):
        assert json.loads((run.dir / "lock").read_text())["pid"] == os.getpid()
    proc.wait()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    run = Run(tmp_path / "r")
    run.dir.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (run.dir / "lock").write_text(json.dumps({"host": "vm", "pid": int(dead.stdout), "since": "then"}))
    assert run.locked_by() is None
    with run.attempt():
        assert json.loads((run.dir / "lock").read_text())["pid"] == os.getpid()
        run.finish({"x": 1})


# ----------------------------------------------------------------------------- checkpoints


def test_a_truncated_last_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, capsys):
    run = Run(tmp_path / "r")
    run.checkpoints.mkdir(parents=True)
    for step in (10, 20, 30):
        torch.save({"global_step": step}, run.checkpoints / f"step={step}.ckpt")
    torch.save({"global_step": 40}, run.checkpoints / "last.ckpt")
    data = (run.checkpoints / "last.ckpt").read_bytes()
    (run.checkpoints / "last.ckpt").write_bytes(data[: len(data) // 2])
    (run.checkpoints / "step=30.ckpt").write_bytes(b"")  # an empty file, e.g. a full disk
    assert run.last_checkpoint() == run.checkpoints / "step=20.ckpt"
    assert run.resume_checkpoint() == run.checkpoints / "step=20.ckpt"
    err = capsys.readouterr().err
    assert "last.ckpt is truncated or corrupt" in err and "step=30.ckpt is truncated" in err
    assert (run.checkpoints / "last.ckpt.corrupt").exists() and not (run.checkpoints / "last.ckpt").exists()


# ----------------------------------------------------------------------------- end to end

STEPS = [
    *TINY,
    "data.val_docs=24",  # 3 validation batches of 8 (ELECTRA's examples: one a synthetic document)
    "trainer.max_steps=60",
    "trainer.checkpoint_every_n_steps=20",
    "trainer.val_every_n_steps=30",
    "trainer.deterministic=true",
]


def csv_rows(run: Path) -> list[dict]:
    with open(run / "csv" / "metrics.csv", newline="") as f:
        return [
            {k: v for k, v in r.items() if v != "" and "tokens_per_s" not in k} for r in csv.DictReader(f)
        ]


def assert_same_rows(reference: Path, run: Path) -> None:
    """The run logged the reference's rows: same steps, same metrics, same values."""
    ref_rows, rows = csv_rows(reference), csv_rows(run)
    assert [(r["step"], sorted(r)) for r in rows] == [(r["step"], sorted(r)) for r in ref_rows]
    for r, q in zip(ref_rows, rows):
        for k in r:
            assert float(q[k]) == pytest.approx(float(r[k]), rel=1e-5), (r["step"], k)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 60-step run (checkpoints at 20, 40, 60; validations at 30, 60)."""
    out = tmp_path_factory.mktemp("ref")
    res = convexp("pretrain", *STEPS, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = run_dirs(out)
    return run


@pytest.mark.slow
def test_killed_run_with_truncated_last_ckpt_resumes_and_logs_every_step_once(tmp_path, reference):
    kill_between_checkpoints(["pretrain", *STEPS], tmp_path, tmp_path / "hold", env=QUIET)  # after step 20
    [run] = run_dirs(tmp_path)
    assert not (run / "metrics.json").exists()
    last = run / "checkpoints" / "last.ckpt"  # a link to step=20.ckpt: made a truncated file of its own
    whole = last.read_bytes()
    last.unlink()
    last.write_bytes(whole[:1000])

    res = convexp("pretrain", *STEPS, outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "last.ckpt is truncated or corrupt" in res.stderr
    a, b = (
        json.loads((reference / "metrics.json").read_text()),
        json.loads((run / "metrics.json").read_text()),
    )
    assert b["steps"] == 60 and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-5)
    ref_rows, rows = csv_rows(reference), csv_rows(run)
    assert [r["step"] for r in rows] == [r["step"] for r in ref_rows]  # every step once, in order
    for r, q in zip(ref_rows, rows):
        assert r.keys() == q.keys()
        for k in r:
            assert float(q[k]) == pytest.approx(float(r[k]), rel=1e-5), (r["step"], k)
    s = status(run)
    assert s["status"] == "finished" and [x["status"] for x in s["attempts"]] == ["failed", "finished"]


@pytest.mark.slow
def test_crash_between_training_and_metrics_is_redone_with_the_last_validation(tmp_path, reference):
    """last.ckpt (step 60) is written before the validation at step 60: a crash after training
    leaves status running, a model dir and no metrics; the next command redoes the validation."""
    import shutil

    out = tmp_path / "o"
    shutil.copytree(reference.parent.parent.parent, out)
    [run] = run_dirs(out)
    (run / "metrics.json").unlink()
    shutil.rmtree(run / "hf")
    s = status(run)
    s["status"] = "running"
    s["attempts"][-1].update(status="running", ended=None)
    (run / "status.json").write_text(json.dumps(s))

    res = convexp("pretrain", *STEPS, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = (
        json.loads((reference / "metrics.json").read_text()),
        json.loads((run / "metrics.json").read_text()),
    )
    assert b["steps"] == 60 and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-6)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-6)
    assert (run / "hf" / "config.json").exists() and status(run)["status"] == "finished"


# Runs `convexp ARGS` with one step made to stop half-way (marker file, then sleep) so that the
# test can SIGKILL it there: inside the Hugging Face export (its temporary directory written, not
# renamed), inside writing metrics.json (its temporary file half written), or inside a periodic
# validation (validation#N: the N-th, at its first batch).
PAUSED = """
import os, sys, tempfile, time
from pathlib import Path

phase, marker, *args = sys.argv[1:]


def pause(until=lambda: False):  # tell the test, then wait for the kill (or until SIGTERM came)
    Path(marker).touch()
    deadline = time.time() + 600
    while time.time() < deadline and not until():
        time.sleep(0.05)


if phase == "export":
    import convexp.models.hf_export as hf

    real_export = hf.export_hf

    def export_hf(*a, **k):
        real_export(*a, **k)
        pause()

    hf.export_hf = export_hf
if phase == "metrics":
    from convexp.store.runs import Run

    real_write = Run.write_json

    def write_json(self, name, data):
        if name == "metrics.json":
            fd, _ = tempfile.mkstemp(dir=self.dir, prefix=".metrics.json.")
            os.write(fd, b'{"steps": ')
            pause()
        real_write(self, name, data)

    Run.write_json = write_json
if phase.startswith("validation#"):  # the N-th periodic validation of this process, in flight
    from convexp.train.health import Health

    nth, seen = int(phase.split("#")[1]), []

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if batch_idx == 0:
            seen.append(trainer.global_step)
            if len(seen) == nth:
                pause(lambda: trainer.received_sigterm)

    Health.on_validation_batch_start = on_validation_batch_start
sys.argv = ["convexp", *args]
from convexp.cli import main

main()
"""


def kill_paused(phase: str, args: list[str], out: Path, sig: int = signal.SIGKILL) -> int:
    """Run `convexp ARGS` paused at ``phase`` (see PAUSED) and send it ``sig`` there; its exit code."""
    marker = out.parent / f"paused-{out.name}"
    env = {**os.environ, "CONVEXP_OUTPUTS": str(out), **QUIET}
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED, phase, str(marker), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not marker.exists() and proc.poll() is None:
        time.sleep(0.02)
    assert marker.exists(), f"{phase} was never reached"
    proc.send_signal(sig)
    return proc.wait(timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["export", "metrics"])
def test_sigkill_while_finishing_is_found_and_redone(tmp_path, reference, phase):
    out = tmp_path / "o"
    kill_paused(phase, ["pretrain", *STEPS], out)
    [run] = run_dirs(out)
    assert status(run)["status"] == "running" and not (run / "metrics.json").exists()
    half = list(run.glob(".tmp-hf-*" if phase == "export" else ".metrics.json.*"))
    assert half, sorted(p.name for p in run.iterdir())

    res = convexp("pretrain", *STEPS, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = (
        json.loads((reference / "metrics.json").read_text()),
        json.loads((run / "metrics.json").read_text()),
    )
    assert b["steps"] == 60 and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-6)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-6)
    assert (run / "hf" / "config.json").exists() and (run / "model").is_dir()
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")]  # half-written files removed
    s = status(run)
    assert s["status"] == "finished" and [x["status"] for x in s["attempts"]] == ["failed", "finished"]
    assert [r["step"] for r in csv_rows(run)] == [r["step"] for r in csv_rows(reference)]


@pytest.mark.slow
def test_pretrain_divergence_is_recorded_and_exits_non_zero(tmp_path):
    res = convexp(
        "pretrain",
        *TINY,
        "optim.lr=1e6",
        "trainer.max_steps=30",
        "trainer.checkpoint_every_n_steps=1",
        outputs=tmp_path,
        env=QUIET,
    )
    assert res.returncode != 0
    lines = [line for line in res.stderr.splitlines() if line.strip() and "━" not in line]
    assert lines[-1].startswith("error: training diverged: non-finite") and "Traceback" not in res.stderr
    [run] = run_dirs(tmp_path)
    s = status(run)
    assert s["status"] == "diverged" and s["diverged"]["step"] >= 1 and s["diverged"]["lr"] > 0
    assert s["diverged"]["last_finite_loss"] is not None
    assert not (run / "model").exists() and not (run / "metrics.json").exists()
    # the checkpoints kept are healthy: the last one is of the step before the divergence
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == s["diverged"]["step"] - 1
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


@pytest.mark.slow
def test_finetune_divergence_is_recorded_and_exits_non_zero(tmp_path, pretrained):
    res = convexp(
        "finetune",
        "glue",
        "task=rte",
        f"init={pretrained}",
        "scale=smoke",
        "glue.synthetic_size=160",
        "epochs=1",
        "batch_size=16",
        "task.max_len=48",
        "lr=1e6",
        outputs=tmp_path,
        env=QUIET,
    )
    assert res.returncode != 0 and "diverged" in res.stderr and "Traceback" not in res.stderr, res.stderr[
        -2000:
    ]
    [run] = (tmp_path / "runs" / "finetune").glob("*")
    assert status(run)["status"] == "diverged" and not (run / "metrics.json").exists()
    assert not (run / "model").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code, name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_ctrl_c_or_sigterm_is_interrupted_and_the_resume_clears_it(tmp_path, sig, code, name):
    args = [
        *TINY,
        "trainer.max_steps=400",
        "trainer.checkpoint_every_n_steps=20",
        "trainer.val_every_n_steps=200",
    ]
    # held after its first checkpoint (step 20), before its second, until signalled: it cannot finish first
    hold = tmp_path / "hold"
    proc = held_at_second_checkpoint(["pretrain", *args], tmp_path, hold, QUIET, stderr=subprocess.PIPE, text=True)
    proc.send_signal(sig)
    release(hold)  # SIGTERM stops at the end of the step (SIGINT already has)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err and "interrupted:" in err
    [run] = run_dirs(tmp_path)
    s = status(run)
    assert (
        s["status"] == "interrupted" and name in s["error"] and (run / "checkpoints" / "last.ckpt").exists()
    )

    res = convexp("pretrain", *args, outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    s = status(run)
    assert s["status"] == "finished" and "error" not in s
    assert [a["status"] for a in s["attempts"]] == ["interrupted", "finished"]


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["data", "forward", "backward", "optimizer", "checkpoint", "validation"])
def test_ctrl_c_in_any_phase_of_a_step_is_never_lost(tmp_path, phase):
    """SIGINT while the run is held inside one phase of a step, its KeyboardInterrupt swallowed
    there (as a finalizer or a library's ``except BaseException`` would): the run still stops,
    recorded ``interrupted``, exit 130, no traceback, never finished."""
    args = [*TINY, "trainer.max_steps=400", "trainer.checkpoint_every_n_steps=10", "trainer.val_every_n_steps=10"]
    hold = tmp_path / "hold"
    proc = held_in_phase(["pretrain", *args], tmp_path, hold, phase, QUIET, stderr=subprocess.PIPE, text=True)
    proc.send_signal(signal.SIGINT)
    while not (hold / "swallowed").exists() and proc.poll() is None:  # the signal landed in the phase
        time.sleep(0.01)
    release(hold)
    _, err = proc.communicate(timeout=120)
    assert (hold / "swallowed").read_text() == phase
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted:" in err, err[-2000:]
    [run] = run_dirs(tmp_path)
    s = status(run)
    assert s["status"] == "interrupted" and "SIGINT" in s["error"] and not (run / "metrics.json").exists()


@pytest.mark.slow
def test_two_identical_commands_train_once(tmp_path):
    args = [*TINY, "trainer.max_steps=40", "trainer.val_every_n_steps=20"]
    env = {**os.environ, "CONVEXP_OUTPUTS": str(tmp_path), **QUIET}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "convexp.cli", "pretrain", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    [run] = run_dirs(tmp_path)
    assert status(run)["status"] == "finished" and len(status(run)["attempts"]) == 1
    assert codes[0] == 0, outs
    if codes[1] == 2:  # refused while the other trained: one line naming the holder
        err = next(e for (o, e), p in zip(outs, procs) if p.returncode == 2)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "is being written by host" in lines[0] and "pid" in lines[0]
    else:  # it took the lock after the other had finished
        assert codes[1] == 0 and any("already finished" in o for o, _ in outs)
    rows = csv_rows(run)
    assert len({r["step"] for r in rows if "train/loss" in r}) == len([r for r in rows if "train/loss" in r])


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint_every", [25, 30])
def test_a_validation_killed_in_flight_is_redone_once(tmp_path, checkpoint_every):
    """Killed inside the periodic validation at step 60: with checkpoints every 30 steps the newest
    one (step 60) was saved just before that validation (Lightning would count it as done); with
    every 25, steps 51-60 are redone. Either way the resumed run logs the validation at 60 once,
    with the uninterrupted value, and every other row once."""
    args = [
        *TINY,
        "trainer.max_steps=90",
        f"trainer.checkpoint_every_n_steps={checkpoint_every}",
        "trainer.val_every_n_steps=30",
        "trainer.deterministic=true",
    ]
    ref = tmp_path / "ref"
    res = convexp("pretrain", *args, outputs=ref, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "o"
    kill_paused("validation#2", ["pretrain", *args], out)  # at step 60
    [run] = run_dirs(out)
    assert not any("val/loss" in r and r["step"] == "59" for r in csv_rows(run))  # killed before its row
    res = convexp("pretrain", *args, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    [reference] = run_dirs(ref)
    assert_same_rows(reference, run)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, run))
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_sigterm_inside_a_validation_resumes_to_the_uninterrupted_rows(tmp_path, reference):
    """SIGTERM inside the validation at step 30 (Lightning stops after its first batch): the
    checkpoint is the end of step 30, and the resumed run runs that validation whole, once,
    logged at its own step."""
    out = tmp_path / "o"
    assert kill_paused("validation#1", ["pretrain", *STEPS], out, signal.SIGTERM) == 143
    [run] = run_dirs(out)
    s = status(run)
    assert s["status"] == "interrupted" and "SIGTERM after step 30" in s["error"], s
    res = convexp("pretrain", *STEPS, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_rows(reference, run)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, run))
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_a_diverged_run_in_a_sweep_is_reported_and_never_reused(tmp_path):
    from helpers import SHRINK, ledger, statuses, write_sweep

    sweep = write_sweep(tmp_path / "div.yaml", {"a": {}})
    args = ["ablate", str(sweep), *SHRINK, "finetune.lr=1e6"]  # the fine-tuning's loss becomes NaN
    out = tmp_path / "out"
    res = convexp(*args, outputs=out, env=QUIET)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert statuses(out, "div") == {"pretrain/a": "done", "finetune/a/rte/s42": "diverged"}
    assert "1 diverged" in res.stdout and "diverged: finetune/a/rte/s42: " in res.stdout
    [run] = (out / "runs" / "finetune").glob("*")
    first = status(run)
    assert first["status"] == "diverged" and not (run / "metrics.json").exists()

    res = convexp(*args, outputs=out, env=QUIET)  # the same sweep again: not reused, not re-run
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert statuses(out, "div") == {"pretrain/a": "cached", "finetune/a/rte/s42": "diverged"}
    assert f"delete {run}" in ledger(out, "div")["nodes"]["finetune/a/rte/s42"]["error"]
    assert status(run) == first


@pytest.mark.slow
def test_sigterm_checkpoints_the_step_it_stopped_at_and_the_resume_matches(tmp_path, reference):
    hold = tmp_path / "hold"
    proc = held_at_second_checkpoint(["pretrain", *STEPS], tmp_path, hold, QUIET, stderr=subprocess.PIPE, text=True)
    proc.send_signal(signal.SIGTERM)
    release(hold)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    [run] = run_dirs(tmp_path)
    s = status(run)
    assert s["status"] == "interrupted" and "SIGTERM after step" in s["error"], s
    step = int(s["error"].split("after step ")[1].split()[0])
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == step == 40  # the step the signal came in (held before its checkpoint)
    assert not (run / "checkpoints" / "last.ckpt.partial").exists()

    res = convexp("pretrain", *STEPS, outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, run))
    assert b["steps"] == 60 and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-5)
    assert_same_rows(reference, run)


@pytest.mark.slow
def test_a_fine_tuning_validation_killed_in_flight_is_redone_once(tmp_path, pretrained):
    """Killed inside the validation at the end of epoch 2 of 3 (checkpoints every half epoch):
    the resumed run logs that epoch's dev scores once, as an uninterrupted run does."""
    args = [
        "finetune",
        "glue",
        "task=rte",
        f"init={pretrained}",
        "scale=smoke",
        "glue.synthetic_size=160",
        "epochs=3",
        "batch_size=16",
        "task.max_len=48",
    ]
    ref, out = tmp_path / "ref", tmp_path / "o"
    res = convexp(*args, outputs=ref, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    kill_paused("validation#2", args, out)
    res = convexp(*args, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    [reference], [run] = ((d / "runs" / "finetune").glob("*") for d in (ref, out))
    assert len([r for r in csv_rows(reference) if "val/accuracy" in r]) == 3
    assert_same_rows(reference, run)
    assert status(run)["attempts"][0]["status"] == "failed"  # it was killed
