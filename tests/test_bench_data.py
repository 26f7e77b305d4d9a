"""`convexp bench data`: one invocation times the tokenizer alone, convexp's build on 1 and N
processes, run_mlm's way, and the streaming rows, on a generated corpus; bad options are one line."""

from __future__ import annotations

import json

import pytest
from helpers import convexp


@pytest.mark.parametrize(
    "args, message",
    [(["--size", "0"], "--size must be a positive integer"), (["--examples", "blocks"], "--examples 'blocks'"),
     (["--seq-len", "4"], "--seq-len must be at least 5")],
)  # fmt: skip
def test_bad_options_are_one_line(tmp_path, args, message):
    res = convexp("bench", "data", *args, "--workdir", str(tmp_path / "w"), outputs=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_the_corpus_is_openwebtext_like_and_the_same_for_a_seed(tmp_path):
    from convexp.bench.data_corpus import documents, write_corpus

    docs = list(documents(200_000, seed=1))
    assert docs == list(documents(200_000, seed=1)) and docs != list(documents(200_000, seed=2))
    paragraphs = [len(d.split("\n\n")) for d in docs]
    assert 14 <= sum(paragraphs) / len(docs) <= 26 and 2_000 < 200_000 / len(docs) < 8_000
    assert write_corpus(tmp_path / "c.jsonl", 50_000) == len((tmp_path / "c.jsonl").read_text().splitlines())


@pytest.mark.slow
def test_bench_data_writes_its_record(tmp_path):
    out = tmp_path / "data.json"
    res = convexp("bench", "data", "--size", "6000000", "--processes", "2", "--repeats", "1", "--out", str(out),
                  "--workdir", str(tmp_path / "w"), outputs=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["benchmark"] == "data" and r["cpu"] and r["processes"] == 2
    assert set(r["tokens_per_s"]) == {"tokenizer", "convexp x1", "convexp x2", "run_mlm x2"}
    assert r["corpus"]["documents"] > 1024 + 100  # two training chunks: the two-process build used its pool
    assert r["build_stats"]["num_tokens"] < r["corpus"]["tokens"]  # the 100 validation documents held out
    s = r["streaming"]
    assert s["resume_depths"][1] == 10 * s["resume_depths"][0] and 0 < s["shard_blocks"] < s["blocks"]
    assert set(r["ratios"]) == set(r["met"]) == {"convexp/tokenizer", "convexp/run_mlm", "shard/whole",
                                                 "deep/shallow resume", "deep resume s",
                                                 "deep/shallow resume, stored", "deep resume s, stored"}  # fmt: skip
    assert s["store_pass_s"] < s["store_fill_s"]  # a later pass reads the store: no tokenising
    assert max(s["first_block_after_resume_stored_s"]) < min(s["first_block_after_resume_s"])
    assert "convexp x2" in res.stdout and r["cpu"] in res.stdout
