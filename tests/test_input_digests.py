"""Run ids hash the contents of local input files: edited data makes a new run, never the old result."""

import json
import os
from pathlib import Path

from helpers import official_json

from convexp.config.compose import compose_stage
from convexp.data.digests import cache_file, input_digests
from convexp.tasks.pretraining.runs import pretrain_run
from convexp.tasks.classification.runs import classification_runs
from convexp.tasks.squad.runs import squad_runs


def local_squad(root: Path, size: int = 20) -> Path:
    """A v1.1 SQuAD folder of synthetic questions in the official JSON layout."""
    from convexp.tasks.squad.data import synthetic_squad

    data = synthetic_squad(size, 3, "v1.1")
    root.mkdir(parents=True)
    for split, name in (("train", "train"), ("validation", "dev")):
        official_json(root / f"{name}-v1.1.json", data[split], "v1.1")
    return root


def custom_task(folder: Path) -> tuple[Path, list[str]]:
    """A custom pair-classification task's CSV files, and the overrides that name them."""
    folder.mkdir(parents=True)
    for split in ("train", "dev"):
        rows = [f"a man walks {i},he {'walks' if i % 2 else 'sits'},{i % 2}" for i in range(12)]
        (folder / f"{split}.csv").write_text("\n".join(["premise,hypothesis,label", *rows]) + "\n")
    over = ["task=custom", f"task.train_file={folder / 'train.csv'}", f"task.validation_file={folder / 'dev.csv'}",
            "task.text_fields=[premise,hypothesis]", "task.label_field=label", "task.num_labels=2"]  # fmt: skip
    return folder / "train.csv", over


def edit_one_line(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("a", "e", 1)
    path.write_text("".join(lines))


def squad_id(outputs: Path, data: Path) -> str:
    over = [f"outputs={outputs}", "init=x", "seeds=[1]", "task=squad1", "squad.source=local", f"squad.path={data}"]
    [run] = squad_runs(compose_stage("finetune", over), "m", 256)
    return run.run.id


def test_editing_a_local_squad_file_makes_a_new_run(tmp_path):
    data = local_squad(tmp_path / "squad")
    before = squad_id(tmp_path, data)
    assert squad_id(tmp_path, data) == before  # the same files, the same run
    os.utime(data / "train-v1.1.json")  # touched, same bytes: the same run (the cache re-hashes it)
    assert squad_id(tmp_path, data) == before
    dev = data / "dev-v1.1.json"
    dev.write_text(dev.read_text().replace('"question": "', '"question": "so ', 1))
    assert squad_id(tmp_path, data) != before


def test_editing_a_custom_task_or_glue_folder_makes_a_new_run(tmp_path):
    train, custom_over = custom_task(tmp_path / "nli")

    def ids(*over):
        cfg = compose_stage("finetune", [f"outputs={tmp_path}", "init=x", "seeds=[1]", *over])
        return [r.run.id for r in classification_runs(cfg, "m", 64, {})]

    custom = ids(*custom_over)
    edit_one_line(train)
    assert ids(*custom_over) != custom

    glue = tmp_path / "glue"
    (glue / "RTE").mkdir(parents=True)
    (glue / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta b\tc d\tentailment\n")
    local = ids("task=rte", "glue.source=local", f"glue.path={glue}")
    assert ids("task=rte", "glue.source=local", f"glue.path={glue}") == local
    (glue / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")  # a file added
    assert ids("task=rte", "glue.source=local", f"glue.path={glue}") != local
    assert ids("task=rte") == ids("task=rte")  # hub data: no local input, ids as before


def test_editing_a_pretraining_corpus_makes_a_new_run(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a first document line\nand its second\n\nanother document\n")

    def run_id():
        cfg = compose_stage("pretrain", [f"outputs={tmp_path}", "data=files", f"data.path={corpus}"])
        return pretrain_run(cfg).id

    before = run_id()
    assert run_id() == before
    edit_one_line(corpus)
    assert run_id() != before


def test_digests_are_cached_by_size_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVEXP_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "data.txt"
    f.write_text("one\n")
    first = input_digests({"data.path": str(f), "hub": "org/name", "none": None})
    assert list(first) == ["data.path"]  # a hub name and null are not local inputs
    cache = json.loads(cache_file().read_text())
    assert cache[str(f.resolve())][2] == first["data.path"]
    # a stale cache entry (same size and mtime) is trusted: the cache is what saves re-reading a corpus
    stat = f.stat()
    f.write_text("two\n")
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert input_digests({"data.path": str(f)}) == first
    os.utime(f)  # a real edit moves the mtime: hashed again
    assert input_digests({"data.path": str(f)}) != first
