"""The run directories a stage command will make, named before any of them runs (no Lightning).

Run directories are named by hashes of what they compute, so the pre-training run of a config,
and every fine-tuning run of a GLUE invocation, can be found from the config alone: ``convexp
ablate`` lays out whole sweeps this way (cached, to resume, new) and ``convexp report`` finds the
results again. Configs arrive composed: a GLUE invocation's per-task configs are composed by the
caller (the CLI, the sweep planner) for the tasks :func:`glue_task_names` lists.

A run's name also shows what varies (``+<key><value>`` tokens, convexp.store.run_names.run_name): for a sweep,
the variant's own overrides (the planner passes ``tokens``); for a command, the overrides it was
given whose values differ from the defaults (:func:`command_tokens`). The hash alone says which run
it is: the store finds a run by its hash whatever its name.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf

from ..config.compose import compose_stage, override_key, parse_overrides
from ..tasks.classification import custom
from ..data.digests import input_digests
from ..tasks.classification.loading import task_data
from ..tasks import PROBING as PROBING_ORDER
from ..errors import UserError
from .run_names import EXECUTION_KEYS, name_token, run_key
from .runs import Run

TASK_ORDER = ("mnli", "qqp", "qnli", "sst2", "cola", "stsb", "mrpc", "rte")  # MNLI first: intermediate init
TASK_SETS = {"all": TASK_ORDER, "probing_all": PROBING_ORDER}  # task=<set>: these tasks in turn
INTERMEDIATE = ("rte", "stsb", "mrpc")
BERMO_PROBING_SEEDS = (63, 77, 9, 96, 39)  # BERMO Table 12


# Overrides that no run name shows: the slug shows them (preset, objective, task, seeds, name, BERMO's
# mixing), or they say where a run starts, at which scale or under which protocol (the bundles the
# rest of the recipe comes from; the hash tells those runs apart), or how a fine-tune runs, not
# what it computes (not in its id, as run_names.EXECUTION_KEYS for pre-training).
UNNAMED = (
    *("model", "init_model", "objective", "name", "task", "seeds", "scalar_mix"),
    *("init", "scale", "finetune_scale", "protocol"),
    *("checkpoint_every_s", "malloc_mmap_threshold_mib"),
)
# Nor does a name show where the data comes from, only what the model and recipe are: a name with a
# path is long and true on one machine only (`+path_home_me_data`), and the hash already tells such
# runs apart (it holds the source settings, and a local file's contents: data/digests.py). So no
# override whose key names a path (PATH_KEYS: ``tokenizer_path``, ``glue.path``, ``task.train_file``)
# or whose value is one (a ``/`` in it: ``distill.teacher=runs/...``, a hub dataset), and none of the
# data-source groups (SOURCE_GROUPS: source, folder, synthetic size and seed, corpus size, held-out
# split) but the keys in them that shape the examples (SOURCE_RECIPE) and a corpus preset picked by
# its short name (``data=openwebtext``: a config-group choice, a word).
PATH_KEYS = ("path", "dir", "file", "files")
SOURCE_GROUPS = ("data", "glue", "squad")
SOURCE_RECIPE = ("data", "data.examples", "data.line_by_line", "squad.max_len", "squad.doc_stride")


def names_data_source(key: str, value: object) -> bool:
    """Whether override ``key=value`` says where data comes from (see PATH_KEYS, SOURCE_GROUPS)."""
    text = str(value)
    if key.rsplit(".", 1)[-1].endswith(PATH_KEYS) or "/" in text or "\\" in text:
        return True
    return key.split(".", 1)[0] in SOURCE_GROUPS and key not in SOURCE_RECIPE


def named_overrides(overrides: list[str]) -> list[tuple[str, object]]:
    """(key, value) of the overrides a run name shows: not UNNAMED, not an execution key
    (run_names.EXECUTION_KEYS: logging, devices, outputs), not where data comes from
    (:func:`names_data_source`), not a deletion."""
    out = []
    for o in parse_overrides(list(overrides)):
        key = override_key(o).split("@")[0]
        execution = any(key == k or key.startswith(f"{k}.") for k in EXECUTION_KEYS)
        if o.is_delete() or key in UNNAMED or execution or names_data_source(key, o.value()):
            continue
        out.append((key, o.value()))
    return out


def variant_tokens(overrides: list[str]) -> list[str]:
    """The name tokens (``kernel_size9``) of a sweep variant's overrides: what differs from the
    sweep's base."""
    return [name_token(k, v) for k, v in named_overrides(overrides)]


def command_tokens(cfg: DictConfig) -> list[str]:
    """The name tokens of the overrides a command was given (``cfg.invocation``) whose values
    differ from the defaults: from the same command composed with only its UNNAMED overrides
    (preset, task, scale...), so ``model.kernel_size=9`` on a preset whose kernel is 9 names nothing."""
    given = list((cfg.get("invocation") or {}).get("overrides") or [])
    named = named_overrides(given)
    if not named:
        return []
    kept = [o for o, p in zip(given, parse_overrides(given)) if override_key(p) in UNNAMED]
    try:
        base = compose_stage(cfg.stage, kept)
    except UserError:  # the defaults alone do not compose (a key the command needs): name them all
        return [name_token(k, v) for k, v in named]
    choices, base_choices = cfg.get("choices") or {}, base.get("choices") or {}

    def differs(key: str) -> bool:
        if key in choices:  # a config group: the option picked
            return choices[key] != base_choices.get(key)
        return _plain(OmegaConf.select(cfg, key)) != _plain(OmegaConf.select(base, key))

    return [name_token(k, v) for k, v in named if differs(k)]


def _plain(value):
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def pretrain_run(cfg: DictConfig, tokens: list[str] | None = None) -> Run:
    """The run directory of a composed pre-training config (known before it runs): its recipe
    (conf/recipe/) is part of the composed config, so the id hashes every value the run uses.
    ``tokens``: the name's tokens (a sweep's); None: the command's (:func:`command_tokens`)."""
    slug = "-".join(filter(None, [cfg.model.name, cfg.objective.name, cfg.name]))
    hashed = cfg
    if cfg.get("init"):  # a run it continues by its id, not its path: the same id in any run store
        hashed = OmegaConf.merge(cfg, {"init": run_key(_identity(str(cfg.init)))})
    named = {"data.path": cfg.data.get("path"), "tokenizer.path": cfg.tokenizer.get("path")}
    named.update({f"data.parts.{i}.path": part.get("path") for i, part in enumerate(cfg.data.get("parts") or [])})
    inputs = input_digests(named)
    if inputs:  # local corpus or tokenizer files: their contents, not only their paths
        hashed = OmegaConf.create({**OmegaConf.to_container(hashed, resolve=True), "inputs": inputs})
    tokens = command_tokens(cfg) if tokens is None else tokens
    return Run.for_config(cfg.outputs, "pretrain", slug, hashed, tokens)


# The recipe keys of a composed fine-tuning config (conf/finetune.yaml, set by conf/protocol/) that
# every run's ``hp`` carries, under the same names; ``scalar_mix_lr`` too where the protocol has one.
RECIPE_KEYS = (
    "lr",
    "batch_size",
    "epochs",
    "warmup_fraction",
    "layerwise_lr_decay",
    "weight_decay",
    "adam_epsilon",
    "adam_betas",
    "grad_clip",
)


def model_size(cfg: DictConfig, hidden_size: int) -> str:
    """``base`` for an init model of hidden size >= ``cfg.base_width``, else ``small``: which entry
    of a recipe value given per size (``lr: {small: .., base: ..}``) applies."""
    return "base" if hidden_size >= cfg.base_width else "small"


def hyperparameters(cfg: DictConfig, hidden_size: int) -> list[dict]:
    """The settings of one task's runs, for an init model of ``hidden_size``: the composed recipe
    (conf/protocol/<protocol>.yaml and the command line) with each per-size value picked for the
    model's size, once, or once per combination of ``grid_values`` when ``grid`` is on."""
    size = model_size(cfg, hidden_size)
    keys = [*RECIPE_KEYS, *(["scalar_mix_lr"] if cfg.get("scalar_mix_lr") is not None else [])]
    hp = {}
    for key in keys:
        value = cfg[key]
        if isinstance(value, DictConfig):  # {small: .., base: ..}
            value = value[size]
        if value is None:
            raise UserError(
                f"{key}: task={cfg.task.name} has no value under protocol={cfg.protocol} "
                f"(conf/task/{cfg.task.name}.yaml); give {key}=... on the command line"
            )
        hp[key] = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    if not cfg.grid:
        return [hp]
    _check_grid_overrides(cfg)
    axes = {k: list(v) for k, v in cfg.grid_values.items()}
    return [{**hp, **dict(zip(axes, values))} for values in itertools.product(*axes.values())]


def _check_grid_overrides(cfg: DictConfig) -> None:
    """A value given on the command line that the grid would vary is refused (one line): the
    user meant that value, and the grid would silently replace it."""
    given = {override_key(o) for o in parse_overrides(list(cfg.get("invocation", {}).get("overrides", [])))}
    for key in cfg.grid_values:
        if key in given:
            raise UserError(
                f"{key}= is given but the grid (on at scale=paper for protocol={cfg.protocol}) varies "
                f"{key}: add grid=false to run your {key}, or set grid_values.{key}=[...]"
            )


@dataclasses.dataclass
class GlueRun:
    """One fine-tuning run of a GLUE invocation: (task, seed, hyper-parameters), its run directory,
    and the run it starts from (the same seed's MNLI run, for the intermediate tasks) or None."""

    task: str
    seed: int
    hp: dict
    run: Run
    run_cfg: dict  # what the run id hashes (rundirs.finetune_run)
    start: "GlueRun | None" = None


def glue_task_names(cfg: DictConfig) -> list[str]:
    """The tasks a GLUE invocation fine-tunes, in execution order: ``task=all`` / ``probing_all``
    are sets; MNLI comes first when the protocol starts the intermediate tasks from it."""
    names = list(TASK_SETS.get(cfg.task.name, [cfg.task.name]))
    if cfg.intermediate and "mnli" not in names and any(t in INTERMEDIATE for t in names):
        names = ["mnli", *names]  # the intermediate task runs first
    return names


def compose_finetune(
    overrides: list[str], cfg: DictConfig | None = None
) -> tuple[DictConfig, dict[str, DictConfig]]:
    """For the edges (the CLI, a sweep's node): the fine-tuning invocation's composed config (``cfg``
    where the caller has composed it already) and, for every other task it fine-tunes
    (``task=all``, MNLI first), the same command's config."""
    cfg = compose_stage("finetune", overrides) if cfg is None else cfg
    others = [t for t in glue_task_names(cfg) if t != cfg.task.name]
    return cfg, {t: compose_stage("finetune", [*overrides, f"task={t}"]) for t in others}


def glue_runs(
    cfg: DictConfig,
    init_slug: str,
    hidden_size: int,
    task_cfgs: Mapping[str, DictConfig],
    tokens: list[str] | None = None,
) -> list[GlueRun]:
    """Every run of a GLUE invocation, in execution order (MNLI before the tasks that start from it).

    ``task_cfgs``: the composed config of each task of :func:`glue_task_names` (``cfg`` itself for
    its own task may be left out). Needs only the init's name and width, not its weights:
    ``convexp ablate`` lays out fine-tunes of models that are not pre-trained yet, and ``convexp
    report`` finds them again. ``tokens``: the names' tokens (a sweep's); None: the command's."""
    tokens = command_tokens(cfg) if tokens is None else tokens
    intermediate = cfg.intermediate
    runs: list[GlueRun] = []
    mnli: dict[int, GlueRun] = {}
    for name in glue_task_names(cfg):
        tcfg = task_config(cfg, task_cfgs, name)
        for hp in hyperparameters(tcfg, hidden_size):
            for seed in cfg.seeds:
                start = mnli.get(seed) if intermediate and name in INTERMEDIATE else None
                grouped = {"group_by_length": True} if tcfg.get("group_by_length") else None  # off: older ids
                start_id = start.run.id if start else ""
                run, run_cfg = finetune_run(tcfg, init_slug, name, seed, hp, start_id, grouped, tokens)
                runs.append(GlueRun(name, seed, hp, run, run_cfg, start))
                if name == "mnli":
                    mnli.setdefault(seed, runs[-1])  # the first setting's run
    return runs


def task_config(cfg: DictConfig, task_cfgs: Mapping[str, DictConfig], name: str) -> DictConfig:
    """The composed config of task ``name`` of the invocation ``cfg``."""
    if cfg.task.name == name:
        return cfg
    if name not in task_cfgs:
        raise KeyError(f"no composed config for task {name!r} (compose one per glue_task_names(cfg))")
    return task_cfgs[name]


def probing_overrides(overrides: list[str]) -> list[str]:
    """`convexp finetune probing ARGS` as finetune overrides: task=all (the default) is the ten
    probing tasks (task=probing_all), protocol=bermo unless given, and at scale=paper BERMO's five
    seeds unless seeds= is given. A task that is not a probing task is refused."""
    parsed = parse_overrides(overrides)
    given = {override_key(o): o.value() for o in parsed}
    task = str(given.get("task", "all"))
    if task not in ("all", "probing_all", *PROBING_ORDER):
        raise UserError(
            f"task={task} is not a probing task; use task=all or one of: {', '.join(PROBING_ORDER)} "
            "(GLUE tasks: convexp finetune glue)"
        )
    out = [o for o, p in zip(overrides, parsed) if override_key(p) != "task"]
    out.append(f"task={'probing_all' if task == 'all' else task}")
    if "protocol" not in given:
        out.insert(0, "protocol=bermo")
    if "seeds" not in given and str(given.get("scale", given.get("finetune_scale", "paper"))) == "paper":
        out.append(f"seeds=[{','.join(map(str, BERMO_PROBING_SEEDS))}]")
    return out


# Bumped when what a fine-tuning run computes changes without a config key saying so, so that no
# earlier result is reused as if it were this one. 2: ELECTRA's layer-wise LR depths, the
# classifier head of the model family ([CLS] -> dropout -> linear for ELECTRA/ConvBERT), BERMO's
# per-layer mixing normalisation. 3: the learning-rate warm-up as Hugging Face's and ELECTRA's (step s at
# s/warmup, the first update at 0; it ran one step ahead).
FINETUNE_RECIPE = 3


def finetune_run(
    cfg: DictConfig,
    init_slug: str,
    task_name: str,
    seed: int,
    hp: dict,
    start_slug: str = "",
    extra: Mapping | None = None,
    tokens: list[str] = (),
) -> tuple[Run, dict]:
    """The run directory of one (task, seed, hyper-parameters) fine-tune, and what its id hashes
    (``extra``: more keys a task family adds, e.g. SQuAD's windows and data source; ``tokens``: the
    name's tokens). The init and the start run are hashed by :func:`run_names.run_key` of their names,
    so that their names' tokens never change this run's id.

    What the id hashes is a plain dict of plain values (the same JSON as the DictConfig it used to
    be: the same ids), and the part that depends on ``cfg`` alone is built once per composed config:
    a sweep plans one run per (task, seed, setting), thousands from a few configs."""
    run_cfg = {
        "stage": "finetune",
        "recipe": FINETUNE_RECIPE,
        "task": task_name,
        "seed": seed,
        "hp": hp,
        "init": run_key(init_slug),
        "from": run_key(start_slug),
        **_task_identity(cfg),
    }
    for k, v in (extra or {}).items():  # plain values, as the id hashes them
        run_cfg[k] = OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v
    inputs = input_digests(_local_inputs(run_cfg))
    if inputs:  # local data files: their contents, not only their paths (edited data, a new run)
        run_cfg["inputs"] = inputs
    mix = cfg.get("scalar_mix")
    bermo = {True: "bermo", False: "noscalarmix", None: None}[None if mix is None else bool(mix)]
    slug = "-".join(filter(None, [init_slug, bermo, task_name, f"s{seed}", cfg.name]))
    return Run.for_config(cfg.outputs, "finetune", slug, run_cfg, tokens), run_cfg


_IDENTITY: dict[int, tuple[DictConfig, dict]] = {}  # id(cfg) -> (cfg, its part of run ids)


def _task_identity(cfg: DictConfig) -> dict:
    """The keys of a fine-tuning run's id that depend on its composed config alone (copied: the
    caller adds its own). Cached per config object (kept alive by the cache, so an id is never
    another config's)."""
    hit = _IDENTITY.get(id(cfg))
    if hit is None or hit[0] is not cfg:
        if len(_IDENTITY) > 512:
            _IDENTITY.clear()
        hit = _IDENTITY[id(cfg)] = (cfg, _identity_of(cfg))
    return json.loads(json.dumps(hit[1]))  # a copy the caller may add to


def _identity_of(cfg: DictConfig) -> dict:
    d = {
        "glue": OmegaConf.to_container(cfg.glue) if "glue" in cfg else None,
        "max_len": cfg.task.max_len,
        "protocol": cfg.protocol,
        "precision": cfg.trainer.precision,
        "name": cfg.name,
        "logger": OmegaConf.to_container(cfg.logger),
        "trainer": {k: cfg.trainer[k] for k in ("accelerator", "num_workers", "log_every_n_steps")},
    }
    data = task_data(cfg.task)  # sample limits, a custom task's files: only when set (older ids stay)
    if data:
        d["task_data"] = data
    # pruning and distillation change a run only when they are on (older runs keep their ids)
    if cfg.pruning.method != "none":
        d["pruning"] = OmegaConf.to_container(cfg.pruning)
    if cfg.distill.teacher:
        teacher = run_key(_identity(cfg.distill.teacher))
        d["distill"] = {**OmegaConf.to_container(cfg.distill), "teacher": teacher}
    mix = cfg.get("scalar_mix")
    if mix is not None:  # BERMO's layer mixing added to (or removed from) the init model
        d["scalar_mix"] = bool(mix)
        if mix:  # the normalisation changes what the mix computes
            d["scalar_mix_norm"] = cfg.get("scalar_mix_norm", "per_layer")
    if cfg.get("both_orders"):  # the training pairs in both orders (off: older ids stay)
        d["both_orders"] = True
    if cfg.get("classifier"):  # a head other than the init model's
        d["classifier"] = cfg.classifier
    return json.loads(json.dumps(d))  # plain values, as the id hashes them


def _local_inputs(run_cfg: Mapping) -> dict:
    """The values of a fine-tuning run's id that may name local files or folders."""
    glue, squad, data = (run_cfg.get(k) or {} for k in ("glue", "squad", "task_data"))
    return {
        "glue.path": glue.get("path"),
        "squad.path": squad.get("path"),
        **{f"task.{k}": data.get(k) for k in custom.FILE_KEYS.values()},
    }


def _identity(path: str) -> str:
    """A teacher or a continued init by what it is: a run's id, or the checkpoint's absolute path
    (or hub name)."""
    from pathlib import Path

    p = Path(path)
    in_store = p.parent.parent.name == "runs"  # a run of the store, planned, maybe not run yet
    if in_store or (p / "model").is_dir() or (p / "metrics.json").exists():
        return p.resolve().name
    return str(p.resolve()) if p.exists() else path
