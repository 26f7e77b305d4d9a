"""convexp on Lightning's public APIs: the CSV logger (a `Logger`), time-bounded checkpoints
(the `on_save_checkpoint` hook), the steps progress bar, SLURM's cluster environment with
auto-requeue off; the one private thing left, the checkpoint loop state, behind a version check."""

from __future__ import annotations

import csv
import logging
import tomllib
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from packaging.specifiers import SpecifierSet
from packaging.requirements import Requirement
from torch.utils.data import DataLoader, TensorDataset

from convexp.train.common import cluster_plugins
from convexp.train.health import LOOP_STATE_MINORS, Health, fit, fit_loop_state
from convexp.train.metrics_csv import AppendingCSVLogger
from convexp.train.progress import StepProgressBar

ROOT = Path(__file__).resolve().parent.parent


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(tmp_path: Path, max_steps: int, **kw) -> pl.Trainer:
    return pl.Trainer(
        max_steps=max_steps,
        val_check_interval=3,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        logger=AppendingCSVLogger(tmp_path / "csv"),
        callbacks=[
            pl.callbacks.ModelCheckpoint(
                dirpath=str(tmp_path / "ckpt"), filename="{step}", every_n_train_steps=2, save_top_k=-1
            ),
            Health(),
            *kw.pop("callbacks", []),
        ],
        enable_model_summary=False,
        accelerator="cpu",
        **kw,
    )


def data():
    return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)


def rows(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    with open(path / "csv" / "metrics.csv", newline="") as f:
        return [(r["step"], tuple(sorted(k for k in r if r[k] and k != "step"))) for r in csv.DictReader(f)]


def test_csv_logger_keeps_rows_across_a_resume_each_step_once(tmp_path):
    torch.manual_seed(0)
    ref = tmp_path / "ref"
    fit(trainer(ref, 8, enable_progress_bar=False), Tiny(), train_dataloaders=data(), val_dataloaders=data())

    torch.manual_seed(0)
    run = tmp_path / "run"
    fit(trainer(run, 5, enable_progress_bar=False), Tiny(), train_dataloaders=data(), val_dataloaders=data())
    assert rows(run)[-1][0] == "4"  # steps 1..5 logged (as 0..4), a validation after step 3
    ckpt = run / "ckpt" / "step=4.ckpt"  # "killed" after step 5: resumed from step 4, step 5 redone
    checkpoint = torch.load(ckpt, weights_only=False)
    assert fit_loop_state(checkpoint), "this Lightning's checkpoint has a loop state convexp cannot edit"
    fit(
        trainer(run, 8, enable_progress_bar=False),
        Tiny(),
        train_dataloaders=data(),
        val_dataloaders=data(),
        ckpt_path=str(ckpt),
    )
    assert rows(run) == rows(ref)  # earlier rows kept, redone ones once, new columns merged
    assert [s for s, keys in rows(run) if "val/loss" in keys] == ["2", "5"]


def test_loop_state_is_edited_only_for_the_lightning_minors_it_is_known_for(caplog):
    known = {"pytorch-lightning_version": f"{LOOP_STATE_MINORS[0]}.0", "loops": {"fit_loop": {"k": 1}}}
    running = ".".join(pl.__version__.split(".")[:2])
    assert fit_loop_state(known) == ({"k": 1} if running in LOOP_STATE_MINORS else {})
    newer = {**known, "pytorch-lightning_version": "9.1.0"}
    with caplog.at_level(logging.WARNING):
        assert fit_loop_state(newer) == {}
    assert "Lightning 9.1.0" in caplog.text and "not redone on resume" in caplog.text


def test_loop_state_minors_are_the_ones_pyproject_allows():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [lightning] = [Requirement(r) for r in project["dependencies"] if r.startswith("pytorch-lightning")]
    allowed = [f"2.{m}" for m in range(30) if SpecifierSet(str(lightning.specifier)).contains(f"2.{m}.0")]
    assert tuple(allowed) == LOOP_STATE_MINORS
    if ".".join(pl.__version__.split(".")[:2]) not in LOOP_STATE_MINORS:
        pytest.skip(f"Lightning {pl.__version__} is past the bound (CI's newest-releases step)")


def test_slurm_gets_its_environment_with_auto_requeue_off(monkeypatch):
    for name in ("SLURM_NTASKS", "SLURM_JOB_NAME", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    assert cluster_plugins() == []
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "convexp")
    [env] = cluster_plugins()
    assert isinstance(env, pl.plugins.environments.SLURMEnvironment) and env.auto_requeue is False


def test_progress_bar_counts_optimizer_steps_of_the_whole_run(tmp_path):
    seen = []

    class Snapshot(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            task = bar.progress.tasks[bar.train_progress_bar_id]
            seen.append((task.completed, task.total, task.description))

    bar = StepProgressBar()
    t = trainer(tmp_path, 20, callbacks=[bar, Snapshot()], max_epochs=-1)
    fit(t, Tiny(), train_dataloaders=DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4))
    assert [s[0] for s in seen] == list(range(1, 21)) and {s[1] for s in seen} == {20}
    assert seen[0][2].endswith("epoch 1") and seen[-1][2].endswith("epoch 3")


def test_progress_bar_updates_every_n_steps_and_stops_without_waiting(tmp_path):
    """On a GPU the bar reads device values every log_every_n_steps; however seldom it updates,
    its redraw thread wakes often, so that stopping it (the end of every fit) waits a tenth of a
    second, not a whole refresh period (Lightning's refresh_rate is redraws per second)."""
    seen, waits = [], []

    class Snapshot(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            seen.append(bar.progress.tasks[bar.train_progress_bar_id].completed)

        def on_train_end(self, trainer, *args):
            waits.append(1 / bar.progress.live._refresh_thread.refresh_per_second)

    bar = StepProgressBar(every=4)
    t = trainer(tmp_path, 10, callbacks=[bar, Snapshot()], max_epochs=-1)
    fit(t, Tiny(), train_dataloaders=DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4))
    assert seen == [0, 0, 0, 4, 4, 4, 4, 8, 8, 10]
    assert waits and waits[0] <= 0.1
