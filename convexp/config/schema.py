"""Structured configs: the types and ranges of the config nodes, checked when a command composes.

YAML says what the values are; these dataclasses say what they may be. A composed config is
checked against them before anything runs or any directory is made (``--cfg`` included), so
``model.kernel_size=abc``, ``trainer.max_steps=0`` or ``optim.lr=-1`` fails at once with one line
naming the key. ``0`` is never a stand-in for a default; the papers' values are in the config
(pre-training: ``conf/recipe/``). Checking never
changes the composed config (run ids are hashes of it): the typed copy is thrown away.
"""

from __future__ import annotations

import functools
import math
import os
import re
import signal
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from ..errors import ConfigError, UserError
from .groups import (
    AblateSchema,
    DataSchema,
    DistillSchema,
    GlueSourceSchema,
    LauncherSchema,
    LoggerSchema,
    ObjectiveSchema,
    PruningSchema,
    SquadSourceSchema,
    TaskSchema,
    TokenizerSchema,
)
from .lightning import lightning_values
from .ranges import choose, positive


@dataclass
class TrainerSchema:
    """``conf/trainer/``: the Lightning Trainer and the loop around the step."""

    accelerator: str = "auto"
    devices: Any = 1  # a count, "auto", or a list of device ids
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    max_steps: Optional[int] = None
    steps_multiplier: float = 1.0
    batch_size: Optional[int] = None
    accumulate_grad_batches: int = 1
    val_every_n_steps: int = 10000
    val_batches: int = 50
    log_every_n_steps: int = 50
    checkpoint_every_n_steps: int = 10000
    num_workers: Any = 2  # loader processes; fine-tuning's auto: 0 on a CPU run, 2 on a GPU (train/accel.py)
    threads: Any = "auto"  # auto or a number of intra-op threads
    deterministic: bool = False
    nonfinite_patience: int = 0  # non-finite steps in a row tolerated (AMP's skipped steps)
    lock_wait: float = 0.0  # seconds to wait for another process writing the same run
    requeue_signal: Optional[str] = "SIGUSR1"  # SLURM time-limit warning: checkpoint + requeue; null: off
    tf32: bool = True  # speed options: convexp/train/accel.py
    fused_adamw: Any = "auto"  # auto, true or false
    pin_memory: Any = "auto"  # auto, true or false
    compile: Any = False  # false, true (= blocks), blocks, step or graphs
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        for key in ("max_steps", "batch_size"):
            positive(f"trainer.{key}", getattr(self, key), "null only where unused: fine-tuning")
        for key in ("num_nodes", "accumulate_grad_batches", "val_every_n_steps", "val_batches",
                    "log_every_n_steps", "checkpoint_every_n_steps", "steps_multiplier"):
            positive(f"trainer.{key}", getattr(self, key))
        if self.nonfinite_patience < 0 or self.lock_wait < 0:
            raise ValueError("trainer.nonfinite_patience and trainer.lock_wait must be 0 or more")
        if self.requeue_signal is not None and not isinstance(getattr(signal, self.requeue_signal, None), signal.Signals):
            raise ValueError(f"trainer.requeue_signal={self.requeue_signal}: not a signal name; use e.g. SIGUSR1 or null")
        for key in ("fused_adamw", "pin_memory"):
            if getattr(self, key) not in ("auto", True, False):
                raise ValueError(f"trainer.{key}={getattr(self, key)}: use auto, true or false")
        if self.compile not in (False, True, "blocks", "step", "graphs", "whole"):
            raise ValueError(f"trainer.compile={self.compile}: use false, blocks (or true), step, graphs or whole")
        w = self.num_workers
        if w != "auto" and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
            raise ValueError(f"trainer.num_workers={w}: must be 0 (load in the main process) or more, or auto")
        if self.threads != "auto" and (isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"trainer.threads={self.threads}: use auto or a number of threads (1 or more), e.g. trainer.threads=1")
        lightning_values(self.accelerator, self.strategy, self.precision, self.devices)


@dataclass
class OptimSchema:
    """``conf/optim/``: AdamW with linear warm-up and decay."""

    lr: Optional[float] = None
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_steps: int = 10000
    grad_clip: Optional[float] = 1.0

    def __post_init__(self) -> None:
        positive("optim.lr", self.lr, "null only where unused: fine-tuning")
        positive("optim.eps", self.eps)
        positive("optim.grad_clip", self.grad_clip, "null: no clipping")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"optim.weight_decay={self.weight_decay}: must be 0 or more")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps={self.warmup_steps}: must be 0 or more")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optim.betas={list(self.betas)}: two numbers in [0, 1)")


@dataclass
class RecipeSchema:
    """``conf/recipe/``: what names a pre-training recipe (its sources are the file's comments: not
    in the config, so editing them changes no run id); its values are the keys it sets (optim,
    trainer, objective, seq_len), typed there."""

    name: str = "?"
    generator_fraction: Optional[float] = None  # ELECTRA's generator hidden / discriminator hidden

    def __post_init__(self) -> None:
        g = self.generator_fraction
        if g is not None and not 0 < g <= 1:
            raise ValueError(f"recipe.generator_fraction={g}: must be in (0, 1] (null: no generator)")


# what pre-training cannot run without; the recipe sets them (conf/recipe/)
PRETRAIN_REQUIRED = ("optim.lr", "trainer.max_steps", "trainer.batch_size")


@dataclass
class PretrainSchema:
    """The top-level keys of ``conf/pretrain.yaml``."""

    stage: str = "pretrain"
    seed: int = 42
    seq_len: int = 128
    init: Optional[str] = None
    resume: bool = True
    retry_diverged: bool = False  # train a diverged run again (else it is refused: runs.py)
    name: Optional[str] = None
    outputs: str = "outputs"

    def __post_init__(self) -> None:
        positive("seq_len", self.seq_len)


# The recipe keys whose value may depend on the init model's size: a number, or {small: .., base: ..}
# (``base_width`` decides which applies: tasks/finetune_runs.hyperparameters).
SIZED_KEYS = ("lr", "epochs", "batch_size")
# The keys a grid (``grid_values``) may vary.
GRID_KEYS = ("lr", "weight_decay", "epochs", "batch_size", "warmup_fraction", "layerwise_lr_decay")


@dataclass
class FinetuneSchema:
    """The top-level keys of ``conf/finetune.yaml`` that are numbers or lists: the fine-tuning
    recipe (filled by ``conf/protocol/<protocol>.yaml``) and the seeds."""

    seeds: List[int] = field(default_factory=lambda: [42])
    base_width: int = 768
    lr: Any = None  # a number or {small, base}; null only for a task set (task=all: each task's own)
    epochs: Any = None
    batch_size: Any = None
    warmup_fraction: float = 0.1
    layerwise_lr_decay: float = 1.0
    weight_decay: float = 0.0
    adam_epsilon: float = 1e-6
    adam_betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: Optional[float] = None
    scalar_mix_lr: Optional[float] = None
    intermediate: bool = False
    both_orders: bool = False
    grid: bool = False
    grid_values: Dict[str, List[Any]] = field(default_factory=dict)
    group_by_length: bool = True  # GLUE/probing rows, SQuAD windows: training batches of similar length
    checkpoint_every_s: float = 300.0  # fine-tuning's last.ckpt at most this often (0: every half epoch)
    malloc_mmap_threshold_mib: Any = None  # MiB, or null: glibc's own (train/accel.heap_mmap_threshold)
    scalar_mix: Optional[bool] = None
    scalar_mix_norm: str = "per_layer"
    classifier: Optional[str] = None
    resume: bool = True
    retry_diverged: bool = False
    keep_weights: str = "auto"  # auto | all | none: which runs keep model/ (train/weights.py)

    def __post_init__(self) -> None:
        from ..models.config import CLASSIFIERS, NORMS

        choose("keep_weights", self.keep_weights, ("auto", "all", "none"), "none")
        choose("scalar_mix_norm", self.scalar_mix_norm, NORMS, "layers")
        choose("classifier", self.classifier, (None, *CLASSIFIERS), "pooler")
        m = self.malloc_mmap_threshold_mib
        number = isinstance(m, (int, float)) and not isinstance(m, bool)
        if m is not None and not (number and 0 < m <= 32):
            raise ValueError(f"malloc_mmap_threshold_mib={m}: give MiB in (0, 32] (glibc's range), or null for glibc's own (the default)")
        if self.checkpoint_every_s < 0:
            raise ValueError(f"checkpoint_every_s={self.checkpoint_every_s}: give seconds >= 0")
        if not self.seeds:
            raise ValueError("seeds=[]: give at least one seed, e.g. seeds=[42]")
        positive("base_width", self.base_width)
        for key in SIZED_KEYS:
            value = getattr(self, key)
            for size, v in (value.items() if isinstance(value, dict) else [("", value)]):
                where = f"{key}.{size}" if size else key
                if isinstance(value, dict) and size not in ("small", "base"):
                    raise ValueError(f"{where}: a size is small or base, e.g. {key}={{small: 1, base: 2}}")
                positive(where, v, "null: a task set's, each task gives its own")
                if key != "lr" and v is not None and v != int(v):
                    raise ValueError(f"{where}={v}: must be a whole number")
        d = self.layerwise_lr_decay
        if not 0 < d <= 1:
            raise ValueError(f"layerwise_lr_decay={d}: must be in (0, 1] (1: no layer-wise decay)")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay={self.weight_decay}: must be 0 or more")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction={self.warmup_fraction}: must be in [0, 1)")
        positive("adam_epsilon", self.adam_epsilon)
        positive("grad_clip", self.grad_clip, "null: no clipping")
        positive("scalar_mix_lr", self.scalar_mix_lr, "null: the encoder's rate")
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise ValueError(f"adam_betas={list(self.adam_betas)}: two numbers in [0, 1)")
        for key, values in self.grid_values.items():
            if key not in GRID_KEYS:
                raise ValueError(f"grid_values.{key}: not a grid key; use {', '.join(GRID_KEYS)}")
            if not values:
                raise ValueError(f"grid_values.{key}=[]: give at least one value")
            for v in values:
                if key == "weight_decay" and v == 0:
                    continue
                positive(f"grid_values.{key}", v)
        if self.grid and not self.grid_values:
            raise ValueError("grid=true but this protocol has no grid (grid_values is empty): the grid is "
                             "ConvBERT's (protocol=convbert), or give grid_values")


def typed(schema: type, node: DictConfig, where: str):
    """``node`` as an instance of dataclass ``schema``; a wrong type or unknown key is one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(_structured(schema), node))  # merge copies it
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or getattr(e, "key", None) or "?"
        key = f"{where}.{key}" if where else key
        first = str(e).strip().splitlines()[0]
        if "not in" in first:
            raise ConfigError(
                f"unknown {where} config key '{key}': check the spelling (--cfg prints every key)"
            ) from e
        if "is not a ListConfig" in first:
            raise ConfigError(f"{key}: expected a list, e.g. {key}=[1,2]") from e
        raise ConfigError(with_example(f"{key}: {first}", schema, where, key)) from e
    except (TypeError, ValueError) as e:  # the dataclass's own checks (ModelConfig.validate)
        if isinstance(e, UserError):
            raise
        message = str(e)
        named = re.match(r"([\w.]+)=", message)
        raise ConfigError(with_example(message, schema, where, named.group(1)) if named else message) from e


@functools.cache
def _structured(schema: type) -> DictConfig:
    """``OmegaConf.structured(schema)``, made once (a sweep's plan checks ~20 composed configs)."""
    return OmegaConf.structured(schema)


def with_example(message: str, schema: type, where: str, key: str) -> str:
    """``message`` with ``; e.g. KEY=VALUE`` (:func:`shown_example`) when it has no example."""
    leaf = key[len(where) + 1:] if where and key.startswith(where + ".") else key
    value = shown_example(schema, leaf)
    if "e.g." in message or value is None:
        return message
    return f"{message}; e.g. {key}={value}"


# an example of a type, for a key whose default (none, or ???) shows none
TYPE_EXAMPLES = {int: "8", float: "0.5", bool: "true"}


def shown_example(schema: type, name: str) -> str | None:
    """A value of ``schema``'s field ``name`` of its own type, as written on a command line: its
    default, else one of its type (``TYPE_EXAMPLES``); None for no such field or no such example."""
    import typing
    from dataclasses import MISSING, fields

    f = next((f for f in fields(schema) if f.name == name), None)
    if f is None:
        return None
    if f.default not in (MISSING, None):
        return str(f.default).lower() if isinstance(f.default, bool) else str(f.default)
    try:
        hint = typing.get_type_hints(schema)[name]
    except (NameError, TypeError):  # an annotation this module cannot resolve
        return None
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return TYPE_EXAMPLES.get(args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint)


def key_example(key: str) -> str | None:
    """:func:`shown_example` of a dotted key of a stage config: a group's (``objective.mask_prob``)
    or a top-level one (``seq_len``); None for a key no schema here types."""
    head, _, leaf = key.partition(".")
    if leaf:
        schemas = [GROUPS[head]] if head in GROUPS else []
    else:
        schemas = [PretrainSchema, FinetuneSchema, AblateSchema]
    return next((v for v in (shown_example(s, leaf or head) for s in schemas) if v is not None), None)


def check_label(key: str, value) -> None:
    """A value that becomes part of a run directory's name (``name=``, a preset's ``model.name``)
    is a file name: 1 to 100 printable characters (letters of any script, spaces inside), no path
    separator, no ``..``, not starting with ``.`` or ``-`` — nothing can climb out of the run store."""
    if value is None or not isinstance(value, str):
        return
    bad = (
        not value
        or len(value) > 100
        or value != value.strip()
        or value[0] in ".-"
        or ".." in value
        or any(c in "/\\" or unicodedata.category(c).startswith("C") for c in value)
    )
    if bad:
        raise ConfigError(
            f"{key}={value!r} is not a valid label: it names a run folder, so no '/', '\\', '..' or control "
            "characters, not starting with '.' or '-', at most 100 characters; e.g. name=lr3e-4"
        )


# every config group's schema, by its key in a composed stage config (or conf/ablate.yaml)
GROUPS = {
    "trainer": TrainerSchema,
    "optim": OptimSchema,
    "data": DataSchema,
    "tokenizer": TokenizerSchema,
    "objective": ObjectiveSchema,
    "logger": LoggerSchema,
    "task": TaskSchema,
    "glue": GlueSourceSchema,
    "squad": SquadSourceSchema,
    "pruning": PruningSchema,
    "distill": DistillSchema,
    "launcher": LauncherSchema,
}
# what a value that must be given (``???`` in the config) is, for the line that asks for it
REQUIRED = {
    "init": "the model to fine-tune: a convexp pretrain run dir, a Hugging Face dir or hub name, or none "
            "with model=<preset>; e.g. init=google/electra-small-discriminator",
    "data.path": "the corpus: a file or folder (data=files) or a hub dataset; e.g. data.path=corpus/",
    "tokenizer.path": "a tokenizer.json, vocab.txt or hub model; e.g. tokenizer.path=bert-base-uncased",
}


def check_types(cfg: DictConfig) -> None:
    """Check every typed node of a composed stage config (each group's schema, the stage's own
    keys), and what no type says: every required value given, names are names, the outputs folder
    can be made."""
    from ..models import ModelConfig

    missing = _first_missing(cfg)
    if missing:
        what = REQUIRED.get(missing, f"give {missing}=...")
        raise ConfigError(f"{missing} is required (the config leaves it ???): {what}")
    stage = {"pretrain": PretrainSchema, "finetune": FinetuneSchema}.get(cfg.get("stage"))
    own = typed(stage, _own(cfg, stage), "") if stage else None  # first: group values derive from them
    if "model" in cfg:
        typed(ModelConfig, cfg.model, "model")
    for key, schema in GROUPS.items():
        if key in cfg:
            typed(schema, cfg[key], key)
    if cfg.get("stage") == "pretrain":
        _check_recipe(cfg)
        if OmegaConf.select(cfg, "trainer.num_workers") == "auto":
            raise ConfigError("trainer.num_workers=auto is fine-tuning's; pre-training takes a number, e.g. 2")
        positions = OmegaConf.select(cfg, "model.max_position_embeddings")
        if positions is not None and own.seq_len > positions:
            raise ConfigError(
                f"seq_len={own.seq_len} exceeds the model's model.max_position_embeddings={positions}"
            )
    name = cfg.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"name={name!r} is not text: quote it, e.g. name='{name}'")
    for key, value in (("name", name), ("model.name", OmegaConf.select(cfg, "model.name"))):
        check_label(key, value)
    if "outputs" in cfg:
        check_outputs(cfg.outputs)


def init_none_problem(cfg: DictConfig) -> str | None:
    """What a fine-tuning config with ``init=none`` (a randomly initialised model) lacks, or None:
    asked by the CLI before it imports the stages, and by the stage itself (a config composed with
    ``init=none`` alone is a valid base for sweeps and tests)."""
    if str(cfg.get("init")) != "none":
        return None
    if not cfg.get("init_model"):
        return "init=none needs model=<preset> (a randomly initialised baseline); see `convexp models`"
    if not cfg.get("tokenizer_path"):
        return "init=none needs tokenizer_path=<tokenizer.json or vocab.txt>"
    return None


def check_sweep_settings(settings: DictConfig) -> None:
    """``convexp ablate``'s own settings (conf/ablate.yaml and its launcher), typed."""
    typed(AblateSchema, _own(settings, AblateSchema), "")
    typed(LauncherSchema, settings.launcher, "launcher")


def check_outputs(outputs) -> None:
    """The outputs folder is a folder, or can be made (nothing is made here)."""
    from pathlib import Path

    path = Path(str(outputs)).expanduser()
    fix = "set outputs= (or CONVEXP_OUTPUTS) to a folder you can write; e.g. outputs=~/convexp-outputs"
    if path.exists() and not path.is_dir():
        raise ConfigError(f"outputs {str(outputs)!r} is a file, not a folder: {fix}")
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"outputs {str(outputs)!r} cannot be made: {existing} is a file; {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"outputs {str(outputs)!r} cannot be written: no permission in {existing}; {fix}")


def _first_missing(cfg: DictConfig) -> str | None:
    """The first key (dotted) whose value is ``???``, or None."""
    for key in cfg:
        if OmegaConf.is_missing(cfg, key):
            return str(key)
        node = cfg._get_node(key)
        if isinstance(node, DictConfig):
            inner = _first_missing(node)
            if inner:
                return f"{key}.{inner}"
    return None


def _check_recipe(cfg: DictConfig) -> None:
    """A pre-training config has a recipe (the model preset names one) and every value it sets."""
    if "recipe" not in cfg:
        model = OmegaConf.select(cfg, "choices.model", default="?")
        raise ConfigError(
            f"model preset {model!r} names no pre-training recipe: add `- /recipe@_global_: NAME` to its "
            "defaults list, or pass +recipe@_global_=NAME (the recipes: convexp/conf/recipe/)"
        )
    typed(RecipeSchema, cfg.recipe, "recipe")
    for key in PRETRAIN_REQUIRED:
        if OmegaConf.select(cfg, key) is None:
            raise ConfigError(f"{key}=null: pre-training needs a value (recipe {cfg.recipe.name} sets it; give {key}=...)")
    if cfg.objective.name == "electra" and cfg.objective.get("generator_fraction") is None:
        raise ConfigError(
            f"recipe {cfg.recipe.name} has no generator (recipe.generator_fraction=null): give "
            "objective.generator_fraction=... (ELECTRA: 0.25; 1/3 for base) or use objective=mlm"
        )


def _own(cfg: DictConfig, schema: type) -> DictConfig:
    """The stage's top-level keys that ``schema`` types."""
    from dataclasses import fields

    return OmegaConf.masked_copy(cfg, [f.name for f in fields(schema) if f.name in cfg])
