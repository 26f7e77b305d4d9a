"""A study keeps only the fine-tuned weights something reads (keep_weights, train/weights.py): in a
sweep a distillation teacher and, until its intermediate tasks have finished, the MNLI run they
start from; a command keeps its runs'; a finished run that did not keep weights read later is
trained again for them (one line says so), never failing. The setting is not part of a run's id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import QUIET, SHRINK, convexp, ledger, write_sweep

from convexp.sweep.plan import build_plan
from convexp.sweep.spec import load_sweep


def test_a_sweep_keeps_the_weights_a_later_node_reads_and_no_others(outputs):
    distill = build_plan(load_sweep("bermo-distill"), ["scale=smoke"])
    kept = {k for k, n in distill.nodes.items() if n.keep_weights == "read"}
    assert kept == {f"finetune/teacher/{t}/s42" for t in ("mnli", "qqp", "squad1")}
    assert all(n.keep_weights == "none" for k, n in distill.nodes.items() if n.stage == "finetune" and k not in kept)
    chang = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]"])
    assert {k for k, n in chang.nodes.items() if n.keep_weights == "read"} == {"finetune/composite/mnli/s42"}
    assert chang.nodes["finetune/composite/rte/s42"].starts_from == ["finetune/composite/mnli/s42"]
    node = chang.nodes["finetune/composite/mnli/s42"]
    # the command says it; the plan's overrides (what tests/data/sweep_plans.json records) do not
    assert node.command.endswith(" keep_weights=all") and node.stage_args[-1] == "keep_weights=all"
    assert not any(o.startswith("keep_weights") for n in chang.nodes.values() for o in n.overrides)
    every = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]", "keep_weights=all"])
    assert {n.keep_weights for n in every.nodes.values() if n.stage == "finetune"} == {"all"}
    assert [r.id for n in every.nodes.values() for r in n.runs] == [r.id for n in chang.nodes.values() for r in n.runs]


def test_a_finished_run_without_the_weights_a_node_reads_is_planned_again(outputs):
    plan = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]", "tasks=[rte]"])
    mnli = plan.nodes["finetune/composite/mnli/s42"]
    [run] = mnli.runs
    run.dir.mkdir(parents=True)
    run.write_json("metrics.json", {"score": 0.5})
    run.set_status("finished")
    again = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]", "tasks=[rte]"])
    assert again.nodes[mnli.key].state == "weights" and not again.nodes[mnli.key].done
    (run.dir / "model").mkdir()
    for name in ("model.safetensors", "model_config.json"):
        (run.dir / "model" / name).write_text("{}")
    assert build_plan(load_sweep("key-based-conv"), ["scale=smoke", "variants=[composite]", "tasks=[rte]"]).nodes[mnli.key].done


# --- end to end: tiny sweeps


def _weights(out: Path) -> dict[str, bool]:
    return {d.name.split("-s42")[0].rsplit("-", 1)[-1]: (d / "model").is_dir() for d in (out / "runs" / "finetune").iterdir()}


@pytest.mark.slow
def test_an_intermediate_tasks_start_keeps_its_weights_until_they_have_run(tmp_path):
    """Chang et al.'s protocol: RTE starts from the MNLI run. The sweep leaves no fine-tuned
    weights behind, and its report is complete; a later sweep with another intermediate task trains
    the MNLI run again for its weights (saying so), its results untouched."""
    sweep = write_sweep(tmp_path / "chang.yaml", {"a": {}})
    body = yaml.safe_load(sweep.read_text())
    body["finetune"]["overrides"] = ["protocol=chang"]
    sweep.write_text(yaml.safe_dump(body))
    out = tmp_path / "out"
    res = convexp("ablate", str(sweep), *SHRINK, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "weights deleted: finetune/a/mnli/s42" in res.stdout
    assert _weights(out) == {"mnli": False, "rte": False}
    report = convexp("report", str(sweep), outputs=out, env=QUIET)
    assert report.returncode == 0 and "Missing" not in report.stdout, report.stdout + report.stderr
    [mnli] = [d for d in (out / "runs" / "finetune").iterdir() if "-mnli-" in d.name]
    metrics = json.loads((mnli / "metrics.json").read_text())

    args = [str(sweep), *[a if a != "tasks=[rte]" else "tasks=[mrpc]" for a in SHRINK]]
    dry = convexp("ablate", *args, "--dry-run", outputs=out, env=QUIET)
    assert "finetune/a/mnli/s42" in dry.stdout and " weights " in dry.stdout, dry.stdout
    res = convexp("ablate", *args, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "finished without its weights (keep_weights), which are read now: training it again" in res.stdout
    assert ledger(out, "chang")["nodes"]["finetune/a/mrpc/s42"]["status"] == "done"
    assert json.loads((mnli / "metrics.json").read_text()) == metrics  # the recorded result is never touched
    assert _weights(out) == {"mnli": False, "rte": False, "mrpc": False}


@pytest.mark.slow
def test_a_teacher_keeps_its_weights_and_export_trains_a_run_again_for_its_own(tmp_path):
    pruned = {"teacher": "base", "finetune": ["pruning=movement", "distill.alpha_ce=0.1"]}
    sweep = write_sweep(tmp_path / "distil.yaml", {"base": {}, "pruned": pruned})  # written sorted: the teacher first
    out = tmp_path / "out"
    res = convexp("ablate", str(sweep), *SHRINK, outputs=out, env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    runs = {d.name: (d / "model").is_dir() for d in (out / "runs" / "finetune").iterdir()}
    assert sorted(runs.values()) == [False, True] and runs[next(n for n in runs if "pruning" not in n)]
    [student] = [d for d in (out / "runs" / "finetune").iterdir() if "pruning" in d.name]
    res = convexp("export", str(student), "--batch", "2", "--seq-len", "16", outputs=out, env=QUIET)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "did not keep its weights (keep_weights); training it again for them" in res.stdout
    assert (student / "model").is_dir() and (student / "export").is_dir()
    assert not list(student.glob("*-weights"))  # the training again's own folder is gone


@pytest.mark.slow
def test_a_command_keeps_its_weights_unless_told_and_all_trains_again_for_them(tmp_path, pretrained):
    init = pretrained
    ft = ["task=rte", f"init={init}", "scale=smoke", "glue.synthetic_size=60", "epochs=1", "task.max_len=32"]
    res = convexp("finetune", "glue", *ft, "seeds=[1]", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    res = convexp("finetune", "glue", *ft, "seeds=[2]", "keep_weights=none", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    kept = {d.name.split("-rte-")[1][:2]: (d / "model").is_dir() for d in (tmp_path / "runs" / "finetune").iterdir()}
    assert kept == {"s1": True, "s2": False}
    [s2] = [d for d in (tmp_path / "runs" / "finetune").iterdir() if "-s2" in d.name]
    assert (s2 / "predictions" / "validation.tsv").is_file() and (s2 / "submission").is_dir()
    res = convexp("finetune", "glue", *ft, "seeds=[2]", outputs=tmp_path, env=QUIET)  # auto: reused as it is
    assert res.returncode == 0 and not (s2 / "model").exists()
    res = convexp("finetune", "glue", *ft, "seeds=[2]", "keep_weights=all", outputs=tmp_path, env=QUIET)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "training it again to keep them" in res.stdout and (s2 / "model" / "model.safetensors").is_file()
    assert len(list((tmp_path / "runs" / "finetune").iterdir())) == 2  # the same run, not a new one
