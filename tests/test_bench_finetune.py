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
    assert res.exit_code == 0 and "finetune" in res.output and "pretrain" in res.output and "squad" in res.output
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


@pytest.mark.parametrize("first_only", [False, True])
def test_the_floor_counts_the_encoders_matrix_products(first_only):
    """floor.encoder_flops equals torch's own FLOP count of a training step's products (forward and
    backward, the [CLS]-only last block and the padding skipped below it too), and of a forward
    pass's, on a padded batch."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from convexp.bench.floor import encoder_flops
    from convexp.models import ModelConfig
    from convexp.models.encoder import Encoder

    cfg = ModelConfig(vocab_size=50, hidden_size=16, num_heads=2, intermediate_size=32, num_layers=3)
    shape = {"hidden": 16, "intermediate": 32, "layers": 3}
    encoder = Encoder(cfg).train()  # training: the CPU attention is unfused (its products are counted)
    ids = torch.randint(5, 50, (3, 7))
    mask = (torch.arange(7) < torch.tensor([[7], [4], [2]])).long()  # 13 real tokens of 21
    batch = [(3, 7, 13)]
    with FlopCounterMode(display=False) as counter:
        encoder(ids, mask, first_only=first_only).features.sum().backward()
    assert counter.get_total_flops() == encoder_flops(batch, shape, train=True, cls_only=first_only)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        encoder(ids, mask, first_only=first_only)
    assert counter.get_total_flops() == encoder_flops(batch, shape, train=False, cls_only=first_only)
    assert encoder_flops(batch, shape, train=True) == encoder_flops([(3, 7)], shape, train=True)
    assert encoder_flops(batch, shape, train=True, cls_only=True) < encoder_flops([(3, 7)], shape, train=True, cls_only=True)


def _fake_floor(rates_gflop: list[float], threads: int = 1, seen: list | None = None) -> dict:
    """floor.job_floor of a small job whose GEMM rate samples are ``rates_gflop`` in turn."""
    import torch

    from convexp.bench.floor import job_floor

    rates = iter(rates_gflop)

    def measure(rows, shape):
        if seen is not None:
            seen.append(torch.get_num_threads())
        return next(rates) * 1e9

    lengths = torch.tensor([5, 9, 12, 7, 30, 16, 8, 11])
    shape = {"hidden": 16, "intermediate": 32, "layers": 2}
    return job_floor(lengths, lengths[:4], 4, 1, shape, 42, threads=threads, measure=measure)


def test_the_floor_takes_the_best_of_its_rate_samples_on_the_jobs_threads():
    """A busy machine's 34 GFLOP/s does not set the floor: of [34, 136, 120] it takes 136, measured
    on the job's threads (torch's own count put back after)."""
    import torch

    from convexp.bench.floor import floor_line, floor_record

    seen: list[int] = []
    before = torch.get_num_threads()
    products = _fake_floor([34, 136, 120], threads=1, seen=seen)
    for _ in range(3):  # before, between and after the runs
        products["rate"].sample()
    assert seen == [1, 1, 1] and torch.get_num_threads() == before
    rec = floor_record(products, {"full": [64.0, 128.0], "cls_only": [53.0]})
    assert rec["gemm_gflop_per_s"] == 136 and rec["gemm_gflop_per_s_samples"] == [34, 136, 120]
    assert rec["seconds"] == {k: v / 136e9 for k, v in products["flops"].items()}
    assert rec["threads"] == 1 and rec["floor_above_wall"] is False and rec["walls_below_floor"] == {}
    assert "136 GFLOP/s, the best of 3 samples" in floor_line(rec) and "too busy" not in floor_line(rec)


def test_a_floor_above_a_measured_wall_is_flagged_not_clamped():
    from convexp.bench.floor import floor_line, floor_record

    products = _fake_floor([34])
    products["rate"].sample()
    full = products["flops"]["full"] / 34e9
    rec = floor_record(products, {"full": [full * 2, full / 2], "cls_only": []})
    assert rec["floor_above_wall"] is True and rec["walls_below_floor"] == {"full": full / 2}
    assert rec["seconds"]["full"] == full  # not clamped
    assert "the machine was too busy to measure the floor" in floor_line(rec)


def test_the_bench_samples_the_rate_between_its_repeats(tmp_path):
    """run_repeats calls ``between`` after every seed's turn but the last (the bench samples
    before and after the runs itself)."""
    import io
    import sys

    from rich.console import Console

    from convexp.bench.jobs import run_repeats

    said: list[str] = []

    def commands(seed):
        said.append(f"run {seed}")
        return {"convexp": [sys.executable, "-c", "pass"], "trainer-grouped": [sys.executable, "-c", "pass"]}

    runs = run_repeats(commands, [1, 2, 3], tmp_path, Console(file=io.StringIO()), "m", "m",
                       lambda *_: {"m": 1.0}, between=lambda: said.append("sample"))  # fmt: skip
    assert said == ["run 1", "sample", "run 2", "sample", "run 3"] and len(runs) == 6
    assert [(r["tool"], r["setting"]) for r in runs[:2]] == [("convexp", "default"), ("trainer", "grouped")]
    assert all(r["started"] < r["ended"] for r in runs)


def _run(tool, setting, repeat, wall, train_s, steps=10, first=2.0, last_gap=1.0, **more):
    """A run of jobs.run_repeats: started at 100 + 1000 repeat, its first step ``first`` s later."""
    start = 100.0 + 1000 * repeat
    return {"tool": tool, "setting": setting, "repeat": repeat, "seed": 42 + repeat, "wall_s": wall, "cpu_s": wall,
            "peak_rss_mib": 500.0, "started": start, "ended": start + wall, "train_s": train_s, "steps": steps,
            "first_step": start + first, "last_step": start + wall - last_gap, "m": 90.0, **more}  # fmt: skip


def test_the_summary_sets_the_stage_beside_its_bare_step_and_its_fixed_cost():
    """Per setting: convexp's ratios to the contenders, and each tool's steps against its job: the
    stage's steps/s over the bare step's on the same repeat, the seconds before the first step and
    after the last (the bare step is not a contender)."""
    from convexp.bench.jobs import summarize

    runs = [
        _run("convexp", "default", 0, 30.0, 20.0, first=6.0, last_gap=2.0),
        {"tool": "bare", "setting": "default", "repeat": 0, "seed": 42, "wall_s": 25.0, "cpu_s": 25.0,
         "peak_rss_mib": 400.0, "started": 0.0, "ended": 25.0, "train_s": 19.0, "steps": 10},
        _run("plain", "default", 0, 40.0, 30.0, first=4.0, last_gap=3.0),
        _run("convexp", "grouped", 0, 20.0, 12.0),
        _run("trainer", "grouped", 0, 25.0, 16.0),
    ]  # fmt: skip
    s = summarize(runs, 320, metric="m")
    assert set(s) == {"default", "grouped"} and "bare" not in s["default"]
    assert set(s["default"]["ratio"]) == {"plain"} and set(s["grouped"]["ratio"]) == {"trainer"}
    assert s["default"]["ratio"]["plain"]["wall_s"] == pytest.approx(30 / 40)
    loop = s["default"]["loop"]["convexp"]
    assert loop["vs_bare"] == pytest.approx((10 / 20) / (10 / 19)) and loop["bare_steps_per_s"] == pytest.approx(10 / 19)
    assert loop["to_first_step_s"] == pytest.approx(6.0) and loop["after_last_step_s"] == pytest.approx(2.0)
    assert "vs_bare" not in s["default"]["loop"]["plain"] and "vs_bare" not in s["grouped"]["loop"]["convexp"]
    assert s["default"]["loop"]["plain"]["to_first_step_s"] == pytest.approx(4.0)


@pytest.mark.slow
def test_tiny_job_writes_the_record_of_every_tool(tmp_path):
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
    hf = ["plain", "trainer"] if transformers_available() else []
    jobs = [("convexp", "default"), ("bare", "default"), *((t, "default") for t in hf),
            ("convexp", "grouped"), ("bare", "grouped"), *(("trainer", "grouped") for t in hf[1:])]  # fmt: skip
    runs = [(r["tool"], r["setting"], r["repeat"], r["seed"]) for r in rec["runs"]]
    assert runs == [(t, s, i, 42 + i) for i in range(2) for t, s in jobs]
    assert rec["job"]["seeds"] == [42, 43] and rec["job"]["settings"] == ["default", "grouped"]
    commands = rec["job"]["commands"]
    assert commands["convexp"][:4] == ["convexp", "finetune", "glue", "task=sst2"]  # runnable as written
    assert "seeds=[42]" in commands["convexp"] and "group_by_length=true" not in commands["convexp"]  # scale=paper's
    assert "group_by_length=true" in commands["convexp-grouped"] and "group_by_length=true" in commands["bare-grouped"]
    for r in rec["runs"]:
        assert r["returncode"] == 0 and r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_mib"] > 50
        assert r["steps"] == 3 and r["train_s"] > 0  # 96 rows in batches of 32, one epoch
        if r["tool"] != "bare":
            assert 0 <= r["dev_accuracy"] <= 100 and r["started"] < r["first_step"] < r["last_step"] < r["ended"]
    assert rec["job"]["train_rows"] == 96 and rec["job"]["dev_rows"] == 40 and rec["job"]["max_len"] == 32
    for setting in ("default", "grouped"):
        s = rec["summary"][setting]
        assert s["convexp"]["examples_per_s"] == pytest.approx(96 / s["convexp"]["wall_s"])
        loop = s["loop"]["convexp"]
        assert loop["vs_bare"] > 0 and len(loop["vs_bare_per_repeat"]) == 2 and loop["to_first_step_s"] > 0
        for other in [t for t in hf if setting == "default" or t == "trainer"]:
            r = s["ratio"][other]
            assert r["wall_s"] == pytest.approx(s["convexp"]["wall_s"] / s[other]["wall_s"])
            assert len(r["wall_s_per_pair"]) == 2
            assert r["dev_accuracy_within_1_point"] == (abs(r["dev_accuracy_difference"]) <= 1)
            assert s["loop"][other]["after_last_step_s"] > 0
        floor = rec["floor"][setting]  # the job's matrix products alone, at this machine's GEMM rate
        assert floor["train_tokens"] <= floor["train_padded_tokens"] and floor["gemm_gflop_per_s"] > 0
        assert len(floor["gemm_gflop_per_s_samples"]) == 3  # before, between and after the two repeats
        assert 0 < floor["seconds"]["cls_only"] < floor["seconds"]["full"] < s["convexp"]["wall_s"]
    # random batches pad more than length-grouped ones
    assert rec["floor"]["default"]["train_padded_tokens"] > rec["floor"]["grouped"]["train_padded_tokens"]
    assert rec["job"]["device"] == "cpu" and rec["job"]["precision"] == "fp32"
    assert "Matrix products alone" in res.output and "stage / bare" in res.output
    assert "wall time" in res.output and "peak RSS" in res.output and "vs plain loop" in res.output
    # convexp's run kept its results and dropped its resume checkpoints
    run = next((tmp_path / "work" / "convexp-0" / "runs" / "finetune").iterdir())
    assert (run / "metrics.json").exists() and (run / "predictions" / "validation.tsv").exists()
    assert (run / "model").is_dir() and not (run / "checkpoints").exists()


def test_step_benchmark_times_every_contender_in_turn():
    from convexp.bench.step import time_interleaved

    order = []
    t = time_interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3, warmup=1)
    assert order == ["a", "b", "a", "b", "a", "b", "a", "b"]  # warm-up each, then turns
    assert set(t) == {"a", "b"} and all(v >= 0 for v in t.values())


def test_cuda_step_table_prints_each_models_rows_as_they_are_timed(monkeypatch, capsys):
    """On a GPU a compile takes a minute or more: each model's rows print when timed, and the
    ConvBERT/ELECTRA ratio comes from the eager rows (the CUDA work itself runs in the gpu tier)."""
    import torch

    from convexp.bench import cuda_step

    timed = []

    def bench_model(name, batch_size, seq_len, rounds, peak, hf, modes):
        timed.append(name)
        print(f"timing {name}")
        ms = {"convbert_small": 3.0, "electra_small": 2.0, "convbert_base": 9.0}[name]
        return [{"model": name, "shape": f"{batch_size}x{seq_len}", "contender": "convexp", "ms/step": ms,
                 "tokens/s": 1.0, "MFU %": 1.0}]  # fmt: skip

    monkeypatch.setattr(cuda_step, "bench_model", bench_model)
    monkeypatch.setattr(cuda_step, "matmul_tflops", lambda: 100.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "a GPU")
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        record = cuda_step.run_cuda_benchmarks(1, hf=False)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    out = capsys.readouterr().out
    assert timed == ["convbert_small", "electra_small", "convbert_base"]
    assert out.index("model convbert_small") < out.index("timing electra_small")  # printed before the next
    assert "ConvBERT-small step / ELECTRA-small step (convexp, eager): 1.50" in out
    assert [r["model"] for r in record["rows"]] == timed and all("compile s" in r for r in record["rows"])


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


def test_a_squad_floor_counts_the_full_encoder_for_every_tool():
    """A span head reads every position: bench squad's floor is the full encoder's, and its line
    says so (no [CLS]-only figure)."""
    from convexp.bench.floor import floor_line, floor_record

    import torch

    from convexp.bench.floor import job_floor

    lengths = torch.tensor([40, 90, 120, 70, 200, 160])
    shape = {"hidden": 16, "intermediate": 32, "layers": 2}
    floor = job_floor(lengths, lengths[:3], 4, 1, shape, 42, threads=1, measure=lambda rows, s: 120e9, cls_only=False)
    rec = floor_record(floor, {"full": [1e6]})
    assert set(rec["seconds"]) == {"full"} and not rec["floor_above_wall"]
    assert "every tool's" in floor_line(rec) and "[CLS]" not in floor_line(rec)
