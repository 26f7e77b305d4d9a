"""Run ids hash the contents of local input files: edited data makes a new run, never the old result."""

import json
import os
from pathlib import Path

from test_squad_stage import local_squad
from test_task_data import custom_overrides, write_nli_csv

from convexp.config import compose_stage
from convexp.data.digests import cache_file, input_digests
from convexp.stages.rundirs import glue_runs, pretrain_run
from convexp.stages.squad_runs import squad_runs


def edit_one_line(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace("a", "e", 1)
    path.write_text("".join(lines))


def squad_id(outputs: Path, data: Path) -> str:
    over = [f"outputs={outputs}", "init=x", "seeds=[1]", "task=squad1", "squad.source=local", f"squad.path={data}"]
    [run] = squad_runs(compose_stage("finetune", over), "m", 256)
    return run.run.id


def test_editing_a_local_squad_file_makes_a_new_run(tmp_path):
    data = local_squad(tmp_path / "squad", "v1.1", size=20)
    before = squad_id(tmp_path, data)
    assert squad_id(tmp_path, data) == before  # the same files, the same run
    os.utime(data / "train-v1.1.json")  # touched, same bytes: the same run (the cache re-hashes it)
    assert squad_id(tmp_path, data) == before
    dev = data / "dev-v1.1.json"
    dev.write_text(dev.read_text().replace('"question": "', '"question": "so ', 1))
    assert squad_id(tmp_path, data) != before


def test_editing_a_custom_task_or_glue_folder_makes_a_new_run(tmp_path):
    files = write_nli_csv(tmp_path / "nli")

    def ids(*over):
        cfg = compose_stage("finetune", [f"outputs={tmp_path}", "init=x", "seeds=[1]", *over])
        return [r.run.id for r in glue_runs(cfg, "m", 64, {})]

    custom = ids(*custom_overrides(files, "task.num_labels=3"))
    edit_one_line(files["train"])
    assert ids(*custom_overrides(files, "task.num_labels=3")) != custom

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
