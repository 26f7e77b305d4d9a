"""The command line of ``convexp ablate NAME KEY=VALUE...``: which keys configure the sweep
itself (conf/ablate.yaml) and which go to the pre-training or fine-tuning stage."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from ..config.compose import CONF_DIR, compose, compose_stage, group_options, override_key, parse_overrides, with_key
from ..config.schema import check_sweep_settings
from .spec import SweepError

STAGES = ("pretrain", "finetune")


def split_args(args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the sweep's own settings, {stage: overrides}) from the command line's KEY=VALUE list.

    ``pretrain.KEY=V`` / ``finetune.KEY=V`` go to one stage; keys of conf/ablate.yaml (scale,
    variants, tasks, seeds, tflops, launcher...) configure the sweep; any other key goes to every
    stage whose configuration has it (an unknown key is an error)."""
    own_keys = set(OmegaConf.load(CONF_DIR / "ablate.yaml")) | {"launcher"}
    own, stage = [], {s: [] for s in STAGES}
    bases = None
    for a, parsed in zip(args, parse_overrides(args)):  # Hydra's grammar (+key, ~key, lists, quotes)
        bare = override_key(parsed)
        prefix = "" if parsed.type.name == "CHANGE" else "+"  # ADD, FORCE_ADD or DEL: not a plain set
        head = bare.split(".")[0]
        if head in STAGES and "." in bare:
            stage[head].append(with_key(parsed, bare.split(".", 1)[1]))
        elif head in own_keys:
            own.append(a)
        else:
            bases = bases or {s: compose_stage(s, [] if s == "pretrain" else ["init=none"]) for s in STAGES}
            targets = [s for s in STAGES if _has_key(bases[s], bare, s)]
            if not targets and not prefix:
                raise SweepError(
                    f"unknown key {bare!r}: neither stage has it; use pretrain.{bare}=... or finetune.{bare}=..., "
                    "or check the spelling (`convexp pretrain --cfg`, `convexp finetune glue init=x --cfg`)"
                )
            for s in targets or STAGES:
                stage[s].append(a)
    return own, stage


# the sweep sets these on the fine-tuning stage itself
_FINETUNE_RESERVED = {"init", "model", "init_model", "task", "seeds"}


def _has_key(cfg: DictConfig, key: str, stage: str) -> bool:
    head = key.split(".")[0]
    if stage == "finetune" and head in _FINETUNE_RESERVED:
        return False
    if (CONF_DIR / head).is_dir() and head in cfg.get("choices", {}):
        return "." not in key or OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING
    return OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING


_MISSING = object()


def sweep_settings(own: list[str]) -> DictConfig:
    """conf/ablate.yaml with the sweep's own arguments."""
    # `scale` names a config group too, so Hydra cannot take scale=... as a plain key: set it after
    parsed = parse_overrides(own)
    scales = [str(o.value()) for o in parsed if override_key(o) == "scale"]
    settings = compose("ablate", [a for a, o in zip(own, parsed) if override_key(o) != "scale"])
    if scales:
        settings.scale = scales[-1]
    if settings.scale not in group_options("scale"):
        raise SweepError(
            f"unknown scale {settings.scale!r}; choose one of: {', '.join(group_options('scale'))}"
        )
    check_sweep_settings(settings)
    return settings
