"""The prepared build: a text corpus's examples made chunk by chunk on every core, written once,
compactly, to one memory-mapped Arrow file per split.

The corpus is read as ``chunks.py``'s chunks (``CHUNK_DOCS`` consecutive documents, chunk k has
key k), so the rows depend on the documents, the settings and the seed alone: the same rows, in
the same order, whatever the number of processes (``data.num_proc``: a positive number, or
``auto``, the default = the physical cores this process may use, ``train.accel.usable_cores``).

With one process, or a corpus of one chunk (tests, ``scale=smoke``), the build runs here. Else a
pool of ``spawn``ed processes (a fresh interpreter: the tokenizer's Rust threads and the
training process's state are never forked) each loads the tokenizer once, with its own
parallelism off (one process per core is the parallelism), and makes whole chunks: the parent
reads each chunk's documents from the text table and sends them (at most ``AHEAD`` chunks per
process in flight; the last chunks, which leave processes idle, tokenised on the tokenizer's own
threads too, so that a corpus of a few chunks still keeps every core busy), gets back the chunk's compact rows (:class:`~.chunks.CompactExamples`: uint16
ids, length, B's start; ~4x smaller than the text) and its token counts, and writes them in chunk
order to the split's Arrow file, one record batch per chunk. The parent's share of the work
(reading, sending, writing) is under 1% of the workers' (0.5-0.8% of the CPU seconds on ``bench
data``'s corpus, read memory-mapped as a hub or file corpus is), so one parent feeds many workers,
and nothing is concatenated or copied afterwards. (A spawned process imports the
parent's main module: a script of one's own that prepares a corpus of several chunks on several
processes keeps its work under ``if __name__ == "__main__":``, as ``multiprocessing`` asks; the
``convexp`` command does.)

File layout (``<split>.arrow``, Arrow IPC stream, as ``datasets`` writes its own files): columns
``input_ids`` (fixed-size list of uint16, uint32 for a vocabulary over 65,536), ``length``,
``b_start`` (uint16) and ``pair_label`` (int8, nsp / sop), with ``datasets``' feature metadata,
read back with ``datasets.Dataset.from_file`` (memory-mapped: a rank or loader worker maps the
same pages).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...data.errors import DataError
from ...data.tokenizer import Tokenizer
from .chunks import CHUNK_DOCS, CompactExamples, TokenCounts, chunk_examples

AHEAD = 2  # chunks in flight per process: one being built, one waiting


def build_processes(setting) -> int:
    """``data.num_proc``: ``auto`` (or None) = the physical cores this process may use; else a
    positive number (0 is refused: it never means "default")."""
    if setting is None or setting == "auto":
        from ...train.accel import usable_cores

        return usable_cores()
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
        raise DataError(f"data.num_proc must be a positive number of processes or auto, not {setting!r}")
    return setting


def features(seq_len: int, vocab_size: int, labelled: bool):
    """The ``datasets`` features of compact rows (see the module docstring)."""
    from datasets import Features, List, Value

    from .chunks import id_dtype

    f = {
        "input_ids": List(Value(id_dtype(vocab_size).name), length=seq_len),
        "length": Value("uint16"),
        "b_start": Value("uint16"),
    }
    if labelled:
        f["pair_label"] = Value("int8")
    return Features(f)


@dataclass
class Built:
    """What a split's build says about it."""

    rows: int
    counts: TokenCounts  # document tokens and documents
    example_tokens: int  # non-padding tokens of all rows (specials included)


class ArrowRows:
    """Compact rows appended chunk by chunk to one Arrow stream file."""

    def __init__(self, path: Path, seq_len: int, vocab_size: int, labelled: bool):
        import pyarrow as pa

        self.schema = features(seq_len, vocab_size, labelled).arrow_schema
        self.seq_len, self.rows, self.tokens = seq_len, 0, 0
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)

    def write(self, part: CompactExamples) -> None:
        import pyarrow as pa

        if not len(part):
            return
        ids = pa.FixedSizeListArray.from_arrays(pa.array(part.input_ids.reshape(-1)), self.seq_len)
        columns = [ids, *(pa.array(c) for name, c in part.columns().items() if name != "input_ids")]
        self._writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self.schema))
        self.rows += len(part)
        self.tokens += int(part.length.sum(dtype=np.int64))

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


def build_split(texts, tokenizer: Tokenizer, seq_len: int, layout: tuple[str, str], seed: int, path: Path,
                processes: int) -> Built:  # fmt: skip
    """Write the examples of the text Dataset ``texts`` (chunk k seeded by (seed, k)) to the
    Arrow file ``path``; ``processes`` as :func:`build_processes` gives it."""
    n_docs = len(texts)
    n_chunks = -(-n_docs // CHUNK_DOCS)
    out = ArrowRows(path, seq_len, tokenizer.vocab_size, labelled=layout[0] in ("nsp", "sop"))
    counts = TokenCounts(tokenizer.vocab_size)

    def docs(k: int) -> list[str]:
        return texts[k * CHUNK_DOCS : min((k + 1) * CHUNK_DOCS, n_docs)]["text"]

    try:
        if processes == 1 or n_chunks <= 1:
            for k in range(n_chunks):
                out.write(chunk_examples(docs(k), tokenizer, seq_len, layout, seed, k, counts))
        else:
            for part, chunk_counts, chunk_docs in _pooled(docs, n_chunks, tokenizer, seq_len, layout, seed, processes):
                out.write(part)
                counts.counts += chunk_counts
                counts.docs += chunk_docs
    finally:
        out.close()
    return Built(out.rows, counts, out.tokens)


def _pooled(docs, n_chunks: int, tokenizer: Tokenizer, seq_len: int, layout, seed: int, processes: int):
    """(compact rows, token counts, documents) of chunks 0..n_chunks-1 in order, made by a pool of
    spawned processes, ``AHEAD`` chunks per process in flight."""
    workers = min(processes, n_chunks)
    context = multiprocessing.get_context("spawn")
    init = (tokenizer.to_json(), seq_len, layout, seed)
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=init) as pool:
        pending: list[Future] = []
        next_chunk = 0
        while next_chunk < n_chunks or pending:
            while next_chunk < n_chunks and len(pending) < AHEAD * workers:
                tail = n_chunks - next_chunk < workers  # the last chunks: other processes soon idle
                pending.append(pool.submit(_worker_chunk, next_chunk, docs(next_chunk), tail))
                next_chunk += 1
            yield pending.pop(0).result()


_WORKER: dict = {}


def _start_worker(tokenizer_json: str, seq_len: int, layout, seed: int) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core is the parallelism
    from tokenizers import Tokenizer as Backend

    _WORKER.update(tokenizer=Tokenizer(Backend.from_str(tokenizer_json)), seq_len=seq_len, layout=layout, seed=seed)


def _worker_chunk(key: int, texts: list[str], tail: bool):
    """Chunk ``key``'s compact rows, token counts and documents; one of the last chunks
    (``tail``) is tokenised on the tokenizer's threads too, as the other processes run out of work."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if tail else "false"  # read at each encode_batch
    w = _WORKER
    counts = TokenCounts(w["tokenizer"].vocab_size)
    part = chunk_examples(texts, w["tokenizer"], w["seq_len"], w["layout"], w["seed"], key, counts)
    return part, counts.counts, counts.docs


# ---------------------------------------------------------------------------- what a build costs

# Document tokens a second one process of the prepared build turns into examples, by
# ``data.examples``: OpenWebText-like text (``convexp bench data``'s corpus, 20 MB), a 30,522-token
# WordPiece, seq_len 128, the whole ``prepare_pretraining_data`` (reading the corpus, tokenising,
# making the examples, writing them) on ``data.num_proc=1``, over its CPU seconds. Measured
# 2026-11-28 on an AMD EPYC (2 cores, AVX-512) shared with other jobs (wall-clock rates there were
# lower; CPU seconds are the work itself; one run of each, one after the other: ``convexp bench
# data``'s convexp x1 row, best of two, gave 434,000 for packed blocks). ELECTRA's and Chang et
# al.'s examples tokenise each line or sentence on its own (many short inputs) and split sentences
# in Python: slower per token.
PREPARE_TOKENS_PER_CORE_S = {"packed": 365_000, "electra": 300_000, "sentence_pairs": 220_000}
ARROW_FILE_BYTES = 1024  # the schema (with ``datasets``' features) and the stream's end, measured ~500
ARROW_CHUNK_BYTES = 512  # one record batch's header per chunk of 1,024 documents, measured ~300


def prepared_bytes(rows: int, seq_len: int, vocab_size: int, labelled: bool) -> int:
    """Disk of a prepared split of ``rows`` examples: each ``seq_len`` ids of 2 bytes (4 for a
    vocabulary over 65,536), its length and B's start (2 bytes each) and, ``labelled`` (nsp / sop),
    its pair label (1 byte); plus Arrow's headers (one per chunk of ``CHUNK_DOCS`` documents,
    counted here as one per 1,024 rows: an upper bound, as a chunk holds more rows)."""
    from .chunks import id_dtype

    row = seq_len * id_dtype(vocab_size).itemsize + 4 + (1 if labelled else 0)
    return rows * row + ARROW_FILE_BYTES + ARROW_CHUNK_BYTES * -(-rows // CHUNK_DOCS)


def prepare_seconds(tokens: int, processes: int, examples: str = "packed") -> float:
    """Wall seconds of a prepared build of ``tokens`` document tokens into ``examples`` on
    ``processes`` cores, at :data:`PREPARE_TOKENS_PER_CORE_S` (downloading is not counted)."""
    return tokens / (PREPARE_TOKENS_PER_CORE_S[examples] * max(1, processes))
