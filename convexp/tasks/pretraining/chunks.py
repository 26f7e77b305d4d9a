"""Pre-training examples made chunk by chunk, and stored compactly.

A corpus is read as *chunks* of ``CHUNK_DOCS`` consecutive documents. Each chunk's examples
(``packing.py``: packed blocks, Chang et al.'s sentence pairs or ELECTRA's examples) are made from
that chunk alone, with a random generator seeded by (seed, the chunk's key):

  - any number of processes can build the chunks of a corpus, in any order, and the examples,
    concatenated in chunk order, are the same rows (the prepared build: ``data.num_proc``);
  - a streaming reader can own whole chunks (its share), and its position is (chunk, examples
    of it already read): a resume rebuilds at most one chunk.

ELECTRA's own builder works the same way: each of its jobs builds examples from its own files
with its own generator (``build_pretraining_dataset.py``, ``ExampleWriter`` per job). Packed blocks
never span two chunks, so each chunk's last block may be short (padded): one block in ~8,000 on
OpenWebText at length 128.

A chunk's key is any value with a stable ``str`` (an int: the chunk's index in the corpus; a
tuple such as (source shard, chunk within it) for a streaming reader).

Compact rows (:class:`CompactExamples`; what the prepared cache stores, 2 bytes a position where
the vocabulary fits 16 bits, as nanoGPT's ``prepare.py``):

  input_ids   [n, L] uint16 (uint32 for a vocabulary over 65,536), padded with pad_id
  length      [n] uint16   real (non-padding) tokens, specials included
  b_start     [n] uint16   the first position of segment B (token type 1); L where no position
                           has type 1 (single-segment rows, Chang et al.'s all-zero types)
  pair_label  [n] int8     nsp / sop only

:func:`expand` turns them back into the int64 ``input_ids``, ``attention_mask`` and
``token_type_ids`` (+ ``pair_label``) the stage reads: attention_mask = position < length,
token_type_ids = b_start <= position < length (rows as ``packing.py`` makes them).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ...data.synthetic import entropy_from_counts
from ...data.tokenizer import Tokenizer
from .packing import SpecialIds, electra_examples, pack_blocks, sentence_pairs
from .sentences import split_lines, split_sentences

CHUNK_DOCS = 1024  # documents per chunk: part of what the examples are (in the cache key)
COMPACT_COLUMNS = ("input_ids", "length", "b_start")


def compact_columns(labelled: bool) -> tuple[str, ...]:
    """The columns of compact rows (``pair_label`` with nsp / sop labels)."""
    return COMPACT_COLUMNS + (("pair_label",) if labelled else ())


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type holding every token id."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def chunk_rng(seed: int, key) -> random.Random:
    """The generator of chunk ``key``'s examples (str seeds hash with SHA-512: the same in every
    process and Python session)."""
    return random.Random(f"convexp-chunk/{seed}/{key}")


def specials_of(tokenizer: Tokenizer) -> SpecialIds:
    return SpecialIds(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)


class TokenCounts:
    """Running unigram counts and document count of a token stream."""

    def __init__(self, vocab_size: int):
        self.counts = np.zeros(vocab_size, dtype=np.int64)
        self.docs = 0

    def add(self, id_lists: list[list[int]], docs: int | None = None) -> None:
        """Count the tokens of id_lists, and ``docs`` documents (default: one per list)."""
        flat = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int64)
        self.counts += np.bincount(flat, minlength=len(self.counts))[: len(self.counts)]
        self.docs += len(id_lists) if docs is None else docs

    def merge(self, other: "TokenCounts") -> None:
        self.counts += other.counts
        self.docs += other.docs

    def entropy(self) -> float:
        """Unigram entropy of the counted tokens, nats/token."""
        return entropy_from_counts(self.counts.tolist())


def token_docs(texts: list[str], tokenizer: Tokenizer, counts: TokenCounts | None = None) -> list[list[int]]:
    """Token ids of each document (no specials), optionally counted."""
    ids = tokenizer.encode_batch(texts)
    if counts is not None:
        counts.add(ids)
    return ids


def unit_docs(texts: list[str], tokenizer: Tokenizer, units, counts: TokenCounts | None = None):
    """Each document as the token ids of its units (no specials), optionally counted: sentences
    (``split_sentences``) or lines (``split_lines``)."""
    split = [units(t) for t in texts]
    ids = iter(tokenizer.encode_batch([s for doc in split for s in doc]))
    docs = [[next(ids) for _ in doc] for doc in split]
    if counts is not None:
        counts.add([s for doc in docs for s in doc], docs=len(docs))
    return docs


def example_rows(
    texts: list[str], tokenizer: Tokenizer, seq_len: int, layout: tuple[str, str], rng: random.Random,
    counts: TokenCounts | None = None,
) -> Iterator[dict]:  # fmt: skip
    """The examples of one list of documents, as ``packing.py``'s row dicts: packed blocks,
    sentence pairs or ELECTRA's examples (``layout`` = (pair_format, examples))."""
    pair_format, examples = layout
    sp = specials_of(tokenizer)
    if examples == "sentence_pairs":
        return sentence_pairs(unit_docs(texts, tokenizer, split_sentences, counts), seq_len, sp)
    if examples == "electra":
        return electra_examples(unit_docs(texts, tokenizer, split_lines, counts), seq_len, sp, rng)
    return pack_blocks(token_docs(texts, tokenizer, counts), seq_len, pair_format, sp, rng)


@dataclass
class CompactExamples:
    """Examples as arrays (see the module docstring); ``pair_label`` None unless nsp / sop."""

    input_ids: np.ndarray  # [n, L] uint16 | uint32
    length: np.ndarray  # [n] uint16
    b_start: np.ndarray  # [n] uint16
    pair_label: np.ndarray | None = None  # [n] int8

    def __len__(self) -> int:
        return len(self.input_ids)

    def columns(self) -> dict[str, np.ndarray]:
        out = {"input_ids": self.input_ids, "length": self.length, "b_start": self.b_start}
        if self.pair_label is not None:
            out["pair_label"] = self.pair_label
        return out

    @classmethod
    def concat(cls, parts: list["CompactExamples"]) -> "CompactExamples":
        labels = [p.pair_label for p in parts]
        return cls(
            np.concatenate([p.input_ids for p in parts]),
            np.concatenate([p.length for p in parts]),
            np.concatenate([p.b_start for p in parts]),
            None if labels[0] is None else np.concatenate(labels),
        )


def compact(rows: Iterable[dict], seq_len: int, vocab_size: int, labelled: bool) -> CompactExamples:
    """Row dicts (``packing.py``) as arrays; ``labelled``: the rows carry ``pair_label``."""
    rows = list(rows)
    ids = np.array([r["input_ids"] for r in rows], dtype=id_dtype(vocab_size)).reshape(len(rows), seq_len)
    mask = np.array([r["attention_mask"] for r in rows], dtype=np.bool_).reshape(len(rows), seq_len)
    types = np.array([r["token_type_ids"] for r in rows], dtype=np.bool_).reshape(len(rows), seq_len)
    typed = types.any(axis=1)
    b_start = np.where(typed, types.argmax(axis=1), seq_len).astype(np.uint16)
    label = np.array([r["pair_label"] for r in rows], dtype=np.int8) if labelled else None
    return CompactExamples(ids, mask.sum(axis=1).astype(np.uint16), b_start, label)


def chunk_examples(
    texts: list[str], tokenizer: Tokenizer, seq_len: int, layout: tuple[str, str], seed: int, key,
    counts: TokenCounts | None = None,
) -> CompactExamples:  # fmt: skip
    """The examples of chunk ``key`` (its documents ``texts``), compact; ``counts`` (if given)
    gains the chunk's document tokens."""
    rows = example_rows(texts, tokenizer, seq_len, layout, chunk_rng(seed, key), counts)
    return compact(rows, seq_len, tokenizer.vocab_size, labelled=layout[0] in ("nsp", "sop"))


def chunked(texts: Iterable[str], size: int = CHUNK_DOCS) -> Iterator[list[str]]:
    """Consecutive lists of ``size`` documents (the last may be shorter)."""
    it = iter(texts)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def expand(columns: dict) -> dict:
    """Compact columns (numpy arrays or tensors: ``input_ids`` [B, L], ``length`` [B],
    ``b_start`` [B], optional ``pair_label`` [B]) as the stage's int64 tensors ``input_ids``,
    ``attention_mask``, ``token_type_ids`` [B, L] (+ ``pair_label`` [B])."""
    import torch

    ids = torch.as_tensor(np.asarray(columns["input_ids"]).astype(np.int64))  # [B, L]
    pos = torch.arange(ids.shape[1])  # [L]
    length = torch.as_tensor(np.asarray(columns["length"]).astype(np.int64))[:, None]  # [B, 1]
    b_start = torch.as_tensor(np.asarray(columns["b_start"]).astype(np.int64))[:, None]  # [B, 1]
    out = {
        "input_ids": ids,
        "attention_mask": (pos < length).long(),
        "token_type_ids": ((pos >= b_start) & (pos < length)).long(),
    }
    if "pair_label" in columns:
        out["pair_label"] = torch.as_tensor(np.asarray(columns["pair_label"]).astype(np.int64))
    return out
