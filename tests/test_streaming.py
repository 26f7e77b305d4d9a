"""Streaming pre-training data (tasks/pretraining/streaming.py, readers.py): each reader (a DDP
rank's loader worker) reads and tokenises only its share, the batches are fixed by the seed and the
reader count, and a resumed reader goes on from the position its checkpoint kept, re-tokenising one
chunk at most. The chunk store (chunk_store.py): the first pass keeps each chunk's examples, later
passes and resumed readers read them instead of the source, with the same batches and positions.
Offline: every corpus is written by the test."""

from __future__ import annotations

import collections
import json
import time

import numpy as np
import pytest
import torch
from helpers import write_vocab
from torch.utils.data import DataLoader

from convexp.data.synthetic import synthetic_corpus, vocabulary_words
from convexp.data.tokenizer import Tokenizer
from convexp.errors import UserError
from convexp.tasks.pretraining.chunks import CHUNK_DOCS
from convexp.tasks.pretraining.readers import Layout, ReaderBatches, check_shares, resume_positions
from convexp.tasks.pretraining.streaming import StreamingExamples, prepare_streaming

SHARDS, SHARD_DOCS, VAL_DOCS = 4, 1300, 30  # 2 chunks a shard


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The same documents as 4 parquet shards and as one JSON-lines file, and a vocab.txt."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("streaming")
    docs = synthetic_corpus(SHARDS * SHARD_DOCS, seed=3)
    (root / "shards").mkdir()
    for s in range(SHARDS):
        part = docs[s * SHARD_DOCS : (s + 1) * SHARD_DOCS]
        pq.write_table(pa.table({"text": part}), root / "shards" / f"{s:02d}.parquet")
    (root / "one").mkdir()
    (root / "one" / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    vocab = write_vocab(root / "vocab.txt", sorted(vocabulary_words()) + [".", ","])
    return {"root": root, "docs": docs, "vocab": vocab}


def streaming(corpus, folder: str, tmp_path, seq_len: int = 32, **data):
    cfg = {"source": "files", "path": str(corpus["root"] / folder), "streaming": True, "val_docs": VAL_DOCS, **data}
    return prepare_streaming(cfg, {"kind": "pretrained", "path": str(corpus["vocab"])}, seq_len, tmp_path / "cache", seed=0)


@pytest.fixture
def encoded(monkeypatch):
    """Every text the tokenizer encodes from now on, in order."""
    texts: list[str] = []
    encode = Tokenizer.encode_batch

    def counting(self, batch):
        texts.extend(batch)
        return encode(self, batch)

    monkeypatch.setattr(Tokenizer, "encode_batch", counting)
    return texts


@pytest.mark.parametrize("folder, readers", [("shards", 1), ("shards", 2), ("shards", 4), ("shards", 3), ("one", 3)])
def test_each_training_document_is_tokenised_by_one_reader(corpus, tmp_path, monkeypatch, encoded, folder, readers):
    data = streaming(corpus, folder, tmp_path)
    opened = collections.defaultdict(set)  # reader -> source shards it read
    shard = StreamingExamples.shard
    encoded.clear()
    for r in range(readers):
        monkeypatch.setattr(StreamingExamples, "shard", lambda self, s, r=r: opened[r].add(s) or shard(self, s))
        chunks = list(data.train.reader(r, readers).chunks(passes=1))
        assert chunks, f"reader {r} of {readers} made no chunk"
    counts = collections.Counter(encoded)
    assert set(counts) == set(corpus["docs"][VAL_DOCS:]) and max(counts.values()) == 1
    if folder == "shards" and SHARDS % readers == 0:  # whole shards: a reader reads its own only
        assert all(opened[r] == set(range(r, SHARDS, readers)) for r in range(readers))


def batches_of(reader, n: int, batch_size: int):
    it = reader.batches(batch_size)
    return [next(it) for _ in range(n)]


def same(a, b) -> bool:
    """The same rows (every column) and the same positions, batch for batch."""
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(ea.columns().values(), eb.columns().values(), strict=True))
        and pa == pb
        for (ea, pa), (eb, pb) in zip(a, b)
    )


def test_a_resumed_reader_goes_on_exactly_rebuilding_one_chunk(corpus, tmp_path, encoded):
    data = streaming(corpus, "shards", tmp_path)
    ref = batches_of(data.train.reader(1, 2), 260, 64)  # two passes over shards 1 and 3
    assert same(ref[:50], batches_of(data.train.reader(1, 2), 50, 64))  # fixed by the seed and reader count
    passes = [at["pass"] for _, at in ref]
    assert passes[0] == 0 and passes[-1] >= 1
    ends = [i for i, (_, at) in enumerate(ref[:-1]) if at["chunk"] != ref[i + 1][1]["chunk"]]
    for i in (0, 17, ends[0], passes.index(1), len(ref) - 12):  # mid-chunk, across chunks, in the second pass
        encoded.clear()
        assert same(batches_of(data.train.reader(1, 2, ref[i][1]), 10, 64), ref[i + 1 : i + 11]), i
        assert len(encoded) <= 2 * CHUNK_DOCS  # the chunk it stopped in, and the ten batches' own


def test_the_first_batch_after_resuming_ten_times_deeper_costs_the_same(corpus, tmp_path, encoded):
    """Today's resume re-reads and re-tokenises what the run consumed: 10x deeper, ~10x the time.
    Without the chunk store (a corpus larger than the disk) a resumed reader rebuilds one chunk."""
    data = streaming(corpus, "shards", tmp_path, store_chunks=False)
    ref = batches_of(data.train.reader(0, 1), 400, 32)
    shallow, deep = ref[39][1], ref[399][1]
    assert deep["batches"] == 10 * shallow["batches"]
    seconds, docs = collections.defaultdict(list), {}
    for _ in range(3):  # interleaved, the best of three: a shared machine's noise
        for name, at in (("shallow", shallow), ("deep", deep)):
            encoded.clear()
            start = time.perf_counter()
            next(data.train.reader(0, 1, at).batches(32))
            seconds[name].append(time.perf_counter() - start)
            docs[name] = len(encoded)
    assert docs["deep"] <= CHUNK_DOCS and docs["shallow"] <= CHUNK_DOCS
    assert min(seconds["deep"]) <= 1.5 * min(seconds["shallow"]) and min(seconds["deep"]) <= 2.0, seconds


def loader_batches(data, layout: Layout, rank: int, saved, consumed: int, n: int, batch_size: int = 16):
    """The rank's first n batches from its DataLoader (``layout.workers`` worker processes), from a
    checkpoint's data position ``saved``, and the positions a data module records as it takes them."""
    from convexp.tasks.pretraining.batches import Masker
    from convexp.tasks.pretraining.stage import token_info

    masker = Masker(token_info(data.tokenizer), 0.15, 0.8, 0.1, False, False, None)
    positions, offset, line = resume_positions(saved, layout, rank, consumed)
    assert line is None
    batches = ReaderBatches(data.train, layout, rank, positions, offset, batch_size, masker, seed=0)
    workers = layout.workers if layout.workers > 1 else 0
    taken, recorded = [], dict(positions)
    for batch in DataLoader(batches, batch_size=None, num_workers=workers):
        at = batch.pop("data_position")
        recorded[at["reader"]] = at["position"]
        taken.append(torch.cat([batch["masked"].flatten(), batch["labels"].flatten()]))
        if len(taken) == n:
            return taken, recorded


@pytest.mark.parametrize("world, workers", [(1, 2), (2, 1), pytest.param(2, 2, marks=pytest.mark.slow)])
def test_interrupted_and_resumed_readers_give_the_uninterrupted_batches(corpus, tmp_path, world, workers):
    data = streaming(corpus, "shards", tmp_path)
    layout = Layout(world, workers)
    for rank in range(world):
        ref, _ = loader_batches(data, layout, rank, None, 0, 13)
        first, recorded = loader_batches(data, layout, rank, None, 0, 7)  # killed after its 7th batch
        saved = {"layout": [world, workers], "positions": recorded}
        resumed, _ = loader_batches(data, layout, rank, saved, 7, 6)
        assert all(torch.equal(a, b) for a, b in zip(first + resumed, ref, strict=True)), rank


def test_another_reader_count_starts_a_new_pass_and_says_so():
    saved = {"layout": [2, 1], "positions": {0: {"pass": 2, "batches": 5}, 1: {"pass": 1, "batches": 5}}}
    positions, offset, line = resume_positions(saved, Layout(1, 2), rank=0, consumed=10)
    assert "saved for 2 (2 ranks x 1 loader worker)" in line and "pass 3" in line and "\n" not in line
    assert {r: (p["pass"], p["batches"], p["source"]) for r, p in positions.items()} == {0: (3, 5, None), 1: (3, 5, None)}
    positions, offset, line = resume_positions(None, Layout(1, 2), rank=0, consumed=3)
    assert "no streaming data position" in line and offset == 1 and positions[0]["batches"] == 2
    assert resume_positions(None, Layout(1, 2), rank=0, consumed=0) == ({}, 0, None)


def test_a_corpus_too_small_for_its_readers_is_refused_in_one_line(corpus, tmp_path):
    data = streaming(corpus, "one", tmp_path, max_docs=CHUNK_DOCS + 100)  # two chunks, one shard
    check_shares(data.train, Layout(1, 2), rank=0)
    with pytest.raises(UserError) as e:
        check_shares(data.train, Layout(2, 2), rank=1)
    assert "too small for 4 (2 ranks x 2 loader workers) readers" in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------- the stage (Lightning, DDP)


class LoggingTokenizer(Tokenizer):
    """A tokenizer that appends (process, texts) of each encode call to a file: counts what every
    DDP process tokenises."""

    def __init__(self, tokenizer: Tokenizer, log):
        self.__dict__.update(tokenizer.__dict__)
        self.log = str(log)

    def encode_batch(self, texts):
        texts = list(texts)
        with open(self.log, "a") as f:
            f.write(json.dumps([__import__("os").getpid(), texts]) + "\n")
        return super().encode_batch(texts)


class BatchLog(__import__("pytorch_lightning").Callback):
    """Appends (attempt, rank, global step, digest of the masked batch) of each training batch
    taken to a file; raises Interrupt at global step ``stop`` (after recording it)."""

    def __init__(self, path, attempt: int, stop: int | None = None):
        self.path, self.attempt, self.stop = str(path), attempt, stop

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import hashlib

        digest = hashlib.sha256(batch["masked"].numpy().tobytes() + batch["labels"].numpy().tobytes()).hexdigest()
        with open(self.path, "a") as f:
            f.write(json.dumps([self.attempt, trainer.global_rank, trainer.global_step, digest]) + "\n")
        if trainer.global_step == self.stop:
            raise Interrupt(f"stopped at step {self.stop}")


class Interrupt(Exception):
    pass


def stage_cfg(corpus, outputs, *extra):
    from convexp.config.compose import compose_stage

    return compose_stage("pretrain", [
        "scale=smoke", "seq_len=32", "model.num_layers=1", "model.hidden_size=32", "model.embedding_size=16",
        "model.intermediate_size=64", "trainer.batch_size=8", "trainer.val_batches=1", "trainer.log_every_n_steps=4",
        "tokenizer=pretrained", f"tokenizer.path={corpus['vocab']}", "tokenizer.vocab_size=null", "data=files",
        f"data.path={corpus['root'] / 'shards'}", "data.streaming=true", f"data.val_docs={VAL_DOCS}",
        "trainer.max_steps=12", "trainer.val_every_n_steps=12", "trainer.checkpoint_every_n_steps=4",
        f"outputs={outputs}", "logger.mode=disabled", *extra,
    ])  # fmt: skip


TWO_RANKS = ["trainer.strategy=ddp_spawn", "trainer.devices=2", "trainer.accelerator=cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("layout", [["trainer.num_workers=2"], TWO_RANKS], ids=["1 rank x 2 workers", "2 ranks"])
def test_a_killed_streaming_run_resumes_with_the_uninterrupted_batches(corpus, tmp_path, monkeypatch, layout):
    """Two ranks (gloo): also, no training document is tokenised twice in all (today's readers
    tokenise the whole stream on every rank)."""
    from convexp.tasks.pretraining import stage
    from convexp.tasks.pretraining.runs import pretrain_run

    encoded, prepare = tmp_path / "encoded.jsonl", stage.prepare_streaming

    def logging_tokenizer(*args, **kwargs):
        data = prepare(*args, **kwargs)
        data.train.tokenizer = LoggingTokenizer(data.train.tokenizer, encoded)
        return data

    log = tmp_path / "batches.jsonl"
    with monkeypatch.context() as m:
        m.setattr(stage, "prepare_streaming", logging_tokenizer)
        ref = stage_cfg(corpus, tmp_path / "ref", *layout)
        assert stage.run_pretrain(ref, pretrain_run(ref), callbacks=(BatchLog(log, 0),)).finished
    by_process = collections.defaultdict(list)
    for pid, texts in map(json.loads, encoded.read_text().splitlines()):
        by_process[pid] += texts
    assert len(by_process) == 2  # the two ranks' processes, or the two loader workers
    everything = [t for texts in by_process.values() for t in texts]
    assert len(everything) == len(set(everything)) >= 2 * CHUNK_DOCS  # no document twice
    assert set(everything) <= set(corpus["docs"][VAL_DOCS:])

    with pytest.raises(Exception, match="stopped at step 9"):  # after the checkpoint of step 8
        first = stage_cfg(corpus, tmp_path / "out", *layout)
        stage.run_pretrain(first, pretrain_run(first), callbacks=(BatchLog(log, 1, stop=9),))
    again = stage_cfg(corpus, tmp_path / "out", *layout, "resume=true")
    resumed = stage.run_pretrain(again, pretrain_run(again), callbacks=(BatchLog(log, 2),))
    assert resumed.finished
    taken = collections.defaultdict(dict)  # attempt -> (rank, step) -> digest
    for attempt, rank, step, digest in map(json.loads, log.read_text().splitlines()):
        taken[attempt][rank, step] = digest
    ref, first, second = taken[0], taken[1], taken[2]
    assert sorted({s for _, s in second}) == list(range(8, 12))
    assert {k: ref[k] for k in first} == first and {k: ref[k] for k in second} == second

# ---------------------------------------------------------------------------- the chunk store


@pytest.fixture
def opened(monkeypatch):
    """The source shards opened from now on (each ``StreamingExamples.shard`` call)."""
    shards: list[int] = []
    shard = StreamingExamples.shard
    monkeypatch.setattr(StreamingExamples, "shard", lambda self, s: shards.append(s) or shard(self, s))
    return shards


def reader_batches(data, r: int, readers: int, n: int, position=None):
    return batches_of(data.train.reader(r, readers, position), n, 64)


@pytest.mark.parametrize("folder, r, readers", [("shards", 1, 2), ("one", 1, 3)], ids=["own shards", "shared file"])
def test_later_passes_and_resumes_read_the_store_and_give_the_same_batches(corpus, tmp_path, encoded, opened,
                                                                            folder, r, readers):  # fmt: skip
    without = streaming(corpus, folder, tmp_path / "off", store_chunks=False)
    ref = reader_batches(without, r, readers, 240)
    passes = [at["pass"] for _, at in ref]
    assert passes[-1] >= 2  # three passes: the corpus's order, then two drawn from the seed
    first_pass = passes.index(1)

    data = streaming(corpus, folder, tmp_path / "on")
    store = data.train.store
    assert store is not None and store.parent == tmp_path / "on" / "cache" and not store.exists()
    encoded.clear()
    filled = reader_batches(data, r, readers, first_pass + 1)  # the first pass (read through): read, tokenised, stored
    assert same(filled, ref[: first_pass + 1]) and encoded
    assert len(list(store.glob("*/shard.json"))) == (SHARDS // readers if folder == "shards" else 1)

    encoded.clear()
    opened.clear()
    assert same(reader_batches(data, r, readers, 240), ref)  # again from the start: every pass from the store
    assert not encoded and not opened  # nothing tokenised, no source shard read

    for i in (5, first_pass - 1, first_pass + 7, len(ref) - 11):  # resumed mid-chunk, across a pass, deep
        assert same(reader_batches(data, r, readers, 10, position=ref[i][1]), ref[i + 1 : i + 11]), i
    assert not encoded and not opened
    # the store keeps the rows, not who read them: one reader reads what two (or three) stored
    whole = reader_batches(without, 0, 1, 60)
    encoded.clear()
    assert same(reader_batches(data, 0, 1, 60), whole) and 0 < len(encoded) < len(corpus["docs"]) - VAL_DOCS


@pytest.mark.slow  # a killed pass and a resumed one
def test_a_store_made_in_a_killed_pass_is_completed_without_rebuilding_it(corpus, tmp_path, encoded, opened):
    """A reader killed mid-shard leaves whole chunk files and no shard record: the next run reads the
    shard again, takes the stored chunks and records the shard; a missing chunk is read alone."""
    without = streaming(corpus, "shards", tmp_path / "off", store_chunks=False)
    N = 300
    ref = reader_batches(without, 0, 1, N)
    assert ref[-1][1]["pass"] == 1  # the first pass read through
    data = streaming(corpus, "shards", tmp_path / "on")
    killed = next(i for i, (_, at) in enumerate(ref) if at["chunk"] == 1)
    reader_batches(data, 0, 1, killed + 1)  # killed in shard 0's second (last) chunk
    store = data.train.store
    assert sorted(p.name for p in (store / "0").iterdir()) == ["0.arrow", "1.arrow"]  # no shard.json yet
    encoded.clear()
    assert same(reader_batches(data, 0, 1, N), ref)
    tokenised = collections.Counter(encoded)
    assert not any(d in tokenised for d in corpus["docs"][VAL_DOCS : VAL_DOCS + 1024])  # chunk (0, 0) was stored
    assert len(list(store.glob("*/shard.json"))) == SHARDS
    (store / "2" / "1.arrow").unlink()  # a chunk lost: read alone from its recorded start, and stored again
    encoded.clear()
    opened.clear()
    assert same(reader_batches(data, 0, 1, N), ref)
    assert opened == [2] and 0 < len(encoded) <= 1024 and (store / "2" / "1.arrow").exists()


def test_the_store_is_off_with_store_chunks_false_and_out_of_run_ids(corpus, tmp_path):
    from convexp.config.compose import compose_stage
    from convexp.errors import UserError
    from convexp.tasks.pretraining.runs import pretrain_run

    data = streaming(corpus, "shards", tmp_path, store_chunks=False)
    reader_batches(data, 0, 1, 30)
    assert data.train.store is None and data.stats["chunk_store"] is None
    assert not list((tmp_path / "cache").glob("chunks-*"))
    base = ["data=openwebtext", "scale=smoke", f"outputs={tmp_path}"]
    assert pretrain_run(compose_stage("pretrain", base)).dir == pretrain_run(
        compose_stage("pretrain", [*base, "data.store_chunks=false"])
    ).dir
    for bad in ("0", "''", "yes"):
        with pytest.raises(UserError) as e:
            compose_stage("pretrain", [*base, f"data.store_chunks={bad}"])
        assert "data.store_chunks=" in str(e.value) and "use true" in str(e.value) and "\n" not in str(e.value)


def test_a_store_that_cannot_be_written_is_said_once_and_the_reader_goes_on(corpus, tmp_path, monkeypatch, capsys):
    import errno

    from convexp.tasks.pretraining.build import ArrowRows

    ref = reader_batches(streaming(corpus, "shards", tmp_path / "off", store_chunks=False), 0, 1, 40)
    data = streaming(corpus, "shards", tmp_path / "on")

    def full(self, part):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ArrowRows, "write", full)
    capsys.readouterr()
    assert same(reader_batches(data, 0, 1, 40), ref)
    lines = [line for line in capsys.readouterr().err.splitlines() if "chunk store" in line]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "data.store_chunks=false" in lines[0]
    assert not [p for p in data.train.store.rglob("*") if p.is_file()]  # no part-written file left
