"""What the guides (docs/guides/) show a command doing, beyond composing it (tests/test_docs.py):
a fine-tune says how many runs it makes and why, a report takes other columns than its sweep
file's, a resumed run says where it resumes from."""

from __future__ import annotations

import types

import pytest


def _planned(task, seed, lr, epochs, finished=False):
    run = types.SimpleNamespace(finished=finished)
    return types.SimpleNamespace(task=task, seed=seed, hp={"lr": lr, "epochs": epochs, "batch_size": 32}, run=run)


def test_a_fine_tune_says_how_many_runs_a_grid_and_seeds_make():
    from convexp.tasks.classification.stage import runs_line

    grid = [_planned("rte", s, lr, e, finished=(s == 1)) for s in (1, 2, 3) for lr in (1e-4, 2e-4) for e in (3, 10)]
    assert runs_line(grid) == "12 runs: rte x 3 seeds x 4 settings (lr 2 x epochs 2); 4 finished, 8 to train"
    assert runs_line([_planned("sst2", 42, 1e-4, 3)]) == "1 run: sst2 x 1 seed; 0 finished, 1 to train"


def test_a_report_takes_other_columns_than_its_sweep_files():
    from convexp.report.build import _report_args
    from convexp.report.build import ReportError

    assert _report_args(["report.columns=[sst2.remaining_weights,sst2,diverged]"]) == (
        None, {"columns": ("sst2.remaining_weights", "sst2", "diverged")}
    )
    args, own = _report_args(["scale=smoke", "report.columns=[rte]"])
    assert args == ["scale=smoke"] and own == {"columns": ("rte",)}
    for bad in ("report.columns=rte", "report.columns=[]", "report.columns=[1,2]"):
        with pytest.raises(ReportError, match="give a list of report columns"):
            _report_args([bad])


def test_an_unknown_report_column_is_one_line(tmp_path):
    from helpers import convexp

    res = convexp("report", "bermo-distill", "report.columns=[nope]", outputs=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "report.columns: unknown report column 'nope'" in res.stderr


def test_a_resumed_run_says_where_it_resumes_from(tmp_path, capsys):
    from convexp.store.runs import Run

    run = Run(tmp_path / "r")
    (run.dir / "checkpoints").mkdir(parents=True)
    import torch

    torch.save({"global_step": 200}, run.dir / "checkpoints" / "step=200.ckpt")
    assert run.resume_checkpoint() == run.dir / "checkpoints" / "step=200.ckpt"
    assert capsys.readouterr().err == "resuming r from checkpoints/step=200.ckpt\n"
    assert run.last_checkpoint() is not None and capsys.readouterr().err == ""  # asked, not resumed: silent
