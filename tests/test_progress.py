"""How a run says how far it is outside a terminal (a pipe, nohup, a SLURM log): plain lines at
every tenth of the run and at least once a minute, within 80 columns, reading the device only when
a line is due; on a terminal the rich bar (tests/test_lightning_public.py)."""

from __future__ import annotations

import re

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from convexp.train import progress
from convexp.train.progress import PlainProgress, StepProgressBar, duration, progress_line, step_progress


class Rows(pl.LightningModule):
    """Fits dict batches as the stages' are: input_ids, and num_tokens (a host int) when ``tokens``."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch["input_ids"]).pow(2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _collate(tokens: bool):
    def collate(rows):
        batch = {"input_ids": torch.stack(rows)}
        if tokens:
            batch["num_tokens"] = 7 * len(rows)
        return batch

    return collate


def _fit(bar, steps: int, tokens: bool = False) -> None:
    t = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_model_summary=False,
                   callbacks=[bar], limit_val_batches=0, max_epochs=-1)  # fmt: skip
    data = DataLoader(list(torch.randn(24, 4)), batch_size=4, collate_fn=_collate(tokens))
    t.fit(Rows(), train_dataloaders=data)


def test_outside_a_terminal_a_run_prints_a_line_at_every_tenth_within_80_columns(capsys):
    bar = step_progress(every=1)  # pytest's stdout is not a terminal
    assert isinstance(bar, PlainProgress)
    _fit(bar, 50)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [int(re.match(r"step (\d+)/50 ", line).group(1)) for line in lines] == list(range(5, 51, 5))
    assert all(len(line) <= 80 for line in lines)
    assert all(re.search(r" loss [\d.e-]+ [\d.,k]+ examples/s elapsed \d+s ETA \d+s$", line) for line in lines), lines
    assert lines[-1].startswith("step 50/50 100% ")


def test_pre_training_batches_give_tokens_per_second(capsys):
    _fit(PlainProgress(), 10, tokens=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) == 10 and all(" tok/s " in line for line in lines)


def test_a_line_at_least_once_a_minute_and_the_loss_read_only_for_a_line(capsys, monkeypatch):
    """Each line reads the loss (a device value: on a GPU, a wait for the queued steps) once; no
    step without a line reads it."""
    reads = []
    real = PlainProgress.get_metrics
    monkeypatch.setattr(PlainProgress, "get_metrics", lambda self, *a: reads.append(1) or real(self, *a))
    _fit(PlainProgress(), 100)  # 10 lines: one every 10 steps
    assert len(reads) == 10 == len(capsys.readouterr().out.splitlines())
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # a minute passes between any two steps
    _fit(PlainProgress(), 30)
    assert len(capsys.readouterr().out.splitlines()) == 30 == len(reads) - 10


def test_a_line_fits_80_columns_at_paper_scale():
    line = progress_line(999_999, 1_000_000, 10.372, 296_661.0, "tok/s", 11 * 86400 + 3600, 1.0)
    assert line == "step 999999/1000000 99% loss 10.37 297k tok/s elapsed 11d01h ETA 1s" and len(line) <= 80
    assert [duration(s) for s in (42, 303, 7500, 273600)] == ["42s", "5m03s", "2h05m", "3d04h"]


def test_on_a_terminal_the_bar(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert isinstance(step_progress(every=4, speed=False), StepProgressBar)
