"""`convexp -v` / `--quiet`: convexp's INFO lines through a rich handler; warnings always."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from convexp.logs import LIGHTNING, show_logs
from helpers import QUIET, TINY, convexp


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = root.level, list(root.handlers), {n: logging.getLogger(n).level for n in ("convexp", *LIGHTNING)}
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def test_verbose_shows_info_lines_and_quiet_only_warnings(capsys, restore_logging):
    log = logging.getLogger("convexp.tasks.classification.encoding")
    lightning = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    handler = show_logs(verbose=1)
    log.info("tokenised sst2 loaded from cache")
    log.debug("a debug line")
    err = capsys.readouterr().err
    assert "tokenised sst2 loaded from cache" in err and "INFO" in err and "a debug line" not in err

    logging.getLogger().removeHandler(handler)
    show_logs(quiet=True)
    log.info("an info line")
    lightning.info("GPU available: False")
    log.warning("no diagnostic (ax) split")
    err = capsys.readouterr().err
    assert "an info line" not in err and "GPU available" not in err
    assert "no diagnostic (ax) split" in err and "WARNING" in err


def test_verbose_and_quiet_together_is_one_clear_error(tmp_path):
    res = convexp("-v", "--quiet", "models", outputs=tmp_path, env=QUIET)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: -v/--verbose and --quiet contradict each other: pass one"
    ]


@pytest.mark.slow
def test_pretrain_with_v_shows_the_data_lines(tmp_path):
    args = ["pretrain", *TINY, "trainer.max_steps=2", "trainer.val_every_n_steps=2"]
    loud = convexp("-v", *args, outputs=tmp_path / "loud", env=QUIET)
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert "tokenizer" in loud.stderr and "packed" in loud.stderr, loud.stderr[-2000:]
    plain = convexp(*args, outputs=tmp_path / "plain", env=QUIET)
    assert plain.returncode == 0 and "packed" not in plain.stderr


def test_a_sweeps_worker_process_is_as_verbose_as_the_command_line(tmp_path, monkeypatch, restore_logging):
    """`convexp -v ablate ... launcher.workers=2`: each worker process (a fresh interpreter) applies
    the command line's -v / --quiet before it runs its node, as a SLURM job does (NodeJob)."""
    from convexp import logs, noise
    from convexp.sweep import execute as launchers  # pool_job: a worker runs one node

    seen = {}

    def node(stage, overrides):
        seen.update(chosen=logs.verbosity(), third_parties_quiet=noise.is_quiet())
        seen["lightning"] = logging.getLogger("pytorch_lightning").level

    monkeypatch.setattr(launchers, "run_node", node)
    monkeypatch.setattr(launchers.os, "dup2", lambda *a: None)  # the log file, not this test's output
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # nor this process's threads
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    monkeypatch.setattr(logs, "_CHOSEN", {})
    monkeypatch.setitem(noise._STATE, "quiet", False)
    assert launchers.pool_job("pretrain", [], str(tmp_path / "node.log"), 1, {"verbose": 0, "quiet": True}) is None
    assert seen == {"chosen": {"verbose": 0, "quiet": True}, "third_parties_quiet": True, "lightning": logging.WARNING}
    monkeypatch.setattr(logs, "_CHOSEN", {})
    launchers.pool_job("pretrain", [], str(tmp_path / "node.log"), 1, {"verbose": 1, "quiet": False})
    assert seen["chosen"] == {"verbose": 1, "quiet": False} and not seen["third_parties_quiet"]  # -v: all of it
