"""Resumable, deterministic streams of training examples.

Training reads an endless stream: position p of the stream is row perm_e[p mod n] of the
dataset, where perm_e is a permutation drawn from (seed, epoch e = p // n). Position p goes to
rank p mod world_size. A run resumed at optimizer step s starts at position
s · accumulate · batch_per_device · world_size and sees exactly the rows an uninterrupted run
would have seen; each batch also carries its first position, from which the step's random
masks are seeded, so a resumed run reproduces an uninterrupted one.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ..data.length_batches import grouped_permutation, row_lengths


class PermutedStream(Dataset):
    """Map position -> example dict (+ "position"), over an endless sequence of epochs."""

    def __init__(self, rows, seed: int, columns: tuple[str, ...]):
        self.rows, self.seed, self.columns = rows, seed, columns
        self.n = len(rows)
        self._epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=g)
        return self._perm

    def __len__(self) -> int:  # one epoch; the sampler decides how far to go
        return self.n

    def row_index(self, position: int) -> int:
        """The dataset row at stream position ``position``."""
        return int(self._permutation(position // self.n)[position % self.n])

    def __getitem__(self, position: int) -> dict:
        row = self.rows[self.row_index(position)]
        out = {c: torch.as_tensor(row[c]) for c in self.columns}
        out["position"] = torch.tensor(position)
        return out


class LengthGroupedStream(PermutedStream):
    """The training stream with ``group_by_length``: each epoch's order puts rows of similar
    length in the same batch (data/length_batches.py; GLUE and probing rows, SQuAD windows),
    aligned to the stream's batches; as deterministic in (seed, epoch) as the plain stream, so
    resuming reproduces it."""

    def __init__(self, rows, seed: int, columns: tuple[str, ...], batch_size: int):
        super().__init__(rows, seed, columns)
        self.batch_size, self.lengths = batch_size, row_lengths(rows)

    def _permutation(self, epoch: int) -> torch.Tensor:
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            offset = (-epoch * self.n) % self.batch_size  # positions that finish the last epoch's batch
            self._epoch, self._perm = epoch, grouped_permutation(self.lengths, self.batch_size, g, offset)
        return self._perm


def training_stream(
    rows, seed: int, columns: tuple[str, ...], batch_size: int, group_by_length: bool
) -> PermutedStream:
    """A fine-tuning stage's training stream: length-grouped batches with ``group_by_length``."""
    if group_by_length:
        return LengthGroupedStream(rows, seed, columns, batch_size)
    return PermutedStream(rows, seed, columns)


def training_loader(
    rows, seed: int, columns: tuple[str, ...], batch_size: int, group_by_length: bool, start_step: int,
    collate, num_workers: int,
) -> DataLoader:  # fmt: skip
    """A fine-tuning stage's training batches: :func:`training_stream` from the batch after
    ``start_step`` steps (a resumed run goes on where it stopped), collated by ``collate``."""
    return DataLoader(
        training_stream(rows, seed, columns, batch_size, group_by_length),
        batch_size=batch_size,
        sampler=StreamSampler(start_step * batch_size),
        collate_fn=collate,
        num_workers=num_workers,
    )


class StreamSampler(Sampler[int]):
    """Endless positions start + k·world_size + rank, k = 0, 1, ... (no __len__: the run is step-bounded)."""

    def __init__(self, start: int, rank: int = 0, world_size: int = 1):
        self.start, self.rank, self.world_size = start, rank, world_size

    def __iter__(self) -> Iterator[int]:
        p = self.start + self.rank
        while True:
            yield p
            p += self.world_size
