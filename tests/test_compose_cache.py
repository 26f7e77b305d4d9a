"""Hydra's compositions kept across processes (config/compose_cache.py): the next process composing
the same overrides from the same config files reads the kept one; an edited config file, another
environment or a refusal is never answered from it."""

from __future__ import annotations

import os
import pickle

import pytest
from omegaconf import OmegaConf

from convexp.config import compose, compose_cache
from convexp.config.compose import add_config_dirs, compose_stage
from convexp.errors import ConfigError


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A cache folder of the test's own; ``next_process()`` forgets what this process holds."""
    monkeypatch.setenv("CONVEXP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CONVEXP_CONFIG_PATH", raising=False)
    compose_cache._store.clear()
    yield compose_cache._store.clear
    compose_cache._store.clear()


def _plain(cfg) -> dict:
    d = OmegaConf.to_container(cfg, resolve=True)
    d.pop("invocation")
    return d


def test_the_next_process_reads_the_composition_without_hydra(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "a"))
    first = compose_stage("finetune", ["scale=paper", "task=rte", "init=x"])
    fresh()
    monkeypatch.setattr(compose, "initialize_hydra", lambda conf, dirs: pytest.fail("composed again"))
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "b"))  # resolved in this process
    again = compose_stage("finetune", ["scale=paper", "task=rte", "init=x"])
    assert _plain(again) == {**_plain(first), "outputs": str(tmp_path / "b")}
    assert list((tmp_path / "cache" / "compose").glob("*.pkl"))


def test_an_edited_config_file_composes_again(fresh, tmp_path):
    mine = tmp_path / "conf" / "model"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("defaults: [convbert_small]\nkernel_size: 7\n")
    add_config_dirs([tmp_path / "conf"])
    assert compose_stage("pretrain", ["model=mine"]).model.kernel_size == 7
    (mine / "mine.yaml").write_text("defaults: [convbert_small]\nkernel_size: 5\n")
    os.utime(mine / "mine.yaml", ns=(1, 1))  # another modification time, whatever the clock's tick
    fresh()
    assert compose_stage("pretrain", ["model=mine"]).model.kernel_size == 5


def test_a_refusal_is_never_kept(fresh):
    for _ in range(2):
        with pytest.raises(ConfigError, match="bogus"):
            compose_stage("pretrain", ["bogus.key=1"])
        fresh()
    compose_stage("pretrain", ["scale=smoke"])  # a composition that is kept, beside the refused one
    [kept] = compose_cache._folder().glob("*.pkl")
    keys = pickle.loads(kept.read_bytes())
    assert len(keys) == 1 and "bogus" not in next(iter(keys))
