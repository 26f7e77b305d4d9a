"""Pre-training batches made off the training thread: fetched, stacked and masked, ready to step.

The training step only runs the model: everything a batch needs before it (reading its rows,
stacking them, choosing and replacing the masked tokens) happens in the data pipeline, in
DataLoader worker processes (``trainer.num_workers > 0``) or, with none, on a GPU run in one
background thread that keeps ``PREFETCH`` batches ready (:class:`Prefetched`): the step waits for
the device, so the pipeline overlaps it entirely. A CPU run with none makes each batch inline,
between steps: its step keeps every core busy, and a thread would only take cycles from it
(``convexp bench pretrain`` on 2 cores: stage/bare step 0.84 with the thread, 0.96 without). The
vectorised fetch (one Arrow ``take`` per batch instead of a row lookup per example) serves both.

Masks stay a function of the stream position alone (see ``streams.py``): the batch starting at
position p is masked by a generator seeded with ``step_seed(seed, p)`` — whoever makes it, in
whatever order — so a resumed run repeats an uninterrupted one exactly. That seed travels with
the batch (``seed``, a Python int): the step seeds its own draws (dropout, the ELECTRA generator's
samples) with it, without reading a device tensor back.

Everything the step would otherwise have to ask the device is decided here, on the host: whether
any row has padding (``padded``), the real token count (``num_tokens``) and the predicted
positions as a fixed number of slots (``mlm_positions``, ``mlm_labels``; see
:func:`~convexp.tasks.pretraining.objectives.prediction_slots`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from ...train.common import step_seed
from .chunks import expand
from .objectives import TokenInfo, mask_tokens, prediction_slots

PREFETCH = 4  # batches the background thread keeps ready


@dataclass
class Masker:
    """Adds to a collated batch (the objective's masking settings; see
    :func:`convexp.tasks.pretraining.objectives.mask_tokens`): ``masked`` and ``labels`` [B, L], the
    prediction slots ``mlm_positions`` and ``mlm_labels`` [P] (P = B x ``max_predictions`` with
    ELECTRA's exact count, else the batch's count rounded up to ``slot_multiple``: 64 on a GPU, so
    that compiled steps see few shapes), and, as Python values the step
    reads without a device sync, ``seed`` (of the step's own draws), ``padded`` (any padding) and
    ``num_tokens`` (real tokens)."""

    tokens: TokenInfo
    mask_prob: float
    replace_mask: float
    replace_random: float
    whole_word: bool
    exact_count: bool
    max_predictions: int | None
    slot_multiple: int = 8

    @classmethod
    def from_objective(cls, tokens: TokenInfo, o, slot_multiple: int = 8) -> "Masker":
        return cls(
            tokens, o.mask_prob, o.replace_mask, o.replace_random, o.whole_word,
            o.get("exact_count", False),  # BERT masking (objective=mlm) has no count
            o.get("max_predictions"), slot_multiple,
        )

    def mask(self, batch: dict, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(
            batch["input_ids"], self.tokens, generator, self.mask_prob, self.replace_mask,
            self.replace_random, self.whole_word, exact_count=self.exact_count,
            max_predictions=self.max_predictions, attention_mask=batch["attention_mask"],
        )

    def __call__(self, batch: dict, seed: int) -> dict:
        g = torch.Generator().manual_seed(seed)
        batch["masked"], batch["labels"] = self.mask(batch, g)
        B = batch["input_ids"].shape[0]
        slots = B * self.max_predictions if self.exact_count and self.max_predictions else None
        batch["mlm_positions"], batch["mlm_labels"] = prediction_slots(batch["labels"], slots, self.slot_multiple)
        batch["seed"] = seed
        batch["num_tokens"] = int(batch["attention_mask"].sum())
        batch["padded"] = batch["num_tokens"] < batch["attention_mask"].numel()
        return batch


def numpy_rows(rows, columns: tuple[str, ...]):
    """A ``datasets.Dataset`` formatted for :func:`stack_rows` (numpy, the columns only); any other
    sequence of row dicts as it is."""
    return rows.with_format("numpy", columns=list(columns)) if hasattr(rows, "with_format") else rows


def stack_rows(rows, indices: list[int], columns: tuple[str, ...]) -> dict:
    """Compact rows ``indices`` (``chunks.CompactExamples``' ``columns``) of :func:`numpy_rows` (a
    Dataset: one Arrow take) expanded to the int64 tensors ``input_ids``, ``attention_mask``,
    ``token_type_ids`` [B, L] (``pair_label`` [B]), as ``packing.py`` made the rows."""
    if hasattr(rows, "with_format"):
        return expand(rows[indices])
    picked = [rows[i] for i in indices]
    return expand({c: np.stack([np.asarray(r[c]) for r in picked]) for c in columns})


class StreamBatches(Dataset):
    """Item = one training batch, given its stream positions (``PositionBatches``): the rows the
    stream puts there (``PermutedStream.row_index``), stacked, with ``position`` [B], masked."""

    def __init__(self, stream, masker: Masker, seed: int):
        self.stream, self.masker, self.seed = stream, masker, seed
        self.rows = numpy_rows(stream.rows, stream.columns)

    def __len__(self) -> int:
        return len(self.stream)

    def __getitem__(self, positions: list[int]) -> dict:
        batch = stack_rows(self.rows, [self.stream.row_index(p) for p in positions], self.stream.columns)
        batch["position"] = torch.tensor(positions)
        return self.masker(batch, step_seed(self.seed, positions[0]))


class PositionBatches(Sampler[list[int]]):
    """The per-device batches of ``streams.StreamSampler``'s endless positions: lists of
    ``batch_size`` consecutive positions of this rank."""

    def __init__(self, sampler: Iterable[int], batch_size: int):
        self.sampler, self.batch_size = sampler, batch_size

    def __iter__(self) -> Iterator[list[int]]:
        batch = []
        for p in self.sampler:
            batch.append(p)
            if len(batch) == self.batch_size:
                yield batch
                batch = []


class ValBatches(Dataset):
    """Validation batch k: rows [k·B, (k+1)·B) of the validation set, masked with the fixed seed
    ``step_seed(seed, -1 - k)`` (the same masks at every validation, in every run)."""

    def __init__(self, rows, columns: tuple[str, ...], batch_size: int, masker: Masker, seed: int):
        self.rows, self.columns, self.batch_size = numpy_rows(rows, columns), columns, batch_size
        self.masker, self.seed = masker, seed

    def __len__(self) -> int:
        return -(-len(self.rows) // self.batch_size)

    def __getitem__(self, k: int) -> dict:
        end = min((k + 1) * self.batch_size, len(self.rows))
        batch = stack_rows(self.rows, list(range(k * self.batch_size, end)), self.columns)
        return self.masker(batch, step_seed(self.seed, -1 - k))


class Prefetched:
    """Iterate ``loader`` in a background thread, ``depth`` batches ahead, in order. Errors in the
    thread are raised in the consumer; the thread stops when the consumer stops iterating, or at
    :meth:`close` — which the data module calls when fitting ends, because Lightning leaves an
    endless stream's iterator open, and a thread still inside torch when the interpreter exits
    can abort the process (SIGABRT, seen in DDP children)."""

    def __init__(self, loader: Iterable, depth: int = PREFETCH):
        self.loader, self.depth = loader, depth
        self._threads: list[tuple[threading.Event, threading.Thread]] = []

    def __len__(self) -> int:
        return len(self.loader)

    def close(self, timeout: float = 30.0) -> None:
        """Stop every producer thread and wait for it (it finishes the batch it is making)."""
        for stop, _ in self._threads:
            stop.set()
        for _, thread in self._threads:
            thread.join(timeout)
        self._threads = [(s, t) for s, t in self._threads if t.is_alive()]

    def __iter__(self) -> Iterator:
        q: queue.Queue = queue.Queue(self.depth)
        stop = threading.Event()
        done = object()

        def hand_over(entry) -> bool:
            """Put ``entry`` on the queue unless told to stop first; False once stopped."""
            while not stop.is_set():
                try:
                    q.put(entry, timeout=0.1)
                    return True
                except queue.Full:
                    pass
            return False

        def produce() -> None:
            try:
                for item in self.loader:
                    if not hand_over((item, None)):
                        return
                hand_over((done, None))
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                hand_over((None, e))

        thread = threading.Thread(target=produce, name="convexp-prefetch", daemon=True)
        self._threads = [(s, t) for s, t in self._threads if t.is_alive()] + [(stop, thread)]
        thread.start()
        try:
            while True:
                item, error = q.get()
                if error is not None:
                    raise error
                if item is done:
                    return
                yield item
        finally:
            stop.set()
