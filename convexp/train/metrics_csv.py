"""``csv/metrics.csv``: every logged row of a run, across its resumes, on Lightning's public
``Logger`` API.

Lightning's own CSVLogger deletes an existing metrics.csv and buffers rows; this one continues the
file of the previous attempts, writes each row as it is logged, and rewrites the file atomically
when a new column appears (the columns sorted, ``step`` among them, as Lightning's). `Health`
drops the rows a resumed attempt redoes (:meth:`AppendingCSVLogger.drop_rows`), so each step is
in the file exactly once.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Callable

import torch
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from ..atomic import atomic_write


class AppendingCSVLogger(Logger):
    def __init__(self, log_dir: str | Path):
        super().__init__()
        self._dir = Path(log_dir)
        self.path = self._dir / "metrics.csv"
        self.columns: list[str] = []
        if self.path.is_file():
            with open(self.path, newline="") as f:
                self.columns = list(csv.DictReader(f).fieldnames or [])

    @property
    def name(self) -> str:
        return self._dir.name

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str:
        return str(self._dir)

    @property
    def log_dir(self) -> str:
        return str(self._dir)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Nothing: the run's whole config is its ``config.yaml`` (and W&B's config)."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        row = {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in metrics.items()}
        row["step"] = step
        new = set(row) - set(self.columns)
        if new:  # a new column: the header changes, so the whole file is rewritten
            self._rewrite(sorted({*self.columns, *new}), [*self._rows(), row])
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.columns).writerow(row)

    @rank_zero_only
    def drop_rows(self, redone: Callable[[dict], bool]) -> None:
        """Remove the rows (dicts of CSV strings) for which ``redone(row)`` is true."""
        if self.path.is_file():
            self._rewrite(self.columns, [r for r in self._rows() if not redone(r)])

    def _rows(self) -> list[dict]:
        if not self.path.is_file():
            return []
        with open(self.path, newline="") as f:
            return list(csv.DictReader(f))

    def _rewrite(self, columns: list[str], rows: list[dict]) -> None:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.path, out.getvalue())
        self.columns = columns
