"""Streaming readers: each DDP rank and each loader worker reads and tokenises only its share of a
streaming corpus (``streaming.StreamingExamples``), and where it is is a few numbers that a
checkpoint keeps, so a resumed run goes on at once with the batches it would have seen.

Readers. A run has R = world size x W readers (W = ``trainer.num_workers``, or 1 without loader
workers); reader r = rank x W + worker. The corpus has S source shards. The readers form
G = gcd(S, R) groups (reader r is in group r mod G); group g reads the shards g, g + G, ...
(S / G of them), and its m = R / G members deal out the group's chunks of CHUNK_DOCS documents:
member k (= r div G) tokenises chunks k, k + m, k + 2m, ... of the group's pass and reads the
others' text without tokenising it. S a multiple of R (a parquet export of many shards): each
reader reads only its own S / R shards, as ``datasets.distributed.split_dataset_by_node`` would;
one file: every reader reads it and tokenises 1 chunk in R. Never is a document tokenised by two
readers, and the batches are fixed by the seed and R.

Passes. A reader's pass is its group's shards once (its epoch: readers pass independently, and a
reader with longer shards passes less often): the first pass in the corpus's order, pass p > 0 in
an order drawn from (seed, group, p). With the chunk store (``chunk_store.py``, ``data.store_chunks``,
the default) a reader keeps each chunk it makes, and goes through a shard read through before from
the store's record of it, without reading the source (downloading it, from the hub) or tokenising:
a later pass, a requeue or a resume reads the stored rows; without it, each pass reads the
reader's shards again (from the hub: downloaded again).

Chunks. Chunk j of shard s is the shard's documents [j x CHUNK_DOCS, (j + 1) x CHUNK_DOCS) (after
the held-out validation documents); its examples are ``chunks.chunk_examples`` with key (s, j), the
same rows whichever reader makes them, in every pass.

Position (after each batch, a JSON-able dict): ``pass``, ``shard_pos`` (the shard's place in the
pass's order), ``source`` (the shard's ``IterableDataset.state_dict()`` at the chunk's start: shard
and offset, which ``load_state_dict`` seeks to in Arrow/parquet shards; None: the shard's start),
``chunk`` (j), ``count`` (the chunk's number in the group's pass: who tokenises it), ``used`` (its
examples already in batches) and ``batches`` (the reader's batches so far). A resumed reader
reads that one chunk from the store, or re-reads and re-tokenises it, nothing before it. The
positions, like the rows, are the same with and without the store.

Batches. A reader's n-th batch is the next ``batch_size`` examples of its chunks (a batch may span
two chunks); it is batch i = n x W + w of its rank (a DataLoader takes its workers' batches in
turn), global batch q = i x world + rank, masked with ``step_seed(seed, q x batch_size)``. Each
batch carries ``data_position`` (its reader and that reader's position after it): the data module
records it when the training loop takes the batch (Lightning and the loader workers fetch ahead),
and keeps the positions of the last batches taken in its checkpoint (``PretrainData.state_dict``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from torch.utils.data import IterableDataset, get_worker_info

from ...errors import UserError
from ...train.common import step_seed
from .chunks import CHUNK_DOCS, CompactExamples, expand

FRESH = {"pass": 0, "shard_pos": 0, "source": None, "chunk": 0, "count": 0, "used": 0, "batches": 0}


@dataclass(frozen=True)
class Layout:
    """The readers of a run: ``world`` ranks x ``workers`` loader workers (1 without workers)."""

    world: int
    workers: int

    @property
    def readers(self) -> int:
        return self.world * self.workers

    def __str__(self) -> str:
        ranks = f"{self.world} rank{'s' * (self.world > 1)}"
        return f"{self.readers} ({ranks} x {self.workers} loader worker{'s' * (self.workers > 1)})"


class Reader:
    """Reader ``r`` of ``readers``: its share's chunks and batches, from ``position`` on (None: the start)."""

    def __init__(self, examples, r: int, readers: int, position: dict | None = None):
        self.examples, self.r, self.readers = examples, r, readers
        groups = math.gcd(examples.num_shards, readers)
        self.group, self.member, self.members = r % groups, r // groups, readers // groups
        self.shards = list(range(self.group, examples.num_shards, groups))
        self.position = dict(position or FRESH)
        self.store = examples.chunk_store()  # None: data.store_chunks=false (or data.cache=false)

    def order(self, p: int) -> list[int]:
        """The group's shards in the order pass ``p`` reads them."""
        shards = list(self.shards)
        if p:
            random.Random(f"convexp-pass/{self.examples.seed}/{self.group}/{p}").shuffle(shards)
        return shards

    def chunks(self, passes: int | None = None) -> Iterator[tuple[dict, CompactExamples]]:
        """(position at the chunk's start, its examples) of each chunk this reader tokenises (or
        reads from the chunk store), from its position on, for ``passes`` passes (None: endlessly)."""
        at = self.position
        p, i, source, j, c = at["pass"], at["shard_pos"], at["source"], at["chunk"], at["count"]
        end = None if passes is None else p + passes
        while p != end:
            whole, made = i == 0 and source is None, False
            order = self.order(p)
            for i in range(i, len(order)):
                for source, j, count, examples in self._shard_chunks(order[i], source, j, c):
                    c = count + 1
                    if examples is not None:
                        made = made or len(examples) > 0
                        yield {"pass": p, "shard_pos": i, "source": source, "chunk": j, "count": count}, examples
                source, j = None, 0
            if whole and not made:
                raise UserError(
                    f"streaming reader {self.r} of {self.readers} found no training example in its share "
                    f"(shards {self.shards}, chunk {self.member} in every {self.members} of {CHUNK_DOCS} documents); "
                    "use fewer loader workers or ranks, more documents, or data.streaming=false"
                )
            p, i, c = p + 1, 0, 0

    def _shard_chunks(self, s: int, source, j: int, c: int) -> Iterator[tuple]:
        """(the shard's state at the chunk's start, the chunk's j, its count, its examples when this
        reader's, else None) of source shard ``s``'s chunks from chunk ``j`` (at state ``source``),
        ``c`` the count of chunk j. A shard the chunk store has read through is gone through from its
        record, never read (a chunk of this reader's not stored is read alone); another is read, each
        chunk of this reader's taken from the store or made and stored, and recorded once read through."""
        store = self.store
        record = store.shard(s) if store is not None else None
        if record is not None:
            for j in range(j, record["chunks"]):
                start = record["sources"][j]
                mine = self._mine(c)
                yield start, j, c, self._examples(s, j, lambda: self._read_one(s, start)) if mine else None
                c += 1
            return
        docs = self.examples.shard(s)
        if source is not None:
            docs.load_state_dict(source)
        whole, sources, n_docs = source is None, [source], 0
        for batch in docs.iter(batch_size=CHUNK_DOCS):
            after = docs.state_dict()
            texts = batch["text"]
            yield source, j, c, self._examples(s, j, lambda: texts) if self._mine(c) else None
            sources.append(after)
            n_docs += len(texts)
            source, j, c = after, j + 1, c + 1
        if store is not None and whole:
            store.put_shard(s, sources[:-1], n_docs)

    def _mine(self, c: int) -> bool:
        """Whether chunk number ``c`` of the group's pass is this reader's to tokenise."""
        return c % self.members == self.member

    def _examples(self, s: int, j: int, texts) -> CompactExamples:
        """Chunk (s, j)'s examples: from the chunk store, else made from its documents ``texts()`` (and stored)."""
        stored = self.store.chunk(s, j) if self.store is not None else None
        if stored is not None:
            return stored
        examples = self.examples.chunk(texts(), (s, j))
        if self.store is not None:
            self.store.put_chunk(s, j, examples)
        return examples

    def _read_one(self, s: int, start) -> list[str]:
        """The documents of the chunk of shard ``s`` that starts at state ``start``."""
        docs = self.examples.shard(s)
        if start is not None:
            docs.load_state_dict(start)
        return next(iter(docs.iter(batch_size=CHUNK_DOCS)))["text"]

    def batches(self, batch_size: int) -> Iterator[tuple[CompactExamples, dict]]:
        """(the next batch's examples, this reader's position after it), endlessly."""
        n, skip = self.position["batches"], self.position["used"]
        parts: list[CompactExamples] = []
        need = batch_size
        for at, examples in self.chunks():
            k, skip = skip, 0  # only the chunk a resumed reader stopped in has used examples
            while k < len(examples):
                take = min(need, len(examples) - k)
                parts.append(_rows(examples, k, k + take))
                k, need = k + take, need - take
                if need == 0:
                    n += 1
                    yield CompactExamples.concat(parts), {**at, "used": k, "batches": n}
                    parts, need = [], batch_size


def _rows(examples: CompactExamples, start: int, stop: int) -> CompactExamples:
    labels = examples.pair_label
    return CompactExamples(
        examples.input_ids[start:stop], examples.length[start:stop], examples.b_start[start:stop],
        None if labels is None else labels[start:stop],
    )  # fmt: skip


class ReaderBatches(IterableDataset):
    """One rank's training batches of a streaming corpus (item = a masked batch with its
    ``data_position``): in loader worker slot w (none: w = 0 of 1), the batches of reader
    rank x W + (w + ``offset``) mod W, from its position in ``positions`` (reader -> position).
    ``offset``: the worker whose batch the rank takes next (a DataLoader starts at slot 0)."""

    def __init__(self, examples, layout: Layout, rank: int, positions: dict, offset: int, batch_size: int, masker, seed: int):  # fmt: skip
        self.examples, self.layout, self.rank, self.positions = examples, layout, rank, positions
        self.offset, self.batch_size, self.masker, self.seed = offset, batch_size, masker, seed

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        W, world = self.layout.workers, self.layout.world
        w = ((info.id if info else 0) + self.offset) % W
        r = self.rank * W + w
        reader = self.examples.reader(r, self.layout.readers, self.positions.get(r))
        for examples, at in reader.batches(self.batch_size):
            q = ((at["batches"] - 1) * W + w) * world + self.rank  # the global batch number
            batch = self.masker(expand(examples.columns()), step_seed(self.seed, q * self.batch_size))
            batch["data_position"] = {"reader": r, "position": at}
            yield batch


def resume_positions(saved: dict | None, layout: Layout, rank: int, consumed: int) -> tuple[dict, int, str | None]:
    """(this rank's readers' positions, the worker offset, a line to say or None) to resume from a
    checkpoint's data position ``saved`` ({"layout": [world, workers], "positions": {reader:
    position}}; None: a fresh run, or a checkpoint written before positions were kept) after the
    rank took ``consumed`` batches (global step x accumulation)."""
    W = layout.workers
    mine = range(rank * W, (rank + 1) * W)
    if saved and tuple(saved["layout"]) == (layout.world, layout.workers):
        positions = {r: saved["positions"][r] for r in mine if r in saved["positions"]}
        return positions, sum(p["batches"] for p in positions.values()) % W, None
    if not consumed:
        return {}, 0, None
    if saved:  # other readers: each starts its share afresh in a new pass, batch numbers going on
        fresh_pass = 1 + max((p["pass"] for p in saved["positions"].values()), default=0)
        was = Layout(*saved["layout"])
        line = (
            f"resuming streaming data on {layout} readers, saved for {was}: each reader starts its share "
            f"afresh in pass {fresh_pass} (no batch is read twice by this run, but the batches are not those "
            "of an uninterrupted run, and the documents of the interrupted pass may be seen again)"
        )
    else:
        fresh_pass = 0
        line = (
            "the checkpoint keeps no streaming data position (made by an older convexp): the readers start "
            "their shares from the beginning"
        )
    positions = {
        rank * W + w: {**FRESH, "pass": fresh_pass, "batches": consumed // W + (w < consumed % W)} for w in range(W)
    }
    return positions, consumed % W, line


def share_note(num_shards: int, layout: Layout) -> str | None:
    """A line saying how readers share shards when some read a shard another also reads; None
    when each reads only its own (the shard count a multiple of the reader count)."""
    groups = math.gcd(num_shards, layout.readers)
    if groups == layout.readers:
        return None
    m = layout.readers // groups
    return (
        f"streaming: {num_shards} source shard(s) over {layout} readers: groups of {m} readers each read "
        f"{num_shards // groups} shard(s) and tokenise 1 chunk in {m} (a reader count dividing {num_shards} "
        "reads each shard once)"
    )


def gather_positions(positions: dict) -> dict:
    """Every rank's readers' positions (a collective: every rank calls it, as Lightning saves a
    checkpoint on every rank)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return dict(positions)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, dict(positions))
    return {r: p for part in gathered for r, p in part.items()}


def check_shares(examples, layout: Layout, rank: int) -> None:
    """Each reader of this rank must tokenise at least one chunk in a pass: its group's shards must
    hold more than (its member number) x CHUNK_DOCS documents (read here, not tokenised, or counted
    from the chunk store's shard records; only when readers share shards). One-line UserError otherwise."""
    for w in range(layout.workers):
        reader = Reader(examples, rank * layout.workers + w, layout.readers)
        if reader.member == 0:
            continue
        need, seen = reader.member * CHUNK_DOCS + 1, 0
        for s in reader.shards:
            record = reader.store.shard(s) if reader.store is not None else None
            if record is not None:  # read through before: counted, not read
                seen += record["docs"]
            for batch in examples.shard(s).iter(batch_size=CHUNK_DOCS) if record is None else ():
                seen += len(batch["text"])
                if seen >= need:
                    break
            if seen >= need:
                break
        if seen < need:
            raise UserError(
                f"the streaming corpus is too small for {layout} readers: {examples.num_shards} source "
                f"shard(s), and reader {reader.r}'s share of them has {seen} documents, fewer than one chunk of "
                f"{CHUNK_DOCS} for each of the {reader.members} readers sharing it; use fewer loader workers "
                "or ranks, or data.streaming=false"
            )

