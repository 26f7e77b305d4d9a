"""Pre-training examples from tokenized documents (pure Python): packed blocks, sentence pairs or
ELECTRA's examples.

``data.examples`` picks how examples are made (``EXAMPLES``):

packed (``pack_blocks``): documents (lists of token ids without special tokens) are concatenated,
in order, into one stream, and the stream is cut into blocks that fill ``seq_len`` exactly (a
block may span a document boundary, as RoBERTa's FULL-SENTENCES; nothing marks the boundary).
Block layouts (``objective.pair_format``):

  pairs   [CLS] A [SEP] B [SEP]   A and B consecutive spans of the stream, split at a uniformly
          random point (sentence pairs without NSP, made from packed text); no label
  nsp     as pairs, but with probability 1/2 B is replaced by a span of the same length from a
          random other document; pair_label 1 = random ("not next"), 0 = next. The tokens of
          the replaced B are not lost: the next block starts with them (BERT does the same)
  sop     as pairs, but with probability 1/2 A and B are swapped; pair_label 1 = swapped
  single  [CLS] tokens [SEP]

Each row: ``input_ids``, ``token_type_ids`` (0 for [CLS] A [SEP], 1 for B [SEP]),
``attention_mask`` (1 = real token), all ``seq_len`` long, and ``pair_label`` for nsp/sop.
Only the last block of a stream can be short; it is padded with pad_id (type 0, mask 0).
A final remainder of one token is dropped in the pair formats.

"Random other document" is drawn from a pool of the ``pool_size`` most recently read
documents (excluding those in the current block), so that streams of any size can be packed
in one pass; until the pool holds another document, an nsp block keeps its true B (label 0).
The output depends only on the documents, the settings and ``rng``'s state: packing is
deterministic for a seed.

sentence_pairs (``sentence_pairs``): Chang et al.'s examples, as their line-by-line pair dataset
builds them (mlpc-ucsd/BERT_Convolutions, ``src/transformers/data/datasets/language_modeling.py``
``LineByLineTextDataset``): sentences 1+2, 3+4, ... become ``[CLS] A [SEP] B [SEP]``, one pair per
example, never packed; an example longer than ``seq_len`` is cut to its first ``seq_len`` tokens
(their ``example[0:block_size]``: the final [SEP] goes too), a shorter one is padded with pad_id
up to ``seq_len`` (as their ``__getitem__`` pads to block_size), so every row has the same
length. ``token_type_ids`` are all 0: their collator (``DataCollatorForLanguageModeling``) passes
only input_ids, attention_mask and labels, so BERT's token types default to zeros. No pair label
(MLM only, no NSP). Two deviations, both so that no example holds two documents' text: pairs are
formed within a document (their file pairs consecutive lines across document boundaries too),
and a document's odd last sentence is an example of its own, ``[CLS] A [SEP]`` (their file
pairs it with the next document's first sentence; their iterable dataset allows "one or two
sentences" per example).

electra (``electra_examples``): ELECTRA's examples, as its ``build_pretraining_dataset.py``
(``ExampleBuilder``, google-research/electra; ConvBERT's data is built with the same file) makes
them from documents given as lines (the units its builder reads: the text lines of a corpus file,
blank ones skipped; on OpenWebText a line is a paragraph, on a one-sentence-per-line corpus a
sentence). Lines accumulate until they hold at least the *target length* of tokens (seq_len, see
below) or the document ends; then they become one example and the next example starts empty:

  1. With probability 0.1 the example is a single segment (its first-segment target is 100,000),
     else the first segment's target is (target − 3) // 2.
  2. Each line in turn goes to segment A if A is empty, or if A plus the line stays under A's
     target, or — while B is still empty and A is under its target — with probability 1/2;
     otherwise to B. (So a short line after B has started can still join A.)
  3. A is cut to seq_len − 2 tokens, B to seq_len − len(A) − 3 (an empty B: no B); the tokens cut
     off are dropped, as are a line's tokens beyond them: nothing carries to the next example.
  4. The next example's target is seq_len, or with probability 0.05 a uniform integer in
     [5, seq_len] (an example may still exceed its target: the last line counts whole).

An example never holds two documents' tokens, and A/B split only at line boundaries. Rows:
``[CLS] A [SEP] B [SEP]`` (types 0 / 1) or ``[CLS] A [SEP]``, padded to seq_len; no pair label.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ...config.groups import EXAMPLES, PAIR_FORMATS  # noqa: F401  (the choices, declared with their schema)

# ELECTRA's build_pretraining_dataset.py (ExampleBuilder._create_example)
ELECTRA_SINGLE_SEGMENT = 0.1  # probability of a one-segment example (first-segment target 100,000)
ELECTRA_SHORT_TARGET = 0.05  # probability that the next example's target is randint(5, seq_len)
ELECTRA_MIN_TARGET = 5


@dataclass(frozen=True)
class SpecialIds:
    cls_id: int
    sep_id: int
    pad_id: int


def min_seq_len(pair_format: str) -> int:
    """Shortest block with at least one token per segment."""
    return 3 if pair_format == "single" else 5


def pack_blocks(
    docs: Iterable[list[int]],
    seq_len: int,
    pair_format: str,
    specials: SpecialIds,
    rng: random.Random,
    pool_size: int = 1000,
) -> Iterator[dict]:
    """Yield the blocks of a document stream (see the module docstring) as dicts of lists."""
    if pair_format not in PAIR_FORMATS:
        raise ValueError(f"unknown pair_format {pair_format!r}; choose one of {PAIR_FORMATS}")
    if seq_len < min_seq_len(pair_format):
        raise ValueError(f"seq_len {seq_len} is too short for pair_format {pair_format!r}")
    room = seq_len - (2 if pair_format == "single" else 3)  # content tokens per block
    buf: list[int] = []  # tokens read but not yet packed
    buf_doc: list[int] = []  # the document index of each of them
    pool: list[tuple[int, list[int]]] = []  # ring buffer of recent documents (nsp)
    docs_iter = iter(enumerate(docs))

    def fill() -> None:
        while len(buf) < room:
            nxt = next(docs_iter, None)
            if nxt is None:
                return
            i, ids = nxt
            if not ids:
                continue
            buf.extend(ids)
            buf_doc.extend([i] * len(ids))
            if pair_format == "nsp":
                if len(pool) < pool_size:
                    pool.append((i, ids))
                else:
                    pool[i % pool_size] = (i, ids)

    while True:
        fill()
        take = min(room, len(buf))
        if pair_format == "single":
            if take == 0:
                return
            yield _row(buf[:take], None, None, seq_len, specials)
            del buf[:take], buf_doc[:take]
            continue
        if take < 2:
            return
        cut = rng.randint(1, take - 1)
        a, b, label, used = buf[:cut], buf[cut:take], None, take
        if pair_format == "nsp":
            label = 0
            if rng.random() < 0.5:
                span = _random_span(pool, len(b), set(buf_doc[:take]), rng)
                if span is not None:
                    b, label, used = span, 1, cut  # the true B starts the next block
        elif pair_format == "sop":
            label = int(rng.random() < 0.5)
            if label:
                a, b = b, a
        yield _row(a, b, label, seq_len, specials)
        del buf[:used], buf_doc[:used]


def sentence_pairs(docs: Iterable[list[list[int]]], seq_len: int, specials: SpecialIds) -> Iterator[dict]:
    """Yield Chang et al.'s examples (see the module docstring) of documents given as lists of
    sentences (token ids without special tokens; empty sentences are skipped)."""
    if seq_len < 3:
        raise ValueError(f"seq_len {seq_len} is too short for sentence pairs")
    for doc in docs:
        sentences = [ids for ids in doc if ids]
        for i in range(0, len(sentences), 2):
            a, b = sentences[i], sentences[i + 1] if i + 1 < len(sentences) else None
            ids = [specials.cls_id, *a, specials.sep_id] + ([*b, specials.sep_id] if b is not None else [])
            ids = ids[:seq_len]
            pad = seq_len - len(ids)
            yield {
                "input_ids": ids + [specials.pad_id] * pad,
                "token_type_ids": [0] * seq_len,
                "attention_mask": [1] * len(ids) + [0] * pad,
            }


def electra_examples(
    docs: Iterable[list[list[int]]], seq_len: int, specials: SpecialIds, rng: random.Random
) -> Iterator[dict]:
    """Yield ELECTRA's examples (see the module docstring) of documents given as lists of lines
    (token ids without special tokens; lines without tokens are skipped)."""
    if seq_len < min_seq_len("pairs"):
        raise ValueError(f"seq_len {seq_len} is too short for ELECTRA's examples")
    target = seq_len
    for doc in docs:
        lines: list[list[int]] = []
        length = 0
        for ids in doc:
            if not ids:
                continue
            lines.append(ids)
            length += len(ids)
            if length >= target:
                yield _electra_row(lines, target, seq_len, specials, rng)
                target, lines, length = _electra_target(seq_len, rng), [], 0
        if lines:  # the document ends the example
            yield _electra_row(lines, target, seq_len, specials, rng)
            target = _electra_target(seq_len, rng)


def _electra_row(lines: list[list[int]], target: int, seq_len: int, sp: SpecialIds, rng: random.Random) -> dict:
    """One example of the accumulated lines: segments A and B (steps 1-3 of the module docstring)."""
    a_target = 100_000 if rng.random() < ELECTRA_SINGLE_SEGMENT else (target - 3) // 2
    a: list[int] = []
    b: list[int] = []
    for line in lines:
        if not a or len(a) + len(line) < a_target or (not b and len(a) < a_target and rng.random() < 0.5):
            a += line
        else:
            b += line
    a = a[: seq_len - 2]
    b = b[: max(0, seq_len - len(a) - 3)]
    return _row(a, b or None, None, seq_len, sp)


def _electra_target(seq_len: int, rng: random.Random) -> int:
    """The next example's target length (step 4 of the module docstring)."""
    return rng.randint(ELECTRA_MIN_TARGET, seq_len) if rng.random() < ELECTRA_SHORT_TARGET else seq_len


def _random_span(
    pool, length: int, exclude: set[int], rng: random.Random, tries: int = 20
) -> list[int] | None:
    """``length`` tokens from a random pooled document not in ``exclude`` (continuing into the
    following pooled documents if it is too short), or None if there is no such document."""
    for _ in range(tries):
        k = rng.randrange(len(pool))
        if pool[k][0] not in exclude:
            break
    else:
        return None
    ids = pool[k][1]
    start = rng.randrange(max(1, len(ids) - length + 1))
    span = ids[start : start + length]
    for step in range(1, len(pool)):
        if len(span) >= length:
            break
        doc, more = pool[(k + step) % len(pool)]
        if doc not in exclude:
            span += more[: length - len(span)]
    return span if len(span) == length else None


def _row(a: list[int], b: list[int] | None, label: int | None, seq_len: int, sp: SpecialIds) -> dict:
    ids = [sp.cls_id, *a, sp.sep_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, sp.sep_id]
        types += [1] * (len(b) + 1)
    n, pad = len(ids), seq_len - len(ids)
    row = {
        "input_ids": ids + [sp.pad_id] * pad,
        "token_type_ids": types + [0] * pad,
        "attention_mask": [1] * n + [0] * pad,
    }
    if label is not None:
        row["pair_label"] = label
    return row
