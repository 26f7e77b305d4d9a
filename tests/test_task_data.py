"""Real-data conveniences of `convexp finetune glue`: GLUE folders without test files, the sample
limits task.max_train_samples / task.max_eval_samples, and task=custom from CSV / JSON-lines
files. Offline: every file is written by the test itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import open_dict

from convexp.config.compose import compose_stage
from convexp.data.errors import TaskError, TaskFileError, TaskLabelError
from convexp.tasks.classification.loading import load_task, prepare_task
from convexp.tasks.classification.scores import compute_metrics
from convexp.tasks.classification.registry import get_task
from convexp.errors import UserError
from convexp.tasks.classification.runs import classification_runs
from helpers import convexp

FAST = ["scale=smoke", "epochs=1", "batch_size=16", "task.max_len=48"]
NO_WANDB = {"WANDB_MODE": "disabled"}


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep the datasets library's own cache inside the test's tmp dir."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def sst2_train_dev_only(root: Path, n_train: int = 40, n_dev: int = 12) -> Path:
    """A classic GLUE folder holding SST-2's train.tsv and dev.tsv, and no test.tsv."""
    words = ["a fine film", "a dull film", "good acting", "bad plot", "great fun", "poor pacing"]
    folder = root / "SST-2"
    folder.mkdir(parents=True)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = [f"{words[i % 6]} {i}\t{int(i % 6 in (0, 2, 4))}" for i in range(n)]
        (folder / name).write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return root


def task_cfg(*overrides: str):
    return compose_stage("finetune", ["init=x", *overrides])


def one_line(exc_info, *parts):
    msg = str(exc_info.value)
    assert isinstance(exc_info.value, UserError) and "\n" not in msg, msg
    for p in parts:
        assert p in msg, msg


# ---------------------------------------------------------------------------- GLUE without test files


def test_glue_folder_with_train_and_dev_only_loads(tmp_path):
    root = sst2_train_dev_only(tmp_path / "glue")
    splits = load_task("sst2", {"source": "local", "path": str(root)})
    assert list(splits) == ["train", "validation"]
    assert len(splits["train"]) == 40 and splits["validation"]["label"][:3] == [1, 0, 1]
    (root / "SST-2" / "dev.tsv").unlink()  # dev files stay required
    with pytest.raises(TaskFileError) as e:
        load_task("sst2", {"source": "local", "path": str(root)})
    one_line(e, "SST-2/dev.tsv")


def test_mnli_without_test_files_and_disk_without_test_split(tmp_path):
    import datasets

    splits = load_task("rte", {"source": "synthetic", "synthetic_size": 60})
    datasets.DatasetDict({k: v for k, v in splits.items() if k != "test"}).save_to_disk(str(tmp_path / "rte"))
    again = load_task("rte", {"source": "disk", "path": str(tmp_path / "rte")})
    assert list(again) == ["train", "validation"]


# ---------------------------------------------------------------------------- sample limits


def test_sample_limits_cut_train_and_dev_not_test():
    cfg = task_cfg("task=mnli", "glue.source=synthetic", "glue.synthetic_size=80")
    full = {k: len(v) for k, v in prepare_task(cfg.task, cfg.glue)[1].items()}
    cfg = task_cfg(
        "task=mnli",
        "glue.source=synthetic",
        "glue.synthetic_size=80",
        "task.max_train_samples=30",
        "task.max_eval_samples=7",
    )
    task, splits = prepare_task(cfg.task, cfg.glue)
    sizes = {k: len(v) for k, v in splits.items()}
    assert sizes["train"] == 30 and sizes["validation_matched"] == sizes["validation_mismatched"] == 7
    assert sizes["test_matched"] == full["test_matched"] == 50  # a submission needs every test row
    assert splits["train"]["idx"] == list(range(30))  # the first N rows
    cfg = task_cfg("task=rte", "glue.source=synthetic", "task.max_train_samples=1000000")
    assert len(prepare_task(cfg.task, cfg.glue)[1]["train"]) == 2000  # more than there are: all


@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_limit_is_a_one_line_error(value):
    with pytest.raises(UserError) as e:  # when composing (convexp/config/schema.py)
        task_cfg("task=rte", f"task.max_train_samples={value}")
    one_line(e, f"task.max_train_samples={value}", "whole number >= 1")


def test_run_ids_unchanged_by_null_keys_changed_by_limits():
    """The new task keys are null by default and leave the run ids of existing runs as they were."""
    cfg = task_cfg("task=rte")
    before = [p.run.id for p in classification_runs(cfg, "m", 64, {})]
    with open_dict(cfg):  # the config as it was before the keys existed
        del cfg.task["max_train_samples"], cfg.task["max_eval_samples"]
    assert [p.run.id for p in classification_runs(cfg, "m", 64, {})] == before
    limited = classification_runs(task_cfg("task=rte", "task.max_train_samples=100"), "m", 64, {})
    assert not {p.run.id[-10:] for p in limited} & {b[-10:] for b in before}  # other hashes, not only names
    assert limited[0].run_cfg["task_data"] == {"max_train_samples": 100}


# ---------------------------------------------------------------------------- task=custom


def write_nli_csv(folder: Path, with_test: bool = True) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    labels = ["yes", "no", "maybe"]
    files = {}
    for split, n in (("train", 48), ("dev", 12), *((("test", 6),) if with_test else ())):
        lines = ["premise,hypothesis,label,extra"]
        for i in range(n):
            lab = labels[i % 3]
            lines.append(f'"a man, {i}, walks",{lab} {"it is" if i % 2 else "it was"} so,{lab},x')
        files[split] = folder / f"{split}.csv"
        files[split].write_text("\n".join(lines) + "\n")
    return files


def custom_overrides(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        "task=custom",
        f"task.train_file={files['train']}",
        f"task.validation_file={files['dev']}",
        *([f"task.test_file={files['test']}"] if "test" in files else []),
        "task.text_fields=[premise,hypothesis]",
        "task.label_field=label",
        *extra,
    ]


def test_custom_csv_pair_task_with_text_labels(tmp_path):
    files = write_nli_csv(tmp_path / "nli")
    cfg = task_cfg(*custom_overrides(files, "task.num_labels=3"))
    task, splits = prepare_task(cfg.task, cfg.glue)
    assert task.label_names == ("maybe", "no", "yes")  # sorted: the recorded mapping
    assert task.is_pair and task.metrics == ("accuracy",) and task.benchmark == "custom"
    assert get_task("custom") == task  # registered for the stage's summary
    assert list(splits) == ["train", "validation", "test"]
    row = splits["train"][0]
    assert row == {"premise": "a man, 0, walks", "hypothesis": "yes it was so", "label": 2, "idx": 0}
    assert splits["validation"]["label"][:3] == [2, 1, 0]
    assert splits["test"]["label"][:3] == [2, 1, 0]  # a labelled test file: scored too


def test_custom_binary_ints_and_jsonl_regression(tmp_path):
    rows = [{"text": f"row {i}", "y": i % 2} for i in range(10)]
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    base = [
        "task=custom",
        f"task.train_file={tmp_path / 'train.jsonl'}",
        f"task.validation_file={tmp_path / 'dev.jsonl'}",
        "task.text_fields=[text]",
        "task.label_field=y",
    ]
    cfg = task_cfg(*base, "task.num_labels=2")
    task, splits = prepare_task(cfg.task, cfg.glue)
    assert (
        task.label_names == ()
        and task.metrics == ("accuracy", "f1")
        and list(splits) == ["train", "validation"]
    )
    assert splits["train"]["label"] == [i % 2 for i in range(10)]
    assert set(compute_metrics(task, [0, 1, 1], [0, 1, 0])) == {"accuracy", "f1"}
    cfg = task_cfg(*base, "task.regression=true")
    task, splits = prepare_task(cfg.task, cfg.glue)
    assert task.is_regression and task.metrics == ("pearson", "spearman")
    assert splits["train"].features["label"].dtype == "float32"


def test_custom_task_errors(tmp_path):
    files = write_nli_csv(tmp_path / "nli", with_test=False)

    def fails(error, *overrides, parts):
        cfg = task_cfg(*overrides)
        with pytest.raises(error) as e:
            prepare_task(cfg.task, cfg.glue)
        one_line(e, *parts)

    ok = custom_overrides(files, "task.num_labels=3")
    fails(
        TaskFileError,
        *ok,
        f"task.validation_file={tmp_path / 'nope.csv'}",
        parts=["nope.csv", "no such file"],
    )
    fails(TaskFileError, *ok, "task.label_field=gold", parts=["no column gold", "premise, hypothesis"])
    fails(TaskFileError, *ok, "task.text_fields=[sentence]", parts=["no column sentence"])
    (tmp_path / "empty.csv").write_text("premise,hypothesis,label\n")
    fails(
        TaskFileError, *ok, f"task.validation_file={tmp_path / 'empty.csv'}", parts=["empty.csv", "no rows"]
    )
    fails(
        TaskLabelError,
        *custom_overrides(files, "task.num_labels=2"),
        parts=["3 different labels", "num_labels=3"],
    )
    fails(TaskError, *custom_overrides(files), parts=["task.num_labels=<", "regression"])
    fails(TaskError, "task=custom", parts=["task.train_file"])


# ---------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_train_dev_only_folder_fine_tunes_without_test_predictions(tmp_path, pretrained):
    root = sst2_train_dev_only(tmp_path / "glue", n_train=64, n_dev=20)
    args = [
        "finetune",
        "glue",
        "task=sst2",
        f"init={pretrained}",
        *FAST,
        "glue.source=local",
        f"glue.path={root}",
    ]
    res = convexp(*args, "task.max_train_samples=32", outputs=tmp_path, env=NO_WANDB)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "sst2: no test data; test predictions and submission skipped" in res.stdout
    [run] = (tmp_path / "runs" / "finetune").glob("*")
    assert sorted(p.name for p in (run / "predictions").iterdir()) == ["validation.tsv"]
    assert not list(run.glob("submission/*.tsv")) and not list(tmp_path.glob("runs/glue/*/submission.zip"))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["task"] == "sst2" and set(metrics["dev"]) == {"validation"} and "test" not in metrics
    res = convexp(*args, "task.max_train_samples=0", outputs=tmp_path, env=NO_WANDB)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "task.max_train_samples=0" in lines[0], res.stderr[
        -2000:
    ]


@pytest.mark.slow
def test_custom_csv_task_fine_tunes_end_to_end(tmp_path, pretrained):
    files = write_nli_csv(tmp_path / "nli")
    args = ["finetune", "glue", f"init={pretrained}", *FAST, *custom_overrides(files, "task.num_labels=3")]
    res = convexp(*args, outputs=tmp_path, env=NO_WANDB)
    assert res.returncode == 0, res.stderr[-3000:]
    [summary] = (tmp_path / "runs" / "glue").glob("*/summary.json")
    s = json.loads(summary.read_text())
    assert list(s["tasks"]) == ["custom"] and all(v is None for v in s["glue"].values())
    [run] = s["tasks"]["custom"]["runs"]
    assert set(run["dev"]["validation"]) == {"accuracy"} and "test" in run
    run_dir = tmp_path / "runs" / "finetune" / run["run"]
    preds = (run_dir / "predictions" / "test.tsv").read_text().splitlines()
    assert preds[0] == "idx\tlabel\tprediction" and len(preds) == 7
    res = convexp(*args, outputs=tmp_path, env=NO_WANDB)  # the same command: the run is reused
    assert res.returncode == 0 and len(list((tmp_path / "runs" / "finetune").glob("*"))) == 1
    missing = [a for a in args if not a.startswith("task.train_file")] + ["task.train_file=/no/such.csv"]
    res = convexp(*missing, outputs=tmp_path, env=NO_WANDB)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "/no/such.csv" in lines[0], res.stderr[-2000:]
