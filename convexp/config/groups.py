"""Structured configs of the config groups beyond the stage's own (``conf/data/``,
``conf/tokenizer/``, ``conf/objective/``, ``conf/logger/``, ``conf/task/``, ``conf/pruning/``,
``conf/launcher/``; the ``glue:``, ``squad:`` and ``distill:`` nodes of conf/finetune.yaml;
conf/ablate.yaml's own keys): types, ranges and choices, checked when a command composes
(:func:`convexp.schema.check_types`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .ranges import choose, count, in_range, non_negative, positive

# The choices of the task nodes below, declared here with the node that is checked against them; the
# task code that implements each choice imports them from here (a lower layer never asks a task).
EXAMPLES = ("packed", "sentence_pairs", "electra")  # data.examples: tasks/pretraining/packing.py
PAIR_FORMATS = ("pairs", "nsp", "sop", "single")  # objective.pair_format: tasks/pretraining/packing.py
GLUE_SOURCES = ("synthetic", "hub", "local", "disk")  # glue.source: tasks/classification/loading.py
SQUAD_SOURCES = ("synthetic", "hub", "local")  # squad.source: tasks/squad/data.py

@dataclass
class DataSchema:
    """``conf/data/``: the pre-training corpus (read by data/corpus.py and tasks/pretraining/pretraining.py)."""

    source: str = "synthetic"
    path: Optional[str] = None
    name: Optional[str] = None
    revision: Optional[str] = None  # hub: branch, tag or commit (data/hub.py)
    split: str = "train"
    text_field: str = "text"
    streaming: bool = False
    num_docs: Optional[int] = None
    seed: int = 0
    max_docs: Optional[int] = None
    line_by_line: bool = False
    examples: str = "packed"
    cache: bool = True
    num_proc: Any = "auto"  # a positive number of processes or auto (checked here)
    store_chunks: Any = True  # true or false: 0 or an empty value is refused (checked here)
    val_fraction: Optional[float] = None
    val_docs: Optional[int] = None
    val_split: Optional[str] = None
    parts: Optional[List[Any]] = None  # hub datasets read in turn (checked by data/corpus.py's _check_parts)

    def __post_init__(self) -> None:
        from ..data.corpus import SOURCES, check_store_chunks

        choose("data.source", self.source, SOURCES, "wikitext103 (a preset: data=wikitext103)")
        choose("data.examples", self.examples, EXAMPLES, "sentence_pairs")
        count("data.num_docs", self.num_docs, none_means="every document")
        if self.num_proc != "auto" and (type(self.num_proc) is not int or self.num_proc < 1):
            raise ValueError(f"data.num_proc={self.num_proc}: must be a whole number >= 1, or auto (the cores the run may use)")
        check_store_chunks(self.store_chunks)
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
    log_model: bool = False  # the final model/ (and a fine-tuning run's predictions/) as W&B artifacts

    def __post_init__(self) -> None:
        choose("logger.mode", self.mode, ("auto", "online", "offline", "disabled"), "offline")


@dataclass
class TaskSchema:
    """``conf/task/``: a GLUE, probing, SQuAD or custom task; keys a kind of task lacks stay unset."""

    name: str = "?"
    kind: Optional[str] = None  # squad, probing, a user's module (tasks/kind.py); unset: glue (convexp/tasks/__init__.py)
    max_len: Optional[int] = None
    epochs: Dict[str, Optional[int]] = field(default_factory=dict)
    batch_size: Dict[str, Optional[int]] = field(default_factory=dict)
    lr: Dict[str, Optional[float]] = field(default_factory=dict)
    intermediate_from: Optional[str] = None
    unordered: bool = False  # sentence order carries no meaning (MRPC, STS-B): protocol=convbert's both_orders
    grid: Optional[bool] = None
    max_train_samples: Optional[int] = None
    max_eval_samples: Optional[int] = None
    version: Optional[str] = None  # SQuAD
    qa: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    train_file: Optional[str] = None  # task=custom (tasks/classification/custom.py)
    validation_file: Optional[str] = None
    test_file: Optional[str] = None
    text_fields: List[str] = field(default_factory=list)
    label_field: Optional[str] = None
    num_labels: Optional[int] = None
    regression: bool = False
    options: Dict[str, Any] = field(default_factory=dict)  # a user's kind's own settings (tasks/kind.py)
    source: Optional[str] = None  # the conf/finetune.yaml node its data comes from; unset: its kind's (config/compose.py)

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
    """``glue:`` of conf/finetune.yaml: where the classification tasks' data comes from, GLUE's and the
    SentEval probing tasks' alike (tasks/classification/loading.py); a custom task reads its own
    files (``task.train_file`` ...). Named ``glue`` (node and class) as before: users' overrides
    (``glue.source=local``) and config files keep working, and errors name the class."""

    source: str = "hub"
    path: Optional[str] = None
    revision: Optional[str] = None  # hub: branch, tag or commit (data/hub.py)
    seed: int = 0
    synthetic_size: int = 2000

    def __post_init__(self) -> None:
        choose("glue.source", self.source, GLUE_SOURCES, "local glue.path=<GLUE folder>")
        count("glue.synthetic_size", self.synthetic_size)


@dataclass
class SquadSourceSchema:
    """``squad:`` of conf/finetune.yaml: where SQuAD comes from (tasks/squad/data.py) and its windows."""

    source: str = "hub"
    path: Optional[str] = None
    revision: Optional[str] = None  # hub: branch, tag or commit (data/hub.py)
    seed: int = 0
    synthetic_size: int = 2000
    max_len: Optional[int] = None
    doc_stride: Optional[int] = None

    def __post_init__(self) -> None:
        choose("squad.source", self.source, SQUAD_SOURCES, "local squad.path=<folder of the JSON files>")
        count("squad.synthetic_size", self.synthetic_size)
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
        from ..pruning.methods import ALIASES, METHODS

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
    workers: Any = 1  # a number, or auto (launcher=local: one per GPU slot, sweep/gpus.py)
    per_gpu: Any = 1  # launcher=local: jobs at once on one GPU, or auto (by estimated memory, sweep/gpus.py)
    gpu_ids: Optional[List[int]] = None  # launcher=local: the GPUs the sweep may use (null: all)
    key: Optional[str] = None
    wait_s: float = 86400.0
    cluster: Optional[str] = None
    folder: Optional[str] = None
    partition: Optional[str] = None
    timeout_min: int = 4320
    device: Optional[str] = None  # the card the measured rates are read for (sweep/rates.py; null: h100)
    # launcher=submitit: overrides of what each job asks for (null: its own request, sweep/requests.py)
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    tasks_per_node: Optional[int] = None
    cpus_per_task: Optional[int] = None
    mem_gb: Optional[int] = None
    array_parallelism: int = 64
    max_requeues: int = 100
    additional: Optional[Dict[str, Any]] = None
    poll_s: float = 60.0  # --follow
    gpus: Optional[int] = None  # --dry-run's wall-clock on the cluster (sweep/schedule.py)

    def __post_init__(self) -> None:
        choose("launcher.name", self.name, ("local", "node", "submitit"), "submitit (launcher=submitit)")
        if self.workers != "auto":
            if isinstance(self.workers, bool) or not isinstance(self.workers, int):
                raise ValueError(f"launcher.workers={self.workers}: give a number of workers (1 or more) or auto")
            count("launcher.workers", self.workers)
        if self.per_gpu != "auto":
            if isinstance(self.per_gpu, bool) or not isinstance(self.per_gpu, int):
                raise ValueError(
                    f"launcher.per_gpu={self.per_gpu}: give how many jobs may share a GPU (1 or more) or auto"
                )
            count("launcher.per_gpu", self.per_gpu)
        for i in self.gpu_ids or []:
            count("launcher.gpu_ids", i, low=0)
        if self.gpu_ids is not None and (not self.gpu_ids or len(set(self.gpu_ids)) != len(self.gpu_ids)):
            raise ValueError(f"launcher.gpu_ids={self.gpu_ids}: give distinct GPU indices, e.g. [0,1], or null for all")
        non_negative("launcher.wait_s", self.wait_s)
        choose("launcher.cluster", self.cluster, (None, "slurm", "local", "debug"), "slurm")
        for key in ("timeout_min", "array_parallelism"):
            count(f"launcher.{key}", getattr(self, key))
        for key in ("nodes", "tasks_per_node", "cpus_per_task", "mem_gb"):
            count(f"launcher.{key}", getattr(self, key), none_means="each job's own request")
        count("launcher.gpus_per_node", self.gpus_per_node, low=0, none_means="each job's own request")
        count("launcher.max_requeues", self.max_requeues, low=0)
        positive("launcher.poll_s", self.poll_s)
        count("launcher.gpus", self.gpus, none_means="no wall-clock estimate")
        choose("launcher.device", self.device, (None, "h100", "h200", "a100", "v100"), "h100")


@dataclass
class AdaptiveSchema:
    """``adaptive:`` of conf/ablate.yaml: adaptive seeds (convexp/sequential.py); off while ``looks``
    is null."""

    looks: Optional[List[int]] = None
    alpha: float = 0.05
    margin: float = 0.5
    budget: Optional[float] = None  # GPU-hours for the whole study (null: none)

    def __post_init__(self) -> None:
        if self.looks is not None:
            looks = list(self.looks)
            if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
                raise ValueError(
                    f"adaptive.looks={looks}: seeds per cell at each look, rising from at least 2; "
                    "e.g. adaptive.looks=[3,6,10] (null: the sweep's fixed seeds)"
                )
        if not 0 < self.alpha < 1:
            raise ValueError(f"adaptive.alpha={self.alpha}: a probability in (0, 1), e.g. 0.05")
        positive("adaptive.margin", self.margin, "a difference within ±margin points is equivalent; e.g. 0.5")
        positive("adaptive.budget", self.budget, "null: no budget, the looks' cap alone")


@dataclass
class AblateSchema:
    """The top-level keys of ``conf/ablate.yaml``: which part of a sweep runs, and how."""

    scale: str = "paper"
    variants: Any = None  # a name or a list of names
    tasks: Optional[List[str]] = None
    seeds: Any = None  # a seed or a list of them
    init: Optional[str] = None
    tflops: Optional[float] = None  # a stated rate instead of the measured one (sweep/rates.py)
    adaptive: AdaptiveSchema = field(default_factory=lambda: AdaptiveSchema())

    def __post_init__(self) -> None:
        positive("tflops", self.tflops, "null: the rates measured on launcher.device's card")
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
