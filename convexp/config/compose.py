"""Compose the configs with Hydra's compose API and validate the result.

The configs ship inside the package (``convexp/conf/``: stage configs, config groups, named sweeps
in ``conf/sweep/``). A user's own config directories — laid out the same way, e.g.
``mine/model/my_model.yaml`` or ``mine/sweep/my-sweep.yaml`` — are searched first: they come from
``convexp --config-dir DIR`` or the ``CONVEXP_CONFIG_PATH`` environment variable (directories
separated by ``os.pathsep``), which ``--config-dir`` also sets so that worker processes see them.

Hydra parses every override (its grammar: ``key=value``, ``+key=value``, ``~key``, lists, quoting)
and composes; types are checked at compose time against the structured configs in
:mod:`convexp.schema`. Everything a user can get wrong raises :class:`ConfigError` with one line
that names the problem and the fix (Hydra's own hint, kept to one line); the CLI prints that line
and exits with code 2.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from ..errors import ConfigError
from . import compose_cache
from .hydra_init import initialize_hydra

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"  # the built-in configs (package data)
CONFIG_PATH_ENV = "CONVEXP_CONFIG_PATH"


# --- where configs are found ----------------------------------------------------------------


def user_config_dirs() -> list[Path]:
    """The user's config directories, searched before the built-in ones: ``CONVEXP_CONFIG_PATH``'s
    (``--config-dir``), then ``CONVEXP_USER_DIR``'s (``--user-dir``: a folder of a user's code holds
    its configs too)."""
    from ..user_code import USER_DIR_ENV, user_dirs

    dirs = [Path(p).expanduser() for p in os.environ.get(CONFIG_PATH_ENV, "").split(os.pathsep) if p]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(
                f"config directory {str(d)!r} (from --config-dir or {CONFIG_PATH_ENV}) does not exist"
            )
    for d in user_dirs():
        if not d.is_dir():
            raise ConfigError(f"user directory {str(d)!r} (from --user-dir or {USER_DIR_ENV}) does not exist")
    found = [d.resolve() for d in [*dirs, *user_dirs()]]
    return list(dict.fromkeys(found))  # each once, in order


def add_config_dirs(dirs: list[str | Path]) -> None:
    """Search ``dirs`` (in this order) before every config directory known so far."""
    for d in dirs:
        if not Path(d).expanduser().is_dir():
            raise ConfigError(f"--config-dir {str(d)!r}: no such directory")
    known = os.environ.get(CONFIG_PATH_ENV, "")
    os.environ[CONFIG_PATH_ENV] = os.pathsep.join(
        [*(str(Path(d).expanduser().resolve()) for d in dirs), *filter(None, known.split(os.pathsep))]
    )


def user_task_kinds() -> list[str]:
    """The kinds of task the user's task files name (``kind:`` of ``task/*.yaml`` in their config
    and user directories): ``convexp finetune`` offers each beside the built-in ones (tasks/kind.py:
    a user's is a module defining ``KIND``). Read as text: nothing is imported."""
    import yaml

    found = []
    for d in user_config_dirs():
        for f in sorted((d / "task").glob("*.yaml")) if (d / "task").is_dir() else ():
            try:
                kind = (yaml.safe_load(f.read_text()) or {}).get("kind")
            except (OSError, yaml.YAMLError, AttributeError):
                continue  # composing it says what is wrong
            if isinstance(kind, str):
                found.append(kind)
    return list(dict.fromkeys(found))


def config_dirs() -> list[Path]:
    """Every config directory in search order: the user's first, then the built-in ``conf/``."""
    return [*user_config_dirs(), CONF_DIR]


def group_sources(group: str) -> dict[str, Path]:
    """{name: file} of every config in group ``group`` (e.g. ``model``, ``sweep``), sorted by name;
    a user's config shadows a built-in one of the same name."""
    found: dict[str, Path] = {}
    for d in config_dirs():
        for p in (d / group).glob("*.yaml"):
            found.setdefault(p.stem, p)
    return dict(sorted(found.items()))


def group_options(group: str) -> list[str]:
    """Names of the configs in a config group, user and built-in, sorted."""
    return list(group_sources(group))


def is_builtin(path: Path) -> bool:
    return CONF_DIR in Path(path).resolve().parents


# --- overrides: Hydra's grammar ----------------------------------------------------------------


@lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


_PARSED: dict[tuple[str, ...], list] = {}  # overrides -> Hydra's parse (a sweep's plan asks ~1,000 times)


def parse_overrides(overrides: list[str]) -> list:
    """Hydra's parse of command-line overrides (``hydra.core.override_parser.types.Override``);
    the same overrides are parsed once per process."""
    key = tuple(overrides)
    if key not in _PARSED:
        if len(_PARSED) > 4096:
            _PARSED.clear()
        _PARSED[key] = _parse_overrides(list(overrides))
    return list(_PARSED[key])


def _parse_overrides(overrides: list[str]) -> list:
    from hydra.errors import HydraException

    try:
        parsed = _parser().parse_overrides(list(overrides))
    except HydraException as e:
        wide = next((o for o in overrides if not o.isascii() and "=" in o and "'" not in o and '"' not in o), None)
        if wide:  # Hydra's grammar takes letters beyond ASCII only in quotes
            key, value = wide.split("=", 1)
            raise ConfigError(f"{wide}: quote a value with letters beyond ASCII, e.g. {key}='{value}'") from e
        raise ConfigError(one_line(str(e))) from e
    for o in parsed:
        if not o.key_or_group:
            raise ConfigError(f"{o.input_line!r} has no key: write KEY=VALUE, e.g. optim.lr{o.input_line}")
    return parsed


def check_group_choice(o) -> None:
    """A config group (``model=``, ``scale=``, ...) takes the name of one of its files."""
    group = o.key_or_group
    if o.is_delete() or not any((d / group).is_dir() for d in config_dirs()):
        return
    value = o.value()
    if value is not None and not isinstance(value, (str, list)):  # null deselects the group (Hydra's)
        names = ", ".join(group_options(group))
        raise ConfigError(f"{group}={o.input_line.split('=', 1)[-1]}: {group} is a config group; choose one of {names}")


def _yaml_problem(e) -> str:
    """One line for a config file that is not YAML: the file (searched in the user's config
    directories, where hand-written files are), the line and the problem."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    for d in user_config_dirs():
        for f in sorted(d.rglob("*.yaml")):
            try:
                yaml.safe_load(f.read_text())
            except yaml.YAMLError as bad:
                m = getattr(bad, "problem_mark", None)
                where = f"line {m.line + 1}, column {m.column + 1}: " if m else ""
                return f"{f} is not valid YAML ({where}{getattr(bad, 'problem', None) or bad}); fix or remove it"
    return f"a config file is not valid YAML ({where}{getattr(e, 'problem', None) or e}); fix it"


def override_key(o) -> str:
    """The key an override sets, with its package (``model``, ``trainer.max_steps``, ``model@x``)."""
    return o.key_or_group + (f"@{o.package}" if o.package else "")


def with_key(o, key: str) -> str:
    """Override ``o`` written out again with another key (prefix and value kept as given)."""
    prefix = {"ADD": "+", "FORCE_ADD": "++", "DEL": "~"}.get(o.type.name, "")
    line = o.input_line or ""
    value = line.split("=", 1)[1] if "=" in line else None
    return f"{prefix}{key}" + ("" if value is None else f"={value}")


def one_line(message: str) -> str:
    """A Hydra / OmegaConf error reduced to one line: Hydra's message and fix hint joined; option
    lists kept (comma-separated), the config search path dropped."""
    lines: list[str] = []
    options: list[str] = []
    for raw in message.strip().splitlines():
        if raw.startswith("Config search path"):
            break
        if raw.startswith("\t"):
            options.append(raw.strip())
        elif raw.strip() and not raw.startswith("    "):
            lines.append(raw.strip().rstrip("."))
    if lines and lines[0].startswith("Could not override") and len(lines) > 1:  # a key not in the config
        lines = [lines[0] + ": no such key, check the spelling (--cfg prints every key)", *lines[1:]]
    text = "; ".join(lines)
    if options:
        text += " " + ", ".join(options)
    text = re.sub(r"^In '[^']*': ", "", text)
    return re.sub(r"^\w+ raised while resolving interpolation: ", "", text)


# --- composing --------------------------------------------------------------------------------


def _steps(n, *, _root_) -> int:
    """``${steps:N}`` (conf/recipe/, conf/scale/): N updates x ``trainer.steps_multiplier`` ("train
    longer"), resolved when composing so that ``--cfg`` shows the number of steps that runs; a
    ``trainer.max_steps=N`` given on the command line is taken as it is."""
    return int(round(int(n) * _number(_root_, "trainer.steps_multiplier", 1)))


def _number(root, key: str, default=None) -> float:
    """A number a resolver computes with; a value that is not one is named (one line)."""
    value = OmegaConf.select(root, key, default=default)
    try:
        return float(value)
    except (TypeError, ValueError):
        from .schema import key_example  # the key's own default (seq_len=128), not another key's

        example = key_example(key) or default
        eg = f"; e.g. {key}={example}" if example is not None else ""
        raise ValueError(f"{key}={value!r} is not a number{eg}") from None


OmegaConf.register_new_resolver("steps", _steps, replace=True)


def _electra_max_predictions(*, _root_) -> int:
    """``${electra_max_predictions:}`` (conf/recipe/electra_small.yaml): ELECTRA's cap on masked
    positions, computed from the length as google-research/electra configure_pretraining.py does,
    ``int((mask_prob + 0.005) * max_seq_length)``: 19 at 128, 79 at 512, so that a run at another
    length (the SQuAD continuation at 512, smoke at 64) masks the same fraction."""
    return int((_number(_root_, "objective.mask_prob") + 0.005) * _number(_root_, "seq_len"))


OmegaConf.register_new_resolver("electra_max_predictions", _electra_max_predictions, replace=True)


def _when_pruning(on, off, *, _root_):
    """``${when_pruning:A,B}``: A when the config fine-prunes (``pruning.method`` is not none), else
    B (conf/protocol/bermo.yaml: BERMO's fine-pruning lr and epochs differ from its fine-tuning ones)."""
    return off if OmegaConf.select(_root_, "pruning.method", default="none") == "none" else on


OmegaConf.register_new_resolver("when_pruning", _when_pruning, replace=True)


def compose(config_name: str | None, overrides: list[str] = (), choices: bool = False) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` (or nothing) with Hydra overrides, resolved.

    With ``choices`` the result carries ``choices``: the option picked in every config group
    (e.g. ``choices.model == "convbert_small"``)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    cfg = _hydra_compose(config_name, overrides, choices)
    try:
        if choices:
            picked = {k: v for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra")}
            with open_dict(cfg):
                del cfg["hydra"]
                cfg.choices = picked
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(one_line(str(e))) from e
    return cfg


def hydra_config(stage: str, overrides: list[str]) -> DictConfig:
    """Hydra's own configuration of a stage command (``--cfg hydra``): search path, the option
    picked in every config group, the overrides as Hydra parsed them (composed here and now)."""
    return _hydra_compose(stage, stage_overrides(stage, overrides), True, kept=False).hydra


def _hydra_compose(config_name: str | None, overrides: list[str], hydra_node: bool, kept: bool = True) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    for o in parse_overrides(overrides):
        check_group_choice(o)
        if o.is_sweep_override():
            raise ConfigError(
                f"{o.input_line!r} is a sweep over values, and a command composes one configuration: "
                f"for a list write {o.key_or_group}=[a,b], for text with commas quote it, "
                "for a sweep write a sweep file (`convexp ablate`)"
            )
    dirs = config_dirs()
    if kept and (cfg := compose_cache.kept(dirs, config_name, overrides, hydra_node)) is not None:
        return cfg  # composed by an earlier process from the same files (compose_cache.py)
    try:
        initialize_hydra(CONF_DIR, tuple(user_config_dirs()))
        cfg = hydra_compose(config_name=config_name, overrides=list(overrides), return_hydra_config=hydra_node)
        compose_cache.keep(dirs, config_name, overrides, hydra_node, cfg)
        return cfg
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(one_line(str(e))) from e
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_problem(e)) from e
    except ValueError as e:  # Hydra's own checks of an override it could parse
        raise ConfigError(one_line(str(e))) from e
    except RecursionError as e:
        raise ConfigError(
            "a config inherits from itself through its defaults list (a config of yours with the name "
            "of a built-in one it inherits from?): rename it"
        ) from e


# `scale=` on the command line selects the stage's own scale group.
SCALE_GROUP = {"pretrain": "scale", "finetune": "finetune_scale"}


def stage_overrides(stage: str, overrides: list[str]) -> list[str]:
    """Command-line overrides as the stage's config spells them: ``scale=`` is the stage's scale
    group; fine-tuning's ``model=<preset>`` (the random-init baseline) is its key ``init_model``;
    ``model.KEY=VALUE`` sets any ModelConfig key, also one the preset leaves at its default (Hydra's
    ``++``: a key the preset sets is overridden as before, the same composed config)."""
    out = []
    for o, parsed in zip(overrides, parse_overrides(overrides)):
        key = override_key(parsed)
        if stage == "pretrain" and _model_key(key) and o.startswith("model."):
            o = "++" + o
        elif key == "scale":
            o = with_key(parsed, SCALE_GROUP[stage])
        elif stage == "pretrain" and key == "recipe":  # model presets include it at the root package
            o = with_key(parsed, "recipe@_global_")
        elif stage == "finetune" and key == "model":
            value = parsed.value()
            if value not in group_options("model"):
                raise ConfigError(
                    f"unknown model preset {value!r}; run `convexp models` to list them"
                )
            o = with_key(parsed, "init_model")
        out.append(o)
    return out


def _model_key(key: str) -> bool:
    """Whether ``key`` is ``model.<a ModelConfig field>`` (or a key below one: model.mixer_options.k)."""
    from dataclasses import fields
    from ..models.config import ModelConfig
    head, _, rest = key.partition(".")
    return head == "model" and rest.split(".")[0] in {f.name for f in fields(ModelConfig)}


def compose_stage(stage: str, overrides: list[str]) -> DictConfig:
    """The stage's composed, type-checked configuration for command-line ``overrides``."""
    from ..store.record import command_line
    from .schema import check_types

    given = list(overrides)
    overrides = stage_overrides(stage, given)
    cfg = compose(stage, overrides, choices=True)
    if stage == "pretrain":
        cfg = _paper_run(cfg, overrides)
    if stage == "finetune":
        _task_pruning(cfg, overrides)
        _keys_read(cfg)
    check_types(cfg)
    with open_dict(cfg):  # for the run record; not part of the run id (run_names.EXECUTION_KEYS)
        cfg.invocation = {"command": command_line(), "overrides": given}
    return cfg


# A recipe's run as its paper made it (conf/recipe/: recipe.paper): the option of each group, or the
# value of each key, that applies above scale=smoke where the command line names none
PAPER_RUN = {"corpus": "data", "vocabulary": "tokenizer", "objective": "objective", "examples": "data.examples"}


def _paper_run(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A pre-training config above ``scale=smoke`` composed with its recipe's corpus, vocabulary,
    objective and examples (``recipe.paper``), each unless the command line names it (``data=`` or
    ``data.examples=``...): ``convexp pretrain model=convbert_small scale=paper`` is ConvBERT's run,
    on OpenWebText with ELECTRA's objective, as its named sweeps run it, never the synthetic corpus
    by default. ``recipe.paper`` is dropped once applied: what it picked is in the config."""
    if "recipe" not in cfg:  # no recipe: refused by the schema, in its own words (schema._check_recipe)
        return cfg
    paper = cfg.recipe.get("paper") or {}
    extra = []
    if cfg.choices.get("scale") != "smoke":
        given = {override_key(o) for o in parse_overrides(overrides)}
        for key, target in PAPER_RUN.items():
            want = paper.get(key)
            have = cfg.choices.get(target) if "." not in target else OmegaConf.select(cfg, target)
            if want is not None and target not in given and have != want:
                extra.append(f"{target}={want}")
    if extra:
        cfg = compose("pretrain", [*extra, *overrides], choices=True)
    named = {override_key(o) for o in parse_overrides(overrides)}
    if cfg.choices.get("scale") == "paper" and cfg.choices.get("data") == "synthetic" and "data" not in named:
        raise ConfigError(
            f"scale=paper would train on the synthetic corpus: recipe {cfg.recipe.name} names no corpus "
            "(recipe.paper.corpus); name one (data=openwebtext, data=files data.path=DIR...), or ask for "
            "the synthetic corpus by name: data=synthetic"
        )
    if "paper" in cfg.recipe:
        with open_dict(cfg):
            del cfg.recipe["paper"]
    return cfg


PROTOCOL_TABLES = ("lr", "epochs", "batch_size")  # task.<key>: a value per protocol, read by conf/protocol/
SOURCE_NODES = ("glue", "squad")  # where a task's data comes from: each read by the tasks of one kind


def _keys_read(cfg: DictConfig) -> None:
    """A fine-tuning config holds only what its run reads: the protocol's values stand in place
    of the task's per-protocol tables (``task.lr`` / ``epochs`` / ``batch_size``, dropped once
    resolved), a task drops the source nodes it does not read (its task file's ``source:``, else
    the node named as its ``kind:``: glue (where unset) reads ``glue:``, squad ``squad:``, probing's
    files say ``source: glue``, another kind reads neither), and a run from a checkpoint drops
    ``init_model`` (``model=``: the preset of ``init=none``)."""
    with open_dict(cfg):
        if not OmegaConf.is_missing(cfg, "init") and str(cfg.init) != "none":  # model=: init=none's preset
            if cfg.init_model is not None:
                raise ConfigError(
                    f"model={cfg.init_model} picks the preset of init=none (a randomly initialised baseline); "
                    f"init={cfg.init} brings its own model: drop model= or use init=none"
                )
            cfg.pop("init_model")
        for key in PROTOCOL_TABLES:
            value = cfg[key]
            cfg[key] = OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value
        for key in PROTOCOL_TABLES:
            cfg.task.pop(key, None)
        reads = cfg.task.get("source") or cfg.task.get("kind") or "glue"  # its task file's source:, else its kind's node
        for node in SOURCE_NODES:
            if node != reads:
                cfg.pop(node, None)


def _task_pruning(cfg: DictConfig, overrides: list[str]) -> None:
    """Merge ``pruning.tasks[<task>]`` (settings that differ per task, e.g. BERMO Table 7's QQP
    warm-ups) into ``pruning``, except keys given on the command line; then drop the map."""
    tasks = cfg.pruning.get("tasks")
    if tasks is None:
        return
    given = {override_key(o) for o in parse_overrides(overrides)}
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
    scoped = [with_key(o, f"model.{o.key_or_group}") for o in parse_overrides(overrides)]
    scoped = [f"++{o}" if _model_key(override_key(p)) and o.startswith("model.") else o
              for o, p in zip(scoped, parse_overrides(scoped))]  # fmt: skip
    cfg = compose(None, [f"+model={name}", *scoped])
    return to_model_config(cfg.model)


def model_configs(names: list[str]) -> dict:
    """Several presets at once (one Hydra composition): {name: ModelConfig}."""
    presets = [f"+model@presets.{n}={n}" for n in names]
    try:  # each preset names its pre-training recipe (conf/recipe/), which would clash: leave it out
        cfg = compose(None, [*presets, "~recipe@_global_"])
    except ConfigError:  # none of them names one (a user's presets)
        cfg = compose(None, presets)
    return {n: to_model_config(cfg.presets[n]) for n in names}


def to_model_config(node) -> "ModelConfig":  # noqa: F821
    """Validate a model node (types, known keys, then :meth:`ModelConfig.validate`)."""
    from ..models import ModelConfig
    from .schema import typed

    try:
        return typed(ModelConfig, node, "model")
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from e


# --- discovering and copying configs --------------------------------------------------------------
