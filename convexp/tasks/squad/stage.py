"""`convexp finetune squad`: fine-tune and evaluate extractive question answering (SQuAD v1.1 / v2.0).

The GLUE stage's twin (tasks/classification/stage.py) for span extraction: the same run store (one run = task,
seed, hyper-parameters; id from tasks/finetune_runs.finetune_run, laid out by runs.py), resume, W&B
and CSV logging, seeds, fine-pruning and distillation (task_module.py). What differs: the model
is a :class:`~convexp.models.qa.QuestionAnswerer` with the protocol's head (ELECTRA's joint head
for protocol=convbert, BERT's independent one for protocol=bermo), training rows are windows of
the contexts (features.py), and evaluation decodes every dev window back to answer
text and scores it with the official metrics (evaluate.py).

Distillation on SQuAD, as Sanh et al.'s ``masked_run_squad.py``: the teacher (a convexp SQuAD run
with the same head and vocabulary) sees the same batch; its start and end logits
(``QAOutput.distillation_logits``; the joint head's end logits given the gold start) are the soft
targets.
"""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from ...store.checkpoint import Checkpoint, CheckpointError
from .data import SquadError, load_squad
from .features import cached_features, collate_squad
from ...errors import UserError
from ...models import ModelConfig
from ...models.qa import QuestionAnswerer
from ...store.record import warn_if_other_version
from ...store.runs import Run
from ...store.rundirs import FinetuneRun
from .evaluate import evaluate_squad
from .runs import qa_settings, squad_source
from ...train.streams import training_loader
from ...train.finetune import FinetuneJob, Init, Trained, train_one
from ...train.accel import loader_workers
from ...train.weights import has_work
from ...train.task_module import TaskModule

COLUMNS = (
    "input_ids",
    "token_type_ids",
    "context_mask",
    "start_position",
    "end_position",
    "is_impossible",
    "feature_index",
)


def build_qa_model(model_cfg: ModelConfig, qa: dict) -> QuestionAnswerer:
    """The protocol's question answerer: ELECTRA's joint head (beam = n_best; with the answerable
    classifier when ``qa["answerable"]``, ELECTRA's on v1.1 and v2.0 alike) or BERT's independent head."""
    if qa["head"] == "electra":
        return QuestionAnswerer(model_cfg, "electra", beam_size=qa["n_best"], answerable=qa["answerable"])
    return QuestionAnswerer(model_cfg, qa["head"])


def load_qa_teacher(ckpt: Checkpoint, qa: dict, student: ModelConfig) -> QuestionAnswerer:
    """A frozen fine-tuned SQuAD teacher: a convexp SQuAD run (or its model dir) with the same head
    and the student's vocabulary."""
    if not ckpt.is_convexp:
        raise CheckpointError(
            f"{ckpt.name} is a Hugging Face checkpoint; a SQuAD teacher must be a convexp SQuAD run "
            "(fine-tune it first with convexp finetune squad)"
        )
    if ckpt.model_cfg.vocab_size != student.vocab_size:
        raise UserError(
            f"{ckpt.name} has a vocabulary of {ckpt.model_cfg.vocab_size} tokens, the student "
            f"{student.vocab_size}; teacher and student must share the tokenizer"
        )
    teacher = build_qa_model(ckpt.model_cfg, qa)
    try:
        missing, unexpected = teacher.load_state_dict(ckpt.state, strict=False)
    except RuntimeError:  # a head of another shape
        missing, unexpected = ["head (shape)"], []
    if missing or unexpected:
        raise CheckpointError(
            f"{ckpt.name} is not a SQuAD model with the {qa['head']} head of {qa['version']} "
            f"(missing {missing[:2]}, unexpected {unexpected[:2]}); give a SQuAD run of the same protocol"
        )
    return teacher.eval().requires_grad_(False)


class SquadModule(TaskModule):
    """Span-extraction fine-tuning, optionally fine-pruned and distilled (see the module docstring).

    Builds, in this order (the seeded initialisation order of ``TaskModule.build``): the
    QuestionAnswerer with ``encoder_state`` loaded, the teacher, the pruning masks."""

    def __init__(
        self, model_cfg: ModelConfig, qa: dict, hp: dict, total_steps: int, seed: int,
        encoder_state: dict | None = None, teacher: Checkpoint | None = None, **settings,
    ):  # fmt: skip
        """``settings``: TaskModule's (pruning, prune_warmup, distill, fused_adamw)."""
        super().__init__(hp, total_steps, seed, **settings)
        self.qa = qa
        self.build(
            lambda: build_qa_model(model_cfg, qa), encoder_state,
            teacher, lambda ckpt: load_qa_teacher(ckpt, qa, model_cfg),
        )  # fmt: skip

    @staticmethod
    def _inputs(batch) -> dict:
        return {
            "input_ids": batch["input_ids"],
            "attention_mask": batch["attention_mask"],
            "token_type_ids": batch["token_type_ids"],
            "context_mask": batch["context_mask"],
            "start_positions": batch["start_positions"],
            "end_positions": batch["end_positions"],
            "is_impossible": batch["is_impossible"],
            "padded": batch.get("padded"),  # the collate's host flag: a GPU step reads nothing back
        }

    def forward_batch(self, batch):
        """The model's output (with its loss) on a training batch."""
        return self.model(**self._inputs(batch))

    @staticmethod
    def student_logits(out) -> torch.Tensor:
        return out.distillation_logits  # start and end logits: Sanh et al. distil both

    def teacher_logits(self, batch) -> torch.Tensor:
        return self._teacher[0](**self._inputs(batch)).distillation_logits


class WindowBatches:
    """collate: pad the windows to the batch's longest; keep the stream position for seeding and
    whether any window is padded (host values)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        position = torch.tensor([int(r["position"]) for r in rows])
        batch = collate_squad(rows, self.pad_id)
        padded = len({len(r["input_ids"]) for r in rows}) > 1  # on the host: no device read in the step
        return {**batch, "position": position, "first_position": int(position[0]), "padded": padded}


class SquadData(pl.LightningDataModule):
    """The training windows as a resumable stream (streams.py), with ``group_by_length`` windows of
    similar length in a batch (a context's last window is short; so are short contexts' only ones);
    evaluation runs after training."""

    def __init__(
        self, train: list[dict], seed: int, batch_size: int, pad_id: int, num_workers: int, group_by_length: bool
    ):
        super().__init__()
        self.train, self.seed, self.batch_size = train, seed, batch_size
        self.pad_id, self.num_workers, self.group_by_length = pad_id, num_workers, group_by_length

    def train_dataloader(self):
        return self.batches(self.trainer.global_step)

    def batches(self, start_step: int = 0):
        """The training batches after ``start_step`` steps (an endless loader)."""
        return training_loader(self.train, self.seed, COLUMNS, self.batch_size, self.group_by_length,
                               start_step, WindowBatches(self.pad_id), self.num_workers)  # fmt: skip


# ----------------------------------------------------------------------------- data


def squad_data(cfg: DictConfig, tokenizer) -> dict:
    """{"train": windows, "dev_records": questions, "dev": windows} of the invocation's task,
    with the task's sample limits (the first N questions)."""
    qa = qa_settings(cfg)
    records = load_squad(squad_source(cfg))
    train, dev = records["train"], records["validation"]
    if cfg.task.max_train_samples:
        train = train[: int(cfg.task.max_train_samples)]
    if cfg.task.max_eval_samples:
        dev = dev[: int(cfg.task.max_eval_samples)]
    window = {k: qa[k] for k in ("max_len", "doc_stride", "max_query_len", "stride_mode")}
    cache = Path(cfg.outputs) / "cache" / "squad"  # a sweep's fine-tunes of the task window it once
    out = {
        "train": cached_features(train, tokenizer, cache, **window),
        "dev_records": dev,
        "dev": cached_features(dev, tokenizer, cache, **window),
    }
    if not out["train"] or not out["dev"]:
        raise SquadError(f"{cfg.task.name}: no training or dev questions left; check the data and sample limits")
    return out


# ----------------------------------------------------------------------------- one run


def squad_one(cfg: DictConfig, init: Init, planned: FinetuneRun, data: dict) -> Run:
    """Fine-tune and evaluate one planned SQuAD run (train/finetune.py), or reuse it."""
    return train_one(cfg, init, planned, squad_job(cfg, init, planned, data))


def squad_job(cfg: DictConfig, init: Init, planned: FinetuneRun, data: dict) -> FinetuneJob:
    """A planned SQuAD run's module, windows and evaluation (train/finetune.py)."""
    seed, hp, qa = planned.seed, planned.hp, dict(planned.run_cfg["qa"])
    train, pad, task = data["train"], init.tokenizer.pad_id, cfg.task.name

    def check() -> None:
        if init.model_cfg.max_position_embeddings < qa["max_len"]:
            raise UserError(
                f"task max_len {qa['max_len']} exceeds the model's {init.model_cfg.max_position_embeddings} "
                f"positions; pass squad.max_len={init.model_cfg.max_position_embeddings} (or a model trained longer)"
            )

    def module(total: int, pruning, prune_warmup: int, teacher) -> SquadModule:
        settings = {"pruning": pruning, "prune_warmup": prune_warmup, "distill": cfg.distill,
                    "fused_adamw": cfg.trainer.fused_adamw}  # fmt: skip
        return SquadModule(init.model_cfg, qa, hp, total, seed, init.take_state(), teacher, **settings)

    def windows() -> SquadData:
        group = bool(cfg.get("group_by_length", False))
        return SquadData(train, seed, hp["batch_size"], pad, loader_workers(cfg.trainer), group)

    def finish(module: SquadModule, trained: Trained) -> None:
        evaluate_squad(trained, qa, data["dev_records"], data["dev"], task)

    return FinetuneJob(len(train), False, module, windows, finish, check)


# ----------------------------------------------------------------------------- an invocation


def fine_tune(cfg: DictConfig, init: Init, runs: list[FinetuneRun]) -> list[Run]:
    """Fine-tune the planned runs, one per seed (kind.py ``plan``; finished runs are reused);
    print EM / F1."""
    if cfg.task.max_len is not None:  # e.g. a sweep's finetune.task.max_len meant for its GLUE tasks
        print(f"note: task.max_len={cfg.task.max_len} is GLUE's; SQuAD's: squad.max_len, squad.doc_stride")
    todo = [p for p in runs if has_work(cfg, p)]  # or its weights are wanted
    for p in runs:
        if p.run.finished:
            warn_if_other_version(p.run)
    if todo:  # data is loaded only when there is work left
        data = squad_data(cfg, init.tokenizer)
        for planned in todo:
            squad_one(cfg, init, planned, data)
    print_squad(cfg.task.name, runs)
    return [p.run for p in runs]


def print_squad(task: str, runs: list[FinetuneRun]) -> None:
    """One line per seed: EM / F1 (v2.0: and the best-threshold F1), and the mean."""
    rows = []
    for p in runs:
        m = p.run.read_json("metrics.json") or {}
        dev = m.get("dev", {}).get("validation", {})
        rows.append((p.seed, dev.get("exact"), dev.get("f1"), dev.get("best_f1"), p.run.dir))
    for seed, em, f1, best, d in rows:
        extra = f"  best F1 {best:.2f}" if best is not None else ""
        line = f"{task} seed {seed}: EM {em:.2f}  F1 {f1:.2f}{extra}"
        name = f"({Path(d).name})"
        print(f"{line}  {name}" if len(line) + 2 + len(name) <= 80 else f"{line}\n  {name}")  # 80 columns
    if len(rows) > 1:
        em = sum(r[1] for r in rows) / len(rows)
        f1 = sum(r[2] for r in rows) / len(rows)
        print(f"{task} mean of {len(rows)} seeds: EM {em:.2f}  F1 {f1:.2f}")
