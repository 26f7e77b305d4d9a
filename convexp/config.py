"""Compose ``conf/`` with Hydra's compose API and validate the result.

Everything a user can get wrong here raises :class:`ConfigError` with one line that names the
problem and the fix; the CLI prints that line and exits with code 2.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from .errors import UserError

CONF_DIR = Path(__file__).resolve().parent / "conf"  # shipped inside the package (package data)
SWEEP_DIR = CONF_DIR / "sweep"


class ConfigError(UserError):
    """A configuration problem; its message is the one line the CLI prints."""


def group_options(group: str) -> list[str]:
    """Names of the configs in a config group (``conf/<group>/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose(config_name: str | None, overrides: list[str] = (), choices: bool = False) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` (or nothing) with Hydra overrides, resolved.

    With ``choices`` the result carries ``choices``: the option picked in every config group
    (e.g. ``choices.model == "convbert_small"``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from hydra.core.global_hydra import GlobalHydra

    _check_group_choices(overrides)
    try:
        if not GlobalHydra.instance().is_initialized():  # once per process: later composes are fast
            initialize_config_dir(config_dir=str(CONF_DIR), version_base=None)
        cfg = hydra_compose(config_name=config_name, overrides=list(overrides), return_hydra_config=choices)
        if choices:
            picked = {k: v for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra")}
            with open_dict(cfg):
                del cfg["hydra"]
                cfg.choices = picked
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_one_line(str(e))) from e
    return cfg


def _one_line(message: str) -> str:
    """Hydra's multi-line errors, reduced to the line a user needs."""
    m = re.search(r"Could not override '([^']+)'", message)
    if m and "To append to your config" in message:
        return f"unknown config key {m.group(1)!r}: check the spelling (add --cfg to print every key)"
    if m and "Could not find" in message:  # group default missing
        return message.strip().splitlines()[-1]
    return "bad configuration: " + message.strip().splitlines()[0]


def _check_group_choices(overrides) -> None:
    """Catch `group=unknown` before Hydra does, with the list of valid choices."""
    for o in overrides:
        key, sep, value = o.lstrip("+~").partition("=")
        if sep and "." not in key and (CONF_DIR / key).is_dir() and value not in group_options(key):
            raise ConfigError(
                f"unknown {key} {value!r}; choose one of: {', '.join(group_options(key))} (see `convexp models`)"
                if key == "model"
                else f"unknown {key} {value!r}; choose one of: {', '.join(group_options(key))}"
            )


# `scale=` on the command line selects the stage's own scale group.
SCALE_GROUP = {"pretrain": "scale", "finetune": "finetune_scale"}


def compose_stage(stage: str, overrides: list[str]) -> DictConfig:
    """Compose ``conf/<stage>.yaml`` with command-line overrides (``scale=`` is the stage's;
    fine-tuning's ``model=<preset>``, the random-init baseline, is its key ``init_model``)."""
    group = SCALE_GROUP[stage]
    overrides = [f"{group}={o.split('=', 1)[1]}" if o.startswith("scale=") else o for o in overrides]
    if stage == "finetune":
        _check_group_choices([o for o in overrides if o.startswith("model=")])
        overrides = [f"init_model={o.split('=', 1)[1]}" if o.startswith("model=") else o for o in overrides]
        cfg = compose(stage, overrides, choices=True)
        _task_pruning(cfg, overrides)
        return cfg
    return compose(stage, overrides, choices=True)


def _task_pruning(cfg: DictConfig, overrides: list[str]) -> None:
    """Merge ``pruning.tasks[<task>]`` (settings that differ per task, e.g. BERMO Table 7's QQP
    warm-ups) into ``pruning``, except keys given on the command line; then drop the map."""
    tasks = cfg.pruning.get("tasks")
    if tasks is None:
        return
    given = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    extra = {k: v for k, v in (tasks.get(cfg.task.name) or {}).items() if f"pruning.{k}" not in given}
    with open_dict(cfg):
        del cfg.pruning["tasks"]
    for k, v in extra.items():
        if k not in cfg.pruning:
            raise ConfigError(
                f"pruning.tasks.{cfg.task.name}.{k}: no such pruning setting; check conf/pruning/"
            )
        cfg.pruning[k] = v


def model_config(name: str, overrides: list[str] = ()):
    """The validated :class:`~convexp.models.ModelConfig` of preset ``conf/model/<name>.yaml``.

    overrides are Hydra overrides relative to the model, e.g. ``["kernel_size=9"]``.
    """
    scoped = [f"{o[: len(o) - len(o.lstrip('+~'))]}model.{o.lstrip('+~')}" for o in overrides]
    cfg = compose(None, [f"+model={name}", *scoped])
    return to_model_config(cfg.model)


def model_configs(names: list[str]) -> dict:
    """Several presets at once (one Hydra composition): {name: ModelConfig}."""
    cfg = compose(None, [f"+model@presets.{n}={n}" for n in names])
    return {n: to_model_config(cfg.presets[n]) for n in names}


def to_model_config(node) -> "ModelConfig":  # noqa: F821
    """Validate a model node (types, known keys, then :meth:`ModelConfig.validate`)."""
    from omegaconf.errors import OmegaConfBaseException

    from .models import ModelConfig

    try:
        merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or getattr(e, "key", None)
        first = str(e).strip().splitlines()[0]
        if "not in" in first:
            raise ConfigError(
                f"unknown model config key {key!r}: check the spelling (see conf/model/*.yaml)"
            ) from e
        raise ConfigError(f"model config {key!r}: {first}") from e
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from e
