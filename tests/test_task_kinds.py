"""The task table (convexp/tasks/__init__.py, issue 56): each kind of task owns its command
(tasks/<kind>/command.py), and a new kind is its folder, its conf/task file and one table line."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

import convexp.tasks as tasks
from convexp.cli import app
from convexp.config.compose import CONF_DIR

# A kind of task of a user's own, whole: its command (a folder holding command.py) ...
TOY_COMMAND = '''
from pathlib import Path

from convexp.errors import UserError
from convexp.tasks import Invocation

STAGE = "finetune"


def arguments(overrides, kind):
    return list(overrides)


def compose(overrides, cfg):
    return Invocation(cfg, {})


def check(inv, planned=False):
    if inv.cfg.task.max_len > 64:
        raise UserError(f"task.max_len={inv.cfg.task.max_len}: the toy task reads at most 64 tokens; lower it")


def plan(inv, start, tokens=None):
    return [Path(inv.cfg.outputs) / "toy.txt"]


def run(inv, summary=True):
    [out] = plan(inv, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"{inv.cfg.task.name} {inv.cfg.task.kind} {inv.cfg.task.max_len} {inv.cfg.protocol}")
'''
# ... its conf/task file ...
TOY_TASK = """name: toy
kind: toy
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


def test_every_kind_has_a_command_with_the_protocol():
    for kind in tasks.COMMANDS:
        cmd = tasks.command(kind)
        assert cmd.STAGE in ("pretrain", "finetune")
        assert all(callable(getattr(cmd, f)) for f in ("arguments", "compose", "check", "plan", "run")), kind


def toy_kind(tmp_path, monkeypatch) -> Path:
    """The toy kind in a user's folder: its command's folder and its task file, and its line in the
    task table; the folder."""
    user = tmp_path / "mine"
    (user / "toykind").mkdir(parents=True)
    (user / "toykind" / "__init__.py").write_text("")
    (user / "toykind" / "command.py").write_text(TOY_COMMAND)
    (user / "task").mkdir()
    (user / "task" / "toy.yaml").write_text(TOY_TASK)
    monkeypatch.setitem(tasks.COMMANDS, "toy", "toykind.command")  # ... and its line in the table
    return user


def test_a_new_kind_of_task_is_its_folder_its_task_file_and_one_table_line(tmp_path, monkeypatch):
    user = toy_kind(tmp_path, monkeypatch)
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.delenv("CONVEXP_USER_DIR", raising=False)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    runner = CliRunner()
    base = ["--user-dir", str(user), "finetune", "toy", "task=toy", "init=none", "model=bert_small", "scale=smoke"]

    listed = runner.invoke(app, ["finetune", "--help"], terminal_width=200)
    assert " toy " in listed.output

    refused = runner.invoke(app, [*base, "task.max_len=128"])
    assert refused.exit_code == 2 and "the toy task reads at most 64 tokens" in refused.output
    assert not (tmp_path / "outputs").exists()

    done = runner.invoke(app, base)
    assert done.exit_code == 0, done.output
    assert (tmp_path / "outputs" / "toy.txt").read_text() == "toy toy 32 convbert"
    # the composed config holds what the toy task reads: neither GLUE's source node nor SQuAD's
    shown = runner.invoke(app, [*base, "--cfg"])
    cfg = yaml.safe_load(shown.output)
    assert "glue" not in cfg and "squad" not in cfg and cfg["task"]["kind"] == "toy"


def test_a_sweep_node_of_a_new_kind_runs_its_own_command(tmp_path, monkeypatch):
    """A sweep's worker routes a fine-tuning node by its composed config's ``kind:``, not by the
    papers' task names: a task of a user's own kind runs its own command there too."""
    from convexp.sweep.execute import run_node

    user = toy_kind(tmp_path, monkeypatch)
    monkeypatch.setenv("CONVEXP_USER_DIR", str(user))
    monkeypatch.setattr("sys.path", [str(user), *__import__("sys").path])
    out = tmp_path / "outputs"
    run_node("finetune", ["task=toy", "init=none", "model=bert_small", "scale=smoke", f"outputs={out}", "seeds=[1]"])
    assert (out / "toy.txt").read_text() == "toy toy 32 convbert"
