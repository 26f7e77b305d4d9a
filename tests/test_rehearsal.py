"""A paper-path rehearsal (slow tier): a ``scale=paper`` pre-training recipe - ConvBERT's ELECTRA
one (OpenWebText, streamed) and Chang et al.'s MLM one (BookCorpus + WikiText-103, prepared) -
with only its sizes overridden (model width, steps, batch, lengths, intervals, vocabulary), on two
gloo ranks, from local parquet shards laid out as the hub's repositories are and read the way a
hub corpus is (``load_dataset(<folder>)``, a config's ``data_files`` in its README), killed once mid-run
(SIGKILL of the whole job when a checkpoint file appears) and resumed, then one of its
fine-tunes. The same code paths a paper run takes: hub loading at a revision, streaming readers
sharded over ranks x loader workers keeping their chunks in the chunk store, the data position in
the checkpoint, the resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import convexp, run_dirs, write_vocab

from convexp.data.synthetic import synthetic_corpus, vocabulary_words

pytestmark = pytest.mark.slow

SIZES = [  # the recipe's sizes, shrunk; nothing else of it changes
    "seq_len=32", "model.num_layers=1", "model.hidden_size=32", "model.embedding_size=16",
    "model.intermediate_size=64", "trainer.batch_size=16", "trainer.max_steps=200", "optim.warmup_steps=20",
    "trainer.val_every_n_steps=100", "trainer.val_batches=2", "trainer.checkpoint_every_n_steps=50",
    "trainer.log_every_n_steps=25", "data.val_docs=50",
]  # fmt: skip
TWO_RANKS = ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp"]


def parquet(folder: Path, texts: list[str], shards: int) -> None:
    """``texts`` as the hub's parquet shards: <folder>/train-0000k-of-0000n.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    n = -(-len(texts) // shards)
    for k in range(shards):
        pq.write_table(pa.table({"text": texts[k * n : (k + 1) * n]}), folder / f"train-{k:05d}-of-{shards:05d}.parquet")


def killed_once(args: list[str], outputs: Path, checkpoint: str) -> None:
    """Run ``convexp pretrain ARGS`` (both ranks in one session) and SIGKILL every process of it as
    soon as a checkpoint file matching ``checkpoint`` is there, as a cluster preempts a job."""
    env = {**os.environ, "CONVEXP_OUTPUTS": str(outputs), "WANDB_MODE": "offline"}
    job = subprocess.Popen(
        [sys.executable, "-m", "convexp.cli", "pretrain", *args], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while not list(outputs.glob(f"runs/pretrain/*/checkpoints/{checkpoint}")) and job.poll() is None:
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert job.returncode == -signal.SIGKILL, "the run ended before it was killed"


def rehearse(args: list[str], outputs: Path) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """Kill the run when its step-100 checkpoint appears, resume it; the run, the resume's output and
    its record entry."""
    killed_once(args, outputs, "step=100.ckpt")
    [run] = run_dirs(outputs)
    assert not (run / "metrics.json").exists()
    resumed = convexp("pretrain", *args, outputs=outputs, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 200 and metrics["val_loss"] is not None
    record = json.loads((run / "record.json").read_text())
    [entry] = record["resumed"]  # the main process's (the other rank re-runs the command)
    assert entry["hub_revisions"] and all(r["revision"] is None for r in entry["hub_revisions"].values())
    return run, resumed, entry


def test_convbert_electra_recipe_streams_resumes_and_fine_tunes(tmp_path):
    started = time.time()
    docs = synthetic_corpus(3200, seed=5)
    parquet(tmp_path / "openwebtext" / "data", docs, shards=4)  # 2 ranks x 2 loader workers (the paper trainer's)
    vocab = write_vocab(tmp_path / "vocab.txt", sorted(vocabulary_words()) + [".", ","])
    args = [
        "scale=paper", "data=openwebtext", "tokenizer=bert_uncased", "model=convbert_small", "objective=electra",
        f"data.path={tmp_path / 'openwebtext'}", f"tokenizer.path={vocab}", "tokenizer.vocab_size=null",
        *SIZES, *TWO_RANKS,
    ]  # fmt: skip
    run, resumed, record = rehearse(args, tmp_path / "out")
    assert [r["path"] for r in record["hub_read"]] == [str(tmp_path / "openwebtext")]  # read as a hub corpus is
    assert "note:" not in resumed.stderr  # each reader reads its own shard, from the position it kept
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["PretrainData"]
    assert state["layout"] == [2, 2] and sorted(state["positions"]) == [0, 1, 2, 3]
    assert {p["shard_pos"] for p in state["positions"].values()} == {0}  # one shard each, in its first pass
    [store] = (tmp_path / "out" / "cache").glob("chunks-*")  # each reader keeps the chunk it made
    assert sorted(p.relative_to(store).as_posix() for p in store.rglob("*.arrow")) == [f"{s}/0.arrow" for s in range(4)]

    ft = convexp(
        "finetune", "glue", "scale=paper", "protocol=convbert", "task=rte", f"init={run}", "seeds=[42]", "grid=false",
        "epochs=1", "batch_size=16", "task.max_len=48", "glue.source=synthetic", "glue.synthetic_size=200",
        "trainer.accelerator=cpu",
        outputs=tmp_path / "out", timeout=900,
    )  # fmt: skip
    assert ft.returncode == 0, ft.stderr[-3000:]
    [finetuned] = (tmp_path / "out" / "runs" / "finetune").glob("*rte*")
    assert json.loads((finetuned / "status.json").read_text())["status"] == "finished"
    print(f"rehearsal (ConvBERT, ELECTRA): {time.time() - started:.0f} s")


def test_chang_mlm_recipe_prepared_from_two_hub_parts_resumes(tmp_path):
    started = time.time()
    sentences = [s.strip() + "." for d in synthetic_corpus(600, seed=6) for s in d.split(".") if s.strip()]
    parquet(tmp_path / "bookcorpus" / "data", sentences, shards=2)  # one sentence a row, no book boundaries
    wiki = tmp_path / "wikitext"
    parquet(wiki / "wikitext-103-raw-v1", synthetic_corpus(300, seed=7), shards=2)
    (wiki / "README.md").write_text(  # the hub repository's config, as Salesforce/wikitext declares it
        "---\nconfigs:\n- config_name: wikitext-103-raw-v1\n  data_files:\n  - split: train\n"
        "    path: wikitext-103-raw-v1/train-*.parquet\n---\n"
    )
    args = [
        "scale=paper", "data=bookcorpus_wikitext103", "objective=mlm", "tokenizer=unigram",
        "data.examples=sentence_pairs", "model=chang_small", f"data.parts.0.path={tmp_path / 'bookcorpus'}",
        f"data.parts.1.path={wiki}", "tokenizer.vocab_size=400", *SIZES, *TWO_RANKS,
    ]  # fmt: skip
    _, _, record = rehearse(args, tmp_path / "out")
    assert sorted(record["hub_revisions"]) == ["data.parts.0", "data.parts.1"]
    print(f"rehearsal (Chang et al., MLM): {time.time() - started:.0f} s")
