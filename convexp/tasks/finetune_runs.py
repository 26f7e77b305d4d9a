"""What every kind of fine-tuning task plans its runs with (no Lightning), shared below the task
folders: the hyper-parameters of a task's runs (the composed protocol, and the ConvBERT grid) and
the run directories, whose ids hash what each run computes (:func:`finetune_run`).

Each kind plans its own runs in its folder with these: classification/runs.py (GLUE, probing and
custom tasks: task sets, MNLI before the tasks that start from it), squad/runs.py (SQuAD: its
windows and source in the id), a user's kind alike. What a run name shows, the pre-training run is
tasks/pretraining/runs.py, the record of a planned run store/rundirs.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf

from ..config.compose import model_config, override_key, parse_overrides
from ..data.digests import input_digests
from ..errors import UserError
from ..models.parts import code_digests
from ..store.rundirs import checkpoint_identity
from ..store.run_names import SharedHash, run_key
from ..store.runs import Run

SAMPLE_KEYS = ("max_train_samples", "max_eval_samples")  # task.<key>: the first N rows (null: every row)


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
    model's size, once, or once per combination of ``grid_values`` when ``grid`` is on (a value
    the command line gives as well is refused by the command's check: :func:`check_grid`)."""
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
    axes = {k: list(v) for k, v in cfg.grid_values.items()}
    return [{**hp, **dict(zip(axes, values))} for values in itertools.product(*axes.values())]


def check_grid(cfg: DictConfig) -> None:
    """With ``grid`` on, a value given on the command line that the grid would vary is refused (one
    line): the user meant that value, and the grid would silently replace it. The commands' check."""
    if not cfg.get("grid"):
        return
    given = {override_key(o) for o in parse_overrides(list(cfg.get("invocation", {}).get("overrides", [])))}
    for key in cfg.grid_values:
        if key in given:
            raise UserError(
                f"{key}= is given but the grid (on at scale=paper for protocol={cfg.protocol}) varies "
                f"{key}: add grid=false to run your {key}, or set grid_values.{key}=[...]"
            )


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
    be: the same ids). Many runs of one config: :class:`RunNamer`."""
    return RunNamer(cfg, extra).run(init_slug, task_name, seed, hp, start_slug, tokens)


class RunNamer:
    """:func:`finetune_run` for the runs of one composed config (and ``extra``): what their ids and
    names share (the config's keys, ``extra``, the local inputs' digests, the slug's tail) is worked
    out and serialised once; each run adds its own keys. A sweep plans one run per (task, seed,
    setting), thousands from a few configs."""

    def __init__(self, cfg: DictConfig, extra: Mapping | None = None):
        shared = _task_identity(cfg)
        for k, v in (extra or {}).items():  # plain values, as the id hashes them
            shared[k] = OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v
        inputs = input_digests(_local_inputs(shared))
        if inputs:  # local data files: their contents, not only their paths (edited data, a new run)
            shared["inputs"] = inputs
        self.shared = shared
        self.hash = SharedHash(shared)
        mix = cfg.get("scalar_mix")
        self.bermo = {True: "bermo", False: "noscalarmix", None: None}[None if mix is None else bool(mix)]
        self.name = cfg.name
        self.outputs = cfg.outputs

    def run(
        self, init_slug: str, task_name: str, seed: int, hp: dict, start_slug: str = "", tokens: list[str] = ()
    ) -> tuple[Run, dict]:
        own = {
            "stage": "finetune",
            "recipe": FINETUNE_RECIPE,
            "task": task_name,
            "seed": seed,
            "hp": hp,
            "init": run_key(init_slug),
            "from": run_key(start_slug),
        }
        run_cfg = {**own, **_plain_copy(self.shared)}  # a copy the caller may change
        slug = "-".join(filter(None, [init_slug, self.bermo, task_name, f"s{seed}", self.name]))
        return Run.for_digest(self.outputs, "finetune", slug, self.hash.digest(own), tokens), run_cfg


def _plain_copy(value):
    """A copy of nested plain dicts and lists (their leaves are immutable)."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


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
    glue = OmegaConf.to_container(cfg.glue) if "glue" in cfg else None
    if glue and glue.get("revision", "") is None:  # left null: the ids runs had before revisions existed
        glue.pop("revision")
    d = {
        "glue": glue,
        "max_len": cfg.task.max_len,
        "protocol": cfg.protocol,
        "precision": cfg.trainer.precision,
        "name": cfg.name,
        "logger": OmegaConf.to_container(cfg.logger),
        "trainer": {k: cfg.trainer[k] for k in ("accelerator", "num_workers", "log_every_n_steps")},
    }
    data = sample_limits(cfg.task)  # only when set (older ids stay); a kind adds its own (extra=)
    if data:
        d["task_data"] = data
    # pruning and distillation change a run only when they are on (older runs keep their ids)
    if cfg.pruning.method != "none":
        d["pruning"] = OmegaConf.to_container(cfg.pruning)
    if cfg.distill.teacher:
        teacher = run_key(checkpoint_identity(cfg.distill.teacher))
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
    if cfg.get("init_model") and str(cfg.init) == "none":  # init=none names its preset, not its contents:
        code = code_digests(model_config(cfg.init_model))  # a user's mixer or FFN adds its source
        if code:
            d["code"] = code
    return json.loads(json.dumps(d))  # plain values, as the id hashes them


def sample_limits(task_cfg) -> dict:
    """The task's sample limits that are set (``SAMPLE_KEYS``): part of its runs' ids."""
    return {k: task_cfg.get(k) for k in SAMPLE_KEYS if task_cfg.get(k) is not None}


def _local_inputs(run_cfg: Mapping) -> dict:
    """The values of a fine-tuning run's id that may name local files or folders: the data
    sources' paths and the task's ``*_file`` keys (a custom task's files)."""
    glue, squad, data = (run_cfg.get(k) or {} for k in ("glue", "squad", "task_data"))
    return {
        "glue.path": glue.get("path"),
        "squad.path": squad.get("path"),
        **{f"task.{k}": v for k, v in data.items() if k.endswith("_file")},
    }
