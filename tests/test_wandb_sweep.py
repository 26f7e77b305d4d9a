"""``--wandb-sweep``: a W&B grid over the plan's nodes, and the one node each agent job runs (no
W&B server: the tests call what the agent's command calls)."""

from __future__ import annotations


import pytest
from helpers import SHRINK, QUIET, convexp, write_sweep

from convexp.sweep.launchers import run_one
from convexp.sweep.plan import build_plan
from convexp.sweep.spec import SweepError, load_sweep
from convexp.sweep.wandb_sweep import wandb_sweep_spec


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "out"))
    return write_sweep(tmp_path / "two.yaml", {"a": {}, "b": {"pretrain": ["seed=7"]}})


def agent_args(spec: dict, key: str) -> list[str]:
    """The KEY=VALUE arguments W&B's ${args_no_hyphens} gives the job that runs node ``key``."""
    params = {**{k: v["value"] for k, v in spec["parameters"].items() if "value" in v}, "launcher.key": key}
    return [f"{k}={v}" for k, v in params.items()]


def test_the_grid_is_the_plans_nodes_in_waves(sweep):
    plan = build_plan(load_sweep(str(sweep)), [*SHRINK, "launcher.workers=2"])
    spec = wandb_sweep_spec(plan)
    keys = spec["parameters"]["launcher.key"]["values"]
    assert keys == ["pretrain/a", "pretrain/b", "finetune/a/rte/s42", "finetune/b/rte/s42"]
    assert spec["method"] == "grid" and spec["parameters"]["launcher"] == {"value": "node"}
    assert "launcher.workers" not in spec["parameters"]  # another launcher's setting
    assert spec["parameters"]["scale"] == {"value": "smoke"}
    assert spec["command"] == ["convexp", "ablate", str(sweep), "${args_no_hyphens}"]
    # the agent's arguments give the same plan (the same run directories)
    again = build_plan(load_sweep(str(sweep)), agent_args(spec, keys[0]))
    assert [r.dir for n in again.order() for r in n.runs] == [r.dir for n in plan.order() for r in n.runs]


def test_a_node_whose_dependency_has_not_finished_runs_nothing(sweep, tmp_path):
    plan = build_plan(load_sweep(str(sweep)), SHRINK)
    with pytest.raises(SweepError, match=r"finetune/a/rte/s42 needs pretrain/a, which has not finished \(new\)"):
        run_one(plan, "finetune/a/rte/s42", wait_s=0)
    with pytest.raises(SweepError, match="launcher.key='nope' is not a node"):
        run_one(plan, "nope", wait_s=0)
    assert not (tmp_path / "out" / "runs").exists()


@pytest.mark.slow
def test_each_agent_job_runs_exactly_one_node(sweep, tmp_path):
    out = tmp_path / "out"
    spec = wandb_sweep_spec(build_plan(load_sweep(str(sweep)), SHRINK))
    [_, *head, _] = spec["command"]  # convexp ablate NAME ${args_no_hyphens}

    def agent_job(key: str):
        return convexp(*head, *agent_args(spec, key), outputs=out, env=QUIET)

    res = agent_job("finetune/a/rte/s42")  # before its pre-training: refused, nothing run
    assert res.returncode == 2 and "needs pretrain/a" in res.stderr, res.stderr[-2000:]
    res = agent_job("pretrain/a")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert [p.parent.parent.name for p in out.glob("runs/*/*/metrics.json")] == ["pretrain"]
    res = agent_job("finetune/a/rte/s42")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    finished = sorted(p.parent.parent.name for p in out.glob("runs/*/*/metrics.json"))
    assert finished == ["finetune", "pretrain"]  # variant b's nodes were not run
    res = agent_job("pretrain/a")
    assert res.returncode == 0 and "1 cached" in res.stdout, res.stdout[-2000:]
    assert not (out / "sweeps" / "two" / "last.json").exists()  # agents share no ledger
