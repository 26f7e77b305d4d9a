"""The default output of a run: 80 columns, no third-party announcement that asks nothing of the user."""

import logging
import re
import unicodedata
import warnings

import pytest
from helpers import TINY, convexp

from convexp import noise


def columns(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def test_quiet_drops_the_named_announcements_and_keeps_other_warnings(monkeypatch):
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))  # restored after the test
    levels = {name: logging.getLogger(name).level for name in noise.LOGGERS}
    try:
        noise.quiet()
        assert all(logging.getLogger(name).getEffectiveLevel() == logging.WARNING for name in noise.LOGGERS)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            noise.quiet()  # the filters go in front of catch_warnings' "default"
            warnings.warn("GPU available but not used. You can set it by doing `Trainer(accelerator='gpu')`.")
            warnings.warn("The 'val_dataloader' does not have many workers which may be a bottleneck.")
            warnings.warn("Checkpoint directory /o/runs/pretrain/x/checkpoints exists and is not empty.")
            warnings.warn("a warning no entry names")  # kept
        assert [str(w.message) for w in caught] == ["a warning no entry names"]
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_verbose_keeps_everything(monkeypatch):
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    before = list(warnings.filters)
    noise.quiet(verbose=True)
    assert warnings.filters == before


def test_a_cpu_run_on_a_gpu_host_says_so(monkeypatch):
    import torch
    from omegaconf import OmegaConf

    from convexp.train.accel import cpu_on_gpu_host

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    line = cpu_on_gpu_host(OmegaConf.create({"accelerator": "cpu"}))
    assert "trainer.accelerator=gpu" in line and columns(line) <= 100
    assert cpu_on_gpu_host(OmegaConf.create({"accelerator": "auto"})) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cpu_on_gpu_host(OmegaConf.create({"accelerator": "cpu"})) is None


def login_node(tmp_path) -> dict:
    """The PATH of a SLURM login node: an ``srun`` on it (a stand-in that is never run), no job."""
    import os

    bin_dir = tmp_path / "login-bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


SLURM_NOISE = ("srun", "SLURM")


@pytest.mark.slow
def test_smoke_pretraining_output_fits_80_columns_without_announcements(tmp_path):
    """On a SLURM login node (srun on PATH, outside a job) too: no line about srun or SLURM."""
    res = convexp("pretrain", *TINY, "trainer.max_steps=6", "trainer.val_every_n_steps=3", outputs=tmp_path,
                  env={**login_node(tmp_path), "WANDB_MODE": "offline", "COLUMNS": "80"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    for noise_line in ("GPU available", "TPU available", "litlogger", "LeafSpec", "infer the `batch_size`",
                       "`Trainer.fit` stopped", "v_num", "wandb:", *SLURM_NOISE):  # fmt: skip
        assert noise_line not in out, noise_line
    # (a line naming the run directory is as long as the outputs folder's path: a temporary one here)
    assert all(columns(line.replace(str(tmp_path), "outputs")) <= 80 for line in out.splitlines()), out
    # a plain progress line (stdout is not a terminal) with the loss, then the end
    assert re.search(r"^step 6/6 100% loss \d+\.\d+ ", res.stdout, flags=re.M) and "finished:" in res.stdout, res.stdout
    assert res.stdout.splitlines()[0] == "threads: 1 (OMP_NUM_THREADS; set trainer.threads=N)"
    assert "W&B: offline (WANDB_MODE)" in res.stderr  # its one line
    assert "`wandb sync RUN/wandb/offline-run-*`" in res.stderr and list((tmp_path / "runs").glob("pretrain/*/wandb/offline-run-*"))


@pytest.mark.slow
def test_smoke_fine_tuning_on_a_login_node_says_nothing_of_srun(tmp_path):
    from helpers import write_vocab

    vocab = write_vocab(tmp_path / "vocab.txt", ["the", "a", "is", "not"])
    res = convexp("finetune", "glue", "scale=smoke", "init=none", "model=bert_small", f"tokenizer_path={vocab}",
                  "task=rte", "glue.synthetic_size=64",
                  "epochs=1", "batch_size=16", "task.max_len=32", outputs=tmp_path,
                  env={**login_node(tmp_path), "WANDB_MODE": "disabled", "COLUMNS": "80"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    assert not [line for line in out.splitlines() if any(word in line for word in SLURM_NOISE)], out


def test_the_srun_warning_is_silenced_outside_a_slurm_job_only(monkeypatch):
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    srun = "The `srun` command is available on your system but is not used. HINT: If your intention is ..."
    for job, kept in ((None, []), ("812", [srun])):
        if job:
            monkeypatch.setenv("SLURM_JOB_ID", job)
        else:
            monkeypatch.delenv("SLURM_JOB_ID", raising=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            noise.quiet()
            warnings.warn(srun)
        assert [str(w.message) for w in caught] == kept


def test_threads_auto_is_the_usable_cores_or_omp_num_threads(monkeypatch):
    import torch
    from omegaconf import OmegaConf

    from convexp.train import accel

    n = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(accel, "usable_cores", lambda: 3)
        assert accel.set_threads(OmegaConf.create({"threads": "auto"})).startswith("threads: 3 (the physical cores")
        assert accel.set_threads(OmegaConf.create({"threads": "auto"})).startswith("threads: 3 (the physical cores")
        assert torch.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice wins over auto
        assert accel.set_threads(OmegaConf.create({"threads": "auto"})).startswith("threads: 2 (OMP_NUM_THREADS")
        assert accel.set_threads(OmegaConf.create({"threads": 1})).startswith("threads: 1 (trainer.threads")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(n)
    monkeypatch.undo()
    assert 1 <= accel.usable_cores() <= (torch.multiprocessing.cpu_count() if hasattr(torch, "multiprocessing") else 1024)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
def test_bad_threads_is_one_line(tmp_path, value):
    from typer.testing import CliRunner

    from convexp.cli import app

    res = CliRunner().invoke(app, ["pretrain", f"trainer.threads={value}", f"outputs={tmp_path}", "--cfg"])
    assert res.exit_code == 2 and "trainer.threads" in res.output and "Traceback" not in res.output


def test_the_gpu_host_note_comes_with_the_threads_line(monkeypatch, capsys):
    import torch
    from omegaconf import OmegaConf

    from convexp.train import accel

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(accel, "_THREADS_SAID", [])
    threads = torch.get_num_threads()
    try:
        accel.set_threads(OmegaConf.create({"accelerator": "cpu", "threads": 1}))
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr()
    assert "trainer.accelerator=gpu" in out.err and out.out.startswith("threads: 1")
