"""Pre-training data: corpus -> tokenizer -> fixed-length examples, cached on disk.

``prepare_pretraining_data(data_cfg, tokenizer_cfg, seq_len, cache_dir, seed, pair_format)``
returns a :class:`PretrainingData` with

  tokenizer  the Tokenizer (pretrained, or trained on the training documents)
  train      a memory-mapped ``datasets.Dataset`` of compact examples ("blocks": columns
             input_ids (uint16), length, b_start, and pair_label for nsp/sop; ``chunks.py``),
             in corpus order, built on ``data.num_proc`` processes (``build.py``)
  val        a small ``datasets.Dataset`` of compact examples
  stats      num_train_blocks, num_val_blocks (examples), num_train_docs, num_val_docs,
             num_tokens (document tokens of the training split, specials and padding excluded),
             unigram_entropy (nats/token, same tokens), mean_example_tokens (non-padding
             tokens per training example, specials included), vocab_size, seq_len,
             pair_format, examples, cached, cache_path, streaming (false)

A streaming corpus (``data.streaming=true``) is not prepared: ``streaming.py`` reads it.

``data.examples`` (``packing.EXAMPLES``): ``packed`` blocks that fill seq_len, Chang et al.'s
``sentence_pairs`` (documents split into sentences by ``sentences.py``, one pair per example,
padded to seq_len) or ELECTRA's ``electra`` examples (documents read as their non-blank lines,
as ELECTRA's builder reads its files; padded to seq_len); the last two need
``pair_format="pairs"``: no NSP/SOP label. All give the same columns and row length, so the stage
reads them the same way.

Compact rows expand (``chunks.expand``) to the int64 input_ids, attention_mask, token_type_ids
(and pair_label) that ``packing.py`` made: what the stage's batches hold (``batches.py``).

Validation split: ``data.val_split`` (a separate hub split, e.g. wikitext's "validation"),
else the last ``val_docs`` documents (or ``val_fraction`` of them, at least 1) of the corpus.
Validation blocks are packed
with a fixed seed, so every training seed sees the same validation set.

Cache (``data.cache``, default true):
  <cache_dir>/tokenizer-<hash>/   trained tokenizer; hash of (corpus, tokenizer config)
  <cache_dir>/<hash>/             train.arrow and val.arrow (``build.py``) and stats.json; hash
                                  of (corpus, tokenizer JSON, seq_len, pair_format, seed)
"corpus" is the data config with defaults filled in, plus size and mtime of local files
(not ``data.num_proc``: the rows do not depend on it).
Entries are written to a temporary directory and renamed into place, by one process: the others
that ask for the same entry meanwhile (every DDP rank, when torchrun or SLURM starts them together)
wait on its lock and then load it (``atomic.building``). A second call with the same inputs loads
both from disk without reading or tokenising the corpus (``stats["cached"] is True``).

Resuming (the stage's job): the train Dataset is in corpus order. For epoch e the stage draws
a permutation of its indices from a generator seeded with (seed, e) and, on resume, skips the
batches of that permutation already consumed (global step x batch size), so a resumed run sees
exactly the batches it would have seen. MLM masking is done
by the stage on the fly, so it needs no cache.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


from ...atomic import building, config_hash
from ...data.corpus import corpus_fingerprint, data_settings, load_corpus
from ...data.errors import DataError, EmptyCorpusError
from .build import build_processes, build_split
from .packing import EXAMPLES, PAIR_FORMATS, min_seq_len
from ...data.tokenizer import Tokenizer, build_tokenizer, tokenizer_settings

log = logging.getLogger(__name__)

FORMAT_VERSION = 3  # part of the examples' cache key: bump when packing changes (2: made per chunk; 3: compact)
TOKENIZER_VERSION = 1  # part of a trained tokenizer's cache key
VAL_SEED = 0


@dataclass
class PretrainingData:
    tokenizer: Tokenizer
    train: object  # datasets.Dataset, or streaming.StreamingExamples when streaming
    val: object  # datasets.Dataset
    stats: dict = field(default_factory=dict)


def prepare_pretraining_data(
    data_cfg, tokenizer_cfg, seq_len: int, cache_dir: Path, seed: int, pair_format: str = "pairs"
) -> PretrainingData:
    """Load the corpus, get the tokenizer and pack train/val blocks (see the module docstring)."""
    d, t = data_settings(data_cfg), tokenizer_settings(tokenizer_cfg)
    pair_format, examples = layout = example_layout(d, seq_len, pair_format)
    if d["streaming"]:
        raise DataError("a streaming corpus is not prepared: read it with streaming.prepare_streaming")
    cache_dir = Path(cache_dir) if d["cache"] else None

    corpus = corpus_fingerprint(d)
    split = _LazySplit(d)
    tokenizer = _get_tokenizer(t, corpus, lambda: split.train, cache_dir)
    # packed blocks keep the cache keys they had before data.examples existed
    fmt = pair_format if examples == "packed" else f"{examples}/{pair_format}"
    key = config_hash("packed", FORMAT_VERSION, corpus, tokenizer.to_json(), seq_len, fmt, seed)
    if cache_dir is not None and (cache_dir / key).is_dir():
        return _load_packed(cache_dir / key, tokenizer)
    train_texts, val_texts = split.train, split.val
    processes = build_processes(d["num_proc"])
    if cache_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            return _pack_splits(
                Path(tmp), train_texts, val_texts, tokenizer, seq_len, layout, seed, True, processes
            )
    with building(cache_dir / key) as tmp:  # one process builds; the others (ranks) wait, then load it
        if tmp is None:
            return _load_packed(cache_dir / key, tokenizer)
        data = _pack_splits(tmp, train_texts, val_texts, tokenizer, seq_len, layout, seed, False, processes)
        data.stats["cache_path"] = str(cache_dir / key)
        (tmp / "stats.json").write_text(json.dumps(data.stats, indent=1))
    log.info("packed %d training blocks into %s", data.stats["num_train_blocks"], cache_dir / key)
    return _load_packed(cache_dir / key, tokenizer, cached=False)


def example_layout(d: dict, seq_len: int, pair_format: str) -> tuple[str, str]:
    """(pair_format, data.examples) of data settings ``d``, checked against ``seq_len`` (one-line DataError)."""
    if pair_format not in PAIR_FORMATS:
        raise DataError(f"unknown pair_format {pair_format!r}; choose one of: {', '.join(PAIR_FORMATS)}")
    if seq_len < min_seq_len(pair_format):
        raise DataError(
            f"seq_len {seq_len} is too short for pair_format {pair_format!r}; "
            f"use at least {min_seq_len(pair_format)}"
        )
    examples = d["examples"]
    if examples not in EXAMPLES:
        raise DataError(f"unknown data.examples {examples!r}; choose one of: {', '.join(EXAMPLES)}")
    if examples != "packed" and pair_format != "pairs":
        raise DataError(
            f"data.examples={examples} has no {pair_format} label (Chang et al.'s and ELECTRA's "
            "examples: none); use objective.pair_format=pairs or data.examples=packed"
        )
    return pair_format, d["examples"]


# ---------------------------------------------------------------------------- splits and texts


class _LazySplit:
    """Train/val text Datasets of a non-streaming corpus, loaded on first use."""

    def __init__(self, d: dict):
        self.d, self._splits = d, None

    def _load(self):
        if self._splits is None:
            self._splits = _split_train_val(self.d)
        return self._splits

    train = property(lambda self: self._load()[0])
    val = property(lambda self: self._load()[1])


def _split_train_val(d: dict):
    corpus = load_corpus(d)
    if d["val_split"]:
        val = load_corpus({**d, "split": d["val_split"], "max_docs": d["val_docs"]})
        return corpus, val
    n = len(corpus)
    if d["val_docs"] is None and d["val_fraction"] is None:
        raise DataError("no validation split: set data.val_docs, data.val_fraction or data.val_split")
    n_val = int(d["val_docs"]) if d["val_docs"] is not None else round(float(d["val_fraction"]) * n)
    n_val = max(1, n_val)
    if n_val >= n:
        raise EmptyCorpusError(
            f"corpus has {n} documents, too few to hold out {n_val} for validation; "
            f"add documents or lower data.val_docs / data.val_fraction"
        )
    return corpus.select(range(n - n_val)), corpus.select(range(n - n_val, n))


def _text_batches(ds, limit: int | None = None, batch_size: int = 1000) -> Iterator[list[str]]:
    """The ``text`` column of a Dataset or IterableDataset in batches, at most ``limit`` documents."""
    import datasets

    if isinstance(ds, datasets.Dataset):
        n = len(ds) if limit is None else min(int(limit), len(ds))
        for i in range(0, n, batch_size):
            yield ds[i : min(i + batch_size, n)]["text"]
        return
    rows = ds.take(int(limit)) if limit is not None else ds
    batch = []
    for row in rows:
        batch.append(row["text"])
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------------------- tokenizer


def _get_tokenizer(
    t: dict, corpus: dict, train_texts, cache_dir: Path | None, default_docs: int | None = None
):
    """Pretrained, cached, or trained on the first train_docs training documents (and cached).

    train_texts: a callable returning the training text Dataset/IterableDataset (called only
    when training is needed)."""
    if t["kind"] == "pretrained":
        return build_tokenizer(t, lambda: iter(()))
    limit = t["train_docs"] if t["train_docs"] is not None else default_docs

    def train():
        texts = train_texts()
        tokenizer = build_tokenizer(t, lambda: _text_batches(texts, limit))
        log.info("trained a %s tokenizer (vocabulary %d)", t["kind"], tokenizer.vocab_size)
        return tokenizer

    if cache_dir is None:
        return train()
    entry = cache_dir / f"tokenizer-{config_hash('tokenizer', TOKENIZER_VERSION, corpus, t)}"
    with building(entry) as tmp:  # one process trains; the others wait, then load it
        if tmp is None:
            log.info("tokenizer loaded from cache %s", entry)
            return Tokenizer.load(entry / "tokenizer.json")
        tokenizer = train()
        tokenizer.save(tmp)
    return tokenizer


# ---------------------------------------------------------------------------- building to disk


def _blocks_dataset(texts, tokenizer, seq_len, layout, seed, workdir: Path, name: str, in_memory: bool,
                    processes: int = 1):  # fmt: skip
    """(Dataset of the compact examples of a text Dataset (``build.py``), token counts, mean
    non-padding tokens per example); the Arrow file stays in ``workdir`` unless ``in_memory``."""
    import datasets

    built = build_split(texts, tokenizer, seq_len, layout, seed, workdir / f"{name}.arrow", processes)
    if built.rows == 0:
        raise EmptyCorpusError(
            f"the {name} split gives no block of length {seq_len}; add documents "
            f"(or raise data.val_docs for the validation split)"
        )
    ds = datasets.Dataset.from_file(str(workdir / f"{name}.arrow"), in_memory=in_memory)
    return ds, built.counts, built.example_tokens / built.rows


def _pack_splits(workdir: Path, train_texts, val_texts, tokenizer, seq_len, layout, seed, in_memory: bool,
                 processes: int = 1):  # fmt: skip
    """Make both splits' examples (``workdir``/{train,val}.arrow, read back memory-mapped unless
    ``in_memory``)."""
    train, counts, mean = _blocks_dataset(
        train_texts, tokenizer, seq_len, layout, seed, workdir, "train", in_memory, processes
    )
    val, val_counts, _ = _blocks_dataset(
        val_texts, tokenizer, seq_len, layout, VAL_SEED, workdir, "val", in_memory, processes
    )
    stats = {
        "num_train_blocks": len(train),
        "num_val_blocks": len(val),
        "num_train_docs": counts.docs,
        "num_val_docs": val_counts.docs,
        "num_tokens": int(counts.counts.sum()),
        "unigram_entropy": counts.entropy(),
        "mean_example_tokens": mean,
        "vocab_size": tokenizer.vocab_size,
        "seq_len": seq_len,
        "pair_format": layout[0],
        "examples": layout[1],
        "streaming": False,
        "cached": False,
        "cache_path": None,
    }
    return PretrainingData(tokenizer, train, val, stats)


def _load_packed(path: Path, tokenizer: Tokenizer, cached: bool = True) -> PretrainingData:
    import datasets

    stats = json.loads((path / "stats.json").read_text())
    stats.update(cached=cached, cache_path=str(path))
    if cached:
        log.info(
            "packed pre-training data loaded from cache %s (%d training blocks)",
            path,
            stats["num_train_blocks"],
        )
    train = datasets.Dataset.from_file(str(path / "train.arrow"))
    val = datasets.Dataset.from_file(str(path / "val.arrow"))
    return PretrainingData(tokenizer, train, val, stats)


def collate(rows: list[dict]) -> dict:
    """Stack block rows (lists, arrays or tensors) into int64 tensors [B, seq_len] (pair_label [B])."""
    import torch

    return {k: torch.stack([torch.as_tensor(r[k]) for r in rows]).long() for k in rows[0]}
