"""Examples made chunk by chunk (tasks/pretraining/chunks.py): a chunk's rows depend on its own
documents, the settings and its key only; the compact form expands back to the rows exactly."""

import numpy as np
import pytest

from convexp.data.synthetic import synthetic_corpus
from convexp.data.tokenizer import build_tokenizer
from convexp.tasks.pretraining.chunks import (
    TokenCounts,
    chunk_examples,
    chunk_rng,
    chunked,
    compact,
    example_rows,
    expand,
    id_dtype,
)

LAYOUTS = [
    ("pairs", "packed"),
    ("nsp", "packed"),
    ("sop", "packed"),
    ("single", "packed"),
    ("pairs", "sentence_pairs"),
    ("pairs", "electra"),
]


@pytest.fixture(scope="module")
def corpus():
    docs = synthetic_corpus(60, 3)
    tok = build_tokenizer({"kind": "wordpiece", "vocab_size": 500}, lambda: iter([docs]))
    return docs, tok


@pytest.mark.parametrize("layout", LAYOUTS)
def test_compact_rows_expand_to_the_packers_rows(corpus, layout):
    docs, tok = corpus
    rows = list(example_rows(docs[:30], tok, 40, layout, chunk_rng(0, 0)))
    got = expand(chunk_examples(docs[:30], tok, 40, layout, seed=0, key=0).columns())
    assert got["input_ids"].dtype.is_floating_point is False and got["input_ids"].shape == (len(rows), 40)
    for c in ("input_ids", "attention_mask", "token_type_ids") + (("pair_label",) if layout[0] in ("nsp", "sop") else ()):
        assert got[c].tolist() == [r[c] for r in rows], c


def test_a_chunk_depends_on_its_documents_and_key_only(corpus):
    docs, tok = corpus
    layout = ("nsp", "packed")
    alone = chunk_examples(docs[20:40], tok, 32, layout, seed=5, key=1)
    again = chunk_examples(docs[20:40], tok, 32, layout, seed=5, key=1)
    assert np.array_equal(alone.input_ids, again.input_ids) and np.array_equal(alone.pair_label, again.pair_label)
    other_key = chunk_examples(docs[20:40], tok, 32, layout, seed=5, key=2)
    other_seed = chunk_examples(docs[20:40], tok, 32, layout, seed=6, key=1)
    assert not np.array_equal(alone.input_ids, other_key.input_ids)
    assert not np.array_equal(alone.input_ids, other_seed.input_ids)
    assert chunk_rng(5, (3, 1)).random() == chunk_rng(5, (3, 1)).random()  # tuple keys: streaming shards


def test_compact_storage_and_counts(corpus):
    docs, tok = corpus
    assert id_dtype(30_522) == np.uint16 and id_dtype(65_536) == np.uint16 and id_dtype(65_537) == np.uint32
    counts = TokenCounts(tok.vocab_size)
    ex = chunk_examples(docs[:10], tok, 64, ("pairs", "packed"), seed=0, key=0, counts=counts)
    assert ex.input_ids.dtype == np.uint16 and ex.length.dtype == np.uint16
    assert counts.docs == 10 and counts.counts.sum() == sum(len(i) for i in tok.encode_batch(docs[:10]))
    # every document token is in a block (pairs: at most one lone last token dropped)
    assert counts.counts.sum() - (ex.length.astype(int) - 3).sum() <= 1
    assert [len(c) for c in chunked(range(2500), 1024)] == [1024, 1024, 452]
