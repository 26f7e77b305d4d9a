"""Pre-training data of a streaming corpus (``data.streaming=true``): read as training goes, never
prepared, each reader tokenising only its own share (``readers.py``).

``prepare_streaming(data_cfg, tokenizer_cfg, seq_len, cache_dir, seed, pair_format)`` returns a
:class:`~convexp.tasks.pretraining.pretraining.PretrainingData` whose ``train`` is a
:class:`StreamingExamples` (the corpus as source shards, the tokenizer and the example settings:
what a reader needs to make its share's examples; ``reader(r, R)``) and ``val`` a small
``datasets.Dataset`` of examples.

Source shards: the corpus's ``datasets`` shards (``IterableDataset.num_shards``: its files, the
parquet shards of a hub dataset, the parts of ``data.parts`` in turn), each read on its own
(``IterableDataset.shard``); a corpus cut by ``data.max_docs`` is one shard (its first documents).

Validation: ``data.val_split`` (a separate hub split), else the first ``val_docs`` (default 1000)
documents of the stream, which the training readers skip (``held_out``: how many of each shard's
first documents that is: shard 0's, unless it has fewer). The unigram entropy (the MLM baseline in
``metrics.json``) is that of the validation documents, so no training document is tokenised twice.
Only a trained tokenizer is cached (on the first ``tokenizer.train_docs``, default 100,000,
training documents).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...data.corpus import corpus_fingerprint, data_settings, load_corpus
from ...data.errors import EmptyCorpusError
from ...data.tokenizer import Tokenizer, tokenizer_settings
from .chunks import CompactExamples, chunk_examples, expand
from .pretraining import VAL_SEED, PretrainingData, _blocks_dataset, _get_tokenizer, _text_batches, example_layout

STREAMING_VAL_DOCS = 1000
STREAMING_TOKENIZER_DOCS = 100_000


@dataclass
class StreamingExamples:
    """A streaming corpus's training examples, made by its readers (``readers.Reader``): picklable,
    sent to each DDP rank and loader worker, which opens only its own shards."""

    corpus: object  # datasets.IterableDataset: the training corpus (a ``text`` column)
    held_out: tuple[int, ...]  # validation documents at the start of each shard
    tokenizer: Tokenizer
    seq_len: int
    layout: tuple[str, str]  # (pair_format, data.examples)
    seed: int

    @property
    def num_shards(self) -> int:
        return len(self.held_out)

    def shard(self, s: int):
        """Source shard ``s``'s training documents (an IterableDataset; read with ``.iter``)."""
        ds = self.corpus if self.num_shards == 1 else self.corpus.shard(self.num_shards, s, contiguous=True)
        return ds.skip(self.held_out[s]) if self.held_out[s] else ds

    def chunk(self, texts: list[str], key) -> CompactExamples:
        """The examples of one chunk of documents (``chunks.chunk_examples``)."""
        return chunk_examples(texts, self.tokenizer, self.seq_len, self.layout, self.seed, key)

    def reader(self, r: int, readers: int, position: dict | None = None):
        """Reader ``r`` of ``readers`` (from ``position``: where an earlier run's reader stopped)."""
        from .readers import Reader

        return Reader(self, r, readers, position)

    def rows(self):
        """One pass of a single reader's examples as row dicts of lists (``packing.py``'s rows)."""
        for _, examples in self.reader(0, 1).chunks(passes=1):
            tensors = expand(examples.columns())
            for i in range(len(examples)):
                yield {k: v[i].tolist() for k, v in tensors.items()}

    __iter__ = rows


def prepare_streaming(
    data_cfg, tokenizer_cfg, seq_len: int, cache_dir: Path, seed: int, pair_format: str = "pairs"
) -> PretrainingData:
    """The tokenizer, the training examples' source and the validation examples of a streaming corpus."""
    import datasets

    d, t = data_settings(data_cfg), tokenizer_settings(tokenizer_cfg)
    layout = example_layout(d, seq_len, pair_format)
    cache_dir = Path(cache_dir) if d["cache"] else None
    corpus = load_corpus(d)
    shards = corpus.num_shards if d["max_docs"] is None else 1
    n_val = int(d["val_docs"]) if d["val_docs"] is not None else STREAMING_VAL_DOCS
    if d["val_split"]:
        val_texts, held_out = _first_docs(load_corpus({**d, "split": d["val_split"]}), n_val), (0,) * shards
    else:
        val_texts, held_out = _held_out(corpus, shards, n_val)
    train = StreamingExamples(corpus, held_out, None, seq_len, layout, seed)
    texts = datasets.concatenate_datasets([train.shard(s) for s in range(shards)])
    if next(iter(texts.take(1)), None) is None:
        raise EmptyCorpusError(
            f"the streaming corpus has no documents left for training after the {n_val} validation documents; "
            "set data.val_docs lower (or data.val_split) or use data.streaming=false for a small corpus"
        )
    train.tokenizer = tokenizer = _get_tokenizer(
        t, corpus_fingerprint(d), lambda: texts, cache_dir, default_docs=STREAMING_TOKENIZER_DOCS
    )
    with tempfile.TemporaryDirectory() as tmp:
        val, val_counts, val_mean = _blocks_dataset(
            datasets.Dataset.from_dict({"text": val_texts}), tokenizer, seq_len, layout, VAL_SEED, Path(tmp),
            "validation", in_memory=True,
        )  # fmt: skip
    stats = {
        "num_train_blocks": None,
        "num_val_blocks": len(val),
        "num_train_docs": None,
        "num_val_docs": val_counts.docs,
        "num_tokens": None,
        "unigram_entropy": val_counts.entropy(),
        "unigram_entropy_docs": val_counts.docs,
        "mean_example_tokens": val_mean,
        "vocab_size": tokenizer.vocab_size,
        "seq_len": seq_len,
        "pair_format": layout[0],
        "examples": layout[1],
        "streaming": True,
        "source_shards": shards,
        "cached": False,
        "cache_path": None,
    }
    return PretrainingData(tokenizer, train, val, stats)


def _first_docs(ds, n: int) -> list[str]:
    return [text for batch in _text_batches(ds, n) for text in batch]


def _held_out(corpus, shards: int, n: int) -> tuple[list[str], tuple[int, ...]]:
    """The first ``n`` documents of the stream (shard after shard) and how many each shard gave."""
    texts, held = [], []
    for s in range(shards):
        got = _first_docs(corpus if shards == 1 else corpus.shard(shards, s, contiguous=True), n - len(texts))
        held.append(len(got))
        texts += got
    return texts, tuple(held)

