"""Pre-training data of a streaming corpus (``data.streaming=true``): read lazily, never cached.

``prepare_streaming(data_cfg, tokenizer_cfg, seq_len, cache_dir, seed, pair_format)`` returns a
:class:`~convexp.tasks.pretraining.pretraining.PretrainingData` whose ``train`` is a
:class:`StreamingBlocks` (the examples, made lazily as the corpus is read) and ``val`` a small
``datasets.Dataset`` of examples. Validation: ``data.val_split`` (a separate hub split), else the
first ``val_docs`` (default 1000) documents of the stream. Only a trained tokenizer is cached.

Resuming: a stream cannot be permuted, it is consumed in order; ``train.skip_blocks(n)`` returns
the same stream without its first n blocks (it re-reads and re-tokenises them: cost proportional
to n, result exact).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ...data.corpus import corpus_fingerprint, data_settings, load_corpus
from ...data.errors import EmptyCorpusError
from ...data.tokenizer import Tokenizer, tokenizer_settings
from .chunks import TokenCounts, token_docs
from .pretraining import (
    VAL_SEED,
    PretrainingData,
    _blocks_dataset,
    _examples,
    _get_tokenizer,
    _text_batches,
    example_layout,
)

STREAMING_VAL_DOCS = 1000
STREAMING_TOKENIZER_DOCS = 100_000
ENTROPY_SAMPLE_DOCS = 10_000  # streaming: unigram entropy estimated on the first documents


def prepare_streaming(
    data_cfg, tokenizer_cfg, seq_len: int, cache_dir: Path, seed: int, pair_format: str = "pairs"
) -> PretrainingData:
    """The tokenizer, the lazily made training examples and the validation examples of a streaming corpus."""
    d, t = data_settings(data_cfg), tokenizer_settings(tokenizer_cfg)
    layout = example_layout(d, seq_len, pair_format)
    cache_dir = Path(cache_dir) if d["cache"] else None
    return _prepare_streaming(d, t, seq_len, cache_dir, seed, layout)


class StreamingBlocks:
    """The examples (packed blocks or sentence pairs) of a streaming corpus, produced lazily.
    Iterating starts again from the first example (after the skipped ones): same seed, same rows."""

    def __init__(
        self,
        texts,
        tokenizer: Tokenizer,
        seq_len: int,
        pair_format: str,
        seed: int,
        skip: int = 0,
        shard: tuple[int, int] = (0, 1),
        examples: str = "packed",
    ):
        self.texts, self.tokenizer, self.seq_len = texts, tokenizer, seq_len
        self.pair_format, self.seed, self.skip, self.shard_spec = pair_format, seed, skip, shard
        self.examples = examples

    def __iter__(self) -> Iterator[dict]:
        layout = (self.pair_format, self.examples)
        blocks = _examples(self.texts, self.tokenizer, self.seq_len, layout, self.seed)
        index, count = self.shard_spec
        return itertools.islice(blocks, self.skip + index, None, count)

    def skip_blocks(self, n: int) -> StreamingBlocks:
        """The same stream without its first n blocks (of this shard), for resuming."""
        count = self.shard_spec[1]
        return StreamingBlocks(
            self.texts,
            self.tokenizer,
            self.seq_len,
            self.pair_format,
            self.seed,
            self.skip + n * count,
            self.shard_spec,
            self.examples,
        )

    def shard(self, index: int, count: int) -> StreamingBlocks:
        """Every count-th block starting at index (one shard per DDP rank or loader worker)."""
        if self.shard_spec != (0, 1):
            raise ValueError("shard() of a sharded stream")
        return StreamingBlocks(
            self.texts,
            self.tokenizer,
            self.seq_len,
            self.pair_format,
            self.seed,
            self.skip,
            (index, count),
            self.examples,
        )


def _prepare_streaming(d: dict, t: dict, seq_len, cache_dir, seed, layout) -> PretrainingData:
    import datasets

    corpus = load_corpus(d)
    n_val = int(d["val_docs"]) if d["val_docs"] is not None else STREAMING_VAL_DOCS
    if d["val_split"]:
        val_texts, train_texts = load_corpus({**d, "split": d["val_split"]}).take(n_val), corpus
    else:
        val_texts, train_texts = corpus.take(n_val), corpus.skip(n_val)
    val_texts = datasets.Dataset.from_dict({"text": [t for b in _text_batches(val_texts) for t in b]})
    if next(iter(train_texts), None) is None:
        raise EmptyCorpusError(
            f"the streaming corpus has no documents left for training after the {n_val} validation documents; "
            "set data.val_docs lower (or data.val_split) or use data.streaming=false for a small corpus"
        )
    tokenizer = _get_tokenizer(
        t, corpus_fingerprint(d), lambda: train_texts, cache_dir, default_docs=STREAMING_TOKENIZER_DOCS
    )
    with tempfile.TemporaryDirectory() as tmp:
        val, val_counts, val_mean = _blocks_dataset(
            val_texts, tokenizer, seq_len, layout, VAL_SEED, Path(tmp), "validation", in_memory=True
        )
    sample = TokenCounts(tokenizer.vocab_size)
    for texts in _text_batches(train_texts, ENTROPY_SAMPLE_DOCS):
        token_docs(texts, tokenizer, sample)
    stats = {
        "num_train_blocks": None,
        "num_val_blocks": len(val),
        "num_train_docs": None,
        "num_val_docs": val_counts.docs,
        "num_tokens": None,
        "unigram_entropy": sample.entropy(),
        "unigram_entropy_docs": sample.docs,
        "mean_example_tokens": val_mean,
        "vocab_size": tokenizer.vocab_size,
        "seq_len": seq_len,
        "pair_format": layout[0],
        "examples": layout[1],
        "streaming": True,
        "cached": False,
        "cache_path": None,
    }
    train = StreamingBlocks(train_texts, tokenizer, seq_len, layout[0], seed, examples=layout[1])
    return PretrainingData(tokenizer, train, val, stats)


