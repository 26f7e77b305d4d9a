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
    from convexp.bench.squad import _script_windows
    from convexp.errors import UserError

    result = {"dev_exact": 1.0, "dev_f1": 12.5, "train_windows": 70, "steps": 5}
    assert _script_windows(result, 70) == result
    with pytest.raises(UserError, match="70 training windows, convexp 64"):
        _script_windows(result, 64)


def test_the_squad_shaped_stand_in_has_squads_windows_and_the_same_answers():
    """The bench's synthetic questions, with contexts lengthened to SQuAD's: every answer still at
    its offset, most windows of 256 tokens hold 150 or more, some contexts need a second window;
    the same seed gives the same records."""
    from convexp.bench.squad import TOKEN, squad_shaped
    from convexp.tasks.squad.data import synthetic_squad

    records = synthetic_squad(200, 42)["train"]
    shaped = squad_shaped(records, 42)
    assert shaped == squad_shaped(records, 42) and len(shaped) == len(records)
    for before, after in zip(records, shaped):
        assert after["question"] == before["question"] and before["context"] in after["context"]
        text, start = after["answers"]["text"][0], after["answers"]["answer_start"][0]
        assert after["context"][start : start + len(text)] == text
    tokens = [len(TOKEN.findall(r["context"])) + len(TOKEN.findall(r["question"])) + 3 for r in shaped]
    assert sum(n >= 150 for n in tokens) > 0.7 * len(tokens)  # most windows: 150 tokens or more
    assert 0 < sum(n > 256 for n in tokens) < 0.3 * len(tokens)  # some contexts need a second window
    assert sum(len(TOKEN.findall(r["context"])) for r in records) < 0.25 * sum(tokens)  # the originals are short


@pytest.mark.slow
def test_tiny_squad_job_writes_the_record_of_every_tool(tmp_path):
    from convexp.bench.step import transformers_available

    out = tmp_path / "record.json"
    res = runner.invoke(
        app,
        ["bench", "squad", "--model", "tiny", "--questions", "48", "--repeats", "1", "--max-len", "128",
         "--stride", "32", "--device", "cpu", "--grouping", "default", "--out", str(out),
         "--workdir", str(tmp_path / "work")],
        terminal_width=200,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    tools = ["convexp", "bare", "plain", "trainer"] if transformers_available() else ["convexp", "bare"]
    assert [r["tool"] for r in rec["runs"]] == tools and {r["setting"] for r in rec["runs"]} == {"default"}
    job = rec["job"]
    assert job["train_questions"] == 48 and job["dev_questions"] == 50 and job["train_windows"] > 48  # contexts overflow
    assert job["train_window_tokens"]["mean"] > 100  # SQuAD-shaped: long windows
    assert "task.qa.bermo.stride_mode=overlap" in job["commands"]["convexp"]
    for r in rec["runs"]:
        assert r["returncode"] == 0 and r["wall_s"] > 0 and r["train_s"] > 0
        assert r["tool"] == "bare" or 0 <= r["dev_f1"] <= 100
    s = rec["summary"]["default"]
    assert s["convexp"]["windows_per_s"] == pytest.approx(job["train_windows"] / s["convexp"]["wall_s"])
    assert s["loop"]["convexp"]["vs_bare"] > 0 and s["loop"]["convexp"]["to_first_step_s"] > 0
    for other in tools[2:]:
        assert s["ratio"][other]["wall_s"] == pytest.approx(s["convexp"]["wall_s"] / s[other]["wall_s"])
        assert "dev_f1_within_2_points" in s["ratio"][other]
    assert "train windows" in res.output and "stage / bare" in res.output
