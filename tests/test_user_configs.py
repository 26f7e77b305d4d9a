"""A researcher's own configs, end to end: a preset and a sweep in their folder are found, listed
and run; every run records what made it; a finished run made by another version is reused with a
warning, never silently and never retrained."""

from __future__ import annotations

import json

import pytest
import yaml

from helpers import SHRINK, convexp, ledger

pytestmark = pytest.mark.slow


@pytest.fixture
def user_dir(tmp_path):
    d = tmp_path / "mine"
    (d / "model").mkdir(parents=True)
    (d / "sweep").mkdir()
    (d / "model" / "my_bert.yaml").write_text(  # a preset of theirs: a built-in one, one change
        "defaults:\n  - bert_small\n  - _self_\nname: my-bert\nhidden_dropout: 0.05\n"
    )
    (d / "sweep" / "my-sweep.yaml").write_text(
        yaml.safe_dump(
            {
                "source": {"paper": "mine", "ref": "Table 1"},
                "pretrain": ["objective=mlm"],
                "variants": {"mine": {"label": "my BERT", "pretrain": ["model=my_bert"]}},
                "finetune": {"tasks": ["rte"]},
                "report": {"columns": ["params", "rte", "glue"]},
            }
        )
    )
    return d


def test_user_preset_and_sweep_are_listed_run_and_recorded(user_dir, tmp_path):
    out = tmp_path / "outputs"
    quiet = {"WANDB_MODE": "disabled"}
    res = convexp("--config-dir", str(user_dir), "ablate", "--list", outputs=out, env=quiet)
    assert res.returncode == 0 and "my-sweep*" in res.stdout and "key-based-conv" in res.stdout
    res = convexp("--config-dir", str(user_dir), "models", "my_bert", outputs=out, env=quiet)
    assert res.returncode == 0 and "my_bert*" in res.stdout

    args = ["--config-dir", str(user_dir), "ablate", "my-sweep", *SHRINK]
    res = convexp(*args, outputs=out, env=quiet)
    assert res.returncode == 0, res.stderr[-3000:]
    sweep_ledger = ledger(out, "my-sweep")
    assert {n["status"] for n in sweep_ledger["nodes"].values()} == {"done"}
    assert "ablate my-sweep" in sweep_ledger["record"]["command"] and sweep_ledger["record"]["versions"]["torch"]
    [pre] = (out / "runs" / "pretrain").glob("my-bert-*")
    assert json.loads((pre / "model" / "model_config.json").read_text())["hidden_dropout"] == 0.05

    record = json.loads((pre / "record.json").read_text())["created"]
    assert "model=my_bert" in record["overrides"] and "pretrain.trainer.max_steps=6" not in record["overrides"]
    assert "trainer.max_steps=6" in record["overrides"]
    assert "ablate my-sweep" in record["command"]
    assert {"convexp", "torch", "pytorch-lightning", "python"} <= set(record["versions"])
    assert record["device"].startswith("cpu")
    [fin] = (out / "runs" / "finetune").glob("*")
    assert json.loads((fin / "record.json").read_text())["created"]["versions"]["convexp"]

    # a finished run made by another convexp version: reused, with one line naming both versions
    for run in (pre, fin):
        rec = json.loads((run / "record.json").read_text())
        rec["created"]["versions"]["convexp"] = "0.0.1"
        (run / "record.json").write_text(json.dumps(rec))
    metrics = (fin / "metrics.json").read_text()
    res = convexp(*args, outputs=out, env=quiet)
    assert res.returncode == 0, res.stderr[-3000:]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: reusing")]
    assert len(warnings) == 2 and all("convexp 0.0.1" in w for w in warnings), res.stderr
    assert (fin / "metrics.json").read_text() == metrics  # not retrained
