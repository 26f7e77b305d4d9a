"""Hub datasets at a revision (data/hub.py): ``data.revision`` (and each ``data.parts`` entry's),
``glue.revision`` and ``squad.revision`` reach ``load_dataset``, the run record and the corpus cache
key; a revision left null changes no run id; a dataset-script repository, which ``datasets`` >= 4
refuses, is read from its parquet export with one line, or refused in one line naming the setting.
No network: ``load_dataset`` is replaced by a recorder."""

from __future__ import annotations

import datasets
import pytest
from omegaconf import OmegaConf

from convexp.config.compose import compose_stage
from convexp.data import hub
from convexp.data.corpus import corpus_fingerprint, load_corpus
from convexp.data.errors import HubDatasetError
from convexp.errors import UserError

TEXTS = {"text": ["a first document", "a second one", "and a third"]}
SCRIPT = "Dataset scripts are no longer supported, but found openwebtext.py"


@pytest.fixture
def hub_calls(monkeypatch):
    """Every load_dataset call (path, name, kwargs); a repository named ``*/script`` holds a loading
    script (refused unless read from its parquet export)."""
    calls = []
    monkeypatch.setattr(hub, "_READS", [])

    def load_dataset(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        if path.endswith("/script") and kwargs.get("revision") != hub.PARQUET_EXPORT:
            raise RuntimeError(SCRIPT)
        ds = datasets.Dataset.from_dict(TEXTS)
        if kwargs.get("split") is None:
            return datasets.DatasetDict({"rows": ds})  # no split a task has
        return ds.to_iterable_dataset() if kwargs.get("streaming") else ds

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_the_revision_reaches_load_dataset_the_record_and_the_cache_key(hub_calls, tmp_path):
    from convexp.store.record import invocation_record

    pinned = {"source": "hub", "path": "org/corpus", "revision": "0123abc"}
    assert load_corpus(pinned)["text"] == TEXTS["text"]
    assert hub_calls[-1][2]["revision"] == "0123abc"
    parts = {"source": "hub", "parts": [{"path": "org/a", "revision": "v1"}, {"path": "org/b"}]}
    load_corpus(parts)
    assert [call[2]["revision"] for call in hub_calls[-2:]] == ["v1", None]  # a part's own, never another's
    # the cache key: a revision is part of it; null leaves the key a corpus had before revisions
    default = corpus_fingerprint({"source": "hub", "path": "org/corpus"})
    assert "revision" not in default and corpus_fingerprint(pinned) != default
    assert corpus_fingerprint(pinned)["revision"] == "0123abc"
    keyed = corpus_fingerprint(parts)["parts"]
    assert "revision" not in keyed[1] and keyed[0]["revision"] == "v1"
    # the record: each hub source's setting, and what this process read
    cfg = compose_stage("pretrain", ["data=wikitext103", "data.revision=0123abc"])
    record = invocation_record(cfg)
    assert record["hub_revisions"] == {"data": {"path": "Salesforce/wikitext", "revision": "0123abc"}}
    assert {"path": "org/corpus", "name": None, "split": "train", "revision": "0123abc", "read": "0123abc",
            "commit": None} in record["hub_read"]  # fmt: skip


def test_a_null_revision_changes_no_run_id_and_a_set_one_does(tmp_path, monkeypatch):
    from convexp.tasks.pretraining.runs import pretrain_run
    from convexp.tasks.finetune_runs import finetune_run
    from convexp.tasks.squad.runs import squad_source

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path))
    for data in ("wikitext103", "bookcorpus_wikitext103"):
        cfg = compose_stage("pretrain", [f"data={data}", "scale=paper"])
        before = OmegaConf.to_container(cfg)  # as the config was before revisions: no key
        before["data"].pop("revision")
        for part in before["data"].get("parts") or []:
            part.pop("revision")
        assert pretrain_run(cfg).id == pretrain_run(OmegaConf.create(before)).id, data
        key = "data.parts.1.revision" if data == "bookcorpus_wikitext103" else "data.revision"
        pinned = compose_stage("pretrain", [f"data={data}", "scale=paper", f"{key}=abc"])
        assert pretrain_run(pinned).id != pretrain_run(cfg).id
    ft = compose_stage("finetune", ["scale=paper", "task=rte", "init=none", "glue.source=hub"])
    old = OmegaConf.to_container(ft)
    old["glue"].pop("revision")
    run, _ = finetune_run(ft, "init-0123456789", "rte", 1, {"lr": 1e-4})
    again, _ = finetune_run(OmegaConf.create(old), "init-0123456789", "rte", 1, {"lr": 1e-4})
    pinned, _ = finetune_run(compose_stage("finetune", ["scale=paper", "task=rte", "init=none", "glue.source=hub",
                                                         "glue.revision=v2"]), "init-0123456789", "rte", 1, {"lr": 1e-4})  # fmt: skip
    assert run.id == again.id != pinned.id
    squad = compose_stage("finetune", ["scale=paper", "task=squad1", "init=none", "squad.source=hub"])
    assert "revision" not in squad_source(squad)
    squad.squad.revision = "v3"
    assert squad_source(squad)["revision"] == "v3"


def test_a_script_repository_is_read_from_its_parquet_export_with_one_line(hub_calls, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the export is not checked for completeness offline
    ds = load_corpus({"source": "hub", "path": "org/script"})
    assert ds["text"] == TEXTS["text"] and hub_calls[-1][2]["revision"] == hub.PARQUET_EXPORT
    [line] = [line for line in capsys.readouterr().err.splitlines() if "org/script" in line]
    assert "openwebtext.py" in line and "refs/convert/parquet" in line and "data.revision" in line
    assert hub.hub_reads()[-1]["read"] == hub.PARQUET_EXPORT and hub.hub_reads()[-1]["revision"] is None


def test_a_script_repository_is_refused_in_one_line_naming_the_setting(hub_calls, monkeypatch):
    with pytest.raises(HubDatasetError) as e:  # a revision given is never replaced by another
        load_corpus({"source": "hub", "path": "org/script", "revision": "main"})
    msg = str(e.value)
    assert "\n" not in msg and "data.revision=refs/convert/parquet" in msg and "openwebtext.py" in msg
    with pytest.raises(HubDatasetError) as e:
        load_corpus({"source": "hub", "parts": [{"path": "org/a"}, {"path": "org/script", "revision": "v0"}]})
    assert "data.parts.1.revision=refs/convert/parquet" in str(e.value)
    # a partial export (the hub converts the first few GB only) would silently be part of the corpus
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    listing = ["plain_text/partial-train/0000.parquet", "plain_text/partial-train/0001.parquet"]
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, *a, **k: listing)
    with pytest.raises(HubDatasetError) as e:
        load_corpus({"source": "hub", "path": "org/script", "streaming": True})
    msg = str(e.value)
    assert "\n" not in msg and "partial-train" in msg and "data.revision" in msg and "data=files" in msg
    assert hub_calls[-1][2].get("revision") is None  # the partial export was not read


def test_glue_and_squad_pass_their_revision(hub_calls):
    from convexp.tasks.classification.loading import load_task
    from convexp.tasks.squad.data import load_squad

    with pytest.raises(UserError):  # the recorder's dataset is no GLUE task: refused after the call
        load_task("rte", {"source": "hub", "revision": "g1"})
    assert hub_calls[0][:2] == ("nyu-mll/glue", "rte") and hub_calls[0][2]["revision"] == "g1"
    with pytest.raises(UserError):
        load_squad({"source": "hub", "revision": "s1"})
    assert hub_calls[-1][:2] == ("rajpurkar/squad", None) and hub_calls[-1][2]["revision"] == "s1"


def test_a_revision_for_a_source_without_one_is_refused(tmp_path):
    from convexp.data.corpus import data_settings

    for cfg, words in (
        ({"source": "files", "path": str(tmp_path), "revision": "x"}, ["data.source=files", "remove it"]),
        ({"source": "hub", "parts": [{"path": "org/a"}], "revision": "x"}, ["data.parts.N.revision"]),
    ):
        with pytest.raises(UserError) as e:
            data_settings(cfg)
        assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)
