"""Compose ``conf/`` with Hydra's compose API and validate the result.

Everything a user can get wrong here raises :class:`ConfigError` with one line that names the
problem and the fix; the CLI prints that line and exits with code 2.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

ROOT = Path(os.environ.get("CONVEXP_ROOT", Path(__file__).resolve().parent.parent))
CONF_DIR = ROOT / "conf"


class ConfigError(ValueError):
    """A user-caused configuration problem; its message is the one line the CLI prints."""


def group_options(group: str) -> list[str]:
    """Names of the configs in a config group (``conf/<group>/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose(config_name: str | None, overrides: list[str] = ()) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` (or nothing) with Hydra overrides, resolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from hydra.core.global_hydra import GlobalHydra

    _check_group_choices(overrides)
    try:
        if not GlobalHydra.instance().is_initialized():  # once per process: later composes are fast
            initialize_config_dir(config_dir=str(CONF_DIR), version_base=None)
        cfg = hydra_compose(config_name=config_name, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        first = str(e).strip().splitlines()[0]
        raise ConfigError(f"bad configuration: {first}") from e
    return cfg


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


def model_config(name: str, overrides: list[str] = ()):
    """The validated :class:`~convexp.models.ModelConfig` of preset ``conf/model/<name>.yaml``.

    overrides are Hydra overrides relative to the model, e.g. ``["kernel_size=9"]``.
    """
    cfg = compose(None, [f"+model={name}", *(f"model.{o}" for o in overrides)])
    return to_model_config(cfg.model)


def model_configs(names: list[str]) -> dict:
    """Several presets at once (one Hydra composition): {name: ModelConfig}."""
    cfg = compose(None, [f"+model@presets.{n}={n}" for n in names])
    return {n: to_model_config(cfg.presets[n]) for n in names}


def to_model_config(node) -> "ModelConfig":  # noqa: F821
    from .models import ModelConfig

    d = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    try:
        return ModelConfig.from_dict(d)
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from e
