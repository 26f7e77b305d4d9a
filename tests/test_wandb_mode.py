"""W&B online/offline the way wandb finds credentials: API key variable, the base URL's host in
the netrc file (NETRC or ~/.netrc), the host `wandb login --host` saved."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from convexp.train.wandb_mode import own_service, wandb_mode

AUTO = OmegaConf.create({"mode": "auto"})
VARIABLES = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "NETRC")


@pytest.fixture
def home(tmp_path, monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    return tmp_path


def netrc(path, host):
    path.write_text(f"machine {host}\n  login user\n  password {'k' * 40}\n")
    path.chmod(0o600)
    return path


def test_nothing_found_is_offline_and_says_where_it_looked(home):
    mode, why = wandb_mode(AUTO)
    assert mode == "offline" and "api.wandb.ai" in why and (str(home / ".netrc") in why or "~/.netrc" in why)


def test_api_key_variable_and_mode_overrides(home, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_mode(AUTO) == ("online", "WANDB_API_KEY")
    assert wandb_mode(OmegaConf.create({"mode": "offline"})) == ("offline", "logger.mode=offline")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode(AUTO) == ("disabled", "WANDB_MODE")


def test_home_netrc_entry_for_the_default_host(home):
    netrc(home / ".netrc", "api.wandb.ai")
    assert wandb_mode(AUTO) == ("online", f"the key for api.wandb.ai in {home / '.netrc'}")


def test_self_hosted_server_needs_its_own_host_in_the_netrc_that_NETRC_names(home, monkeypatch):
    netrc(home / ".netrc", "api.wandb.ai")
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.lab.example:8443")
    assert wandb_mode(AUTO)[0] == "offline"  # the public server's key is not the lab's
    other = netrc(home / "lab-netrc", "wandb.lab.example:8443")
    monkeypatch.setenv("NETRC", str(other))
    assert wandb_mode(AUTO) == ("online", f"the key for wandb.lab.example:8443 in {other}")


def test_host_saved_by_wandb_login_host(home):
    (home / "wandb-config").mkdir()
    (home / "wandb-config" / "settings").write_text("[default]\nbase_url = https://wandb.lab.example\n")
    netrc(home / ".netrc", "api.wandb.ai")
    assert wandb_mode(AUTO)[0] == "offline"
    netrc(home / ".netrc", "wandb.lab.example")
    assert wandb_mode(AUTO)[0] == "online"


@pytest.mark.slow
def test_log_model_logs_the_final_model_as_an_artifact(tmp_path):
    from helpers import TINY, convexp, run_dirs
    from wandb_records import artifacts

    from convexp.store.run_names import run_key

    args = ["pretrain", *TINY, "trainer.max_steps=2", "trainer.val_every_n_steps=2", "logger.log_model=true"]
    res = convexp(*args, outputs=tmp_path)  # WANDB_MODE=offline
    assert res.returncode == 0, res.stderr[-2000:]
    assert "W&B: offline (WANDB_MODE)" in res.stderr
    [run] = run_dirs(tmp_path)
    [wb] = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert "+" in run.name  # named by its overrides; artifact names allow no '+': the name without them
    kind, files = artifacts(wb)[f"model-{run_key(run.name)}"]
    assert kind == "model" and {"model.safetensors", "model_config.json", "tokenizer.json"} <= set(files)


def test_a_parents_wandb_service_is_left_for_this_processs_own(monkeypatch):
    monkeypatch.setenv("WANDB_SERVICE", f"3-{os.getpid() + 1}-unix-/tmp/wandb-x/socket")
    own_service()
    assert "WANDB_SERVICE" not in os.environ  # a parent's: a killed run's ID would stay registered there
    mine = f"3-{os.getpid()}-unix-/tmp/wandb-y/socket"
    monkeypatch.setenv("WANDB_SERVICE", mine)
    own_service()
    assert os.environ["WANDB_SERVICE"] == mine  # this process's own: the runs it starts next share it


LAUNCH_PROBE = """
import json, os, sys, tempfile
import torch  # what a convexp run has loaded when W&B starts
import wandb
from convexp.train.wandb_mode import LAUNCH_INPUTS, skip_unstaged_launch_inputs
applied = []
if sys.argv[1] == "staged":
    from wandb.sdk.launch.inputs import internal
    internal.StagedLaunchInputs.apply = lambda self, run: applied.append(run.id)
skip_unstaged_launch_inputs()
skip_unstaged_launch_inputs()  # twice: wrapped once
run = wandb.init(mode="offline", project="p", dir=tempfile.mkdtemp(), settings=wandb.Settings(silent=True))
run.finish()
print(json.dumps({"launch_loaded": "wandb.sdk.launch" in sys.modules, "applied": applied}))
os._exit(0)
"""


@pytest.mark.parametrize("staged", [False, True], ids=["nothing-staged", "launch-loaded"])
def test_wandb_init_looks_for_launch_inputs_only_where_some_can_be_staged(staged, home):
    """wandb.init imports W&B Launch to look for staged job inputs (~1 s of a run's start beside
    torch); convexp skips the look while nothing can have been staged, and keeps it otherwise."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(home), WANDB_CONFIG_DIR=str(home / "wandb-config"))
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH_PROBE, "staged" if staged else "plain"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["launch_loaded"] is staged
    assert len(result["applied"]) == (1 if staged else 0)


def test_wandbs_own_environment_names_the_project_entity_and_group_unless_the_command_line_does(monkeypatch):
    """WANDB_PROJECT, WANDB_ENTITY and WANDB_RUN_GROUP, as every W&B user sets them, where the command
    line names none; logger.project=... wins."""
    from convexp.config.compose import compose_stage

    monkeypatch.setenv("WANDB_PROJECT", "glue-study")
    monkeypatch.setenv("WANDB_ENTITY", "nlp-lab")
    monkeypatch.setenv("WANDB_RUN_GROUP", "week-49")
    for stage, args in (("pretrain", ["scale=smoke"]), ("finetune", ["init=x", "task=rte"])):
        logger = compose_stage(stage, args).logger
        assert (logger.project, logger.entity, logger.group) == ("glue-study", "nlp-lab", "week-49")
    assert compose_stage("pretrain", ["scale=smoke", "logger.project=mine"]).logger.project == "mine"
    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(name)
    logger = compose_stage("pretrain", ["scale=smoke"]).logger
    assert (logger.project, logger.entity, logger.group) == ("convexp", None, None)


@pytest.mark.slow
def test_an_offline_run_is_named_by_wandbs_own_environment_alone(tmp_path):
    """`WANDB_PROJECT=… WANDB_ENTITY=… WANDB_TAGS=… convexp pretrain …`, offline: the run's own W&B
    file (what `wandb sync` uploads) carries that project, entity and those tags."""
    from helpers import TINY, convexp
    from wandb_records import run_info

    env = {"WANDB_MODE": "offline", "WANDB_PROJECT": "glue-study", "WANDB_ENTITY": "nlp-lab", "WANDB_TAGS": "a,b"}
    res = convexp("pretrain", *TINY, "trainer.max_steps=2", "trainer.val_every_n_steps=2", outputs=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    [wb] = tmp_path.glob("runs/pretrain/*/wandb/offline-run-*/run-*.wandb")
    info = run_info(wb)
    assert (info["project"], info["entity"], info["tags"][:2]) == ("glue-study", "nlp-lab", ["a", "b"]), info
    assert info["tags"][2:] == ["convbert_small", "mlm"]  # the stage's own tags after them, as always
