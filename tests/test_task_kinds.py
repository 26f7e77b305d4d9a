"""The task table (convexp/tasks/__init__.py, issues 56 and 65): each kind of task is one object in
its folder (a TaskKind: its command, estimates and report columns), and a user's kind is a module
on --user-dir and its task file, with no line of the package edited."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import convexp.tasks as tasks
from convexp.cli import app
from convexp.config.compose import CONF_DIR

# A kind of task of a user's own, whole: its TaskKind (a module on --user-dir defining KIND) ...
TOY_COMMAND = '''
from pathlib import Path

from convexp.errors import UserError
from convexp.tasks import TaskKind


class Toy(TaskKind):
    name = "toykind"

    def check(self, inv, planned=False):
        if inv.cfg.task.max_len > 64:
            raise UserError(f"task.max_len={inv.cfg.task.max_len}: the toy task reads at most 64 tokens; lower it")

    def plan(self, inv, start, tokens=None):
        return [Path(inv.cfg.outputs) / "toy.txt"]

    def run(self, inv, summary=True):
        [out] = self.plan(inv, None)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"{inv.cfg.task.name} {inv.cfg.task.kind} {inv.cfg.task.max_len} {inv.cfg.protocol}")


KIND = Toy()
'''
# ... and its conf/task file
TOY_TASK = """name: toy
kind: toykind
max_len: 32
epochs: {convbert: 1, chang: 1, bermo: 1}
batch_size: {convbert: 8, chang: 8, bermo: 8}
lr: {chang_small: 1.0e-4, chang_base: 1.0e-4}
"""


def test_every_task_file_says_the_kind_the_table_gives():
    for f in sorted((CONF_DIR / "task").glob("*.yaml")):
        task = yaml.safe_load(f.read_text())
        if task["name"] in ("all", "custom"):
            continue
        assert task.get("kind", "glue") == tasks.kind(task["name"]), f.name


def test_every_kind_is_a_task_kind_with_the_protocol():
    from convexp.tasks.kind import TaskKind

    assert tasks.command("pretrain").STAGE == "pretrain"
    for kind in ("pretrain", *tasks.KINDS):
        cmd = tasks.command(kind)
        assert all(callable(getattr(cmd, f)) for f in ("arguments", "compose", "check", "plan", "run")), kind
    for kind in tasks.KINDS:
        k = tasks.task_kind(kind)
        assert isinstance(k, TaskKind) and k.STAGE == "finetune" and k.name == kind
        # each built-in kind writes its own steps and estimates (none falls back to the base's)
        assert all(getattr(type(k), f) is not getattr(TaskKind, f) for f in ("check", "plan", "run", "train_examples"))


def toy_kind(tmp_path, monkeypatch) -> Path:
    """The toy kind in a user's folder: its module and its task file; the folder."""
    user = tmp_path / "mine"
    user.mkdir()
    (user / "toykind.py").write_text(TOY_COMMAND)
    (user / "task").mkdir()
    (user / "task" / "toy.yaml").write_text(TOY_TASK)
    return user


def test_a_new_kind_of_task_is_its_module_and_its_task_file(tmp_path, monkeypatch):
    user = toy_kind(tmp_path, monkeypatch)
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.delenv("CONVEXP_USER_DIR", raising=False)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    runner = CliRunner()
    base = ["--user-dir", str(user), "finetune", "toykind", "task=toy", "init=none", "model=bert_small", "scale=smoke"]

    listed = runner.invoke(app, ["--user-dir", str(user), "finetune", "--help"], terminal_width=200)
    assert " toykind " in listed.output and " glue " in listed.output

    # a GLUE task under the user's command, and the user's task under GLUE's: one line each
    other = runner.invoke(app, [*base[:4], "task=rte", *base[5:]])
    assert other.exit_code == 2 and "task=rte is of kind glue" in other.output, other.output
    wrong = runner.invoke(app, [*base[:3], "glue", *base[4:]])
    assert wrong.exit_code == 2 and "task=toy is of kind toykind" in wrong.output, wrong.output

    refused = runner.invoke(app, [*base, "task.max_len=128"])
    assert refused.exit_code == 2 and "the toy task reads at most 64 tokens" in refused.output
    assert not (tmp_path / "outputs").exists()

    done = runner.invoke(app, base)
    assert done.exit_code == 0, done.output
    assert (tmp_path / "outputs" / "toy.txt").read_text() == "toy toykind 32 convbert"
    # the composed config holds what the toy task reads: neither GLUE's source node nor SQuAD's
    shown = runner.invoke(app, [*base, "--cfg"])
    cfg = yaml.safe_load(shown.output)
    assert "glue" not in cfg and "squad" not in cfg and cfg["task"]["kind"] == "toykind"


def test_a_sweep_node_of_a_new_kind_runs_its_own_command(tmp_path, monkeypatch):
    """A sweep's worker routes a fine-tuning node by its composed config's ``kind:``, not by the
    papers' task names: a task of a user's own kind runs its own command there too."""
    from convexp.sweep.execute import run_node

    user = toy_kind(tmp_path, monkeypatch)
    monkeypatch.setenv("CONVEXP_USER_DIR", str(user))
    monkeypatch.setattr("sys.path", [str(user), *__import__("sys").path])
    out = tmp_path / "outputs"
    run_node("finetune", ["task=toy", "init=none", "model=bert_small", "scale=smoke", f"outputs={out}", "seeds=[1]"])
    assert (out / "toy.txt").read_text() == "toy toykind 32 convbert"


# The tagging example (examples/my_tagging): a kind that is not GLUE-shaped, from --user-dir alone
TAGGING = Path(__file__).resolve().parents[1] / "examples" / "my_tagging"


def test_a_user_kind_brings_its_own_estimates_to_a_sweep(tmp_path, monkeypatch):
    """The dry run bills a tagging node from the kind's own files (its training rows, its dev
    file's predictions), not from GLUE's sizes; the node runs `convexp finetune tagging`."""
    from convexp.models.stats import flops_per_token
    from convexp.sweep.disk import RUN_FILES_BYTES
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep
    from convexp.tasks.finetune_runs import hyperparameters
    from convexp.user_code import add_user_dirs

    monkeypatch.chdir(TAGGING.parents[1])  # the task file's paths are the repository's
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("CONVEXP_USER_DIR", "")
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    add_user_dirs([TAGGING])
    plan = build_plan(load_sweep("my-tagging"), ["scale=smoke"])
    nodes = [n for n in plan.order() if n.stage == "finetune"]
    assert [n.task for n in nodes] == ["pos_tags", "pos_tags"] and {n.kind for n in nodes} == {"tagging"}
    assert nodes[0].command.startswith("convexp finetune tagging ")
    rows = sum(1 for line in (TAGGING / "data" / "train.jsonl").read_text().splitlines() if line.strip())
    start = plan.starts[nodes[0].variant]
    from convexp.config.compose import compose_stage

    cfg = compose_stage("finetune", ["scale=smoke", "task=pos_tags", "init=none", "model=chang_small",
                                     f"tokenizer_path={tmp_path / 'v.txt'}"])  # fmt: skip
    epochs = sum(hp["epochs"] for hp in hyperparameters(cfg, start.model_cfg.hidden_size))
    assert nodes[0].flops == flops_per_token(start.model_cfg, 32) * rows * epochs * 32
    assert nodes[0].disk == RUN_FILES_BYTES + 1.2 * (TAGGING / "data" / "dev.jsonl").stat().st_size


def test_a_user_kind_refuses_bad_files_in_its_check(tmp_path, monkeypatch):
    monkeypatch.chdir(TAGGING.parents[1])
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.delenv("CONVEXP_USER_DIR", raising=False)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog"]) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"words": ["the", "dog"], "tags": ["DET", "PRON"]}\n')
    base = ["--user-dir", str(TAGGING), "finetune", "tagging", "task=pos_tags", "init=none", "model=chang_small",
            "scale=smoke", f"tokenizer_path={vocab}"]  # fmt: skip
    res = CliRunner().invoke(app, [*base, f"task.train_file={bad}"])
    assert res.exit_code == 2 and "tags ['PRON'] outside task.options.labels" in res.output, res.output
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_user_kind_runs_a_sweep_and_has_its_column_in_the_report(tmp_path, monkeypatch):
    """examples/my_tagging end to end at scale=smoke (~3 min on 2 cores): two pre-trainings, a
    tagging fine-tune of each through `convexp finetune tagging`, and the report's pos_tags column
    holding each run's token accuracy."""
    import json
    import re

    monkeypatch.chdir(TAGGING.parents[1])
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("CONVEXP_USER_DIR", "")
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    runner = CliRunner()
    done = runner.invoke(app, ["--user-dir", str(TAGGING), "ablate", "my-tagging", "scale=smoke"])
    assert done.exit_code == 0, done.output[-3000:]
    assert "convexp finetune tagging " in done.output and "sweep my-tagging: 4 done" in done.output
    assert f"report: convexp --user-dir {TAGGING} report my-tagging" in done.output
    scores = {}
    for m in (tmp_path / "outputs" / "runs" / "finetune").glob("*/metrics.json"):
        metrics = json.loads(m.read_text())
        assert metrics["task"] == "pos_tags" and 0 <= metrics["score"] <= 100
        scores[m.parent.name.split("-mlm-")[0]] = metrics["score"]
    assert sorted(scores) == ["chang-small", "chang-small-composite"]
    report = runner.invoke(app, ["--user-dir", str(TAGGING), "report", "my-tagging", "scale=smoke"])
    assert report.exit_code == 0, report.output[-3000:]
    assert "tagging dev" in report.output  # the header names the kind's title
    rows = {r.split("|")[1].strip(): r for r in report.output.splitlines() if r.startswith("| ") and "ours" in r}
    for label, run in (("self-attention", "chang-small"), ("composite attention", "chang-small-composite")):
        cell = [c.strip() for c in rows[label].split("|")][4]
        assert re.fullmatch(r"\d+\.\d", cell) and float(cell) == pytest.approx(scores[run], abs=0.05)
