"""Pre-training data of a streaming corpus (``data.streaming=true``): read as training goes, never
prepared, each reader tokenising only its own share (``readers.py``) and keeping what it makes in
the chunk store (``chunk_store.py``), which later passes and resumed runs read instead.

``prepare_streaming(data_cfg, tokenizer_cfg, seq_len, cache_dir, seed, pair_format)`` returns a
:class:`~convexp.tasks.pretraining.pretraining.PretrainingData` whose ``train`` is a
:class:`StreamingExamples` (the corpus as source shards, the tokenizer, the example settings and
the chunk store's folder: what a reader needs to make its share's examples; ``reader(r, R)``) and
``val`` a small ``datasets.Dataset`` of examples.

Source shards: the corpus's ``datasets`` shards (``IterableDataset.num_shards``: its files, the
parquet shards of a hub dataset, the parts of ``data.parts`` in turn), each read on its own
(``IterableDataset.shard``); a corpus cut by ``data.max_docs`` is one shard (its first documents).

Validation: ``data.val_split`` (a separate hub split), else the first ``val_docs`` (default 1000)
documents of the stream, which the training readers skip (``held_out``: how many of each shard's
first documents that is: shard 0's, unless it has fewer). The unigram entropy (the MLM baseline in
``metrics.json``) is that of the validation documents, so no training document is tokenised twice.

Cache (``data.cache``, default true; under ``cache_dir``): the trained tokenizer (on the first
``tokenizer.train_docs``, default 100,000, training documents; ``pretraining.py``'s entry), the
validation examples with their statistics and ``held_out`` (``val-<hash>/``: hash of the corpus,
the tokenizer, ``seq_len`` and the example layout), and, with ``data.store_chunks`` (default true;
not in run ids or keys: where the rows are kept, not what they are), the chunk store
(``chunks-<hash>/``). Each entry is made by one process: the others (DDP ranks started together)
wait on its lock, then read it (``atomic.building``), so a rank reads and tokenises the validation
documents only when no other has.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...atomic import building, config_hash
from ...data.corpus import corpus_fingerprint, data_settings, load_corpus
from ...data.errors import EmptyCorpusError
from ...data.tokenizer import Tokenizer, tokenizer_settings
from .chunk_store import STORE_VERSION, ChunkStore
from .chunks import CHUNK_DOCS, CompactExamples, chunk_examples, expand
from .pretraining import (
    FORMAT_VERSION, VAL_SEED, PretrainingData, _blocks_dataset, _get_tokenizer, _text_batches, example_layout,
)  # fmt: skip

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
    store: Path | None = None  # the chunk store's folder (chunk_store.py); None: data.store_chunks=false

    @property
    def num_shards(self) -> int:
        return len(self.held_out)

    def shard(self, s: int):
        """Source shard ``s``'s training documents (an IterableDataset; read with ``.iter``)."""
        return _training_shard(self.corpus, self.held_out, s)

    def chunk(self, texts: list[str], key) -> CompactExamples:
        """The examples of one chunk of documents (``chunks.chunk_examples``)."""
        return chunk_examples(texts, self.tokenizer, self.seq_len, self.layout, self.seed, key)

    def chunk_store(self) -> ChunkStore | None:
        """The chunk store its readers keep and read (None: none)."""
        if self.store is None:
            return None
        labelled = self.layout[0] in ("nsp", "sop")
        return ChunkStore(self.store, self.seq_len, self.tokenizer.vocab_size, labelled)

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
    d, t = data_settings(data_cfg), tokenizer_settings(tokenizer_cfg)
    layout = example_layout(d, seq_len, pair_format)
    cache_dir = Path(cache_dir) if d["cache"] else None
    corpus = corpus_fingerprint(d)
    source = _Source(d)
    tokenizer = _get_tokenizer(t, corpus, source.train_texts, cache_dir, default_docs=STREAMING_TOKENIZER_DOCS)
    val, meta = _validation(source, tokenizer, seq_len, layout, cache_dir, corpus)
    held_out = tuple(meta["held_out"])
    store = None
    if cache_dir is not None and d["store_chunks"]:
        key = config_hash("chunks", STORE_VERSION, FORMAT_VERSION, CHUNK_DOCS, corpus, held_out, tokenizer.to_json(),
                          seq_len, layout, seed)  # fmt: skip
        store = cache_dir / f"chunks-{key}"
    train = StreamingExamples(source.corpus, held_out, tokenizer, seq_len, layout, seed, store)
    stats = {
        "num_train_blocks": None,
        "num_val_blocks": len(val),
        "num_train_docs": None,
        "num_val_docs": meta["num_val_docs"],
        "num_tokens": None,
        "unigram_entropy": meta["unigram_entropy"],
        "unigram_entropy_docs": meta["num_val_docs"],
        "mean_example_tokens": meta["mean_example_tokens"],
        "vocab_size": tokenizer.vocab_size,
        "seq_len": seq_len,
        "pair_format": layout[0],
        "examples": layout[1],
        "streaming": True,
        "source_shards": len(held_out),
        "cached": False,
        "cache_path": None,
        "chunk_store": None if store is None else str(store),
    }
    return PretrainingData(tokenizer, train, val, stats)


class _Source:
    """A streaming corpus opened (metadata only: its source shards), its validation documents and
    how many of each shard's first documents they are (``held_out``) read on first use."""

    def __init__(self, d: dict):
        self.d = d
        self.corpus = load_corpus(d)
        self.shards = self.corpus.num_shards if d["max_docs"] is None else 1
        self.n_val = int(d["val_docs"]) if d["val_docs"] is not None else STREAMING_VAL_DOCS
        self._val: tuple[list[str], tuple[int, ...]] | None = None

    def validation(self) -> tuple[list[str], tuple[int, ...]]:
        """(the validation documents, how many each shard's start gave)."""
        if self._val is None:
            d, n = self.d, self.n_val
            if d["val_split"]:
                self._val = _first_docs(load_corpus({**d, "split": d["val_split"]}), n), (0,) * self.shards
            else:
                self._val = _held_out(self.corpus, self.shards, n)
        return self._val

    def train_texts(self):
        """The training documents, shard after shard (one-line EmptyCorpusError when there are none)."""
        import datasets

        held_out = self.validation()[1]
        texts = datasets.concatenate_datasets([_training_shard(self.corpus, held_out, s) for s in range(self.shards)])
        if next(iter(texts.take(1)), None) is None:
            raise EmptyCorpusError(
                f"the streaming corpus has no documents left for training after the {self.n_val} validation "
                "documents; set data.val_docs lower (or data.val_split) or use data.streaming=false for a small corpus"
            )
        return texts


def _validation(source: _Source, tokenizer, seq_len: int, layout, cache_dir: Path | None, corpus: dict):
    """(the validation examples, what they say: ``held_out`` and their statistics), made by one
    process and cached (``<cache_dir>/val-<hash>/``), or made here when ``cache_dir`` is None."""
    import datasets

    def make(workdir: Path, in_memory: bool):
        source.train_texts()  # some document is left for training
        texts, held_out = source.validation()
        val, counts, mean = _blocks_dataset(
            datasets.Dataset.from_dict({"text": texts}), tokenizer, seq_len, layout, VAL_SEED, workdir, "validation",
            in_memory=in_memory,
        )  # fmt: skip
        meta = {"held_out": list(held_out), "num_val_docs": counts.docs, "unigram_entropy": counts.entropy(),
                "mean_example_tokens": mean}  # fmt: skip
        return val, meta

    if cache_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            return make(Path(tmp), in_memory=True)
    key = config_hash("streaming-val", FORMAT_VERSION, corpus, source.n_val, tokenizer.to_json(), seq_len, layout)
    entry = cache_dir / f"val-{key}"
    with building(entry) as tmp:  # one process (rank) makes it; the others wait, then load it
        if tmp is not None:
            _, meta = make(tmp, in_memory=False)
            (tmp / "meta.json").write_text(json.dumps(meta))
    return datasets.Dataset.from_file(str(entry / "validation.arrow")), json.loads((entry / "meta.json").read_text())


def _training_shard(corpus, held_out: tuple[int, ...], s: int):
    """Source shard ``s`` of ``corpus`` without its first ``held_out[s]`` (validation) documents."""
    ds = corpus if len(held_out) == 1 else corpus.shard(len(held_out), s, contiguous=True)
    return ds.skip(held_out[s]) if held_out[s] else ds


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

