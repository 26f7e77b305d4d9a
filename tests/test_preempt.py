"""SLURM preemption: the time-limit signal checkpoints, records ``interrupted`` and requeues the
job; the requeued job (the same command) resumes the same run. No cluster: a fake SLURM
environment and a fake ``scontrol`` that records its arguments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import TINY, convexp, held_at_second_checkpoint, release, run_dirs

QUIET = {"WANDB_MODE": "disabled"}
STEPS = [
    *TINY,
    "trainer.max_steps=60",
    "trainer.checkpoint_every_n_steps=20",
    "trainer.val_every_n_steps=30",
    "trainer.deterministic=true",
]


def fake_slurm(tmp_path: Path) -> dict:
    """Environment of a SLURM job whose ``scontrol`` appends its arguments to scontrol.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    scontrol.chmod(0o755)
    return {"SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "WANDB_MODE": "offline"}


@pytest.mark.slow
def test_time_limit_signal_checkpoints_requeues_and_the_same_command_resumes(tmp_path):
    ref_out = tmp_path / "ref"
    res = convexp("pretrain", *STEPS, outputs=ref_out, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    [reference] = run_dirs(ref_out)

    out = tmp_path / "out"
    hold = tmp_path / "hold"  # held after its first checkpoint (20), before its second (40), until signalled
    proc = held_at_second_checkpoint(["pretrain", *STEPS], out, hold, fake_slurm(tmp_path), stderr=subprocess.PIPE, text=True)
    proc.send_signal(signal.SIGUSR1)  # SLURM's warning before the time limit (sbatch --signal=USR1@...)
    release(hold)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0, err[-3000:]
    [run] = run_dirs(out)
    assert run.name == reference.name  # the same run id with and without SLURM
    s = json.loads((run / "status.json").read_text())
    assert s["status"] == "interrupted", s
    assert not (run / "metrics.json").exists()
    assert (run / "checkpoints" / "last.ckpt").exists()
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]

    res = convexp("pretrain", *STEPS, outputs=out, env=fake_slurm(tmp_path / "again"))
    assert res.returncode == 0, res.stderr[-3000:]
    a = json.loads((reference / "metrics.json").read_text())
    b = json.loads((run / "metrics.json").read_text())
    assert b["steps"] == 60 and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-5)
    s = json.loads((run / "status.json").read_text())
    assert s["status"] == "finished" and [x["status"] for x in s["attempts"]] == ["interrupted", "finished"]
    assert not (tmp_path / "again" / "scontrol.log").exists()  # a finished run is not requeued
    # W&B offline: each attempt writes its own offline directory, both for the same W&B run id
    # (the run's id), so `wandb sync` resumes one W&B run instead of starting a second
    files = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2, files
    assert {f.stem.removeprefix("run-") for f in files} == {run.name}


def test_requeue_signal_must_name_a_signal(tmp_path):
    res = convexp("pretrain", *TINY, "trainer.requeue_signal=SIGNOPE", outputs=tmp_path, env=QUIET)
    assert res.returncode == 2 and "trainer.requeue_signal" in res.stderr and "Traceback" not in res.stderr


# ----------------------------------------------------------------------------- submitit job arrays


def test_a_submitit_node_job_resubmits_the_same_node():
    from submitit.helpers import Checkpointable

    from convexp.sweep.node_job import NodeJob

    job = NodeJob({"verbose": 1, "quiet": False})  # the submitting command line's -v
    overrides = ["scale=smoke", "trainer.max_steps=7"]
    again = job.checkpoint("pretrain", overrides)  # what submitit calls at the time-limit signal
    assert isinstance(again.function, NodeJob) and isinstance(again.function, Checkpointable)
    assert again.args == ("pretrain", overrides) and again.kwargs == {}
    assert again.function.chosen == {"verbose": 1, "quiet": False}  # the requeued job is as verbose


@pytest.mark.slow
def test_submitit_job_warned_of_its_time_limit_checkpoints_and_is_requeued(tmp_path):
    """submitit's local executor restarts a job that its handler requeued (exit 144), as SLURM does
    with ``scontrol requeue``: the restarted job resumes the run from the checkpoint of the step the
    signal arrived in, and the sweep records it done."""
    from helpers import SHRINK, statuses, write_sweep

    sweep = write_sweep(tmp_path / "sub.yaml", {"a": {}}, finetune=False)
    args = [
        str(sweep),
        *SHRINK,
        "pretrain.trainer.max_steps=80",
        "pretrain.trainer.checkpoint_every_n_steps=20",
        "pretrain.trainer.val_every_n_steps=40",
        "launcher=submitit",
        "launcher.cluster=local",
        "launcher.timeout_min=30",
    ]
    out = tmp_path / "out"
    hold = tmp_path / "hold"  # the job held between its first and second checkpoints until signalled
    proc = held_at_second_checkpoint(["ablate", *args], out, hold, QUIET, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)  # fmt: skip
    [run] = run_dirs(out)
    job_pid = json.loads((run / "lock").read_text())["pid"]  # the job's process holds the run's lock
    os.kill(job_pid, signal.SIGUSR2)  # submitit's time-limit warning
    release(hold)
    stdout, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout[-3000:]
    assert statuses(out, "sub") == {"pretrain/a": "done"}
    s = json.loads((run / "status.json").read_text())
    assert [a["status"] for a in s["attempts"]] == ["interrupted", "finished"], s
    assert "requeued by the job runner" in s["attempts"][0]["error"]
    assert json.loads((run / "metrics.json").read_text())["steps"] == 80
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 80
