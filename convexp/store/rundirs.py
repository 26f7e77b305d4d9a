"""The run directories a stage command will make, named before any of them runs (no Lightning).

Run directories are named by hashes of what they compute, so the pre-training run of a config,
and every fine-tuning run of an invocation, can be found from the config alone: ``convexp
ablate`` lays out whole sweeps this way (cached, to resume, new) and ``convexp report`` finds the
results again. Here: the pre-training run (:func:`pretrain_run`), what a run name shows, and the
record of a planned fine-tuning run (:class:`FinetuneRun`); the fine-tuning runs themselves (their
tasks, hyper-parameters and ids) are planned in the task layer: tasks/finetune_runs.py (GLUE,
probing, custom tasks) and tasks/squad/runs.py.

A run's name also shows what varies (``+<key><value>`` tokens, convexp.store.run_names.run_name): for a sweep,
the variant's own overrides (the planner passes ``tokens``); for a command, the overrides it was
given whose values differ from the defaults (:func:`command_tokens`). The hash alone says which run
it is: the store finds a run by its hash whatever its name.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, ListConfig, OmegaConf

from ..config.compose import compose_stage, override_key, parse_overrides
from ..data.digests import input_digests
from ..errors import UserError
from ..models.parts import code_digests
from .run_names import EXECUTION_KEYS, name_token, run_key
from .runs import Run


# Overrides that no run name shows: the slug shows them (preset, objective, task, seeds, name, BERMO's
# mixing), or they say where a run starts, at which scale or under which protocol (the bundles the
# rest of the recipe comes from; the hash tells those runs apart), or how a fine-tune runs, not
# what it computes (not in its id, as run_names.EXECUTION_KEYS for pre-training).
UNNAMED = (
    *("model", "init_model", "objective", "name", "task", "seeds", "scalar_mix"),
    *("init", "scale", "finetune_scale", "protocol"),
    *("checkpoint_every_s", "malloc_mmap_threshold_mib", "keep_weights"),
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
        hashed = OmegaConf.merge(cfg, {"init": run_key(checkpoint_identity(str(cfg.init)))})
    named = {"data.path": cfg.data.get("path"), "tokenizer.path": cfg.tokenizer.get("path")}
    named.update({f"data.parts.{i}.path": part.get("path") for i, part in enumerate(cfg.data.get("parts") or [])})
    inputs = input_digests(named)
    hashed = OmegaConf.to_container(hashed, resolve=True)
    if inputs:  # local corpus or tokenizer files: their contents, not only their paths
        hashed["inputs"] = inputs
    code = code_digests(cfg.model)
    if code:  # a user's mixer or FFN: its source, not only its import path (the presets: none)
        hashed["code"] = code
    data = hashed.get("data") or {}
    for source in (data, *(data.get("parts") or [])):  # a revision left null: the ids made before revisions
        if isinstance(source, dict) and source.get("revision", "") is None:
            source.pop("revision")
    tokens = command_tokens(cfg) if tokens is None else tokens
    return Run.for_config(cfg.outputs, "pretrain", slug, hashed, tokens)


@dataclasses.dataclass
class FinetuneRun:
    """One planned fine-tuning run of any task (GLUE, probing, custom, SQuAD): (task, seed,
    hyper-parameters), its run directory, and the run it starts from (the same seed's MNLI run, for
    the intermediate tasks) or None. Planned by tasks/finetune_runs.py and tasks/squad/runs.py."""

    task: str
    seed: int
    hp: dict
    run: Run
    run_cfg: dict  # what the run id hashes (tasks/finetune_runs.finetune_run)
    start: "FinetuneRun | None" = None
    read_later: bool = False  # another run of the same command starts from its weights


def checkpoint_identity(path: str) -> str:
    """A teacher or a continued init by what it is: a run's id, or the checkpoint's absolute path
    (or hub name)."""
    from pathlib import Path

    p = Path(path)
    in_store = p.parent.parent.name == "runs"  # a run of the store, planned, maybe not run yet
    if in_store or (p / "model").is_dir() or (p / "metrics.json").exists():
        return p.resolve().name
    return str(p.resolve()) if p.exists() else path
