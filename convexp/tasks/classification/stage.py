"""`convexp finetune glue|probing`: fine-tune and evaluate on GLUE, SentEval probing or custom tasks,
several seeds.

One fine-tuning run = (task, seed, hyper-parameters): ``outputs/runs/finetune/<slug>-<hash>/``
holds metrics.json (dev metrics), predictions/ (dev and test), submission/ (the GLUE server's
files), checkpoints/ and model/ (the fine-tuned encoder, for intermediate-task initialisation);
see evaluate.py. One invocation = ``outputs/runs/glue/<slug>-<hash>/`` with summary.json and
submission.zip; see summary.py. The run directories are named before anything runs
(runs.py, the kind's ``plan``), from configs composed by the caller:
:func:`fine_tune` takes the invocation's config, one composed config per other task, the opened
init and the planned runs (kinds.py).

Here: the LightningModule (fine-tuning, optionally fine-pruning and distillation), the
LightningDataModule, one run, and the invocation's runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from ...store.checkpoint import Checkpoint, open_checkpoint
from .custom import custom_task
from .encoding import tokenize_task
from .loading import prepare_task
from .scores import compute_metrics
from .registry import Task, get_task, register
from ...errors import UserError
from ...models import ModelConfig, SequenceClassifier
from ...store.record import warn_if_other_version
from ...store.runs import Run, RunDiverged
from .evaluate import Padded, by_idx, eval_loader, evaluate_and_save
from .summary import write_summary
from ...store.rundirs import FinetuneRun
from .runs import task_config
from ...train.streams import training_loader
from ...train.finetune import FinetuneJob, Init, Trained, train_one
from ...train.weights import has_work
from ...train.accel import loader_workers
from ...train.task_module import TaskModule

COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "label", "idx")


# ----------------------------------------------------------------------------- Lightning module


class FinetuneModule(TaskModule):
    """Fine-tuning, optionally with fine-pruning (cfg.pruning: masks on the encoder's matrices,
    their threshold on the cubic schedule) and distillation from a frozen teacher (task_module.py).

    Builds what it trains: a SequenceClassifier of ``model_cfg`` with ``encoder_state`` loaded (a
    BERT pooler or BERMO's scalar mix missing from the start weights starts fresh), then the
    teacher from its checkpoint, then the pruning masks (in this order: the seeded initialisation
    of the head, a teacher's head and the mask scores does not change)."""

    def __init__(
        self, model_cfg: ModelConfig, task: Task, hp: dict, total_steps: int, seed: int,
        encoder_state: dict | None = None, teacher: Checkpoint | None = None, **settings,
    ):  # fmt: skip
        """``settings``: TaskModule's (pruning, prune_warmup, distill, fused_adamw)."""
        super().__init__(hp, total_steps, seed, **settings)
        self.task = task
        self.build(
            lambda: SequenceClassifier(model_cfg, task.num_labels), encoder_state,
            teacher, lambda ckpt: load_teacher(ckpt, task, model_cfg),
        )  # fmt: skip
        self._val: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        # (logits, labels, idx) of the validation after the last step: the run's dev predictions
        self.final_val: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @staticmethod
    def inputs(batch) -> tuple:
        return batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]

    def forward_batch(self, batch):
        """The model's output (with its loss) on a training batch (whether it has padding: the
        collate's host flag, so that a GPU step reads nothing back)."""
        return self.model(*self.inputs(batch), batch["labels"], padded=batch.get("padded"))

    def teacher_logits(self, batch) -> torch.Tensor:
        return self._teacher[0](*self.inputs(batch), padded=batch.get("padded")).logits

    def validation_step(self, batch, batch_idx):
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        self._val.append((out.logits.float().cpu(), batch["labels"].cpu(), batch["idx"].cpu()))

    def on_validation_epoch_end(self) -> None:
        if self._val:
            logits, labels, idx = by_idx(*(torch.cat(x) for x in zip(*self._val)))
            self._val = []
            if self.global_step == self.total_steps and not self.trainer.sanity_checking:
                self.final_val = (logits, labels, idx)
            for k, v in compute_metrics(self.task, logits, labels).items():
                self.log(f"val/{k}", v, prog_bar=True)
            self.log_remaining_weights()


def load_teacher(ckpt: Checkpoint, task: Task, student: ModelConfig) -> SequenceClassifier:
    """A frozen fine-tuned teacher of ``task`` (a convexp fine-tuning run or a HF checkpoint) that
    shares the student's vocabulary."""
    teacher = ckpt.classifier(task.num_labels, task.name)
    if teacher.encoder.cfg.vocab_size != student.vocab_size:
        raise UserError(
            f"{ckpt.name} has a vocabulary of {teacher.encoder.cfg.vocab_size} tokens, the student "
            f"{student.vocab_size}; teacher and student must share the tokenizer"
        )
    return teacher.eval().requires_grad_(False)


class FinetuneData(pl.LightningDataModule):
    """The train stream starts where the restored global step says (resumable; see streams.py);
    rows are padded to each batch's longest; with ``group_by_length`` a batch's rows have
    similar lengths. The dev split is read longest rows first, as many as fit the device's EVAL_TOKENS."""

    def __init__(
        self, train, dev, seed: int, batch_size: int, pad_id: int, num_workers: int, group_by_length: bool
    ):
        super().__init__()
        self.train, self.dev, self.seed = train, dev, seed
        self.batch_size, self.pad_id, self.num_workers = batch_size, pad_id, num_workers
        self.group_by_length = group_by_length

    def train_dataloader(self):
        return self.batches(self.trainer.global_step)

    def batches(self, start_step: int = 0):
        """The training batches after ``start_step`` steps (an endless loader)."""
        return training_loader(self.train, self.seed, COLUMNS, self.batch_size, self.group_by_length,
                               start_step, Padded(self.pad_id), self.num_workers)  # fmt: skip

    def val_dataloader(self):
        return eval_loader(self.dev, self.pad_id, self.trainer.strategy.root_device.type)


# ----------------------------------------------------------------------------- one run


def finetune_one(cfg: DictConfig, init: Init, planned: FinetuneRun, splits: dict) -> Run:
    """Fine-tune one planned GLUE / probing / custom run (train/finetune.py), or reuse it."""
    return train_one(cfg, init, planned, classification_job(cfg, init, planned, splits))


def classification_job(cfg: DictConfig, init: Init, planned: FinetuneRun, splits: dict) -> FinetuneJob:
    """A planned GLUE / probing / custom run's module, data and evaluation (train/finetune.py)."""
    task, seed, hp = get_task(planned.task), planned.seed, planned.hp
    train, pad = splits["train"], init.tokenizer.pad_id

    def module(total: int, pruning, prune_warmup: int, teacher) -> FinetuneModule:
        # the intermediate tasks start from the same seed's MNLI run; read here, dropped once loaded
        start = open_checkpoint(planned.start.run.dir, label="from").encoder_state if planned.start else init.take_state()
        settings = {"pruning": pruning, "prune_warmup": prune_warmup, "distill": cfg.distill,
                    "fused_adamw": cfg.trainer.fused_adamw}  # fmt: skip
        return FinetuneModule(init.model_cfg, task, hp, total, seed, start, teacher, **settings)

    def data() -> FinetuneData:
        group = bool(cfg.get("group_by_length", False))
        return FinetuneData(train, splits[task.dev_splits[0]], seed, hp["batch_size"], pad, loader_workers(cfg.trainer), group)

    def finish(module: FinetuneModule, trained: Trained) -> None:
        known = {task.dev_splits[0]: module.final_val} if module.final_val is not None else None
        evaluate_and_save(trained, task, splits, known)

    return FinetuneJob(len(train), True, module, data, finish)


# ----------------------------------------------------------------------------- an invocation


def fine_tune(
    cfg: DictConfig, task_cfgs: Mapping[str, DictConfig], init: Init, runs: list[FinetuneRun], summary: bool = True
) -> Path | None:
    """Fine-tune the planned runs (kinds.py ``plan``; finished runs are reused), task by task;
    aggregate; print the GLUE table. ``task_cfgs``: the composed config of each other task of
    the command (task=all, MNLI before the intermediate tasks).

    summary=False (a sweep's single run) skips the invocation summary; returns its directory."""
    import datasets

    datasets.disable_progress_bars()
    if cfg.task.name == "custom":  # a user's task: its config says what it is (custom.py)
        register(custom_task(cfg.task), replace=True)
    diverged: list[Run] = []
    for p in runs:
        if p.run.finished:
            warn_if_other_version(p.run)
    number = {id(p): i for i, p in enumerate(runs, 1)}
    announced = not summary  # a command says how many runs, once its first run's data is ready
    for name in dict.fromkeys(p.task for p in runs):
        todo = [p for p in runs if p.task == name and has_work(cfg, p)]  # or its weights are wanted
        if not todo:
            continue  # data is loaded only for tasks with work left
        tcfg = task_config(cfg, task_cfgs, name)
        task, raw = prepare_task(tcfg.task, tcfg.glue, tcfg.both_orders)
        splits = tokenize_task(
            task, raw, init.tokenizer, tcfg.task.max_len, Path(cfg.outputs) / "cache" / "glue"
        )
        for planned in todo:
            if planned.start and not planned.start.run.finished:
                raise UserError(f"{planned.start.run.dir} has not finished; it must run before {name}")
            if not announced:  # (a sweep's node is one run, announced by the sweep)
                print(runs_line(runs), flush=True)
                announced = True
            if summary and len(runs) > 1:
                settings = " ".join(f"{k} {_short(v)}" for k, v in planned.hp.items() if k in GRID_KEYS)
                print(f"run {number[id(planned)]}/{len(runs)}: {planned.task} seed {planned.seed}"
                      + (f", {settings}" if settings else "") + f" -> {planned.run.dir}", flush=True)  # fmt: skip
            try:
                finetune_one(tcfg, init, planned, splits)
            except RunDiverged as e:  # one seed diverging does not stop the others
                diverged.append(planned.run)
                said = str(e) if str(e).startswith(str(planned.run.dir)) else f"{planned.run.dir}: {e}"
                print(f"diverged: {said}", flush=True)
    if summary:
        by_task: dict = {}
        for p in runs:
            if p.run.finished:  # a diverged run has no result
                by_task.setdefault(p.task, {}).setdefault(p.seed, []).append(p.run)
        out = write_summary(cfg, init.slug, by_task) if by_task else None
    if diverged:
        raise RunDiverged(
            f"{len(diverged)} of {len(runs)} runs diverged ({', '.join(r.id for r in diverged)}); "
            "their status.json says where; lower the learning rate (a re-run refuses them; retry_diverged=true trains them again)"
        )
    return out if summary else None


GRID_KEYS = ("lr", "weight_decay", "epochs", "batch_size")  # what a grid's settings differ in


def _short(v) -> str:
    return f"{v:.0e}" if isinstance(v, float) and v < 1e-2 else str(v)


def runs_line(runs: list[FinetuneRun]) -> str:
    """How many runs a command makes, and why: "48 runs: rte x 3 seeds x 16 settings (lr 4 x
    weight_decay 2 x epochs 2); 0 finished, 48 to train"."""
    tasks = list(dict.fromkeys(p.task for p in runs))
    seeds = list(dict.fromkeys(p.seed for p in runs))
    values = {k: list(dict.fromkeys(p.hp.get(k) for p in runs)) for k in GRID_KEYS}
    varied = {k: len(v) for k, v in values.items() if len(v) > 1}
    settings = len({tuple(p.hp.get(k) for k in GRID_KEYS) for p in runs if p.task == tasks[0]})
    parts = [", ".join(tasks), f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}"]
    if settings > 1:
        parts.append(f"{settings} settings ({' x '.join(f'{k} {n}' for k, n in varied.items())})")
    done = sum(p.run.finished for p in runs)
    return f"{len(runs)} run{'s' if len(runs) > 1 else ''}: {' x '.join(parts)}; {done} finished, {len(runs) - done} to train"

