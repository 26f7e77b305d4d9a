"""`convexp report` on a run store with known scores: the verdicts beside the paper's numbers, the
differences against the baseline, the seeds needed, their CSV / JSON / W&B copies and figures."""

import csv
import json
import re
import statistics

import pytest
import yaml
from helpers import convexp, record_figures, write_sweep
from wandb_records import api_serving, run_info

from typer.testing import CliRunner

from convexp.cli import app
from convexp import seed_stats as stats
from convexp.report.build import make_report
from convexp.sweep.plan import build_plan
from convexp.sweep.spec import SweepError, load_sweep

ARGS = ["scale=paper", "seeds=[1,2,3,4,5]", "finetune.grid=false"]
SHIFT = 2.0  # the better variant's gain on RTE; MRPC: none
SEED_EFFECT = [1.5, -2.0, 0.5, 2.5, -1.0]  # each seed moves both variants alike
NOISE = {"base": [0.3, -0.2, 0.1, -0.3, 0.1], "better": [-0.1, 0.2, 0.3, -0.2, -0.2]}  # differences: mean 0


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A two-variant sweep (RTE, MRPC) whose fine-tuning runs hold known scores: a seed effect that
    both variants share, each run's own noise, and a gain of SHIFT for the better variant on RTE."""
    tmp = tmp_path_factory.mktemp("decisions")
    variants = {
        "base": {
            "label": "Baseline",
            "pretrain": ["model=bert_small"],
            "paper": {"rte": 65.0, "mrpc": 90.0, "glue": 75.0},
            "paper_se": {"rte": 0.7},
        },
        "better": {
            "label": "Better",
            "pretrain": ["model=bert_small", "model.num_layers=2"],
            "paper": {"rte": 67.0, "mrpc": 85.0},
        },
    }
    path = write_sweep(tmp / "toy.yaml", variants)
    d = yaml.safe_load(path.read_text())
    d["finetune"]["tasks"] = ["rte", "mrpc"]
    d["report"].update(columns=["params", "rte", "mrpc", "glue"], aggregate="mean", style="chang", paper_split="dev")
    path.write_text(yaml.safe_dump(d))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONVEXP_OUTPUTS", str(tmp))
        plan = build_plan(load_sweep(str(path)), ARGS)
    for node in plan.order():
        if node.stage == "finetune":
            [run] = node.runs
            gain = SHIFT if (node.variant, node.task) == ("better", "rte") else 0.0
            noise = NOISE[node.variant][node.seed - 1] + SEED_EFFECT[node.seed - 1]
            v = {"rte": 65.0, "mrpc": 85.0}[node.task] + gain + noise
            dev = {"accuracy": v} if node.task == "rte" else {"accuracy": v, "f1": v}
            run.dir.mkdir(parents=True)
            run.write_json("metrics.json", {"task": node.task, "hp": {}, "score": v, "dev": {"validation": dev}})
            run.set_status("finished")
    return tmp, path


def test_the_report_decides_with_known_scores(store, monkeypatch):
    tmp, sweep = store
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp))
    out = make_report(str(sweep), ARGS, out=tmp / "report")
    table = (out / "table.md").read_text()
    lines = table.splitlines()
    # verdicts beside the paper's numbers: base's MRPC (mean 85.3: the seed effects' mean is 0.3) is
    # 4.7 below its paper number 90, the other cells within noise of theirs
    vs = [line for line in lines if line.startswith("|  | vs paper |")]
    assert vs[0].split("|")[4:6] == [" ✓ ", " ↓ 4.7 "] and vs[1].split("|")[4:6] == [" ✓ ", " ✓ "]
    assert "Reproduced 3 of 4 cells within noise (1 below, 0 above it)." in table  # GLUE*: no verdict
    assert "paper's printed ± (rows: Baseline)" in table
    # the differences: RTE's shift found and kept by Holm, MRPC none; paired (same seeds, pre-training seed)
    better = next(line for line in lines if line.startswith("| Better | Δ |")).split("|")
    assert better[3].strip().startswith("+2.0 [") and better[3].strip().endswith("*†")
    assert better[4].strip().startswith("+0.0 [") and "*" not in better[4] and "| seeds | paired | paired | paired |" in table.replace("|  |", "|")
    assert "Holm–Bonferroni over the 2 task cell(s)" in table and "1 remains significant (marked †): RTE" in table
    assert "### Seeds needed to detect 0.5 points" in table
    # the same numbers in report.json and statistics.csv
    report = json.loads((out / "report.json").read_text())
    st = report["statistics"]
    rte = st["differences"]["better"]["rte"]
    assert st["baseline"] == "base" and rte["paired"] is rte["excludes_zero"] is rte["significant_holm"] is True
    assert rte["low"] < SHIFT < rte["high"]
    assert st["verdicts"]["base"]["mrpc"]["text"] == "↓ 4.7 below (beyond noise)"
    spread = statistics.stdev(b - a for a, b in zip(NOISE["base"], NOISE["better"]))  # of the differences
    assert st["seeds_needed"]["design"] == "paired" and st["seeds_needed"]["spread"]["rte"] == pytest.approx(spread)
    assert st["seeds_needed"]["seeds"]["rte"] == stats.seeds_needed(0.5, spread, True) == 6
    rows = list(csv.DictReader((out / "statistics.csv").open()))
    diff = next(r for r in rows if (r["kind"], r["variant"], r["column"]) == ("difference", "better", "rte"))
    assert float(diff["low"]) == pytest.approx(rte["low"]) and diff["mark"] == "*†"
    assert {r["column"] for r in rows if r["kind"] == "seeds_needed"} == {"rte", "mrpc", "glue"}
    # figures by default: every seed per variant, and the forest plot of the differences
    assert report["figures"] == [str(out / "seeds.png"), str(out / "differences.png")]
    assert all((out / f).read_bytes()[:4] == b"\x89PNG" for f in ("seeds.png", "differences.png"))


GLUE_NOTE = (
    "GLUE*: ours averages only the columns of the tasks that were run, 2 (MRPC, RTE), while Chang et al.'s GLUE "
    "score is the mean of their 9 columns (CoLA, MNLI-m, MNLI-mm, MRPC, QNLI, QQP, RTE, SST-2, STS-B; WNLI "
    "left out): not the same number, so no verdict is given on it."
)


def test_the_glue_averages_are_told_apart_in_every_format(store, monkeypatch):
    """Our 2-task GLUE average beside the paper's 9-column score: one line says they differ, in the
    markdown table, the LaTeX caption, and on the terminal for CSV (whose file stays data)."""
    tmp, sweep = store
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    for fmt, file in (("md", "table.md"), ("latex", "table.tex"), ("csv", "table.csv")):
        res = CliRunner().invoke(app, ["report", str(sweep), *ARGS, "--no-figures", "--format", fmt])
        assert res.exit_code == 0, res.output
        assert GLUE_NOTE in res.output.replace("\n", " ")
        written = (tmp / "reports" / "toy" / file).read_text()
        if fmt == "latex":
            caption = next(line for line in written.splitlines() if line.startswith(r"\caption{"))
            assert caption.endswith(" " + GLUE_NOTE + "}")
        else:
            assert (GLUE_NOTE in written) == (fmt == "md")


def test_full_glue_averages_say_they_match_the_papers():
    from convexp.report.tables import Cell, Row, glue_columns, glue_note

    full = glue_columns("convbert")
    row = Row("v", "V", {"glue": Cell(80.0)}, {"glue": 86.4}, glue_over=full)
    assert glue_note([row], "convbert") == (
        "GLUE: ours averages the same tasks as the paper's score; ConvBERT's GLUE score is the mean of its "
        "8 tasks (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE; WNLI left out)."
    )
    assert glue_note([Row("v", "V", {"glue": Cell(80.0)}, {}, glue_over=full)], "convbert") is None
    partial = Row("v", "V", {"glue": Cell(80.0, note="*")}, {}, glue_over=full[:4])
    assert glue_note([partial], "convbert") == (
        "GLUE*: averages only the columns of the tasks that were run, 4 (CoLA, SST-2, MRPC, STS-B) of the 8."
    )


def test_seed_and_difference_figures_name_the_swept_key(store, monkeypatch):
    """The variants' axis and the title say what the sweep varies (model.num_layers: default vs 2)."""
    tmp, sweep = store
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp))
    drawn = record_figures(monkeypatch)
    make_report(str(sweep), ARGS, out=tmp / "figures")
    for name, labels in (("seeds.png", ["Baseline\nmodel.num_layers=default", "Better\nmodel.num_layers=2"]),
                         ("differences.png", ["Better\nmodel.num_layers=2"])):  # fmt: skip
        fig = drawn[name]
        assert "\nvaries model.num_layers: default vs 2\n" in fig.get_suptitle()
        first = fig.axes[0]
        assert [t.get_text() for t in first.get_yticklabels()] == labels and first.get_ylabel() == "variant"
    assert "baseline “Baseline” with model.num_layers=default" in drawn["differences.png"].get_suptitle()
    assert drawn["seeds.png"].axes[2].get_title() == "GLUE* (2 columns run)"  # RTE and MRPC of the 9


def test_report_settings_on_the_command_line(store, monkeypatch):
    """report.baseline= and report.detect= among the sweep's arguments, --no-figures, LaTeX."""
    tmp, sweep = store
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = [str(sweep), *ARGS, "report.baseline=better", "report.detect=2", "--no-figures", "--format", "latex"]
    res = CliRunner().invoke(app, ["report", *args])
    assert res.exit_code == 0, res.output
    assert "Differences against the baseline Better" in res.output
    assert r"Baseline & $\Delta$ & -2.0 [" in res.output  # base − better on RTE
    assert "Seeds needed to detect 2 points" in res.output and "figure:" not in res.output
    assert res.output.count(r"\begin{tabular}") == 3  # the table, the differences, the seeds needed
    assert r"\textit{vs paper}" in res.output and r"\checkmark{}" in res.output
    assert r"$\downarrow$ 4.7" in res.output
    out = tmp / "reports" / "toy"
    assert not list(out.glob("*.png")) and json.loads((out / "report.json").read_text())["figures"] == []


@pytest.mark.parametrize(
    "setting, message",
    [
        ("report.detect=0", "report.detect must be a positive number of points, e.g. 0.5, not 0.0"),
        ("report.detect=x", "report.detect must be a positive number of points, e.g. 0.5, not 'x'"),
        ("report.baseline=nope", "report.baseline=nope is not a variant of toy; choose one of: base, better"),
        ("report.colour=red", "unknown report setting 'report.colour=red'"),
    ],
)
def test_bad_report_settings_are_one_line(store, setting, message):
    tmp, sweep = store
    before = {p: p.stat().st_mtime_ns for p in tmp.glob("reports/**/*")}
    res = convexp("report", str(sweep), *ARGS, setting, outputs=tmp, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr
    assert before == {p: p.stat().st_mtime_ns for p in tmp.glob("reports/**/*")}  # nothing written


@pytest.mark.slow  # the W&B service: half a minute on a busy machine
def test_the_wandb_report_run_holds_the_statistics(store, monkeypatch):
    """--source wandb reads the runs through the API (a stand-in serving their metrics.json) and logs
    the report as a run of the sweep's group, job type report, with the statistics in its summary."""
    tmp, sweep = store
    import wandb

    monkeypatch.setattr(wandb, "Api", api_serving(tmp))
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp))
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = make_report(str(sweep), ARGS, source="wandb", out=tmp / "from-wandb", figures=False)
    report = json.loads((out / "report.json").read_text())
    wandb.teardown()  # the W&B service writes the run file: let it finish, as the command's exit does
    [record] = out.glob("wandb/offline-run-*/run-*.wandb")
    info = run_info(record)
    assert (info["group"], info["job_type"]) == ("toy", "report")
    assert info["summary"]["statistics"] == json.loads(json.dumps(report["statistics"]))
    assert info["summary"]["statistics"]["differences"]["better"]["rte"]["significant_holm"]


@pytest.mark.parametrize(
    "variant_keys, report_keys, message",
    [
        ({"paper_se": {"rte": 0.5}}, {}, "paper_se.rte must be the standard error (a number ≥ 0) of a number"),
        ({"paper": {"rte": 66.0}, "paper_se": {"rte": -1}}, {}, "paper_se.rte must be the standard error"),
        ({}, {"baseline": "nope"}, "report.baseline names unknown variant 'nope'; choose one of: a"),
        ({}, {"detect": 0}, "report.detect must be a positive number of points, e.g. 0.5, not 0"),
    ],
)
def test_sweep_files_state_baseline_detect_and_paper_se(tmp_path, variant_keys, report_keys, message):
    path = write_sweep(tmp_path / "s.yaml", {"a": {"pretrain": ["model=bert_small"], **variant_keys}})
    d = yaml.safe_load(path.read_text())
    d["report"].update(report_keys)
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(SweepError, match=re.escape(message)):
        load_sweep(str(path))


def test_chang_sweeps_carry_table_6_standard_errors():
    """Table 6 prints mean ± s.e. over ten runs: the ± of every task and GLUE are the verdicts' paper noise."""
    sweep = load_sweep("key-based-conv")
    assert sweep.variants["composite"].paper_se["cola"] == 0.7
    assert sweep.variants["composite_key"].paper_se["rte"] == 0.4
    assert all(set(v.paper_se) == set(v.paper) - {"params"} for v in sweep.variants.values())
