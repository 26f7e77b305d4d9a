"""`convexp bench sweep`: its argument handling and summary arithmetic (fast), and a tiny end-to-end
sweep's JSON record (slow)."""

from __future__ import annotations

import json
import statistics

import pytest
from typer.testing import CliRunner

from convexp.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--jobs", "0"], "--jobs must be a positive integer, got 0"),
        (["--per-gpu", "0"], "--per-gpu must be a positive integer, got 0"),
        (["--rows", "-3"], "--rows must be a positive integer, got -3"),
        (["--shape", "huge"], "--shape 'huge'"),
        (["--device", "tpu"], "--device 'tpu'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, message):
    res = runner.invoke(app, ["bench", "sweep", *args, "--workdir", str(tmp_path / "work")])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.output
    assert not list(tmp_path.iterdir())  # nothing made before the arguments are checked


def test_bench_lists_sweep():
    res = runner.invoke(app, ["bench", "sweep", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "--per-gpu" in res.output and "--jobs" in res.output


def test_summary_counts_device_seconds_per_job_and_packed_ratios():
    from convexp.bench.sweep import summarize_sweep

    walls = {"sequential": 400.0, "packed": 160.0, "trainer": 800.0}
    acc = {"sequential": [80.0, 90.0, None, 85.0], "packed": [70.0, 75.0, 80.0, 85.0], "trainer": []}
    s = summarize_sweep(walls, acc, jobs=4, devices=1)  # CUDA: one GPU
    assert s["sequential"]["device_s_per_job"] == 100.0 and s["sequential"]["jobs_per_device_hour"] == 36.0
    assert s["packed"]["device_s_per_job"] == 40.0 and s["packed"]["jobs_per_device_hour"] == 90.0
    assert s["trainer"]["jobs_per_device_hour"] == 18.0
    assert s["ratio"] == {"packed/sequential": pytest.approx(2.5), "packed/trainer": pytest.approx(5.0)}
    assert s["sequential"]["dev_accuracy"] == 85.0 and s["packed"]["dev_accuracy"] == 77.5
    assert s["trainer"]["dev_accuracy"] is None
    cpu = summarize_sweep(walls, acc, jobs=4, devices=2)  # a CPU: core-seconds, wall x cores / jobs
    assert cpu["packed"]["device_s_per_job"] == 80.0 and cpu["packed"]["jobs_per_device_hour"] == 45.0
    assert cpu["ratio"] == s["ratio"]  # the device count cancels in the ratios
    assert summarize_sweep({"sequential": 10.0, "packed": 5.0}, {}, 1, 1)["ratio"] == {"packed/sequential": 2.0}
    fixed = summarize_sweep(walls, acc, 4, 1, {"packed": [20.0, None, 4.0, 6.0]})  # a job's wall less its steps
    assert fixed["packed"]["fixed_s_per_job"] == 6.0 and fixed["sequential"]["fixed_s_per_job"] is None


def test_table_names_the_device_and_fits_80_columns():
    import io

    from rich.console import Console

    from convexp.bench.sweep import print_sweep_table, summarize_sweep

    s = summarize_sweep({"sequential": 400.0, "packed": 160.0, "trainer": 800.0}, {"packed": [80.0]}, 16, 1)
    buf = io.StringIO()
    print_sweep_table(Console(file=buf, width=80), {"summary": s, "device_unit": "GPU", "per_device": 4,
                                                     "device_name": "NVIDIA H100", "devices": 1, "jobs": 16})  # fmt: skip
    text = buf.getvalue()
    assert "16 SST-2 fine-tunes of one checkpoint on NVIDIA H100" in text and "jobs/GPU-h" in text
    assert "convexp ×4" in text and "2.50" in text and "5.00" in text and "…" not in text


def test_pool_runs_at_most_k_at_once_and_times_from_first_start_to_last_end(tmp_path):
    import sys
    import time

    from rich.console import Console

    from convexp.bench.sweep import run_pool

    code = "import time, pathlib, sys; p = pathlib.Path(sys.argv[1]); p.write_text(str(time.time())); time.sleep(0.3)"
    cmds = [[sys.executable, "-c", code, str(tmp_path / f"start{i}")] for i in range(3)]
    logs = [tmp_path / f"job{i}" for i in range(3)]
    t0 = time.perf_counter()
    res = run_pool(cmds, 2, [{}] * 3, logs, Console(file=open(tmp_path / "log", "w")), "packed")
    assert len(res["jobs"]) == 3 and all(r["returncode"] == 0 for r in res["jobs"])
    starts = sorted(float((tmp_path / f"start{i}").read_text()) for i in range(3))
    assert starts[1] - starts[0] < 0.25 and starts[2] - starts[0] >= 0.25  # two at once, then the third
    assert max(r["wall_s"] for r in res["jobs"]) < res["wall_s"] <= time.perf_counter() - t0


@pytest.mark.slow
def test_tiny_sweep_records_every_way(tmp_path):
    from convexp.bench.step import transformers_available

    out = tmp_path / "record.json"
    res = runner.invoke(
        app,
        ["bench", "sweep", "--shape", "tiny", "--rows", "64", "--jobs", "3", "--per-gpu", "2", "--device", "cpu",
         "--out", str(out), "--workdir", str(tmp_path / "work")],
        terminal_width=200,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    ways = ["sequential", "packed", "workers", *(["trainer"] if transformers_available() else [])]
    assert list(rec["ways"]) == ways and rec["device"] == "cpu" and rec["device_unit"] == "core"
    assert rec["jobs"] == 3 and rec["per_device"] == 2 and rec["job"]["train_rows"] == 64
    for way in ways:
        w = rec["ways"][way]
        assert [r["seed"] for r in w["runs"]] == [42, 43, 44]
        assert all(r["returncode"] == 0 and 0 <= r["dev_accuracy"] <= 100 for r in w["runs"])
        assert all(0 < r["train_s"] < r["wall_s"] and r["fixed_s"] == pytest.approx(r["wall_s"] - r["train_s"])
                   for r in w["runs"])  # fmt: skip
        s = rec["summary"][way]
        assert s["wall_s"] == w["wall_s"] >= max(r["wall_s"] for r in w["runs"])
        assert s["device_s_per_job"] == pytest.approx(w["wall_s"] * rec["devices"] / 3)
        assert s["jobs_per_device_hour"] == pytest.approx(3600 / s["device_s_per_job"])
        assert s["fixed_s_per_job"] == pytest.approx(sorted(r["fixed_s"] for r in w["runs"])[1])
    assert rec["ways"]["packed"]["at_once"] == 2 and rec["ways"]["sequential"]["at_once"] == 1
    threads = rec["threads_per_packed_job"]
    assert f"trainer.threads={threads}" in rec["ways"]["packed"]["command"]
    assert rec["ways"]["packed"]["environment"] == {"OMP_NUM_THREADS": str(threads)}
    assert rec["ways"]["sequential"]["command"][:4] == ["convexp", "finetune", "glue", "task=sst2"]
    # the sweep's way: 3 jobs in 2 worker processes, so one ran two; the later jobs' fixed cost apart
    runs = rec["ways"]["workers"]["runs"]
    assert len({r["pid"] for r in runs}) <= 2 and sum(r["first_in_process"] for r in runs) == len({r["pid"] for r in runs})
    later = [r["fixed_s"] for r in runs if not r["first_in_process"]]
    assert later and rec["ways"]["workers"]["fixed_s_after_first"] == pytest.approx(statistics.median(later))
    for i in range(3):  # each convexp job kept its own run in its own outputs folder
        for way in ("sequential", "packed", "workers"):
            assert len(list((tmp_path / "work" / f"{way}-{i}" / "runs" / "finetune").iterdir())) == 1
    assert set(rec["summary"]["ratio"]) == {f"packed/{w}" for w in ways if w != "packed"}
    assert "fine-tunes of one checkpoint" in res.output and "core-s/job" in res.output
    assert "[packed 3/3]" in res.output and "[workers 3/3]" in res.output and "sweep ×2:" in res.output
