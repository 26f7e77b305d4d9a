"""`convexp finetune squad`: fine-tune and evaluate extractive question answering (SQuAD v1.1 / v2.0).

The GLUE stage's twin (tasks/classification/stage.py) for span extraction: the same run store (one run = task,
seed, hyper-parameters; id from rundirs.finetune_run, laid out by runs.py), resume, W&B
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
from torch.utils.data import DataLoader

from ... import pruning as pruner
from ...store.checkpoint import Checkpoint, CheckpointError, open_checkpoint
from .data import SquadError, load_squad
from .features import collate_squad, squad_features
from ...errors import UserError
from ...models import ModelConfig
from ...models.qa import QuestionAnswerer
from ...store.record import warn_if_other_version
from ...store.runs import Run
from ...train.accel import prepare_encoders
from ...train.common import step_seed
from ..classification.stage import Init, check_teacher, resolve_init
from ...store.rundirs import GlueRun
from .evaluate import evaluate_squad
from .runs import check_squad_config, qa_settings, squad_runs, squad_source
from ...train.streams import StreamSampler, training_stream
from ...train.task_module import TaskModule, finetune_trainer, schedule, train_attempt

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

    Builds, in this order (the seeded initialisation order of finetune.FinetuneModule): the
    QuestionAnswerer with ``encoder_state`` loaded, the teacher, the pruning masks."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        qa: dict,
        hp: dict,
        total_steps: int,
        seed: int,
        encoder_state: dict | None = None,
        pruning: DictConfig | None = None,
        prune_warmup: int = 0,
        teacher: Checkpoint | None = None,
        distill: DictConfig | None = None,
        fused_adamw="auto",
    ):
        super().__init__(hp, total_steps, seed, pruning, prune_warmup, distill, fused_adamw)
        self.qa = qa
        self.model = build_qa_model(model_cfg, qa)
        if encoder_state is not None:
            missing, unexpected = self.model.encoder.load_state_dict(encoder_state, strict=False)
            if unexpected or [k for k in missing if not k.startswith(("pooler.", "scalar_mix."))]:
                raise UserError(
                    f"init weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
                )
        self._teacher = [load_qa_teacher(teacher, qa, model_cfg)] if teacher is not None else []
        self.prune_model()

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
        }

    def training_step(self, batch, batch_idx):
        torch.manual_seed(step_seed(self.seed, batch["first_position"]))  # dropout, resumable
        multiplier = self.pruning_step()
        inputs = self._inputs(batch)
        out = self.model(**inputs)
        loss = out.loss
        if self._teacher:
            with torch.no_grad():
                teacher_out = self._teacher[0](**inputs)
            d = self.distill
            loss = pruner.distillation_loss(
                out.distillation_logits,
                teacher_out.distillation_logits,
                out.loss,
                d.alpha_ce,
                d.alpha_distil,
                d.temperature,
            )
        loss = self.regularized(loss, multiplier)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss


class WindowBatches:
    """collate: pad the windows to the batch's longest; keep the stream position for seeding."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        position = torch.stack([r.pop("position") for r in rows])
        rows = [{k: v.tolist() for k, v in r.items()} for r in rows]
        return {**collate_squad(rows, self.pad_id), "position": position, "first_position": int(position[0])}


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
        stream = training_stream(self.train, self.seed, COLUMNS, self.batch_size, self.group_by_length)
        return DataLoader(
            stream,
            batch_size=self.batch_size,
            sampler=StreamSampler(self.trainer.global_step * self.batch_size),
            collate_fn=WindowBatches(self.pad_id),
            num_workers=self.num_workers,
        )


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
    out = {
        "train": squad_features(train, tokenizer, **window),
        "dev_records": dev,
        "dev": squad_features(dev, tokenizer, **window),
    }
    if not out["train"] or not out["dev"]:
        raise SquadError(f"{cfg.task.name}: no training or dev questions left; check the data and sample limits")
    return out


# ----------------------------------------------------------------------------- one run


def squad_one(cfg: DictConfig, init: Init, planned: GlueRun, data: dict) -> Run:
    """Fine-tune and evaluate one planned SQuAD run, or reuse it when it has finished."""
    seed, hp, run, run_cfg = planned.seed, planned.hp, planned.run, planned.run_cfg
    if run.finished:
        return run
    run.refuse_diverged(cfg.retry_diverged)
    if run.last_checkpoint() and not cfg.resume:
        raise UserError(f"{run.dir} has an unfinished run; pass resume=true to continue it")
    if init.model_cfg.max_position_embeddings < run_cfg["qa"]["max_len"]:
        raise UserError(
            f"task max_len {run_cfg['qa']['max_len']} exceeds the model's {init.model_cfg.max_position_embeddings} "
            f"positions; pass squad.max_len={init.model_cfg.max_position_embeddings} (or a model trained longer)"
        )
    qa = dict(run_cfg["qa"])
    teacher = open_checkpoint(cfg.distill.teacher, label="distill.teacher") if cfg.distill.teacher else None
    with run.removed_on_refusal():
        run.dir.mkdir(parents=True, exist_ok=True)
        run.write_config(run_cfg)
        pl.seed_everything(seed, verbose=False)

        train = data["train"]
        steps_per_epoch, total, pruning, prune_warmup = schedule(cfg, len(train), hp)
        module = SquadModule(
            init.model_cfg, qa, hp, total, seed, init.take_state(), pruning, prune_warmup, teacher, cfg.distill,
            cfg.trainer.fused_adamw,
        )
        prepare_encoders(module.model, cfg.trainer, whole_step=False)  # gradient checkpointing, compile
        pad = init.tokenizer.pad_id
        group = bool(cfg.get("group_by_length", False))
        datamodule = SquadData(train, seed, hp["batch_size"], pad, cfg.trainer.num_workers, group)

        task = cfg.task.name
        trainer = finetune_trainer(cfg, run, hp, task, seed, total, steps_per_epoch, validate=False)

        def finish(seconds: float) -> None:
            evaluate_squad(
                run,
                module.model,
                qa,
                data["dev_records"],
                data["dev"],
                pad,
                hp,
                seconds,
                len(train) * hp["epochs"],
                pruning,
                init.tokenizer,
                task,
            )

        train_attempt(cfg, run, trainer, module, datamodule, finish, task=task, seed=seed)
    return run


# ----------------------------------------------------------------------------- an invocation


def run_squad(cfg: DictConfig) -> list[Run]:
    """Fine-tune every seed of the SQuAD task (finished runs are reused); print EM / F1."""
    check_squad_config(cfg)  # before the init is opened: a wrong task is the first thing to say
    if cfg.task.max_len is not None:  # e.g. a sweep's finetune.task.max_len meant for its GLUE tasks
        print(f"note: task.max_len={cfg.task.max_len} is GLUE's; SQuAD's windows: squad.max_len, squad.doc_stride")
    init = resolve_init(cfg)
    check_teacher(cfg)
    runs = squad_runs(cfg, init.slug, init.model_cfg.hidden_size)
    todo = [p for p in runs if not p.run.finished]
    for p in runs:
        if p.run.finished:
            warn_if_other_version(p.run)
    if todo:  # data is loaded only when there is work left
        data = squad_data(cfg, init.tokenizer)
        for planned in todo:
            squad_one(cfg, init, planned, data)
    print_squad(cfg.task.name, runs)
    return [p.run for p in runs]


def print_squad(task: str, runs: list[GlueRun]) -> None:
    """One line per seed: EM / F1 (v2.0: and the best-threshold F1), and the mean."""
    rows = []
    for p in runs:
        m = p.run.read_json("metrics.json") or {}
        dev = m.get("dev", {}).get("validation", {})
        rows.append((p.seed, dev.get("exact"), dev.get("f1"), dev.get("best_f1"), p.run.dir))
    for seed, em, f1, best, d in rows:
        extra = f"  best F1 {best:.2f}" if best is not None else ""
        print(f"{task} seed {seed}: EM {em:.2f}  F1 {f1:.2f}{extra}  ({Path(d).name})")
    if len(rows) > 1:
        em = sum(r[1] for r in rows) / len(rows)
        f1 = sum(r[2] for r in rows) / len(rows)
        print(f"{task} mean of {len(rows)} seeds: EM {em:.2f}  F1 {f1:.2f}")
