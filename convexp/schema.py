"""Structured configs: the types and ranges of the config nodes, checked when a command composes.

YAML says what the values are; these dataclasses say what they may be. A composed config is
checked against them before anything runs or any directory is made (``--cfg`` included), so
``model.kernel_size=abc``, ``trainer.max_steps=0`` or ``optim.lr=-1`` fails at once with one line
naming the key. ``0`` is never a stand-in for a default; the papers' values are in the config
(pre-training: ``conf/recipe/``). Checking never
changes the composed config (run ids are hashes of it): the typed copy is thrown away.
"""

from __future__ import annotations

import math
import os
import re
import signal
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError, UserError


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
    num_workers: int = 2
    deterministic: bool = False
    nonfinite_patience: int = 0  # non-finite steps in a row tolerated (AMP's skipped steps)
    lock_wait: float = 0.0  # seconds to wait for another process writing the same run
    requeue_signal: Optional[str] = "SIGUSR1"  # SLURM time-limit warning: checkpoint + requeue; null: off
    tf32: bool = True  # speed options: convexp/stages/accel.py
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
        if self.compile not in (False, True, "blocks", "step", "graphs"):
            raise ValueError(f"trainer.compile={self.compile}: use false, blocks (or true), step or graphs")
        if self.num_workers < 0:
            raise ValueError(f"trainer.num_workers={self.num_workers}: must be 0 (load in the main process) or more")
        lightning_values(self)


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


def lightning_values(t: TrainerSchema) -> None:
    """accelerator, strategy, precision and devices as Lightning accepts them: names from its own
    registries (``AcceleratorRegistry``, ``StrategyRegistry``) and its precision flags; whether the
    hardware is here is not asked (a sweep is planned on a login node for GPU jobs)."""
    from typing import get_args

    from lightning_fabric import connector
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import StrategyRegistry

    # convexp runs on CPUs and GPUs (stages/accel.py); "gpu" is Lightning's alias of the first GPU kind
    accelerators = ["auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators() & {"cpu", "cuda", "mps"})]
    choose("trainer.accelerator", t.accelerator, accelerators, "cpu")
    choose("trainer.strategy", t.strategy, ["auto", *StrategyRegistry.available_strategies()], "ddp")
    precisions = [str(v) for part in get_args(connector._PRECISION_INPUT) for v in get_args(part)]
    choose("trainer.precision", str(t.precision), list(dict.fromkeys(precisions)), "bf16-mixed")
    check_devices(t.devices)
    if t.accelerator == "cpu" and t.devices != "auto":  # Lightning's own parse (a CPU takes a count; GPU ids are checked where the GPUs are)
        from pytorch_lightning.accelerators import CPUAccelerator

        try:
            CPUAccelerator.parse_devices(t.devices)
        except (TypeError, ValueError) as e:
            raise ValueError(f"trainer.devices={t.devices!r} with trainer.accelerator=cpu: {e} e.g. trainer.devices=1") from e


def check_devices(devices) -> None:
    """Lightning's ``devices``: a count >= 1, -1 (all), "auto", or device ids (a list, or "0,1")."""
    ids = None
    if isinstance(devices, str) and devices != "auto":
        parts = [p.strip() for p in devices.split(",") if p.strip()]
        if parts and all(p.lstrip("-").isdigit() for p in parts):
            ids = [int(p) for p in parts]
            devices = ids[0] if len(ids) == 1 and "," not in str(devices) else ids
    ok = (
        devices == "auto"
        or (isinstance(devices, int) and not isinstance(devices, bool) and (devices >= 1 or devices == -1))
        or (isinstance(devices, (list, tuple)) and devices and len(set(devices)) == len(devices)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices))
    )
    if not ok:
        raise ValueError(
            f"trainer.devices={devices!r}: give a count >= 1, -1 (all), auto or device ids; "
            "e.g. trainer.devices=2 or trainer.devices=[0,1]"
        )


def choose(key: str, value, allowed, example) -> None:
    """``value`` must be one of ``allowed``: else one line naming the key, the choices and an example."""
    if value not in allowed:
        shown = ", ".join("null" if a is None else str(a) for a in allowed)
        raise ValueError(f"{key}={value!r}: choose one of {shown}; e.g. {key}={example}")


def non_negative(key: str, value) -> None:
    """``value`` must be a finite number >= 0."""
    in_range(key, value, 0, math.inf, high_open=True)


def in_range(key: str, value, low, high, *, low_open=False, high_open=False, none_means: str | None = None,
             example=None) -> None:
    """``value`` must be a finite number in the interval (``None`` only when ``none_means`` says what it is)."""
    if value is None and none_means:
        return
    outside = value is None or isinstance(value, bool) or not math.isfinite(value) or (
        value <= low if low_open else value < low) or (value >= high if high_open else value > high)
    if outside:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        hint = f" (null: {none_means})" if none_means else ""
        eg = f"; e.g. {key}={example}" if example is not None else ""
        raise ValueError(f"{key}={value}: must be in {interval}{hint}{eg}")


def positive(key: str, value, none_means: str | None = None) -> None:
    """``value`` must be a finite number > 0 (or None when ``none_means`` says what None is)."""
    if value is None and none_means:
        return
    if value is None or isinstance(value, bool) or not math.isfinite(value) or value <= 0 or value >= INT_LIMIT:
        hint = f" ({none_means})" if none_means else ""
        raise ValueError(f"{key}={value}: must be a number > 0{' and below 2**63' if value and value > 0 else ''}{hint}")


INT_LIMIT = 2**63  # what a step count or size can be (torch's int64, Lightning's step counter)


def count(key: str, value, low: int = 1, none_means: str | None = None) -> None:
    """``value`` must be a whole number >= ``low`` (below 2**63), or None where ``none_means`` says."""
    if value is None and none_means:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < INT_LIMIT:
        hint = f" (null: {none_means})" if none_means else ""
        raise ValueError(f"{key}={value}: must be a whole number >= {low}{hint}")


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
# (``base_width`` decides which applies: stages/rundirs.hyperparameters).
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
    grid: bool = False
    grid_values: Dict[str, List[Any]] = field(default_factory=dict)
    group_by_length: bool = True  # GLUE/probing training batches of rows of similar length
    checkpoint_every_s: float = 300.0  # fine-tuning's last.ckpt at most this often (0: every half epoch)
    malloc_mmap_threshold_mib: Optional[float] = 1.0  # stages/accel.heap_mmap_threshold; null: glibc's own
    scalar_mix: Optional[bool] = None
    scalar_mix_norm: str = "per_layer"
    classifier: Optional[str] = None
    resume: bool = True
    retry_diverged: bool = False

    def __post_init__(self) -> None:
        from .models.config import CLASSIFIERS
        from .models.scalar_mix import NORMS

        choose("scalar_mix_norm", self.scalar_mix_norm, NORMS, "layers")
        choose("classifier", self.classifier, (None, *CLASSIFIERS), "pooler")
        m = self.malloc_mmap_threshold_mib
        if m is not None and not 0 < m <= 32:
            raise ValueError(f"malloc_mmap_threshold_mib={m}: give MiB in (0, 32] (glibc's range), or null for glibc's own")
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


# --- the other config groups -------------------------------------------------------------------


@dataclass
class DataSchema:
    """``conf/data/``: the pre-training corpus (read by data/corpus.py and data/pretraining.py)."""

    source: str = "synthetic"
    path: Optional[str] = None
    name: Optional[str] = None
    split: str = "train"
    text_field: str = "text"
    streaming: bool = False
    num_docs: Optional[int] = None
    seed: int = 0
    max_docs: Optional[int] = None
    line_by_line: bool = False
    examples: str = "packed"
    cache: bool = True
    val_fraction: Optional[float] = None
    val_docs: Optional[int] = None
    val_split: Optional[str] = None

    def __post_init__(self) -> None:
        from .data.corpus import SOURCES
        from .data.packing import EXAMPLES

        choose("data.source", self.source, SOURCES, "wikitext103 (a preset: data=wikitext103)")
        choose("data.examples", self.examples, EXAMPLES, "sentence_pairs")
        count("data.num_docs", self.num_docs, none_means="every document")
        count("data.max_docs", self.max_docs, none_means="every document")
        count("data.val_docs", self.val_docs, none_means="val_fraction or val_split")
        in_range("data.val_fraction", self.val_fraction, 0, 1, low_open=True, high_open=True,
                 none_means="val_docs or val_split")


@dataclass
class TokenizerSchema:
    """``conf/tokenizer/``: trained (wordpiece, unigram) or an existing one (pretrained)."""

    kind: str = "wordpiece"
    vocab_size: Optional[int] = None
    lowercase: bool = True
    path: Optional[str] = None
    train_docs: Optional[int] = None

    def __post_init__(self) -> None:
        choose("tokenizer.kind", self.kind, ("wordpiece", "unigram", "pretrained"), "unigram")
        count("tokenizer.vocab_size", self.vocab_size, low=6, none_means="the file's (pretrained)")
        count("tokenizer.train_docs", self.train_docs, none_means="every training document")


@dataclass
class ObjectiveSchema:
    """``conf/objective/`` with the recipe's masking (conf/recipe/)."""

    name: str = "mlm"
    whole_word: bool = False
    pair_format: str = "pairs"
    mask_prob: float = 0.15
    replace_mask: float = 0.8
    replace_random: float = 0.1
    exact_count: bool = False
    max_predictions: Optional[int] = None
    generator_fraction: Optional[float] = None
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        from .data.packing import PAIR_FORMATS

        choose("objective.name", self.name, ("mlm", "electra"), "electra (objective=electra)")
        choose("objective.pair_format", self.pair_format, PAIR_FORMATS, "nsp")
        in_range("objective.mask_prob", self.mask_prob, 0, 1, low_open=True, high_open=True)
        in_range("objective.replace_mask", self.replace_mask, 0, 1)
        in_range("objective.replace_random", self.replace_random, 0, 1)
        if self.replace_mask + self.replace_random > 1:
            raise ValueError(
                f"objective.replace_mask + objective.replace_random = {self.replace_mask + self.replace_random}: "
                "the shares of [MASK] and random tokens must add up to at most 1; e.g. 0.8 and 0.1"
            )
        count("objective.max_predictions", self.max_predictions, none_means="no cap")
        in_range("objective.generator_fraction", self.generator_fraction, 0, 1, low_open=True,
                 none_means="the recipe's")
        non_negative("objective.gen_weight", self.gen_weight)
        non_negative("objective.disc_weight", self.disc_weight)
        positive("objective.temperature", self.temperature)


@dataclass
class LoggerSchema:
    """``conf/logger/``: Weights & Biases."""

    project: str = "convexp"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    mode: str = "auto"

    def __post_init__(self) -> None:
        choose("logger.mode", self.mode, ("auto", "online", "offline", "disabled"), "offline")


@dataclass
class TaskSchema:
    """``conf/task/``: a GLUE, probing, SQuAD or custom task; keys a kind of task lacks stay unset."""

    name: str = "?"
    max_len: Optional[int] = None
    epochs: Dict[str, Optional[int]] = field(default_factory=dict)
    batch_size: Dict[str, Optional[int]] = field(default_factory=dict)
    lr: Dict[str, Optional[float]] = field(default_factory=dict)
    intermediate_from: Optional[str] = None
    grid: Optional[bool] = None
    max_train_samples: Optional[int] = None
    max_eval_samples: Optional[int] = None
    version: Optional[str] = None  # SQuAD
    qa: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    train_file: Optional[str] = None  # task=custom (data/custom.py)
    validation_file: Optional[str] = None
    test_file: Optional[str] = None
    text_fields: List[str] = field(default_factory=list)
    label_field: Optional[str] = None
    num_labels: Optional[int] = None
    regression: bool = False

    def __post_init__(self) -> None:
        count("task.max_len", self.max_len, low=3, none_means="SQuAD's qa windows")
        for key in ("max_train_samples", "max_eval_samples"):
            count(f"task.{key}", getattr(self, key), none_means="all")
        for key in ("epochs", "batch_size"):
            for k, v in getattr(self, key).items():
                count(f"task.{key}.{k}", v, none_means="no value: give it on the command line")
        for k, v in self.lr.items():
            positive(f"task.lr.{k}", v, "no value: give lr= on the command line")
        count("task.num_labels", self.num_labels, low=2, none_means="regression, or not a custom task")
        if self.version is not None:
            choose("task.version", self.version, ("v1.1", "v2.0"), "v2.0")


@dataclass
class GlueSourceSchema:
    """``glue:`` of conf/finetune.yaml: where GLUE and the probing tasks come from (data/loading.py)."""

    source: str = "hub"
    path: Optional[str] = None
    seed: int = 0
    synthetic_size: int = 2000

    def __post_init__(self) -> None:
        from .data.loading import SOURCES

        choose("glue.source", self.source, SOURCES, "local glue.path=<GLUE folder>")
        count("glue.synthetic_size", self.synthetic_size, low=10)


@dataclass
class SquadSourceSchema:
    """``squad:`` of conf/finetune.yaml: where SQuAD comes from (data/squad.py) and its windows."""

    source: str = "hub"
    path: Optional[str] = None
    seed: int = 0
    synthetic_size: int = 2000
    max_len: Optional[int] = None
    doc_stride: Optional[int] = None

    def __post_init__(self) -> None:
        from .data.squad import SOURCES

        choose("squad.source", self.source, SOURCES, "local squad.path=<folder of the JSON files>")
        count("squad.synthetic_size", self.synthetic_size, low=10)
        count("squad.max_len", self.max_len, low=8, none_means="the protocol's")
        count("squad.doc_stride", self.doc_stride, none_means="the protocol's")
        if self.max_len is not None and self.doc_stride is not None and self.doc_stride >= self.max_len:
            raise ValueError(f"squad.doc_stride={self.doc_stride}: must be below squad.max_len={self.max_len}; e.g. 128 for 512")


@dataclass
class PruningSchema:
    """``conf/pruning/``: fine-pruning (pruning/); ``none`` has only ``method``."""

    method: str = "none"
    mask_scale: float = 0.0
    mask_init: str = "constant"
    score_lr: float = 1e-2
    initial_threshold: float = 1.0
    final_threshold: float = 1.0
    initial_warmup: int = 1
    final_warmup: int = 1
    warmup_steps: Optional[int] = None
    regularization: Optional[str] = None
    final_lambda: float = 0.0
    tasks: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from .pruning.masked import ALIASES, METHODS

        choose("pruning.method", self.method, ("none", *METHODS, *ALIASES), "topk (pruning=movement)")
        if self.method == "none":
            return
        choose("pruning.mask_init", self.mask_init, ("constant", "uniform", "kaiming"), "constant")
        choose("pruning.regularization", self.regularization, (None, "l1", "l0"), "l1")
        positive("pruning.score_lr", self.score_lr)
        # topk, magnitude, l0: the fraction of weights kept; sigmoid_threshold: tau on sigmoid(S)
        soft = ALIASES.get(self.method, self.method) == "sigmoid_threshold"
        for key in ("initial_threshold", "final_threshold"):
            in_range(f"pruning.{key}", getattr(self, key), 0, 1, low_open=not soft, high_open=soft, example=0.1)
        count("pruning.initial_warmup", self.initial_warmup, low=0)
        count("pruning.final_warmup", self.final_warmup, low=0)
        count("pruning.warmup_steps", self.warmup_steps, none_means="one epoch")
        non_negative("pruning.final_lambda", self.final_lambda)


@dataclass
class DistillSchema:
    """``distill:`` of conf/finetune.yaml: knowledge distillation from a fine-tuned teacher."""

    teacher: Optional[str] = None
    alpha_ce: float = 0.5
    alpha_distil: float = 0.5
    temperature: float = 2.0

    def __post_init__(self) -> None:
        non_negative("distill.alpha_ce", self.alpha_ce)
        non_negative("distill.alpha_distil", self.alpha_distil)
        positive("distill.temperature", self.temperature)


@dataclass
class LauncherSchema:
    """``conf/launcher/`` (``convexp ablate``): local, node or submitit; a launcher's keys only."""

    name: str = "local"
    workers: int = 1
    key: Optional[str] = None
    wait_s: float = 86400.0
    cluster: Optional[str] = None
    folder: Optional[str] = None
    partition: Optional[str] = None
    timeout_min: int = 4320
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: float = 32.0
    array_parallelism: int = 64
    additional: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        choose("launcher.name", self.name, ("local", "node", "submitit"), "submitit (launcher=submitit)")
        count("launcher.workers", self.workers)
        non_negative("launcher.wait_s", self.wait_s)
        choose("launcher.cluster", self.cluster, (None, "slurm", "local", "debug"), "slurm")
        for key in ("timeout_min", "nodes", "tasks_per_node", "cpus_per_task", "array_parallelism"):
            count(f"launcher.{key}", getattr(self, key))
        count("launcher.gpus_per_node", self.gpus_per_node, low=0)
        positive("launcher.mem_gb", self.mem_gb)


@dataclass
class AblateSchema:
    """The top-level keys of ``conf/ablate.yaml``: which part of a sweep runs, and how."""

    scale: str = "paper"
    variants: Any = None  # a name or a list of names
    tasks: Optional[List[str]] = None
    seeds: Any = None  # a seed or a list of them
    init: Optional[str] = None
    tflops: float = 100.0

    def __post_init__(self) -> None:
        positive("tflops", self.tflops)
        v = self.variants
        if v is not None and not (isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))):
            raise ValueError(f"variants={v!r}: give a variant name or a list of them; e.g. variants=[a,b]")
        for key in ("variants", "tasks", "seeds"):
            if getattr(self, key) == []:
                raise ValueError(f"{key}=[]: give at least one, or null for the sweep's")
        seeds = self.seeds if isinstance(self.seeds, list) else [] if self.seeds is None else [self.seeds]
        for s in seeds:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                raise ValueError(f"seeds={self.seeds!r}: seeds are whole numbers >= 0; e.g. seeds=[42,97]")


def typed(schema: type, node: DictConfig, where: str):
    """``node`` as an instance of dataclass ``schema``; a wrong type or unknown key is one line."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
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


def with_example(message: str, schema: type, where: str, key: str) -> str:
    """``message`` with ``; e.g. KEY=DEFAULT`` (the schema's default) when it has no example."""
    from dataclasses import MISSING, fields

    leaf = key[len(where) + 1:] if where and key.startswith(where + ".") else key
    f = next((f for f in fields(schema) if f.name == leaf), None)
    if "e.g." in message or f is None or f.default in (MISSING, None):
        return message
    return f"{message}; e.g. {key}={str(f.default).lower() if isinstance(f.default, bool) else f.default}"


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
    from .models import ModelConfig

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
