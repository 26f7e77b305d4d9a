"""`convexp finetune glue` end to end on synthetic GLUE, offline."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from helpers import convexp, kill_when, write_vocab

FAST = ["scale=smoke", "glue.synthetic_size=160", "epochs=1", "batch_size=16", "task.max_len=48"]


def summary_of(outputs: Path) -> dict:
    [s] = (outputs / "runs" / "glue").glob("*/summary.json")
    return json.loads(s.read_text())


def finetune_runs(outputs: Path) -> list[Path]:
    return sorted((outputs / "runs" / "finetune").glob("*"))


@pytest.mark.slow
def test_all_tasks_metrics_submission(tmp_path, pretrained):
    res = convexp("finetune", "glue", "task=all", f"init={pretrained}", *FAST, outputs=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "GLUE, ConvBERT (8 tasks)" in res.stdout
    s = summary_of(tmp_path)
    assert set(s["tasks"]) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"}
    assert set(s["columns"]["chang"]) == {
        "cola",
        "mnli-m",
        "mnli-mm",
        "mrpc",
        "qnli",
        "qqp",
        "rte",
        "sst2",
        "stsb",
    }
    eight = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")  # ConvBERT: MNLI = matched
    assert s["glue"]["convbert_mean"] == pytest.approx(
        statistics.fmean(s["columns"]["convbert"][c]["mean"] for c in eight)
    )
    assert s["glue"]["chang_mean"] == pytest.approx(
        statistics.fmean(v["mean"] for v in s["columns"]["chang"].values())
    )
    # every metric equals an independent computation on the saved dev predictions
    checks = {
        "cola": {"mcc": lambda y, p: matthews_corrcoef(y, p)},
        "sst2": {"accuracy": accuracy_score},
        "mrpc": {"accuracy": accuracy_score, "f1": lambda y, p: f1_score(y, p, zero_division=0)},
        "qqp": {"accuracy": accuracy_score, "f1": lambda y, p: f1_score(y, p, zero_division=0)},
        "stsb": {"pearson": lambda y, p: pearsonr(y, p)[0], "spearman": lambda y, p: spearmanr(y, p)[0]},
        "rte": {"accuracy": accuracy_score},
    }
    for task, fns in checks.items():
        [run] = [r for r in finetune_runs(tmp_path) if f"-{task}-" in r.name]
        m = json.loads((run / "metrics.json").read_text())
        assert m["eval_device"] == "cpu"  # where it trained (tests/test_gpu.py: on a GPU, there)
        rows = np.loadtxt(run / "predictions" / "validation.tsv", skiprows=1, ndmin=2)
        y, p = rows[:, 1], rows[:, 2]
        for metric, fn in fns.items():
            expected = 100 * fn(y, p)
            expected = 0.0 if np.isnan(expected) else expected
            assert m["dev"]["validation"][metric] == pytest.approx(expected, abs=1e-3), (task, metric)
    # the submission: the GLUE server's file names and columns
    import zipfile

    [glue_dir] = (tmp_path / "runs" / "glue").glob("*")
    names = set(zipfile.ZipFile(glue_dir / "submission.zip").namelist())
    assert {
        "CoLA.tsv",
        "SST-2.tsv",
        "MRPC.tsv",
        "STS-B.tsv",
        "QQP.tsv",
        "MNLI-m.tsv",
        "MNLI-mm.tsv",
        "QNLI.tsv",
        "RTE.tsv",
    } <= names
    header, first = (glue_dir / "submission" / "RTE.tsv").read_text().splitlines()[:2]
    assert header == "index\tprediction" and first.split("\t")[1] in ("entailment", "not_entailment")


@pytest.mark.slow
def test_seeds_are_aggregated(tmp_path, pretrained):
    res = convexp(
        "finetune", "glue", "task=sst2", f"init={pretrained}", *FAST, "seeds=[1,2,3]", outputs=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    t = summary_of(tmp_path)["tasks"]["sst2"]
    scores = [r["score"] for r in t["runs"]]
    assert len(scores) == 3 and sorted(r["seed"] for r in t["runs"]) == [1, 2, 3]
    assert t["score"]["mean"] == pytest.approx(statistics.fmean(scores))
    assert t["score"]["stderr"] == pytest.approx(statistics.stdev(scores) / 3**0.5)
    assert t["score"]["median"] == pytest.approx(statistics.median(scores))
    assert t["score"]["best"] == max(scores)


@pytest.mark.slow
def test_intermediate_task_starts_from_the_mnli_model(tmp_path, pretrained):
    res = convexp(
        "finetune", "glue", "task=rte", "protocol=chang", f"init={pretrained}", *FAST, outputs=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    runs = finetune_runs(tmp_path)
    [mnli] = [r for r in runs if "-mnli-" in r.name]
    [rte] = [r for r in runs if "-rte-" in r.name]
    from omegaconf import OmegaConf

    from convexp.store.run_names import run_key

    # the id holds the MNLI run's name without its tokens (run_names.run_key): the same run whatever its name
    assert OmegaConf.load(rte / "config.yaml")["from"] == run_key(mnli.name)
    from convexp.store.checkpoint import open_checkpoint

    state = open_checkpoint(mnli).encoder_state
    assert "embeddings.word.weight" in state and "layers.0.mixer.query.weight" in state
    # a fine-tuned model dir carries its tokenizer: it is a complete init= on its own
    from convexp.config.compose import compose_stage
    from convexp.train.finetune import resolve_init

    assert (mnli / "model" / "tokenizer.json").exists()
    init = resolve_init(compose_stage("finetune", [f"init={mnli}", "task=rte"]))
    assert init.slug == mnli.name and init.tokenizer.vocab_size == init.model_cfg.vocab_size


@pytest.mark.slow
def test_killed_finetune_resumes_to_the_same_result(tmp_path, pretrained):
    args = [
        "finetune",
        "glue",
        "task=sst2",
        f"init={pretrained}",
        "scale=smoke",
        "glue.synthetic_size=1200",
        "epochs=3",
        "batch_size=16",
        "task.max_len=48",
        "checkpoint_every_s=0",  # a checkpoint every half epoch, however short the run
    ]
    ref = convexp(*args, outputs=tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = tmp_path / "killed"
    kill_when(args, out, "runs/finetune/*/checkpoints/last.ckpt")
    [run] = finetune_runs(out)
    assert not (run / "metrics.json").exists(), "the run finished before it could be killed"
    res = convexp(*args, outputs=out)
    assert res.returncode == 0, res.stderr[-3000:]
    a = json.loads((finetune_runs(tmp_path / "ref")[0] / "metrics.json").read_text())
    b = json.loads((run / "metrics.json").read_text())
    assert b["dev"]["validation"] == pytest.approx(a["dev"]["validation"])


@pytest.mark.slow
def test_hugging_face_bert_checkpoint_with_its_own_vocab(tmp_path):
    from transformers import BertConfig, BertModel

    from convexp.data.synthetic import vocabulary_words

    words = sorted(vocabulary_words())[:400]
    ckpt = tmp_path / "bert"
    ckpt.mkdir()
    write_vocab(ckpt / "vocab.txt", words)
    cfg = BertConfig(
        vocab_size=405,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(cfg).save_pretrained(ckpt)
    res = convexp("finetune", "glue", "task=rte", f"init={ckpt}", *FAST, outputs=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert summary_of(tmp_path)["tasks"]["rte"]["runs"][0]["score"] >= 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["task=nope"], "Could not find 'task/nope'"),
        (["glue.source=local", "glue.path=/no/such/glue"], "/no/such/glue"),
        (["init=/no/such/run"], "init=/no/such/run does not exist"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, pretrained, args, message):
    res = convexp("finetune", "glue", f"init={pretrained}", *FAST, *args, outputs=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr[-2000:]


@pytest.mark.slow
def test_wrong_columns_and_other_vocabulary(tmp_path, pretrained):
    root = tmp_path / "glue"
    (root / "SST-2").mkdir(parents=True)
    (root / "SST-2" / "train.tsv").write_text("text\tlabel\na film\t1\n")
    (root / "SST-2" / "dev.tsv").write_text("text\tlabel\na film\t1\n")
    res = convexp(
        "finetune",
        "glue",
        "task=sst2",
        f"init={pretrained}",
        *FAST,
        "glue.source=local",
        f"glue.path={root}",
        outputs=tmp_path,
    )
    assert res.returncode == 2 and "train.tsv" in res.stderr, res.stderr[-2000:]
    vocab = write_vocab(tmp_path / "vocab.txt", ["a", "b", "c"])
    res = convexp(
        "finetune",
        "glue",
        "task=sst2",
        f"init={pretrained}",
        f"tokenizer_path={vocab}",
        *FAST,
        outputs=tmp_path,
    )
    assert res.returncode == 2 and "vocabulary" in res.stderr, res.stderr[-2000:]


def test_protocol_hyperparameters_and_grid():
    """ConvBERT/ELECTRA vs Chang et al. Table 5 settings, and the appendix grid (every protocol x
    size x task against the papers' values: tests/test_finetune_recipes.py)."""
    from omegaconf import OmegaConf

    from convexp.config.compose import compose_stage
    from convexp.tasks.finetune_runs import hyperparameters

    cfg = compose_stage("finetune", ["init=x", "task=rte", "grid=false"])
    [hp] = hyperparameters(cfg, 256)
    assert (hp["lr"], hp["epochs"], hp["batch_size"], hp["layerwise_lr_decay"], hp["weight_decay"]) == (
        3e-4,
        10,
        32,
        0.8,
        0.01,
    )
    assert hyperparameters(cfg, 768)[0]["lr"] == 1e-4
    cfg = compose_stage("finetune", ["init=x", "task=mnli", "protocol=chang"])
    [hp] = hyperparameters(cfg, 256)
    assert (hp["lr"], hp["epochs"], hp["batch_size"], hp["layerwise_lr_decay"], hp["weight_decay"]) == (
        3e-4,
        4,
        128,
        1.0,
        0.0,
    )
    assert (
        hyperparameters(compose_stage("finetune", ["init=x", "task=qnli", "protocol=chang"]), 256)[0]["lr"]
        == 1e-4
    )
    grid = hyperparameters(compose_stage("finetune", ["init=x", "task=cola", "scale=smoke", "grid=true"]), 256)
    assert len(grid) == 16
    assert {(g["lr"], g["weight_decay"], g["epochs"]) for g in grid} == {
        (lr, wd, ep) for lr in (5e-5, 1e-4, 2e-4, 3e-4) for wd in (0.01, 0.1) for ep in (3, 10)
    }
    assert OmegaConf.select(cfg, "task.name") == "mnli"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["movement", "l0"])
def test_fine_pruning_saves_the_masked_model_it_evaluated(tmp_path, pretrained, method):
    """pruning=movement keeps 10% of every masked matrix; the saved (folded) model reproduces the
    masked model's dev predictions, and the remaining weights are counted as Sanh et al. do."""
    from safetensors.torch import load_file

    from convexp import pruning
    from convexp.tasks.classification import encoding, loading, registry as tasks
    from convexp.models import SequenceClassifier
    from convexp.models.io import read_model_config

    res = convexp(
        "finetune",
        "glue",
        "task=sst2",
        f"init={pretrained}",
        *FAST,
        "epochs=2",
        f"pruning={method}",
        outputs=tmp_path,
        env={"WANDB_MODE": "disabled"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = finetune_runs(tmp_path)
    m = json.loads((run / "metrics.json").read_text())
    assert isinstance(m["diverged"], bool)  # collapse detection is recorded with every run
    model = SequenceClassifier(read_model_config(run / "model"), 2)
    model.load_state_dict(load_file(str(run / "model" / "model.safetensors")))
    assert m["remaining_weights"] == pytest.approx(100 * pruning.remaining_weights(model))
    if method == "movement":
        for name, layer in pruning.prunable_layers(model):
            kept = (layer.weight != 0).sum().item()
            assert kept == int(0.1 * layer.weight.numel() + 1e-6), name  # top-k: exactly 10%
        assert m["remaining_weights"] < 30
    # the dev predictions were made with the masks; the saved model gives the same ones
    from convexp.data.tokenizer import Tokenizer

    tok = Tokenizer.load(pretrained / "model")
    task = tasks.get_task("sst2")
    raw = loading.load_task(task, {"source": "synthetic", "synthetic_size": 160, "seed": 0, "path": None})
    splits = encoding.tokenize_task(task, raw, tok, 48, tmp_path / "cache")
    from convexp.tasks.classification.evaluate import predict

    logits, _, idx = predict(model, splits["validation"], tok.pad_id)
    again = dict(zip(idx.tolist(), logits.argmax(-1).tolist()))
    saved = [
        line.split("\t") for line in (run / "predictions" / "validation.tsv").read_text().splitlines()[1:]
    ]
    assert len(saved) == len(again) and all(again[int(i)] == int(p) for i, _, p in saved)


@pytest.mark.slow
def test_distillation_from_a_fine_tuned_teacher(tmp_path, pretrained):
    base = ["finetune", "glue", "task=sst2", f"init={pretrained}", *FAST]
    res = convexp(*base, outputs=tmp_path, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-3000:]
    [teacher] = finetune_runs(tmp_path)
    res = convexp(
        *base,
        f"distill.teacher={teacher}",
        "distill.alpha_ce=0.1",
        "distill.alpha_distil=0.9",
        outputs=tmp_path,
        env={"WANDB_MODE": "disabled"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [student] = [r for r in finetune_runs(tmp_path) if r != teacher]  # a new run: distillation is in its id
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(student / "config.yaml")
    from convexp.store.run_names import run_key

    assert cfg.distill.teacher == run_key(teacher.name) and cfg.distill.alpha_distil == 0.9
    assert "teacher" not in student.name  # its path names no token
    bad = convexp(
        "finetune",
        "glue",
        "task=mnli",
        f"init={pretrained}",
        *FAST,
        f"distill.teacher={teacher}",
        outputs=tmp_path,
        env={"WANDB_MODE": "disabled"},
    )
    assert bad.returncode == 2 and "is not a mnli classifier" in bad.stderr, bad.stderr[-2000:]


@pytest.mark.slow
def test_bermo_layer_mixing_on_any_init(tmp_path, pretrained):
    """scalar_mix=true fine-tunes the init model with BERMO's combine block (eq. 1), as its own run."""
    from safetensors.torch import load_file

    res = convexp(
        "finetune",
        "glue",
        "task=sst2",
        f"init={pretrained}",
        *FAST,
        "scalar_mix=true",
        outputs=tmp_path,
        env={"WANDB_MODE": "disabled"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = finetune_runs(tmp_path)
    assert "-bermo-sst2-" in run.name
    state = load_file(str(run / "model" / "model.safetensors"))
    assert state["encoder.scalar_mix.alpha"].shape == (3,)  # embeddings + 2 layers
    assert json.loads((run / "model" / "model_config.json").read_text())["scalar_mix"] is True


@pytest.mark.slow
def test_random_init_baseline(tmp_path, pretrained):
    """init=none model=<preset>: the same architecture without pre-training (tokenizer given)."""
    res = convexp(
        "finetune",
        "glue",
        "task=sst2",
        "init=none",
        "model=bert_small",
        f"tokenizer_path={pretrained}/model",
        *FAST,
        outputs=tmp_path,
        env={"WANDB_MODE": "disabled"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = finetune_runs(tmp_path)
    # the preset, "random", the task and seed, then what the command changed (no tokenizer path)
    assert re.fullmatch(r"bert_small-random-sst2-s42(\+[A-Za-z0-9_.]+)*-[0-9a-f]{10}", run.name), run.name
    assert "tokenizer" not in run.name and "epochs1" in run.name
