"""Every named sweep plans the same runs as recorded in tests/data/sweep_plans.json: the same
nodes, run directories (run ids) and stage overrides at scale=smoke and scale=paper. The record
was made before the sweep engine moved from convexp/ablation.py into convexp/sweep/; a change
here means existing runs would no longer be found (re-record only for an intended change:
``python tests/test_sweep_plans.py``)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

RECORD = Path(__file__).parent / "data" / "sweep_plans.json"
OUTPUTS = "<outputs>"  # the run store's absolute path, replaced in the record


def digest(stage: str, overrides: list[str], deps: list[str]) -> str:
    return hashlib.sha256(json.dumps([stage, overrides, deps]).encode()).hexdigest()[:16]


def plan_record(name: str, scale: str, outputs: Path) -> dict:
    """{"nodes": sorted [key, run dir names, digest of (stage, overrides, deps)]} or {"error": line}."""
    from convexp.errors import UserError
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    try:
        plan = build_plan(load_sweep(name), [f"scale={scale}"])
    except UserError as e:
        return {"error": str(e).replace(str(outputs), OUTPUTS)}
    rows = []
    for n in plan.nodes.values():
        overrides = [o.replace(str(outputs), OUTPUTS) for o in n.overrides]
        rows.append([n.key, [r.dir.name for r in n.runs], digest(n.stage, overrides, n.deps)])
    return {"nodes": sorted(rows)}


def check(scale: str, outputs: Path) -> None:
    from convexp.sweep.spec import sweep_names

    record = json.loads(RECORD.read_text())
    names = sweep_names()
    assert sorted(k.rsplit("@", 1)[0] for k in record if k.endswith(f"@{scale}")) == names
    for name in names:
        want, got = record[f"{name}@{scale}"], plan_record(name, scale, outputs)
        if "error" in want or "error" in got:
            assert got == want, name
            continue
        want_nodes = {r[0]: r[1:] for r in want["nodes"]}
        got_nodes = {r[0]: r[1:] for r in got["nodes"]}
        assert sorted(got_nodes) == sorted(want_nodes), f"{name}@{scale}: other nodes"
        changed = [k for k in want_nodes if got_nodes[k] != want_nodes[k]]
        assert not changed, f"{name}@{scale}: other runs or overrides for {changed[:5]}"


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path.resolve()))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return tmp_path.resolve()


@pytest.mark.slow
def test_smoke_plans_unchanged(outputs):
    check("smoke", outputs)


@pytest.mark.slow
def test_paper_plans_unchanged(outputs):
    check("paper", outputs)


if __name__ == "__main__":  # re-record (only for an intended change of run ids)
    import tempfile

    from convexp.sweep.spec import sweep_names

    with tempfile.TemporaryDirectory() as d:
        os.environ["CONVEXP_OUTPUTS"] = out = str(Path(d).resolve())
        os.environ["WANDB_MODE"] = "disabled"
        record = {
            f"{name}@{scale}": plan_record(name, scale, Path(out))
            for scale in ("smoke", "paper")
            for name in sweep_names()
        }
    RECORD.write_text(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
