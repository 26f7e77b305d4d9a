"""Configs as a Hydra user expects them: shipped in the package, the user's own config folders,
Hydra's override grammar and errors, types checked at compose time, `--cfg job|hydra|all`,
`convexp cp`, and stage `--help` listing the config groups."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from convexp.cli import app
from convexp.config.compose import CONF_DIR, compose_stage, group_options
from convexp.errors import ConfigError

runner = CliRunner()


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A user's config folder with a preset that inherits a built-in one; searched via the env var
    (monkeypatch restores it: --config-dir writes it for worker processes)."""
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", "")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my_model.yaml").write_text(
        "defaults:\n  - convbert_small\n  - _self_\nname: my-model\nkernel_size: 7\n"
    )
    return tmp_path


def invoke(*args):
    res = runner.invoke(app, list(args), terminal_width=200)
    return res.exit_code, res.output


def one_line_error(code, output, *needles):
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2, output
    assert len(lines) == 1 and lines[0].startswith("error:"), output
    for n in needles:
        assert n in lines[0], output
    assert "Traceback" not in output


def test_configs_ship_inside_the_package():
    assert CONF_DIR.parent.name == "convexp"
    assert (CONF_DIR / "pretrain.yaml").is_file() and (CONF_DIR / "sweep" / "objective.yaml").is_file()
    assert "convbert_small" in group_options("model") and "objective" in group_options("sweep")


def test_user_preset_is_found_listed_and_composed(user_dir):
    code, out = invoke("--config-dir", str(user_dir), "models")
    assert code == 0, out
    row = next(line for line in out.splitlines() if "my_model*" in line)
    assert "mixed/sdconv" in row
    code, out = invoke("--config-dir", str(user_dir), "pretrain", "model=my_model", "--cfg")
    assert code == 0, out
    cfg = yaml.safe_load(out)
    assert cfg["model"]["kernel_size"] == 7 and cfg["model"]["hidden_size"] == 256  # inherited
    assert cfg["choices"]["model"] == "my_model"
    code, out = invoke("--config-dir", str(user_dir), "pretrain", "--help")
    assert code == 0 and "my_model*" in out


def test_user_config_dirs_come_first_in_hydras_search_path_in_their_order(tmp_path, monkeypatch):
    """Through Hydra's public API only (initialize_config_dir and a search-path plugin, no
    hydra._internal): the user's folders, in the order given, before Hydra's and the built-in ones."""
    import os

    from convexp.config.compose import hydra_config

    first, second = tmp_path / "a", tmp_path / "b"
    for d in (first, second):
        (d / "model").mkdir(parents=True)
    for d, name in ((first, "from-a"), (second, "from-b")):  # both shadow the default preset
        (d / "model" / "convbert_small.yaml").write_text(
            (CONF_DIR / "model" / "convbert_small.yaml").read_text().replace("name: convbert-small", f"name: {name}")
        )
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", os.pathsep.join(map(str, (first, second))))
    sources = [(s.provider, s.path) for s in hydra_config("pretrain", []).runtime.config_sources]
    # each user folder as Hydra sees it: its config groups, linked from a path that ends in its own
    assert [p for p, _ in sources[:4]] == ["convexp-user", "convexp-user", "hydra", "main"], sources
    assert sources[3][1] == str(CONF_DIR)
    for (_, seen), d in zip(sources[:2], (first, second)):
        assert seen.endswith(str(d.resolve())) and (Path(seen) / "model").resolve() == (d / "model").resolve()
    assert compose_stage("pretrain", []).model.name == "from-a"
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", "")
    assert compose_stage("pretrain", []).model.name == "convbert-small"  # initialised again, built-ins only
    source = (CONF_DIR.parent / "config" / "compose.py").read_text()
    assert "hydra._internal" not in source


def test_missing_config_dir_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", "")
    code, out = invoke("--config-dir", str(tmp_path / "nope"), "models")
    one_line_error(code, out, "--config-dir", "no such directory")


def test_user_preset_shadows_builtin_of_the_same_name(user_dir):
    code, out = invoke("cp", "model/convbert_small", str(user_dir))  # as `tune cp`, then edit
    copied = user_dir / "model" / "convbert_small.yaml"
    copied.write_text(copied.read_text().replace("name: convbert-small", "name: shadow"))
    code, out = invoke("--config-dir", str(user_dir), "pretrain", "--cfg")  # the default preset
    assert code == 0 and yaml.safe_load(out)["model"]["name"] == "shadow", out
    (user_dir / "model" / "electra_small.yaml").write_text(  # electra_small <- ... <- electra_small
        "defaults:\n  - convbert_small\n  - _self_\n"
    )
    code, out = invoke("--config-dir", str(user_dir), "pretrain", "model=electra_small", "--cfg")
    one_line_error(code, out, "inherit")


def test_hydra_list_delete_and_append_overrides():
    cfg = compose_stage("finetune", ["init=x", "seeds=[1,2,3]", "~distill", "+extra.note=hello"])
    assert list(cfg.seeds) == [1, 2, 3]
    assert "distill" not in cfg and cfg.extra.note == "hello"
    cfg = compose_stage("pretrain", ["scale=smoke", "model.kernel_size=5", "name='a b'"])
    assert cfg.model.kernel_size == 5 and cfg.name == "a b" and cfg.seq_len == 64


@pytest.mark.parametrize(
    "args, needles",
    [
        (["pretrain", "model.kernel_size=abc", "--cfg"], ["model.kernel_size", "abc", "Integer"]),
        (["pretrain", "trainer.max_steps=ten", "--cfg"], ["trainer.max_steps"]),
        (["pretrain", "optim.lr=fast", "--cfg"], ["optim.lr", "Float"]),
        (["pretrain", "model.kernel_size=4", "--cfg"], ["kernel_size must be odd"]),
        (["pretrain", "no_such_key=1", "--cfg"], ["no_such_key", "+no_such_key=1"]),
        (["pretrain", "+model.no_such=1", "--cfg"], ["model.no_such"]),
        (["pretrain", "model=nope", "--cfg"], ["model/nope", "convbert_small"]),
        (["pretrain", "seeds", "--cfg"], ["seeds", "EQUAL"]),
        (["pretrain", "seed=1,2", "--cfg"], ["sweep over values", "seed=[a,b]"]),
        (["finetune", "glue", "init=x", "model=nope", "--cfg"], ["unknown model preset 'nope'"]),
        (["pretrain", "--cfg", "jobs"], []),  # "jobs" is an override without '=': Hydra's parse error
    ],
)
def test_bad_overrides_fail_at_compose_with_one_line(args, needles):
    code, out = invoke(*args)
    one_line_error(code, out, *needles)


def test_cfg_job_hydra_all():
    code, job = invoke("pretrain", "scale=smoke", "--cfg")
    assert code == 0 and yaml.safe_load(job)["seq_len"] == 64 and "hydra" not in yaml.safe_load(job)
    code, job2 = invoke("pretrain", "--cfg", "job", "scale=smoke")
    assert code == 0 and yaml.safe_load(job2) == yaml.safe_load(job)
    code, hydra = invoke("pretrain", "--cfg", "hydra", "scale=smoke")
    node = yaml.safe_load(hydra)["hydra"]
    assert code == 0 and set(yaml.safe_load(hydra)) == {"hydra"}
    assert node["runtime"]["choices"]["scale"] == "smoke"
    code, both = invoke("pretrain", "--cfg", "all", "scale=smoke")
    assert code == 0 and {"hydra", "seq_len", "model"} <= set(yaml.safe_load(both))


def test_the_trainer_names_convexp_accepts_are_lightnings_own():
    """The accelerator, strategy and precision values the schema accepts without importing
    Lightning are ones the installed Lightning accepts (its registries and precision flags), and
    every strategy Lightning offers for CPUs and GPUs is among them."""
    from typing import get_args

    from lightning_fabric import connector
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import StrategyRegistry

    from convexp.config.lightning import LIGHTNING_NAMES

    assert set(LIGHTNING_NAMES["accelerator"]) <= {"auto", "gpu", *AcceleratorRegistry.available_accelerators()}
    strategies = {"auto", *StrategyRegistry.available_strategies()}
    assert set(LIGHTNING_NAMES["strategy"]) <= strategies
    assert {s for s in strategies - set(LIGHTNING_NAMES["strategy"]) if "xla" not in s and "tpu" not in s} == set()
    precisions = {str(v) for part in get_args(connector._PRECISION_INPUT) for v in get_args(part)}
    assert set(LIGHTNING_NAMES["precision"]) <= precisions


def test_composing_leaves_lightning_unimported():
    """``--cfg`` and a refused trainer value answer without Lightning's 3-5 s import, whatever the
    value (the names are convexp's own copy of Lightning's)."""
    import subprocess
    import sys

    probe = (
        "import sys; from convexp.config.compose import compose_stage\n"
        "compose_stage('finetune', ['task=sst2', 'init=none'])\n"
        "compose_stage('pretrain', ['trainer.accelerator=gpu', 'trainer.devices=2', 'trainer.strategy=ddp',"
        " 'trainer.precision=bf16-mixed'])\n"
        "compose_stage('pretrain', ['trainer.precision=16', 'trainer.strategy=deepspeed_stage_2'])\n"
        "try:\n    compose_stage('pretrain', ['trainer.precision=fp7'])\nexcept Exception as e:\n    print(type(e).__name__)\n"
        "print('pytorch_lightning' in sys.modules, 'lightning_fabric' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ConfigError", "False", "False", "False"]


def test_stage_help_lists_config_groups_and_options():
    code, out = invoke("finetune", "glue", "--help")
    assert code == 0, out
    assert "pruning:" in out and "movement" in out and "scale:" in out and "task:" in out
    code, out = invoke("pretrain", "--help")
    assert "objective: electra, mlm" in out and "convbert_small" in out


def test_cp_copies_a_builtin_config_and_never_overwrites(tmp_path):
    code, out = invoke("cp", "model/convbert_small", str(tmp_path))
    assert code == 0, out
    copied = tmp_path / "model" / "convbert_small.yaml"
    assert copied.read_text() == (CONF_DIR / "model" / "convbert_small.yaml").read_text()
    code, out = invoke("cp", "key-based-conv", str(tmp_path / "mine.yaml"))  # a NAME one group has
    assert code == 0 and (tmp_path / "mine.yaml").read_text().startswith(
        (CONF_DIR / "sweep" / "key-based-conv.yaml").read_text()[:40]
    )
    code, out = invoke("cp", "model/convbert_small", str(tmp_path))
    one_line_error(code, out, "exists", "never overwrites")
    code, out = invoke("cp", "model/no_such", str(tmp_path))
    one_line_error(code, out, "no built-in config")


def test_compose_error_type():
    with pytest.raises(ConfigError, match="model.kernel_size"):
        compose_stage("pretrain", ["model.kernel_size=abc"])


def test_sweep_arguments_are_parsed_by_hydra():
    from convexp.sweep.args import split_args

    own, stage = split_args(
        ["scale=smoke", "seeds=[1,2]", "+pretrain.extra.note='a b'", "~finetune.distill", "pretrain.seed=3"]
    )
    assert own == ["scale=smoke", "seeds=[1,2]"]
    assert stage["pretrain"] == ["+extra.note='a b'", "seed=3"] and stage["finetune"] == ["~distill"]
    with pytest.raises(ConfigError, match="EQUAL"):
        split_args(["scale"])


def _typed_fields():
    """(where, schema, field name, its type) of every int, float and bool key of the stage configs:
    each group's schema, the stages' own keys, ablate's and the model's."""
    import dataclasses
    import typing

    from convexp.config.groups import AblateSchema
    from convexp.config.schema import GROUPS, FinetuneSchema, PretrainSchema
    from convexp.models import ModelConfig

    schemas = [*GROUPS.items(), ("", PretrainSchema), ("", FinetuneSchema), ("", AblateSchema), ("model", ModelConfig)]
    for where, schema in schemas:
        hints = typing.get_type_hints(schema)
        for f in dataclasses.fields(schema):
            args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
            kind = args[0] if typing.get_origin(hints[f.name]) is typing.Union and len(args) == 1 else hints[f.name]
            if kind in (int, float, bool):
                yield where, schema, f.name, kind


def _of_type(text: str, kind: type) -> bool:
    try:
        return text in ("true", "false") if kind is bool else (kind(text) is not None and (kind is float or "." not in text))
    except ValueError:
        return False


def test_every_typed_keys_example_has_the_keys_own_type():
    """A wrong value's line shows an example of the key's own type (seq_len=abc once showed
    seq_len=0.15, the mask probability's): from the typed schema, and from the resolvers'
    ``is not a number`` line (config/compose._number)."""
    import re

    from omegaconf import OmegaConf

    from convexp.config.schema import key_example, typed

    checked = 0
    for where, schema, name, kind in _typed_fields():
        key = f"{where}.{name}" if where else name
        with pytest.raises(ConfigError) as e:
            typed(schema, OmegaConf.create({name: "abc"}), where)
        example = re.search(rf"e\.g\. {re.escape(key)}=(\S+)", str(e.value))
        assert example and _of_type(example.group(1).rstrip(";,)"), kind), str(e.value)
        if where != "model":  # the stage configs' keys: what the resolvers' line shows
            shown = key_example(key)
            assert shown is not None and _of_type(shown, kind), (key, shown)
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("key, example", [("seq_len", "128"), ("objective.mask_prob", "0.15"),
                                          ("trainer.steps_multiplier", "1.0")])  # fmt: skip
def test_a_resolvers_number_line_shows_the_keys_own_example(key, example):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}='abc' is not a number; e\.g\. {re.escape(key)}={example}$"):
        compose_stage("pretrain", ["scale=smoke", f"{key}=abc"])
