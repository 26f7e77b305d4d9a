"""`convexp pretrain` end to end, offline: runs, resumes after SIGKILL, DDP, W&B offline, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, convexp, kill_between_checkpoints, run_dirs
from wandb_records import config_and_history

def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_pretrain_runs_exports_and_logs_offline(tmp_path, objective):
    res = convexp(
        "pretrain",
        *TINY,
        f"objective={objective}",
        "trainer.max_steps=30",
        "trainer.val_every_n_steps=15",
        outputs=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    m = metrics(run)
    assert m["steps"] == 30 and m["val_loss"] is not None and m["tokens_per_s"] > 0
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    # exported model: weights, model config and tokenizer, loadable by convexp
    from convexp.models.files import is_model_dir
    from convexp.models.io import read_model_config

    assert is_model_dir(run / "model") and (run / "model" / "tokenizer.json").exists()
    assert read_model_config(run / "model").vocab_size == 400
    # ... and a Hugging Face ConvBERT directory that transformers loads
    from transformers import AutoTokenizer, ConvBertModel

    hf = ConvBertModel.from_pretrained(run / "hf")
    tok = AutoTokenizer.from_pretrained(run / "hf")  # tokenizer.json + tokenizer_config.json
    assert hf.config.vocab_size == 400 and tok.vocab_size == 400
    assert tok.model_max_length == hf.config.max_position_embeddings and tok.mask_token == "[MASK]"
    assert tok("The")["input_ids"][0] == tok.cls_token_id and tok.tokenize("THE") == tok.tokenize("the")
    # CSV metrics and the W&B offline run with its config and logged metrics
    assert "train/loss" in (run / "csv" / "metrics.csv").read_text()
    [wb] = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    config, history = config_and_history(wb)
    assert config["objective"]["name"] == objective and config["model"]["hidden_size"] == 32
    logged = {k for row in history for k in row}
    assert {"train/loss", "val/loss", "train/tokens_per_s"} <= logged
    # the same command again: nothing to do
    again = convexp(
        "pretrain",
        *TINY,
        f"objective={objective}",
        "trainer.max_steps=30",
        "trainer.val_every_n_steps=15",
        outputs=tmp_path,
    )
    assert again.returncode == 0 and "already finished" in again.stdout
    assert len(run_dirs(tmp_path)) == 1


@pytest.fixture
def parent_wandb_service():
    """``WANDB_SERVICE`` of a W&B service another process runs, as a notebook or a test runner that
    used wandb hands it to the convexp processes it starts."""
    code = "import os, time, wandb; wandb.setup(); print(os.environ['WANDB_SERVICE'], flush=True); time.sleep(900)"
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        yield {"WANDB_SERVICE": parent.stdout.readline().strip()}
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_result(tmp_path, parent_wandb_service):
    """Under a parent's W&B service too: the killed run's ID stays registered in a service it
    shared, which would refuse the resume."""
    env = parent_wandb_service
    args = [
        *TINY,
        "trainer.max_steps=300",
        "trainer.checkpoint_every_n_steps=40",
        "trainer.val_every_n_steps=100",
        "trainer.deterministic=true",
    ]
    ref = convexp("pretrain", *args, outputs=tmp_path / "ref", env=env)
    assert ref.returncode == 0, ref.stderr[-3000:]

    out = tmp_path / "killed"
    kill_between_checkpoints(["pretrain", *args], out, tmp_path / "hold", env=env)
    [run] = run_dirs(out)
    assert not (run / "metrics.json").exists(), "the run finished before it could be killed"

    resumed = convexp("pretrain", *args, outputs=out, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = metrics(run_dirs(tmp_path / "ref")[0]), metrics(run)
    assert b["steps"] == a["steps"] == 300
    assert b["final_train_loss"] == pytest.approx(a["final_train_loss"], rel=1e-5)
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_ddp_two_processes_on_cpu(tmp_path):
    res = convexp(
        "pretrain",
        *TINY,
        "trainer.max_steps=10",
        "trainer.val_every_n_steps=10",
        "trainer.strategy=ddp_spawn",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        outputs=tmp_path,
    )
    # a child's own last words (an abort message) come before the parent's traceback
    assert res.returncode == 0, res.stderr[:4000] + "\n...\n" + res.stderr[-2000:]
    [run] = run_dirs(tmp_path)
    assert metrics(run)["steps"] == 10


@pytest.mark.parametrize(
    "args, message",
    [
        (["model=nope"], "Could not find 'model/nope'"),
        (["data=files", "data.path=/does/not/exist"], "/does/not/exist"),
        (["trainer.max_step=3"], "Could not override 'trainer.max_step': no such key"),
        (["seq_len=1024"], "max_position_embeddings"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, args, message):
    res = convexp("pretrain", *TINY, *args, outputs=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr[-2000:]


@pytest.mark.slow
def test_empty_corpus_and_vocab_mismatch(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    res = convexp("pretrain", *TINY, "data=files", f"data.path={empty}", outputs=tmp_path)
    assert res.returncode == 2 and "empty" in res.stderr.lower(), res.stderr[-2000:]

    first = convexp("pretrain", *TINY, "trainer.max_steps=2", "trainer.val_every_n_steps=2", outputs=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    res = convexp("pretrain", *TINY, "tokenizer.vocab_size=300", f"init={run}", outputs=tmp_path)
    assert res.returncode == 2 and "vocabulary" in res.stderr, res.stderr[-2000:]
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1
    assert run_dirs(tmp_path) == [run]  # refused before the continuation's run directory is made


def test_cfg_prints_the_composed_config(tmp_path):
    res = convexp("pretrain", "model=chang_small_composite", "objective=electra", "--cfg", outputs=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "fixed_conv: true" in res.stdout and "disc_weight: 50.0" in res.stdout and "choices:" in res.stdout
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, logged",
    [
        (["objective.pair_format=nsp", "data.examples=packed"], "train/pair_loss"),  # ELECTRA's examples: no pair label
        (["objective.pair_format=sop", "objective.whole_word=true", "objective.exact_count=false", "data.examples=packed"],
         "train/pair_loss"),
        (["trainer.precision=bf16-mixed", "model=chang_small_composite_conv_qk"], "train/mlm_loss"),
        (["tokenizer=unigram"], "train/mlm_loss"),
    ],
)
def test_pretrain_options(tmp_path, extra, logged):
    res = convexp(
        "pretrain", *TINY, "trainer.max_steps=6", "trainer.val_every_n_steps=6", *extra, outputs=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    assert metrics(run)["steps"] == 6
    assert logged in (run / "csv" / "metrics.csv").read_text()


@pytest.mark.slow
def test_streaming_corpus(tmp_path):
    from convexp.data.synthetic import synthetic_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in synthetic_corpus(300, seed=1)))
    args = [
        *TINY,
        "data=files",
        f"data.path={corpus}",
        "data.streaming=true",
        "data.val_docs=20",
        "trainer.max_steps=12",
        "trainer.val_every_n_steps=6",
    ]
    res = convexp("pretrain", *args, outputs=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    m = metrics(run)
    assert m["steps"] == 12 and m["val_loss"] is not None and m["data"]["streaming"] is True


@pytest.mark.slow
def test_smoke_scale_learns_well_below_the_unigram_baseline(tmp_path):
    """The README's quick start: `convexp pretrain scale=smoke`, unchanged, on a CPU in minutes."""
    res = convexp("pretrain", "scale=smoke", outputs=tmp_path, env={"WANDB_MODE": "disabled"}, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    m = metrics(run)
    assert m["steps"] == 600
    assert m["val_mlm_loss"] < m["unigram_entropy"] - 1.0, m


def test_mlm_without_pair_head_freezes_its_unused_pooler_and_resumes_older_checkpoints():
    """DDP refuses parameters without a gradient (Chang et al.'s MLM on two ranks failed): the pooler,
    which nothing reads without a pair head, is frozen - AdamW left it as it was anyway - and a
    checkpoint written while it was still in AdamW's groups resumes."""
    import dataclasses

    import torch

    from convexp.config.compose import compose_stage, to_model_config
    from convexp.tasks.pretraining.objectives import TokenInfo
    from convexp.tasks.pretraining.stage import PretrainModule

    cfg = compose_stage("pretrain", [*TINY, "model=chang_small", "objective=mlm"])
    model_cfg = dataclasses.replace(to_model_config(cfg.model), vocab_size=400)
    module = PretrainModule(model_cfg, cfg, TokenInfo(400, 4, (0, 1, 2, 3, 4), None), total_steps=10)
    pooler = module.objective.model.encoder.pooler
    assert not any(p.requires_grad for p in pooler.parameters())
    pooler.requires_grad_(True)  # as older convexp versions built the optimizer
    old = module.configure_optimizers()["optimizer"]
    for p in module.objective.parameters():
        p.grad = None if any(p is q for q in pooler.parameters()) else torch.ones_like(p)
    old.step()
    checkpoint = {"optimizer_states": [old.state_dict()]}
    pooler.requires_grad_(False)
    module.on_load_checkpoint(checkpoint)
    new = module.configure_optimizers()["optimizer"]
    new.load_state_dict(checkpoint["optimizer_states"][0])  # the groups match
    first = next(p for p in module.objective.parameters() if p.requires_grad and p.ndim >= 2)
    assert torch.equal(new.state[first]["exp_avg"], old.state[first]["exp_avg"])
