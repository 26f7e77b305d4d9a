"""`convexp ablate` and `convexp report` end to end on tiny models, offline."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from wandb_records import api_serving, run_info

from helpers import QUIET, SHRINK, convexp, ledger, statuses, write_sweep

# ----------------------------------------------------------------------------- plans, no training


@pytest.mark.slow
def test_every_sweep_plans_at_every_scale():
    """Every named sweep composes (all overrides valid) and expands as its file says."""
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep, sweep_names

    names = sweep_names()
    assert len(names) >= 10
    runs = {}
    for name in names:
        sweep = load_sweep(name)
        assert sweep.source["paper"] and sweep.source["ref"]
        plan = build_plan(sweep, ["scale=smoke"])
        pre = [n for n in plan.nodes.values() if n.key.startswith("pretrain/")]  # not continue/ (SQuAD)
        assert len({n.runs[0].id for n in pre}) == len(pre)  # variants that pre-train alike share a node
        assert set(plan.starts) == set(sweep.variants) and {s.node for s in plan.starts.values()} == {
            n.key for n in pre
        }
        if sweep.finetune:
            tasks = set(sweep.finetune.tasks)
            for v in sweep.variants:
                got = {n.task for n in plan.nodes.values() if n.variant == v and n.stage == "finetune"}
                assert tasks <= got <= tasks | {"mnli"}  # MNLI: the intermediate task (protocol=chang)
        for n in pre:
            runs.setdefault(n.runs[0].id, set()).add(f"{name}/{n.variant}")
    # the same configuration in two sweeps is one run: composite attention is trained once for all
    # of Chang et al.'s sweeps, ConvBERT-small once for ConvBERT's
    assert any(len(v) >= 4 for v in runs.values())
    paper = build_plan(load_sweep("convbert-conv-type"), ["scale=paper"])
    seeds = {n.seed for n in paper.nodes.values() if n.stage == "finetune"}
    assert len(seeds) == 9  # "median of 9 runs"
    sizes = build_plan(load_sweep("convbert-sizes"), ["scale=paper", "variants=[small,small_4m]"])
    steps = {v: c.trainer.max_steps for v, c in sizes.pretrain_cfgs.items()}
    assert steps == {"small": 1_000_000, "small_4m": 4_000_000}
    assert sizes.pretrain_cfgs["small"].data.path == "Skylion007/openwebtext"  # the paper's corpus


@pytest.mark.slow
def test_list_dry_run_and_wandb_sweep(tmp_path):
    res = convexp("ablate", "--list", outputs=tmp_path)
    assert res.returncode == 0, res.stderr
    for name in ("convbert-components", "relative-positions", "conv-injection", "objective"):
        assert name in res.stdout
    assert "Table 1" in res.stdout and "Figure 5" in res.stdout

    res = convexp("ablate", "convbert-conv-type", "scale=smoke", "--dry-run", outputs=tmp_path)
    assert res.returncode == 0, res.stderr
    for v in ("electra_small", "conventional", "dynamic", "sdconv"):
        assert f"pretrain/{v}" in res.stdout and f"finetune/{v}/cola/s42" in res.stdout
    assert "36 runs (36 new)" in res.stdout and "FLOPs" in res.stdout
    assert not (tmp_path / "runs").exists()  # a dry run runs nothing

    res = convexp(
        "ablate",
        "relative-positions",
        "scale=smoke",
        "variants=[fixed,composite]",
        "--wandb-sweep",
        outputs=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    spec = yaml.safe_load((tmp_path / "sweeps" / "relative-positions" / "wandb-sweep.yaml").read_text())
    assert spec["method"] == "grid"
    assert spec["command"] == ["convexp", "ablate", "relative-positions", "${args_no_hyphens}"]
    assert spec["parameters"]["variants"] == {"value": "[fixed,composite]"}
    assert spec["parameters"]["launcher.key"]["values"][:2] == ["pretrain/fixed", "pretrain/composite"]
    assert spec["parameters"]["scale"] == {"value": "smoke"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["no-such-sweep"], "unknown sweep 'no-such-sweep'; choose one of: bermo-distill, bermo-glue"),
        (["convbert-conv-type", "variants=[nope]"], "has no variant 'nope'"),
        (["convbert-conv-type", "scale=huge"], "unknown scale 'huge'"),
        (["convbert-conv-type", "bogus.key=1"], "unknown key 'bogus.key'"),
        (["convbert-conv-type", "pretrain.model.kernel_siz=3"], "Could not override 'model.kernel_siz'"),
        (["convbert-conv-type", "pretrain.model=nope"], "Could not find 'model/nope'"),
    ],
)
def test_bad_command_lines_fail_before_training(tmp_path, args, message):
    res = convexp("ablate", *args, outputs=tmp_path)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("variants: [a\n", "not valid YAML at line 2"),
        ("varients: {}\n", "unknown key 'varients'"),
        ("variants: {}\n", "no variants"),
        ("variants: {a: {pretrain: model=bert_small}}\n", "expected a list of KEY=VALUE overrides"),
        (
            "variants: {a: {pretrain: [model.kernel_siz=3]}}\n",
            "variant a, pretrain: Could not override 'model.kernel_siz'",
        ),
        ("variants: {a: {pretrain: [model=nope]}}\n", "Could not find 'model/nope'"),
        ("variants: {a: {}}\nreport: {columns: [acc]}\n", "unknown report column 'acc'"),
        (
            "variants: {a: {pretrain: [model=bert_small, model.max_position_embeddings=16]}}\n",
            "variant a, pretrain: seq_len=64 exceeds the model's model.max_position_embeddings=16",
        ),
        ("variants: {'a b': {}}\n", "variant names may use"),
        (
            "variants: {a: {finetune: [epochs_typo=3]}}\nfinetune: {tasks: [rte]}\n",
            "variant a, finetune: Could not override 'epochs_typo': no such key",
        ),
        (
            "variants: {a: {finetune: [protocol=nope]}}\nfinetune: {tasks: [rte]}\n",
            "variant a, finetune: Could not find 'protocol/nope'",
        ),
        ("variants: {a: {teacher: b}}\n", "teacher must name another variant"),
        ("init: 3\nfinetune: {tasks: [rte]}\nvariants: {a: {}}\n", "init must be a checkpoint"),
        (
            "finetune: {tasks: [rte]}\nvariants: {a: {}}\nreport: {split: train}\n",
            "report.split must be dev or test",
        ),
        (
            "finetune: {tasks: [rte]}\nvariants: {a: {}}\nreport: {columns: [rte.f2x, nope.acc]}\n",
            "unknown report column 'nope.acc'",
        ),
    ],
)
def test_malformed_sweep_files_fail_before_training(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    res = convexp("ablate", str(path), "scale=smoke", outputs=tmp_path)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- end to end


def _finetune_metrics(outputs: Path, ledger_nodes: dict, variant: str) -> list[dict]:
    out = []
    for key, node in ledger_nodes.items():
        if key.startswith(f"finetune/{variant}/"):
            for r in node["runs"]:
                out.append(json.loads((Path(r) / "metrics.json").read_text()))
    return out


def test_command_line_keys_go_to_the_stages_that_have_them():
    from convexp.sweep.args import split_args

    own, stages = split_args(
        [
            "scale=smoke",
            "launcher.workers=2",
            "trainer.precision=bf16-mixed",
            "objective=electra",
            "glue.source=local",
            "pretrain.seed=1",
            "finetune.lr=1e-4",
        ]
    )
    assert own == ["scale=smoke", "launcher.workers=2"]
    assert stages["pretrain"] == ["trainer.precision=bf16-mixed", "objective=electra", "seed=1"]
    assert stages["finetune"] == ["trainer.precision=bf16-mixed", "glue.source=local", "lr=1e-4"]


@pytest.mark.slow
def test_convbert_sweep_end_to_end_report_matches_run_store(tmp_path, monkeypatch):
    args = ["convbert-conv-type", *SHRINK, "variants=[electra_small,sdconv]", "seeds=[1,2,3]"]
    res = convexp("ablate", *args, outputs=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    nodes = ledger(tmp_path, "convbert-conv-type")["nodes"]
    assert {n["status"] for n in nodes.values()} == {"done"} and len(nodes) == 2 * (1 + 3)

    # W&B: group = sweep, job type = stage, tags = variant; the result is in the summary
    pre = Path(nodes["pretrain/sdconv"]["runs"][0])
    [wb] = pre.glob("wandb/offline-run-*/run-*.wandb")
    info = run_info(wb)
    assert (info["group"], info["job_type"]) == ("convbert-conv-type", "pretrain") and "sdconv" in info[
        "tags"
    ]
    # one name everywhere: the plan's directory (the stage command, which would name the run by all
    # of its overrides, writes there), the W&B run's id and name; no other directory
    assert (info["id"], info["name"]) == (pre.name, pre.name)
    planned = {Path(r).name for n in nodes.values() for r in n["runs"]}
    assert {p.name for p in tmp_path.glob("runs/[pf]*/*")} == planned
    ft = Path(nodes["finetune/sdconv/rte/s2"]["runs"][0])
    [wb] = ft.glob("wandb/offline-run-*/run-*.wandb")
    info = run_info(wb)
    assert (info["group"], info["job_type"]) == ("convbert-conv-type", "finetune") and "sdconv" in info[
        "tags"
    ]
    assert info["summary"]["result"]["score"] == json.loads((ft / "metrics.json").read_text())["score"]

    # the report defaults to the last ablate's arguments and reads exactly those runs
    res = convexp("report", "convbert-conv-type", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((tmp_path / "reports" / "convbert-conv-type" / "report.json").read_text())
    assert [r["variant"] for r in report["rows"]] == ["electra_small", "sdconv"]
    assert report["columns"] == ["mnli", "qnli", "qqp", "rte", "sst2", "mrpc", "cola", "stsb", "glue"]
    for row in report["rows"]:
        ms = _finetune_metrics(tmp_path, nodes, row["variant"])
        rte = statistics.median(m["dev"]["validation"]["accuracy"] for m in ms)  # ConvBERT: median
        assert row["ours"]["rte"]["value"] == pytest.approx(rte) and row["ours"]["rte"]["n"] == 3
        assert row["ours"]["glue"]["value"] == pytest.approx(rte)  # the only task run
        assert row["ours"]["cola"]["value"] is None
        assert row["paper"]["glue"] in (80.4, 81.4)
    table = (tmp_path / "reports" / "convbert-conv-type" / "table.md").read_text()
    assert "| Span-based Dynamic | ours |" in table and "| | paper | 81.5 |" in table.replace("|  |", "| |")
    res = convexp("report", "convbert-conv-type", "--format", "latex", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0 and r"\begin{tabular}" in res.stdout
    res = convexp("report", "convbert-conv-type", "--format", "csv", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0 and "sdconv,Span-based Dynamic,paper,rte,67.1" in res.stdout

    # --source wandb: the same runs, found by id through the W&B API (a stand-in serving the
    # summaries the runs logged), give the same report
    import wandb

    from convexp.report.build import make_report

    monkeypatch.setattr(wandb, "Api", api_serving(tmp_path))
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path))
    out = make_report("convbert-conv-type", source="wandb", out=tmp_path / "from-wandb")
    assert json.loads((out / "report.json").read_text())["rows"] == report["rows"]

    # re-running the finished sweep trains nothing
    before = {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/*/metrics.json")}
    res = convexp("ablate", *args, outputs=tmp_path, env=QUIET)
    assert res.returncode == 0 and "8 cached" in res.stdout, res.stdout[-2000:]
    assert before == {p: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/*/metrics.json")}
    res = convexp("ablate", *args, "--dry-run", outputs=tmp_path, env=QUIET)
    assert "8 runs (8 cached)" in res.stdout


@pytest.mark.slow
def test_chang_sweep_with_intermediate_mnli_and_analysis(tmp_path):
    args = ["relative-positions", *SHRINK, "variants=[nopos,fixed]", "seeds=[1,2]"]
    res = convexp("ablate", *args, outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    nodes = ledger(tmp_path, "relative-positions")["nodes"]
    # protocol=chang: RTE starts from the same seed's MNLI model, so MNLI runs first
    assert set(nodes) == {f"pretrain/{v}" for v in ("nopos", "fixed")} | {
        f"finetune/{v}/{t}/s{s}" for v in ("nopos", "fixed") for t in ("mnli", "rte") for s in (1, 2)
    }
    rte = Path(nodes["finetune/fixed/rte/s2"]["runs"][0])
    mnli = Path(nodes["finetune/fixed/mnli/s2"]["runs"][0])
    from convexp.store.run_names import run_key

    assert yaml.safe_load((rte / "config.yaml").read_text())["from"] == run_key(mnli.name)  # (its hash, no tokens)

    res = convexp("report", "relative-positions", "--analyze", "fixed", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "reports" / "relative-positions"
    report = json.loads((out / "report.json").read_text())
    for row in report["rows"]:
        ms = [m for m in _finetune_metrics(tmp_path, nodes, row["variant"]) if m["task"] == "rte"]
        scores = [m["score"] for m in ms]  # Chang et al.: mean ± standard error over seeds
        assert row["ours"]["rte"]["value"] == pytest.approx(statistics.fmean(scores))
        assert row["ours"]["rte"]["stderr"] == pytest.approx(statistics.stdev(scores) / 2**0.5)
        mnli_m = statistics.fmean(
            m["dev"]["validation_matched"]["accuracy"]
            for m in _finetune_metrics(tmp_path, nodes, row["variant"])
            if m["task"] == "mnli"
        )
        assert row["ours"]["mnli-m"]["value"] == pytest.approx(mnli_m)
    assert report["rows"][1]["paper"]["glue"] == pytest.approx(74.5, abs=3)  # Table 6 dev: a number
    assert report["analysis"]["fixed"]["kernels"]["fixed"]["shape"][0] == 2  # two layers
    assert (out / "attention_fixed.png").exists() and (out / "kernels_fixed.png").exists()


@pytest.mark.slow
def test_failing_run_is_reported_while_the_others_complete(tmp_path):
    """Two worker processes; one variant's corpus is missing (found only when its run starts)."""
    missing = tmp_path / "no-such-corpus.txt"
    sweep = write_sweep(
        tmp_path / "mixed.yaml", {"good": {}, "bad": {"pretrain": ["data=files", f"data.path={missing}"]}}
    )
    args = [str(sweep), *SHRINK, "launcher.workers=2"]
    res = convexp("ablate", *args, outputs=tmp_path / "out", env=QUIET)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    s = statuses(tmp_path / "out", "mixed")
    assert s == {
        "pretrain/good": "done",
        "finetune/good/rte/s42": "done",
        "pretrain/bad": "failed",
        "finetune/bad/rte/s42": "blocked",
    }
    assert f"failed: pretrain/bad: no such file or folder: {missing}" in res.stdout
    assert "blocked: finetune/bad/rte/s42" in res.stdout
    log = Path(ledger(tmp_path / "out", "mixed")["nodes"]["pretrain/bad"]["log"])
    assert "Traceback" in log.read_text()


@pytest.mark.slow
def test_killed_sweep_finishes_only_what_was_missing(tmp_path):
    sweep = write_sweep(tmp_path / "two.yaml", {"a": {}, "b": {"pretrain": ["seed=7"]}}, finetune=False)
    args = [
        str(sweep),
        *SHRINK,
        "pretrain.trainer.max_steps=40",
        "pretrain.trainer.checkpoint_every_n_steps=5",
    ]
    out = tmp_path / "out"
    env = {**os.environ, "CONVEXP_OUTPUTS": str(out), **QUIET}
    proc = subprocess.Popen(
        [sys.executable, "-m", "convexp.cli", "ablate", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def started_second() -> bool:  # the first run finished, the second has a checkpoint
        runs = list(out.glob("runs/pretrain/*"))
        return any((r / "metrics.json").exists() for r in runs) and any(
            not (r / "metrics.json").exists() and list(r.glob("checkpoints/*.ckpt")) for r in runs
        )

    deadline = time.time() + 300
    while time.time() < deadline and not started_second():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [done] = [p.parent for p in out.glob("runs/pretrain/*/metrics.json")]
    first = (done / "status.json").read_text()
    res = convexp("ablate", *args, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sorted(statuses(out, "two").values()) == ["cached", "done"]
    assert (done / "status.json").read_text() == first  # not run again
    steps = [json.loads(p.read_text())["steps"] for p in out.glob("runs/pretrain/*/metrics.json")]
    assert steps == [40, 40]


@pytest.mark.slow
def test_submitit_local_executor(tmp_path):
    sweep = write_sweep(tmp_path / "sub.yaml", {"a": {}})
    args = [str(sweep), *SHRINK, "launcher=submitit", "launcher.cluster=local", "launcher.timeout_min=10"]
    res = convexp("ablate", *args, outputs=tmp_path / "out", env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert statuses(tmp_path / "out", "sub") == {"pretrain/a": "done", "finetune/a/rte/s42": "done"}
    assert res.stdout.count("submitted 1 jobs") == 2  # two waves: pre-training, then fine-tuning
    logs = [n["log"] for n in ledger(tmp_path / "out", "sub")["nodes"].values()]
    assert all("submitit" in log and Path(log).exists() for log in logs)
