"""`convexp bench squad`: argument handling (fast) and a tiny end-to-end run's JSON record (slow)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from convexp.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--questions", "0"], "--questions must be a positive integer"),
        (["--dev-questions", "0"], "--dev-questions must be a positive integer"),
        (["--stride", "0"], "--stride 0"),
        (["--max-len", "32", "--stride", "30"], "give a --stride from 1 to"),
        (["--model", "huge"], "--model 'huge'"),
        (["--init", "{tmp}/nope"], "no config.json there"),
        (["--data", "{tmp}"], "no train-v1.1.json"),
        (["--device", "tpu"], "--device tpu"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = runner.invoke(app, ["bench", "squad", *args, "--workdir", str(tmp_path / "work")])
    assert res.exit_code == 2, res.output
    assert message in res.output and len([x for x in res.output.splitlines() if x.strip()]) == 1
    assert not list(tmp_path.iterdir())  # nothing made before the arguments are checked


def test_the_hf_contenders_must_train_on_convexps_windows():
    from convexp.bench.squad import _script_f1
    from convexp.errors import UserError

    line = json.dumps({"dev_exact": 1.0, "dev_f1": 12.5, "train_windows": 70, "steps": 5})
    assert _script_f1(f"noise\n{line}\n", 70) == 12.5
    with pytest.raises(UserError, match="70 training windows, convexp 64"):
        _script_f1(line, 64)


@pytest.mark.slow
def test_tiny_squad_job_writes_the_record_of_every_tool(tmp_path):
    from convexp.bench.step import transformers_available

    out = tmp_path / "record.json"
    res = runner.invoke(
        app,
        ["bench", "squad", "--model", "tiny", "--questions", "48", "--repeats", "1", "--max-len", "40",
         "--stride", "8", "--device", "cpu", "--out", str(out), "--workdir", str(tmp_path / "work")],
        terminal_width=200,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    tools = ["convexp", "plain", "trainer"] if transformers_available() else ["convexp"]
    assert [r["tool"] for r in rec["runs"]] == tools
    job = rec["job"]
    assert job["train_questions"] == 48 and job["dev_questions"] == 50 and job["train_windows"] > 48  # contexts overflow
    assert "task.qa.bermo.stride_mode=overlap" in job["convexp_command"]
    for r in rec["runs"]:
        assert r["returncode"] == 0 and r["wall_s"] > 0 and 0 <= r["dev_f1"] <= 100
    s = rec["summary"]
    assert s["convexp"]["windows_per_s"] == pytest.approx(job["train_windows"] / s["convexp"]["wall_s"])
    for other in tools[1:]:
        assert s["ratio"][other]["wall_s"] == pytest.approx(s["convexp"]["wall_s"] / s[other]["wall_s"])
        assert "dev_f1_within_2_points" in s["ratio"][other]
    assert "train windows" in res.output and "vs Trainer" in res.output
