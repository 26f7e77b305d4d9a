"""The prepared build (tasks/pretraining/build.py): the same rows on any number of processes,
compact on disk, read by the stage as the packers' rows; a resumed run's batches are the
uninterrupted run's, on one rank and on two."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import TINY, convexp, example_rows, run_dirs

from convexp.data.errors import DataError
from convexp.tasks.pretraining import build
from convexp.tasks.pretraining.chunks import CHUNK_DOCS
from convexp.tasks.pretraining.pretraining import prepare_pretraining_data

DOCS = 2 * CHUNK_DOCS + 100  # three chunks of training documents
SYNTH = {"source": "synthetic", "num_docs": DOCS, "seed": 0, "val_docs": 20}
WORDPIECE = {"kind": "wordpiece", "vocab_size": 600}
L, B = 128, 32  # row length, batch per rank


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The same corpus prepared on 1 process and on 2 (nsp: every column, pair labels too)."""
    root = tmp_path_factory.mktemp("prepared")
    calls = []
    pooled = build._pooled

    def spy(*args):
        calls.append(args[-1])  # the process count
        yield from pooled(*args)

    build._pooled = spy
    try:
        one = prepare_pretraining_data({**SYNTH, "num_proc": 1}, WORDPIECE, L, root / "one", 3, "nsp")
        two = prepare_pretraining_data({**SYNTH, "num_proc": 2}, WORDPIECE, L, root / "two", 3, "nsp")
    finally:
        build._pooled = pooled
    assert calls == [2], "the two-process build did not use its pool"
    return one, two, root


@pytest.mark.slow  # builds on several processes
def test_the_rows_do_not_depend_on_the_process_count(prepared):
    one, two, _ = prepared
    assert one.stats["num_train_docs"] == DOCS - 20 and one.stats["num_train_blocks"] > 1000
    for split in ("train", "val"):
        a, b = getattr(one, split), getattr(two, split)
        assert a.features == b.features and len(a) == len(b)
        for column in a.column_names:
            assert np.array_equal(a.with_format("numpy")[column], b.with_format("numpy")[column]), (split, column)
    same = ("num_tokens", "unigram_entropy", "num_train_docs", "num_val_docs", "mean_example_tokens")
    assert {k: one.stats[k] for k in same} == {k: two.stats[k] for k in same}
    rows = example_rows(one.train)
    assert one.stats["mean_example_tokens"] == pytest.approx(np.mean([sum(r["attention_mask"]) for r in rows]))


def test_the_prepared_rows_are_compact_and_the_cache_key_ignores_num_proc(prepared):
    one, _, root = prepared
    assert str(one.train.features["input_ids"].feature.dtype) == "uint16"
    assert {str(one.train.features[c].dtype) for c in ("length", "b_start")} == {"uint16"}
    assert str(one.train.features["pair_label"].dtype) == "int8"
    [arrow] = (root / "one").glob("*/train.arrow")
    size = arrow.stat().st_size  # what the dry run states beforehand: 2 bytes a token, 5 a row, headers
    assert len(one.train) * (L * 2 + 5) < size <= build.prepared_bytes(len(one.train), L, 600, True) < 1.01 * size
    again = prepare_pretraining_data({**SYNTH, "num_proc": 2}, WORDPIECE, L, root / "one", 3, "nsp")
    assert again.stats["cached"] is True and again.stats["cache_path"] == one.stats["cache_path"]


def test_num_proc_zero_is_refused_and_not_in_the_run_id(tmp_path):
    with pytest.raises(DataError, match="data.num_proc must be a positive number"):
        build.build_processes(0)
    assert build.build_processes(3) == 3 and build.build_processes("auto") >= 1
    from convexp.config.compose import compose_stage
    from convexp.tasks.pretraining.runs import pretrain_run

    os.environ.setdefault("CONVEXP_OUTPUTS", str(tmp_path))
    base = pretrain_run(compose_stage("pretrain", [*TINY, f"outputs={tmp_path}"]))
    other = pretrain_run(compose_stage("pretrain", [*TINY, f"outputs={tmp_path}", "data.num_proc=3"]))
    assert base.dir == other.dir


def batches(data, columns, world: int, rank: int, step: int, count: int) -> list[dict]:
    """``count`` training batches of rank ``rank`` of ``world`` from optimizer step ``step``, as
    the stage's data module makes them (a run resumed at ``step`` starts there)."""
    from convexp.tasks.pretraining.batches import Masker
    from convexp.tasks.pretraining.objectives import TokenInfo
    from convexp.tasks.pretraining.stage import PretrainData

    masker = Masker(TokenInfo(600, 4, (0, 1, 2, 3, 4), None), 0.15, 0.8, 0.1, False, False, None)
    module = PretrainData(data.train, data.val, 5, B, 0, columns, masker)
    module.trainer = SimpleNamespace(global_step=step, accumulate_grad_batches=1, world_size=world, global_rank=rank)
    it = iter(module.train_dataloader())
    return [next(it) for _ in range(count)]


def test_resumed_batches_are_the_uninterrupted_ones_on_one_and_two_ranks(prepared):
    """On 1 rank and on each of 2, resumed at a step past an epoch's end: the same batches (rows
    and masks) as the uninterrupted run; and the rows are the packers' own (the old int32 rows)."""
    one, _, _ = prepared
    columns = ("input_ids", "attention_mask", "token_type_ids", "pair_label")
    packed = example_rows(one.train)
    for world in (1, 2):
        per_epoch = len(one.train) // (B * world)
        stop = per_epoch + 3  # the interrupted run stopped after this many steps: in the second epoch
        for rank in range(world):
            straight = batches(one, columns, world, rank, 0, stop + 4)
            resumed = batches(one, columns, world, rank, stop, 4)
            for a, b in zip(straight[stop:], resumed):
                assert a.keys() == b.keys() and a["seed"] == b["seed"]
                for k, v in a.items():
                    assert torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k], k
            from convexp.train.streams import PermutedStream

            stream = PermutedStream(one.train, 5, columns)
            for batch in resumed:
                rows = [packed[stream.row_index(int(p))] for p in batch["position"]]
                for k in columns:
                    assert batch[k].tolist() == [r[k] for r in rows], k


def test_a_deep_resume_reads_no_more_than_a_shallow_one(prepared):
    """The cached stream's position is index arithmetic: a resume a hundred epochs in draws one
    permutation (that epoch's), whatever came before."""
    one, _, _ = prepared
    draws = []
    real = torch.randperm
    try:
        torch.randperm = lambda *a, **k: draws.append(a[0]) or real(*a, **k)
        columns = ("input_ids", "attention_mask", "token_type_ids", "pair_label")
        for step in (10, (100 * len(one.train) + len(one.train) // 2) // B):  # epoch 100's middle
            draws.clear()
            batches(one, columns, 1, 0, step, 1)
            assert draws == [len(one.train)]
    finally:
        torch.randperm = real


def metrics(run) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.slow
def test_two_rank_run_killed_and_resumed_ends_as_the_uninterrupted_one(tmp_path):
    """Two gloo ranks on the CPU (ddp_spawn), the prepared corpus: killed after a checkpoint,
    resumed, the run's logged losses from there on and its final ones are the uninterrupted run's."""
    args = [
        *TINY, "trainer.max_steps=60", "trainer.checkpoint_every_n_steps=20", "trainer.val_every_n_steps=30",
        "trainer.log_every_n_steps=1", "trainer.deterministic=true", "trainer.strategy=ddp_spawn",
        "trainer.devices=2", "trainer.accelerator=cpu",
    ]  # fmt: skip
    ref = convexp("pretrain", *args, outputs=tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = tmp_path / "killed"
    env = {**os.environ, "CONVEXP_OUTPUTS": str(out), "WANDB_MODE": "offline"}
    proc = subprocess.Popen([sys.executable, "-m", "convexp.cli", "pretrain", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    while proc.poll() is None and not list(out.glob("runs/pretrain/*/checkpoints/step=20.ckpt")):
        time.sleep(0.02)
    time.sleep(0.3)  # the checkpoint file complete
    os.killpg(proc.pid, signal.SIGKILL)  # the parent and both ranks
    proc.wait()
    [run] = run_dirs(out)
    assert not (run / "metrics.json").exists(), "the run finished before it could be killed"
    resumed = convexp("pretrain", *args, outputs=out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = metrics(run_dirs(tmp_path / "ref")[0]), metrics(run)
    assert b["steps"] == a["steps"] == 60
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-5)
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)

    def losses(r) -> dict[int, float]:
        import csv

        rows = csv.DictReader((r / "csv" / "metrics.csv").open())
        return {int(x["step"]): float(x["train/loss"]) for x in rows if x.get("train/loss")}

    after = {s: v for s, v in losses(run).items() if s > 20}
    assert len(after) > 30 and after == pytest.approx({s: losses(run_dirs(tmp_path / "ref")[0])[s] for s in after}, rel=1e-5)
