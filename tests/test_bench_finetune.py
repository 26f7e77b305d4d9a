"""`convexp bench`: the step benchmark's turn-taking, and `bench finetune`'s argument handling (fast) and a tiny
end-to-end run's JSON record (slow)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from convexp.cli import app

runner = CliRunner()


def test_bench_lists_step_and_finetune_and_keeps_its_step_options():
    res = runner.invoke(app, ["bench", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "finetune" in res.output and "pretrain" in res.output
    assert "--steps" in res.output
    res = runner.invoke(app, ["bench", "finetune", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "--repeats" in res.output and "--init" in res.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rows", "0"], "--rows must be a positive integer"),
        (["--repeats", "-1"], "--repeats must be a positive integer"),
        (["--max-len", "2"], "--max-len must be at least 3"),
        (["--model", "huge"], "--model 'huge'"),
        (["--init", "{tmp}/nope"], "no config.json there"),
        (["--data", "{tmp}"], "no SST-2/train.tsv"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = runner.invoke(app, ["bench", "finetune", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and len([x for x in res.output.splitlines() if x.strip()]) == 1
    assert not list(tmp_path.iterdir())  # nothing made before the arguments are checked


@pytest.mark.slow
def test_tiny_job_writes_the_record_of_both_tools(tmp_path):
    from convexp.bench.step import transformers_available

    out = tmp_path / "record.json"
    res = runner.invoke(
        app,
        ["bench", "finetune", "--model", "tiny", "--rows", "96", "--dev-rows", "40", "--repeats", "2",
         "--max-len", "32", "--out", str(out), "--workdir", str(tmp_path / "work")],
        terminal_width=200,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    tools = ["convexp", "transformers"] if transformers_available() else ["convexp"]
    runs = [(r["tool"], r["repeat"], r["seed"]) for r in rec["runs"]]
    assert runs == [(t, i, 42 + i) for i in range(2) for t in tools]
    assert rec["job"]["seeds"] == [42, 43] and "seeds=[42]" in rec["job"]["convexp_command"]
    for r in rec["runs"]:
        assert r["returncode"] == 0 and r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_mib"] > 50
        assert 0 <= r["dev_accuracy"] <= 100
    assert rec["job"]["train_rows"] == 96 and rec["job"]["dev_rows"] == 40 and rec["job"]["max_len"] == 32
    assert rec["job"]["convexp_command"][:4] == ["convexp", "finetune", "glue", "task=sst2"]  # runnable as written
    s = rec["summary"]
    assert s["convexp"]["examples_per_s"] == pytest.approx(96 / s["convexp"]["wall_s"])
    if "transformers" in tools:
        assert s["ratio"]["wall_s"] == pytest.approx(s["convexp"]["wall_s"] / s["transformers"]["wall_s"])
        assert len(s["ratio"]["wall_s_per_pair"]) == 2
        assert s["dev_accuracy_within_1_point"] == (abs(s["dev_accuracy_difference"]) <= 1)
    assert "wall time" in res.output and "peak RSS" in res.output
    # convexp's run kept its results and dropped its resume checkpoints
    run = next((tmp_path / "work" / "convexp-0" / "runs" / "finetune").iterdir())
    assert (run / "metrics.json").exists() and (run / "predictions" / "validation.tsv").exists()
    assert (run / "model").is_dir() and not (run / "checkpoints").exists()


def test_step_benchmark_times_every_contender_in_turn():
    from convexp.bench.step import _time_interleaved

    order = []
    t = _time_interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3, warmup=1)
    assert order == ["a", "b", "a", "b", "a", "b", "a", "b"]  # warm-up each, then turns
    assert set(t) == {"a", "b"} and all(v >= 0 for v in t.values())


@pytest.mark.slow
def test_step_benchmark_prints_both_precisions():
    res = runner.invoke(
        app, ["bench", "--steps", "1", "--batch-size", "2", "--seq-len", "16", "--lengths", "16"],
        terminal_width=200,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "fp32" in res.output and "bf16" in res.output and "speed-up" in res.output


@pytest.mark.slow
def test_pretrain_benchmark_records_throughput_and_memory(tmp_path):
    """In its own process: an in-process W&B run would leave this pytest worker's W&B service in
    WANDB_SERVICE, and the convexp processes later tests start would share it (a run killed there
    would keep its run ID registered, and its resume would be refused)."""
    from helpers import TINY, convexp

    res = convexp("bench", "pretrain", "--steps", "2", *TINY, "trainer.max_steps=6", outputs=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    (path,) = (tmp_path / "bench").glob("pretrain-*.json")
    rec = json.loads(path.read_text())
    assert rec["bare_tokens_per_s"] > 0 and rec["stage_tokens_per_s"] > 0 and rec["ratio"] > 0
    assert rec["stage_steps"] == 6 and rec["bare_step_memory_mib"] >= 0 and rec["peak_rss_mib"] > 50
    assert "peak RSS MiB" in res.stdout
