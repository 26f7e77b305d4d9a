"""BERMO's SentEval probing tasks: the file parser, the synthetic stand-in, protocol=bermo and
`convexp finetune probing` end to end, offline (every file is written by the test itself)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score

from convexp.tasks.classification import loading, scores, registry as tasks
from convexp.data.errors import TaskFileError, TaskLabelError
from convexp.tasks.classification.loading import load_task
from convexp.tasks.classification.synthetic_probing import synthetic_probing_task, wc_label_names
from convexp.tasks.classification.registry import PROBING_ORDER, PROBING_TASKS
from convexp.errors import UserError
from helpers import convexp

FAST = ["scale=smoke", "glue.synthetic_size=96", "epochs=1", "batch_size=16", "task.max_len=64"]
NO_WANDB = {"WANDB_MODE": "disabled"}


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep the datasets library's own cache inside the test's tmp dir."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def write_senteval(folder: Path, file: str, rows: list[tuple[str, str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{file}.txt"
    path.write_text("".join(f"{split}\t{label}\t{sentence}\n" for split, label, sentence in rows))
    return path


def local(folder: Path) -> dict:
    return {"source": "local", "path": str(folder)}


# ---------------------------------------------------------------------------- SentEval files


def test_senteval_files_splits_and_labels(tmp_path):
    write_senteval(
        tmp_path,
        "past_present",
        [
            ("tr", "PRES", "She walks home ."),
            ("tr", "PAST", "He walked home ."),
            ("va", "PAST", "It rained ."),
            ("te", "PRES", "It rains ."),
            ("te", "PAST", "We sang ."),
        ],
    )
    # WC: the labels are the training rows' words, sorted; extra middle fields are ignored
    (tmp_path / "word_content.txt").write_text(
        "tr\tzebra\tthe zebra ran .\ntr\tapple\tan apple fell .\r\n\ntr\tmango\tx\ta mango .\n"
        "va\tmango\ta ripe mango .\nte\tzebra\tone zebra .\n"
    )
    write_senteval(
        tmp_path,
        "tree_depth",
        [("tr", "10", "a ."), ("tr", "5", "b ."), ("va", "12", "c ."), ("te", "9", "d .")],
    )
    tense = load_task("tense", local(tmp_path))
    assert list(tense) == ["train", "validation", "test"]
    assert tense["train"][:] == {
        "sentence": ["She walks home .", "He walked home ."],
        "label": [1, 0],
        "idx": [0, 1],
    }
    assert tense["validation"]["label"] == [0] and tense["test"]["label"] == [1, 0]  # PAST=0, PRES=1
    assert tense["test"].features == loading.task_features("tense")
    wc = load_task("wc", local(tmp_path))
    assert wc["train"]["label"] == [2, 0, 1] and wc["train"]["sentence"][2] == "a mango ."
    assert wc["validation"]["label"] == [1] and wc["test"]["label"] == [2]
    depth = load_task("treedepth", local(tmp_path))  # SentEval's string order: "10" < "12" < "5"
    assert PROBING_TASKS["treedepth"].label_names == ("10", "11", "12", "5", "6", "7", "8", "9")
    assert [depth[s]["label"][0] for s in ("train", "validation", "test")] == [0, 2, 7]


@pytest.mark.parametrize(
    "task, lines, error, parts",
    [
        ("tense", "tr\tPAST\tok .\nva\tPAST\n", TaskFileError, ["past_present.txt:2", "split<TAB>label"]),
        ("tense", "tr\tPAST\tok .\nxx\tPAST\tno .\n", TaskFileError, ["past_present.txt:2", "'xx'"]),
        (
            "tense",
            "tr\tPAST\tok .\nva\tFUTURE\tno .\nte\tPAST\tx\n",
            TaskLabelError,
            [":2", "FUTURE", "PRES"],
        ),
        ("tense", "tr\tPAST\tok .\nva\tPAST\tok .\n", TaskFileError, ["past_present.txt", "no te rows"]),
        (
            "wc",
            "tr\tcat\ta cat .\nva\tdog\ta dog .\nte\tcat\tx\n",
            TaskLabelError,
            ["word_content.txt:2", "'dog'"],
        ),
        ("subjnum", None, TaskFileError, ["missing SentEval probing file", "subj_number.txt"]),
    ],
)
def test_senteval_file_errors_are_one_line(tmp_path, task, lines, error, parts):
    t = PROBING_TASKS[task]
    if lines is not None:
        (tmp_path / f"{t.folder}.txt").write_text(lines)
    with pytest.raises(error) as e:
        load_task(task, local(tmp_path))
    message = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in message
    assert all(p in message for p in parts), message


def test_other_sources(tmp_path):
    import datasets

    splits = load_task("somo", {"source": "synthetic", "synthetic_size": 60})
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "saved" / "somo"))  # GLUE's disk source
    again = load_task("somo", {"source": "disk", "path": str(tmp_path / "saved")})
    assert {k: v[:] for k, v in again.items()} == {k: v[:] for k, v in splits.items()}
    with pytest.raises(TaskFileError, match="no such SentEval probing folder"):
        load_task("tense", {"source": "local", "path": "/no/such/probing"})
    with pytest.raises(TaskFileError, match="SentEval probing folder"):
        load_task("tense", {"source": "local"})
    with pytest.raises(UserError, match="no hub source"):
        load_task("tense", {"source": "hub"})


# ---------------------------------------------------------------------------- registry


def test_registry_and_glue_averages_never_include_probing():
    assert set(PROBING_TASKS).isdisjoint(tasks.GLUE_TASKS) and len(PROBING_TASKS) == 10
    for name in PROBING_ORDER:
        t = tasks.get_task(name)
        assert (
            t.benchmark == "probing" and not t.in_average and not t.submission and t.metrics == ("accuracy",)
        )
    classes = {n: tasks.get_task(n).num_labels for n in PROBING_ORDER}
    assert classes == dict(
        sentlen=6,
        wc=1000,
        treedepth=8,
        topconst=20,
        bshift=2,
        tense=2,
        subjnum=2,
        objnum=2,
        somo=2,
        coordinv=2,
    )
    row = {
        "cola": 60.0,
        "sst2": 90.0,
        "mrpc": 88.0,
        "stsb": 87.0,
        "qqp": 89.0,
        "mnli": 82.0,
        "qnli": 88.0,
        "rte": 68.0,
    }
    probing_scores = scores.score_columns({"tense": {"validation": {"accuracy": 0.0}}}, "convbert")
    assert probing_scores == {"tense": 0.0}
    assert scores.glue_average({**row, **probing_scores}) == pytest.approx(652.0 / 8)
    assert scores.compute_metrics("wc", np.array([3, 999, 5]), np.array([3, 999, 4])) == pytest.approx(
        {"accuracy": 200 / 3}
    )


# ---------------------------------------------------------------------------- synthetic stand-in


def test_synthetic_shapes_and_determinism():
    for name in PROBING_ORDER:
        t = tasks.get_task(name)
        a = load_task(name, {"source": "synthetic", "synthetic_size": 120, "seed": 1})
        b = load_task(name, {"source": "synthetic", "synthetic_size": 120, "seed": 1})
        c = load_task(name, {"source": "synthetic", "synthetic_size": 120, "seed": 2})
        assert list(a) == ["train", "validation", "test"]
        assert [len(a[s]) for s in a] == [120, 50, 50]
        assert {k: v[:] for k, v in a.items()} == {k: v[:] for k, v in b.items()}
        assert a["train"]["sentence"] != c["train"]["sentence"]
        assert all(ds.features == loading.task_features(name) for ds in a.values())
        labels = [y for s in a.values() for y in s["label"]]
        assert min(labels) >= 0 and max(labels) < t.num_labels  # test rows are labelled too
        if t.num_labels <= 8:
            assert set(a["train"]["label"]) == set(range(t.num_labels)), name
        longer = synthetic_probing_task(name, 200, 1)  # a larger size extends a smaller one
        assert longer["train"]["sentence"][:120] == a["train"]["sentence"]


def test_synthetic_labels_are_properties_of_the_sentence():
    rows = synthetic_probing_task("sentlen", 300, 0)["train"]
    bins = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))
    for sentence, label in zip(rows["sentence"], rows["label"]):
        tokens = len(sentence.replace(".", " .").replace(",", " ,").split())
        assert bins[label][0] <= tokens <= bins[label][1], sentence
    rows = synthetic_probing_task("wc", 300, 0)["train"]
    words = wc_label_names()
    targets = set(words)
    for sentence, label in zip(rows["sentence"], rows["label"]):
        found = [w for w in sentence.rstrip(".").replace(",", "").split() if w in targets]
        assert found == [words[label]], sentence  # the one target word, exactly once
    counts = Counter(synthetic_probing_task("bshift", 400, 0)["train"]["label"])
    assert min(counts.values()) > 150  # balanced classes


@pytest.mark.parametrize("name", [n for n in PROBING_ORDER if n not in ("wc", "somo")])
def test_synthetic_tasks_are_learnable(name):
    """A bag of character n-grams and word bigrams beats the majority class on the test rows (WC:
    1000 classes; SOMO: topic coherence, neither is linear in such features)."""
    rows = synthetic_probing_task(name, 1500, 0)
    word = CountVectorizer(token_pattern=r"[^ ]+", ngram_range=(1, 2), binary=True)
    char = CountVectorizer(analyzer="char_wb", ngram_range=(2, 4), binary=True)
    vec = word if name not in ("tense",) else char
    model = LogisticRegression(max_iter=3000).fit(
        vec.fit_transform(rows["train"]["sentence"]), rows["train"]["label"]
    )
    y = np.array(rows["test"]["label"])
    majority = np.bincount(y).max() / len(y)
    assert accuracy_score(y, model.predict(vec.transform(rows["test"]["sentence"]))) > majority + 0.05


# ---------------------------------------------------------------------------- protocol=bermo


def test_bermo_hyperparameters():
    from convexp.config.compose import compose_stage
    from convexp.tasks.classification.runs import GLUE_ORDER, classification_runs, probing_overrides
    from convexp.tasks.finetune_runs import hyperparameters

    bermo = {"lr": 5e-5, "epochs": 3, "batch_size": 32, "warmup_fraction": 0.0, "weight_decay": 0.0}
    bermo |= {"layerwise_lr_decay": 1.0, "adam_epsilon": 1e-8, "adam_betas": [0.9, 0.999], "grad_clip": 1.0}
    bermo |= {"scalar_mix_lr": 1e-2}
    overrides = probing_overrides(["init=x", "task=all"])
    cfg = compose_stage("finetune", overrides)
    assert (cfg.protocol, cfg.task.name, list(cfg.seeds)) == ("bermo", "probing_all", [63, 77, 9, 96, 39])
    for name in ("tense", "wc"):
        tcfg = compose_stage("finetune", probing_overrides(["init=x", f"task={name}"]))
        assert tcfg.task.max_len == 128
        for width in (256, 768):  # no size-dependent rate
            assert hyperparameters(tcfg, width) == [bermo]
    # GLUE tasks under protocol=bermo: A.1.1's settings too (SST-2, MNLI, QQP)
    for name in ("sst2", "mnli", "qqp"):
        assert hyperparameters(
            compose_stage("finetune", ["init=x", f"task={name}", "protocol=bermo"]), 768
        ) == [bermo]
    # task=all: each command its own set
    task_cfgs = {t: compose_stage("finetune", [*overrides, f"task={t}"]) for t in PROBING_ORDER}
    plan = classification_runs(cfg, "m", 256, task_cfgs)
    assert list(dict.fromkeys(p.task for p in plan)) == list(PROBING_ORDER) and len(plan) == 50
    glue_cfg = compose_stage("finetune", ["init=x", "task=all", "seeds=[1]", "grid=false"])
    glue_cfgs = {t: compose_stage("finetune", ["init=x", "seeds=[1]", "grid=false", f"task={t}"]) for t in GLUE_ORDER}
    glue_plan = classification_runs(glue_cfg, "m", 256, glue_cfgs)
    assert [p.task for p in glue_plan] == list(GLUE_ORDER)
    # explicit choices win; smoke scale keeps its own seeds
    cfg = compose_stage(
        "finetune", probing_overrides(["init=x", "protocol=convbert", "scale=smoke", "task=tense"])
    )
    assert (cfg.protocol, list(cfg.seeds)) == ("convbert", [42])
    with pytest.raises(UserError, match="not a probing task"):
        probing_overrides(["task=rte"])


def test_bermo_scalar_mix_learns_at_its_own_rate():
    from convexp.models import ModelConfig
    from convexp.tasks.classification.stage import FinetuneModule

    cfg = ModelConfig(
        vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, scalar_mix=True
    )
    hp = {"lr": 5e-5, "weight_decay": 0.0, "warmup_fraction": 0.0, "layerwise_lr_decay": 1.0}
    hp |= {"adam_epsilon": 1e-8, "adam_betas": [0.9, 0.999], "scalar_mix_lr": 1e-2}
    module = FinetuneModule(cfg, tasks.get_task("tense"), hp, 10, 0)
    opt = module.configure_optimizers()["optimizer"]
    by_lr = {g["lr"]: sum(p.numel() for p in g["params"]) for g in opt.param_groups}
    assert by_lr[1e-2] == 2 + 1 + 1  # α over embeddings + 2 layers, γ
    assert opt.defaults["eps"] == 1e-8


# ---------------------------------------------------------------------------- the command


@pytest.mark.slow
def test_probing_all_end_to_end_and_errors(tmp_path, pretrained):
    res = convexp(
        "finetune", "probing", "task=all", f"init={pretrained}", *FAST, outputs=tmp_path, env=NO_WANDB
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (
        "SentEval probing accuracy (bermo protocol)" in res.stdout and "average, all ten tasks" in res.stdout
    )
    runs = sorted((tmp_path / "runs" / "finetune").glob("*"))
    assert len(runs) == 10
    [summary] = (tmp_path / "runs" / "probing").glob("*/summary.json")
    s = json.loads(summary.read_text())
    assert set(s["tasks"]) == set(PROBING_ORDER) and s["protocol"] == "bermo"
    assert all(v is None for v in s["glue"].values())  # never a GLUE score
    assert set(s["probing"]) == {"all", "surface", "syntactic", "semantic"}
    for name, t in s["tasks"].items():
        [r] = t["runs"]
        assert set(r["dev"]["validation"]) == {"accuracy"} and set(r["test"]["test"]) == {"accuracy"}
        assert t["test_score"]["mean"] == pytest.approx(r["test"]["test"]["accuracy"])
        assert r["hp"]["scalar_mix_lr"] == 1e-2 and r["hp"]["warmup_fraction"] == 0.0
    assert s["probing"]["all"]["test"] == pytest.approx(
        np.mean([t["test_score"]["mean"] for t in s["tasks"].values()])
    )
    # the metrics are the accuracy of the saved predictions
    [run] = [r for r in runs if "-topconst-" in r.name]
    m = json.loads((run / "metrics.json").read_text())
    for split, metrics in (("validation", m["dev"]), ("test", m["test"])):
        rows = np.loadtxt(run / "predictions" / f"{split}.tsv", skiprows=1, ndmin=2)
        assert metrics[split]["accuracy"] == pytest.approx(
            100 * accuracy_score(rows[:, 1], rows[:, 2]), abs=1e-3
        )
    assert not (run / "submission").exists()
    # errors: one line, exit code 2 (a malformed SentEval file; a GLUE task)
    folder = tmp_path / "probing"
    write_senteval(folder, "past_present", [("tr", "PAST", "it rained ."), ("va", "PRES", "it rains .")])
    with (folder / "past_present.txt").open("a") as f:
        f.write("te\tPAST\n")  # line 3: no sentence
    for extra, message in (
        (
            ["task=tense", "glue.source=local", f"glue.path={folder}"],
            "past_present.txt:3: 2 tab-separated field(s)",
        ),
        (["task=rte"], "task=rte is not a probing task"),
    ):
        res = convexp(
            "finetune", "probing", f"init={pretrained}", *FAST, *extra, outputs=tmp_path, env=NO_WANDB
        )
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.returncode == 2 and len(lines) == 1 and message in lines[0], res.stderr[-2000:]
