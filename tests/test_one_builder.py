"""A cache entry that many processes ask for at once (every DDP rank of a run that torchrun or SLURM
starts) is built by one of them (``atomic.building``): the others wait on its lock, then load it, and
a builder that dies releases the lock. Two plain processes race ``prepare_pretraining_data`` and
``prepare_streaming``, then a GLUE task's tokenised splits and SQuAD's windows, with spies counting
what they build."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

WAIT_S = 120  # a safety net against a hung test only: the spies wait on the other process's state


_ORIGINALS: dict = {}


def _note(log: Path, line: str) -> None:
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {line}\n")


def _wait_for_the_other(log: Path, k: str) -> None:
    """Until both processes have asked for the lock of a ``k`` entry, or both have built one."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = [line.split() for line in log.read_text().splitlines()]
        if len({pid for pid, what, kk in lines if kk == k and what == "lock"}) == 2 or sum(
            what == "build" and kk == k for _, what, kk in lines
        ) == 2:
            return
        time.sleep(0.05)


def _spied(log: Path):
    """Patch this process: each entry lock asked for and each build (tokenizer training, a split's
    examples) appends a line to ``log``; a build then waits until the other process has asked for
    the same kind of entry's lock or built it too (so, without the lock, both would build)."""
    from convexp import atomic
    from convexp.tasks.pretraining import pretraining

    def kind(name: str) -> str:
        return "tokenizer" if name.startswith("tokenizer-") else "examples"

    originals = _ORIGINALS.setdefault(
        "all", (getattr(atomic, "entry_lock", None), pretraining.build_tokenizer, pretraining.build_split)
    )
    entry_lock, build_tokenizer, build_split = originals

    def logged_lock(final):
        _note(log, f"lock {kind(Path(final).name)}")
        return entry_lock(final)

    atomic.entry_lock = logged_lock

    def tokenizer_spy(*args, **kwargs):
        _note(log, "build tokenizer")
        _wait_for_the_other(log, "tokenizer")
        return build_tokenizer(*args, **kwargs)

    def split_spy(texts, tokenizer, seq_len, layout, seed, path, processes):
        if path.name in ("train.arrow", "validation.arrow"):  # the prepared examples; streaming's validation
            _note(log, "build examples")
            _wait_for_the_other(log, "examples")
        return build_split(texts, tokenizer, seq_len, layout, seed, path, processes)

    pretraining.build_tokenizer, pretraining.build_split = tokenizer_spy, split_spy


def _rank(root: str, out: str) -> None:
    """One of the racing processes: the prepared data, then a streaming corpus's, both with a
    trained tokenizer; what it got is written to ``out``."""
    from convexp.tasks.pretraining.pretraining import prepare_pretraining_data
    from convexp.tasks.pretraining.streaming import prepare_streaming

    root, got = Path(root), {}
    for name, prepare, data in (
        ("prepared", prepare_pretraining_data, {"num_docs": 300, "val_docs": 20, "num_proc": 1}),
        ("streaming", prepare_streaming, {"num_docs": 300, "val_docs": 20, "streaming": True}),
    ):
        _spied(root / f"{name}.log")
        d = prepare(data, {"kind": "wordpiece", "vocab_size": 300}, 32, root / "cache", seed=0)
        got[name] = {"val": d.val[:]["input_ids"], "vocab": d.tokenizer.to_json(),
                     "cached": d.stats["cached"]}  # fmt: skip
    Path(out).write_text(json.dumps(got))


@pytest.mark.slow  # two processes build
def test_two_processes_asking_for_the_same_entries_build_each_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=_rank, args=(str(tmp_path), str(tmp_path / f"rank{r}.json"))) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(4 * WAIT_S)
    assert [p.exitcode for p in ranks] == [0, 0]
    for name in ("prepared", "streaming"):
        lines = [line.split()[1:] for line in (tmp_path / f"{name}.log").read_text().splitlines()]
        assert lines.count(["build", "tokenizer"]) == 1 and lines.count(["build", "examples"]) == 1, (name, lines)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert got[0]["prepared"]["val"] == got[1]["prepared"]["val"] and got[0]["streaming"] == got[1]["streaming"]
    assert sorted(g["prepared"]["cached"] for g in got) == [False, True]  # one built, the other loaded


def _hold(final: str, held: str) -> None:
    from convexp.atomic import entry_lock

    with entry_lock(Path(final)):
        Path(held).touch()
        time.sleep(WAIT_S)


def test_a_builder_that_dies_releases_the_entry(tmp_path):
    from convexp.atomic import building

    final, held = tmp_path / "entry", tmp_path / "held"
    holder = multiprocessing.get_context("spawn").Process(target=_hold, args=(str(final), str(held)))
    holder.start()
    deadline = time.monotonic() + WAIT_S
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.exists()
    os.kill(holder.pid, signal.SIGKILL)  # killed while building: its lock dies with it
    holder.join()
    with building(final) as tmp:
        (tmp / "done").touch()
    assert (final / "done").exists()


def _finetune_rank(root: str, out: str) -> None:
    """One of two processes asking at once for a GLUE task's tokenised splits and SQuAD's windows
    (each DDP rank of a fine-tune does): each build notes itself in ``fine-tuning.log`` and waits
    until the other process has asked for the entry's lock or built it too."""
    from convexp import atomic
    from convexp.data.tokenizer import Tokenizer
    from convexp.tasks.classification import encoding, loading
    from convexp.tasks.classification.registry import get_task
    from convexp.tasks.squad import features
    from convexp.tasks.squad.data import synthetic_squad

    root, log = Path(root), Path(root) / "fine-tuning.log"

    entry_lock, tokenize_split, squad_features = atomic.entry_lock, encoding._tokenize_split, features.squad_features

    def logged_lock(final):
        _note(log, f"lock {'squad' if Path(final).name.startswith('squad') else 'glue'}")
        return entry_lock(final)

    def spy(kind: str, build):
        def built(*args, **kwargs):
            _note(log, f"build {kind}")
            _wait_for_the_other(log, kind)
            return build(*args, **kwargs)

        return built

    atomic.entry_lock = logged_lock
    encoding._tokenize_split = spy("glue", tokenize_split)
    features.squad_features = spy("squad", squad_features)
    records = synthetic_squad(20, 0)["train"]
    task = get_task("sst2")
    raw = loading.load_task(task, {"source": "synthetic", "synthetic_size": 40, "seed": 0, "path": None})
    words = sorted({w for r in records for w in (r["context"] + " " + r["question"]).replace("?", " ").split()})
    words += sorted({w for ds in raw.values() for row in ds for w in row["sentence"].split()} - set(words))
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", *words]))
    tok = Tokenizer.load(root / "vocab.txt")
    glue = encoding.tokenize_task(task, raw, tok, 32, root / "cache")
    window = {"max_len": 48, "doc_stride": 16, "max_query_len": 64, "stride_mode": "step"}
    squad = features.cached_features(records, tok, root / "cache", **window)
    got = {"glue": {name: ds[:]["input_ids"] for name, ds in glue.items()}, "squad": [f["input_ids"] for f in squad]}
    Path(out).write_text(json.dumps(got))


def test_two_ranks_of_a_fine_tune_tokenise_its_task_once(tmp_path):
    (tmp_path / "fine-tuning.log").touch()
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=_finetune_rank, args=(str(tmp_path), str(tmp_path / f"rank{r}.json")))
             for r in range(2)]  # fmt: skip
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(4 * WAIT_S)
    assert [p.exitcode for p in ranks] == [0, 0]
    lines = [line.split()[1:] for line in (tmp_path / "fine-tuning.log").read_text().splitlines()]
    lines = [line.split() for line in (tmp_path / "fine-tuning.log").read_text().splitlines()]
    builders = {k: {pid for pid, what, kk in lines if what == "build" and kk == k} for k in ("glue", "squad")}
    assert [len(builders["glue"]), len(builders["squad"])] == [1, 1], lines  # one process built each
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert got[0] == got[1]
