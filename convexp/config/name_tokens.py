"""The name tokens of a run (``+<key><value>``, store/run_names.py): which of the overrides it was
given a run's name shows. For a sweep, the variant's own overrides (:func:`variant_tokens`: what
differs from the sweep's base); for a command, those whose values differ from the defaults
(:func:`command_tokens`: the command composed again with only the overrides no name shows). The hash
alone says which run it is: the store finds a run by its hash whatever its name."""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig, OmegaConf

from ..errors import UserError
from ..store.run_names import EXECUTION_KEYS, name_token
from .compose import compose_stage, override_key, parse_overrides


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
