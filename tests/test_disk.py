"""A sweep states its disk before it runs (--dry-run's bill, sweep/disk.py) and what it uses so far
(--status): pre-training data and checkpoints, fine-tuning results and the weights it keeps."""

from __future__ import annotations

import pytest

from convexp.sweep.disk import CORPORA, bill_total, size, sweep_bill
from convexp.tasks.pretraining.build import prepared_bytes
from convexp.sweep.plan import build_plan
from convexp.sweep.show import bill_lines, disk_line
from convexp.sweep.spec import load_sweep


def test_a_paper_sweep_keeps_a_small_part_of_what_every_weight_would_take(outputs):
    plan = build_plan(load_sweep("convbert-sizes"), ["scale=paper", "variants=[base]"])
    stages, data = sweep_bill(plan)
    ft = stages["finetune"]
    assert ft.kept_runs == 0 and ft.every_weight > 100 * ft.disk  # nothing reads them: results only
    default, every = bill_total(stages, data), bill_total(stages, data, every_weight=True)
    assert default <= 0.05 * every
    # ConvBERT-base fine-tuned: 4 bytes a parameter (106M + its head) and the tokenizer
    base = next(n for n in plan.nodes.values() if n.stage == "finetune" and n.variant == "base")
    assert 400e6 < base.weights < 450e6
    lines = bill_lines(plan, 100)
    assert all(len(line) <= 100 for line in lines)
    assert any(line.startswith("  disk in total ") and "(keep_weights=all)" in line for line in lines), lines
    text = " ".join(line.strip() for line in lines)
    assert "data openwebtext: 9.04e+09 tokens, 8,013,769 documents" in text, text
    # streamed with the chunk store (the default): the store keeps every training example once, as
    # the prepared build would (build.prepared_bytes), and the total counts it
    [store] = data
    assert "streamed into its chunk store (data.store_chunks): 7.06e+07 examples, 18.4 GB" in text and store.examples.streamed
    assert store.prepared_bytes == store.examples.bytes == pytest.approx(7.06e7 * (128 * 2 + 4), rel=0.01)
    assert default >= store.prepared_bytes + stages["pretrain"].disk + ft.disk


def test_a_streamed_corpus_without_its_chunk_store_keeps_nothing(outputs):
    args = ["scale=paper", "variants=[base]", "tasks=[rte]"]
    stored = sweep_bill(build_plan(load_sweep("convbert-sizes"), args))
    plan = build_plan(load_sweep("convbert-sizes"), [*args, "data.store_chunks=false"])
    stages, [data] = sweep_bill(plan)
    assert data.prepared_bytes == 0 and data.examples.bytes == stored[1][0].prepared_bytes
    assert bill_total(stages, [data]) == pytest.approx(bill_total(*stored) - data.examples.bytes)
    text = " ".join(line.strip() for line in bill_lines(plan, 100))
    assert "streamed, nothing stored (data.store_chunks=false) prepared instead (data.streaming=false): 7.06e+07 examples" in text


def test_prepared_examples_take_two_bytes_a_position_and_four_a_row(outputs):
    plan = build_plan(load_sweep("key-based-conv"), ["scale=paper", "variants=[composite]", "tasks=[rte]"])
    [(name, corpus, prepared)] = [(d.name, d.corpus, d.prepared_bytes) for d in sweep_bill(plan)[1]]
    assert name == "bookcorpus_wikitext103" and corpus is CORPORA[name]
    # Chang et al.'s 31M sentence pairs, 2 bytes a position and 4 a row (and Arrow's headers)
    assert prepared == prepared_bytes(31_000_000, 128, 30_004, False) == pytest.approx(31e6 * (128 * 2 + 4), rel=3e-3)
    smoke = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]", "tasks=[rte]"])
    [d] = sweep_bill(smoke)[1]
    assert d.corpus.documents == 20_000 and d.cache_bytes == 0  # the synthetic corpus: computed, nothing downloaded


def test_status_says_the_disk_the_runs_use(outputs):
    plan = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]", "tasks=[rte]"])
    run = plan.nodes["pretrain/composite"].runs[0]
    (run.dir / "checkpoints").mkdir(parents=True)
    (run.dir / "checkpoints" / "step=9.ckpt").write_bytes(b"x" * 3_000_000)
    (run.dir / "checkpoints" / "last.ckpt").symlink_to("step=9.ckpt")  # counted once
    line = disk_line(plan)
    assert line.startswith(f"disk: {size(3_000_000)} used (pre-training {size(3_000_000)}, fine-tuning 0 B")
    assert f"≈ {size(bill_total(*sweep_bill(plan)))} when the sweep has run" in line
