"""``convexp bench data``: pre-training data preparation against what a researcher would use
instead, on the same corpus, in one invocation (issue 46, item 5):

  tokenizer alone   ``encode_batch`` over every document, batches of 1,000, its Rust threads on
                    every core: the rate a tokenising pipeline cannot beat without more cores
  convexp ×1, ×N    ``prepare_pretraining_data``, the prepared build (``data.streaming=false``),
                    ``data.num_proc`` 1 and N (N: ``--processes``, default the cores this process
                    may use), into a fresh cache folder: reading the corpus, tokenising, making the
                    examples, writing them, the statistics
  run_mlm ×N        Hugging Face ``run_mlm.py``'s way (hf_mlm.py): ``datasets.map(num_proc=N)``
                    tokenising, then ``group_texts``, at the same process count
  streaming         the whole stream against one shard of four (what each of 4 ranks reads); the
                    first pass that fills the chunk store and a later one that reads it; the first
                    block after resuming at two depths, one ten times the other, rebuilding the
                    chunk and reading it from the store (:func:`streaming_rows`)

Rates are the corpus's document tokens (the tokenizer's count, no specials) over each row's wall
time (and over its CPU seconds, its processes' and threads' together: the work itself, which a
loaded machine changes less), the best of ``--repeats`` interleaved rounds (tokenizer, convexp ×1, convexp ×N, run_mlm,
tokenizer, ...), so that a shared machine's load falls on all. The corpus (data_corpus.py:
OpenWebText-like JSON lines, ``--size`` bytes, with a WordPiece vocabulary of 30,522 trained on
it, or ``--vocab``) is made in the work folder; the record names the CPU and the goals of issue 46.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

from ..errors import UserError
from .data_corpus import train_vocab, write_corpus
from .scratch import work_folder

VAL_DOCS = 100  # held out by convexp's build (tokenised too: every row reads the whole corpus)
GOALS = {  # issue 46, "what it must show", on 2 cores
    "convexp/run_mlm": (">=", 1.0),
    "convexp/tokenizer": (">=", 0.7),
    "shard/whole": ("<=", 0.35),
    "deep/shallow resume": ("<=", 1.5),
    "deep resume s": ("<=", 2.0),
    "deep/shallow resume, stored": ("<=", 1.5),  # the chunk it stopped in read from the chunk store
    "deep resume s, stored": ("<=", 2.0),
}


def _timed(fn, cpu: list | None = None) -> tuple[float, object]:
    """(wall seconds, result) of ``fn()``; ``cpu`` (if given) gains its CPU seconds, this process's
    threads and the child processes it waited for (a pool's, once closed) together."""
    start, before = time.perf_counter(), os.times()
    result = fn()
    wall, after = time.perf_counter() - start, os.times()
    if cpu is not None:
        cpu.append(sum(getattr(after, k) - getattr(before, k) for k in ("user", "system", "children_user", "children_system")))
    return wall, result


def tokenizer_alone(texts: list[str], vocab: Path) -> int:
    """Tokens of every document (no specials), ``encode_batch`` in batches of 1,000 on all threads."""
    from ..data.tokenizer import Tokenizer

    os.environ.pop("TOKENIZERS_PARALLELISM", None)
    backend = Tokenizer.load(vocab).backend
    return sum(len(e.ids) for i in range(0, len(texts), 1000)
               for e in backend.encode_batch(texts[i : i + 1000], add_special_tokens=False))  # fmt: skip


def convexp_build(corpus: Path, vocab: Path, seq_len: int, examples: str, processes: int, cache: Path) -> dict:
    """convexp's prepared build into the fresh folder ``cache``; its statistics."""
    from ..tasks.pretraining.pretraining import prepare_pretraining_data

    data_cfg = {"source": "files", "path": str(corpus), "val_docs": VAL_DOCS, "examples": examples,
                "num_proc": processes}  # fmt: skip
    data = prepare_pretraining_data(data_cfg, {"kind": "pretrained", "path": str(vocab)}, seq_len, cache, seed=0)
    return data.stats


def streaming_rows(corpus: Path, vocab: Path, seq_len: int, examples: str, store: Path, repeats: int = 2) -> dict:
    """The streaming rows (``tasks/pretraining/readers.py``): seconds for one reader's whole pass
    and for reader 0 of 4's (what each of 4 ranks or loader workers reads: the corpus is one file,
    so it reads the text and tokenises 1 chunk in 4); with the chunk store (in the fresh folder
    ``store``): the first pass, which fills it, and a later one, which reads it; and the first block
    after resuming at a depth and at ten times it (a twentieth and a half of the pass; the positions
    are made first, untimed), rebuilding the chunk it stopped in (``data.store_chunks=false``) and
    reading it from the store, best of ``repeats`` interleaved rounds."""
    from ..tasks.pretraining import readers  # noqa: F401 - imported before the clock starts (it imports Lightning)
    from ..tasks.pretraining.streaming import prepare_streaming

    def data(**settings):
        cfg = {"source": "files", "path": str(corpus), "val_docs": VAL_DOCS, "examples": examples, "streaming": True,
               **settings}  # fmt: skip
        return prepare_streaming(cfg, {"kind": "pretrained", "path": str(vocab)}, seq_len, store, 0).train

    stream, stored = data(store_chunks=False), data(store_chunks=True)

    def blocks(examples, r: int, readers: int) -> int:
        return sum(len(chunk) for _, chunk in examples.reader(r, readers).chunks(passes=1))

    whole_s, n = _timed(lambda: blocks(stream, 0, 1))
    shard_s, n_shard = _timed(lambda: blocks(stream, 0, 4))
    fill_s, _ = _timed(lambda: blocks(stored, 0, 1))
    stored_s, _ = _timed(lambda: blocks(stored, 0, 1))
    depth = max(1, n // 20)
    it = stream.reader(0, 1).batches(depth)
    positions = [at for _, (_, at) in zip(range(10), it)]  # after depth, ..., 10 x depth blocks
    resume: dict[str, list[list[float]]] = {"rebuilt": [[], []], "stored": [[], []]}
    for _ in range(repeats):
        for name, examples in (("rebuilt", stream), ("stored", stored)):
            for k, at in enumerate((positions[0], positions[9])):
                resume[name][k].append(_timed(lambda: next(examples.reader(0, 1, at).batches(1)))[0])
    return {"blocks": n, "whole_stream_s": whole_s, "shard_blocks": n_shard, "shard_of_4_s": shard_s,
            "store_fill_s": fill_s, "store_pass_s": stored_s, "resume_depths": [depth, 10 * depth],
            "first_block_after_resume_s": [min(t) for t in resume["rebuilt"]],
            "first_block_after_resume_stored_s": [min(t) for t in resume["stored"]]}  # fmt: skip


def bench_data(size: int = 20_000_000, vocab: str | None = None, seq_len: int = 128, examples: str = "packed",
               processes: int | None = None, repeats: int = 2, out: str | None = None,
               workdir: str | None = None, hf: bool = True) -> dict:  # fmt: skip
    """Make the corpus (and vocabulary), time every row, write the record (``out``) and print the table."""
    import datasets

    from ..train.accel import usable_cores
    from .finetune import write_record

    datasets.disable_progress_bars()
    from .sweep import device_name

    n_proc = processes or usable_cores()
    if hf:
        try:
            import transformers  # noqa: F401
        except ImportError:
            raise UserError("bench data compares with Hugging Face's run_mlm: pip install 'convexp[bench]' (or --skip-hf)")
    with work_folder(workdir, "convexp-bench-data-") as work:
        corpus = work / f"corpus-{size}.jsonl"
        if not corpus.exists():
            write_corpus(corpus, size)
        vocab_path = Path(vocab) if vocab else work / "vocab" / "vocab.txt"
        if not vocab_path.exists():
            if vocab:
                raise UserError(f"--vocab {vocab}: no such file; give a WordPiece vocab.txt (or leave --vocab out)")
            train_vocab(corpus, vocab_path.parent)
        texts = [json.loads(line)["text"] for line in corpus.open()]
        convexp_build(corpus, vocab_path, seq_len, examples, 1, work / "warm")  # the corpus's Arrow cache, warm
        rows: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        tokens, stats = 0, {}
        for r in range(repeats):
            seconds, tokens = _timed(lambda: tokenizer_alone(texts, vocab_path), cpu.setdefault("tokenizer", []))
            rows.setdefault("tokenizer", []).append(seconds)
            for p in dict.fromkeys((1, n_proc)):
                seconds, stats = _timed(lambda: convexp_build(corpus, vocab_path, seq_len, examples, p, work / f"c{r}-{p}"),
                                        cpu.setdefault(f"convexp x{p}", []))  # fmt: skip
                rows.setdefault(f"convexp x{p}", []).append(seconds)
            if hf:
                from .hf_mlm import run_mlm_blocks

                seconds, _ = _timed(lambda: run_mlm_blocks(corpus, vocab_path, seq_len, n_proc, work / f"hf{r}"),
                                    cpu.setdefault(f"run_mlm x{n_proc}", []))  # fmt: skip
                rows.setdefault(f"run_mlm x{n_proc}", []).append(seconds)
        streaming = streaming_rows(corpus, vocab_path, seq_len, examples, work / "store", repeats)
    best = {k: min(v) for k, v in rows.items()}
    rate = {k: tokens / s for k, s in best.items()}
    stored = streaming["first_block_after_resume_stored_s"]
    ratios = {"convexp/tokenizer": rate[f"convexp x{n_proc}"] / rate["tokenizer"],
              "shard/whole": streaming["shard_of_4_s"] / streaming["whole_stream_s"],
              "deep/shallow resume": streaming["first_block_after_resume_s"][1] / streaming["first_block_after_resume_s"][0],
              "deep resume s": streaming["first_block_after_resume_s"][1],
              "deep/shallow resume, stored": stored[1] / stored[0], "deep resume s, stored": stored[1]}  # fmt: skip
    if hf:
        ratios["convexp/run_mlm"] = rate[f"convexp x{n_proc}"] / rate[f"run_mlm x{n_proc}"]
    met = {k: (v >= GOALS[k][1] if GOALS[k][0] == ">=" else v <= GOALS[k][1]) for k, v in ratios.items()}
    record = {
        "benchmark": "data",
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": device_name(False), "cores": usable_cores(), "processes": n_proc, "load_average": os.getloadavg(),
        "corpus": {"bytes": size, "documents": len(texts), "tokens": tokens, "vocab": str(vocab or "trained (30,522)")},
        "seq_len": seq_len, "examples": examples, "repeats": repeats,
        "seconds": rows, "tokens_per_s": rate, "cpu_seconds": cpu,
        "tokens_per_cpu_s": {k: tokens / min(v) for k, v in cpu.items()},  # the work itself, whatever the load
        "build_stats": {k: stats.get(k) for k in ("num_train_blocks", "num_tokens")},
        "streaming": streaming, "ratios": ratios, "goals": {k: f"{GOALS[k][0]} {GOALS[k][1]}" for k in ratios}, "met": met,
    }  # fmt: skip
    write_record(record, out)
    print_table(record)
    return record


def print_table(record: dict) -> None:
    from rich.table import Table

    from .step import console

    c = record["corpus"]
    table = Table(title=f"bench data: {c['documents']:,} documents, {c['tokens']:,} tokens, seq_len {record['seq_len']}, "
                        f"{record['examples']}; {record['cpu']}, {record['cores']} cores")  # fmt: skip
    table.add_column("what")
    table.add_column("rate / time", justify="right")
    for name, r in record["tokens_per_s"].items():
        table.add_row(name, f"{r / 1e6:.2f} M tokens/s")
    s = record["streaming"]
    table.add_row(f"streaming: whole stream ({s['blocks']:,} blocks)", f"{s['whole_stream_s']:.2f} s")
    table.add_row(f"streaming: shard 0 of 4 ({s['shard_blocks']:,} blocks)", f"{s['shard_of_4_s']:.2f} s")
    table.add_row("streaming: the first pass, filling the chunk store", f"{s['store_fill_s']:.2f} s")
    table.add_row("streaming: a later pass, from the chunk store", f"{s['store_pass_s']:.2f} s")
    for depth, t, st in zip(s["resume_depths"], s["first_block_after_resume_s"], s["first_block_after_resume_stored_s"]):
        table.add_row(f"streaming: first block after resuming at {depth:,} (rebuilt / stored)", f"{t:.2f} / {st:.3f} s")
    for k, v in record["ratios"].items():
        table.add_row(f"{k} (goal {record['goals'][k]})", f"{v:.2f} {'met' if record['met'][k] else 'NOT met'}")
    console().print(table)
