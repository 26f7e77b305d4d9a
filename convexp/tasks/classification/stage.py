"""`convexp finetune glue|probing`: fine-tune and evaluate on GLUE (or SentEval) tasks, several seeds.

One fine-tuning run = (task, seed, hyper-parameters): ``outputs/runs/finetune/<slug>-<hash>/``
holds metrics.json (dev metrics), predictions/ (dev and test), submission/ (the GLUE server's
files), checkpoints/ and model/ (the fine-tuned encoder, for intermediate-task initialisation);
see evaluate.py. One invocation = ``outputs/runs/glue/<slug>-<hash>/`` with summary.json and
submission.zip; see summary.py. The run directories are named before anything runs
(store/rundirs.py), from configs composed by the caller: :func:`run_glue` takes the invocation's config
and one composed config per task.

Here: where fine-tuning starts (:func:`resolve_init`), the LightningModule (fine-tuning, optionally
fine-pruning and distillation), the LightningDataModule, one run, and the invocation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ... import pruning as pruner
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
from ...train.accel import prepare_encoders
from ...train.common import step_seed
from .evaluate import Padded, by_idx, eval_loader, evaluate_and_save
from .summary import write_summary
from ...store.rundirs import GlueRun, glue_runs, task_config
from ...train.streams import StreamSampler, training_stream
from ...train.task_module import TaskModule, finetune_trainer, schedule, train_attempt

COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "label", "idx")


# ----------------------------------------------------------------------------- init model


@dataclasses.dataclass
class Init:
    """Where fine-tuning starts: a model config, encoder weights (or None) and a tokenizer.

    ``state`` holds the weights read when the checkpoint was opened until the first run takes
    them (:meth:`take_state`); later runs (other seeds, tasks) read them again from ``ref``, so
    that no copy of the start weights is held while a model trains."""

    model_cfg: ModelConfig
    state: dict | None
    tokenizer: object
    slug: str
    ref: str | None = None

    def take_state(self) -> dict | None:
        """The encoder's start weights (None: random initialisation), for one run to load."""
        if self.ref is None:
            return None
        state, self.state = self.state, None
        return state if state is not None else open_checkpoint(self.ref).encoder_state


def resolve_init(cfg: DictConfig) -> Init:
    """``init=`` (a checkpoint, see :func:`convexp.store.checkpoint.open_checkpoint`, or ``none`` with
    ``model=<preset>``), the tokenizer (``tokenizer_path=`` or the checkpoint's own) and
    ``scalar_mix=`` (BERMO's layer mixing added to or removed from any model)."""
    from ...config.compose import model_config
    from ...data.tokenizer import Tokenizer
    from ...config.schema import init_none_problem

    init = str(cfg.init)
    tok_path = cfg.tokenizer_path
    if init == "none":
        problem = init_none_problem(cfg)  # the CLI asks it too, before importing the stages
        if problem:
            raise UserError(problem)
        tok = Tokenizer.load(tok_path)
        mc = dataclasses.replace(
            model_config(cfg.init_model), vocab_size=tok.vocab_size, pad_token_id=tok.pad_id
        )
        return Init(mc, None, tok, f"{cfg.init_model}-random")
    ckpt = open_checkpoint(init)
    mc = ckpt.model_cfg
    tok = Tokenizer.load(tok_path or ckpt.tokenizer_path or ckpt.path)
    if cfg.get("scalar_mix") is not None and bool(cfg.scalar_mix) != mc.scalar_mix:  # BERMO on any model
        mc = dataclasses.replace(mc, scalar_mix=bool(cfg.scalar_mix))
    if cfg.get("scalar_mix") and cfg.get("scalar_mix_norm"):  # BERMO mixing added here: its normalisation
        mc = dataclasses.replace(mc, scalar_mix_norm=cfg.scalar_mix_norm)
    if cfg.get("classifier"):  # e.g. classifier=hf: Hugging Face's head on an ELECTRA/ConvBERT encoder
        mc = dataclasses.replace(mc, classifier=cfg.classifier)
    if tok.vocab_size != mc.vocab_size:
        raise UserError(
            f"the tokenizer has {tok.vocab_size} tokens but init={init} has a vocabulary of {mc.vocab_size}; "
            "use the model's own tokenizer"
        )
    return Init(mc, ckpt.encoder_state, tok, ckpt.slug, init)


# ----------------------------------------------------------------------------- Lightning module


class FinetuneModule(TaskModule):
    """Fine-tuning, optionally with fine-pruning (cfg.pruning: masks on the encoder's matrices,
    their threshold on the cubic schedule) and distillation from a frozen teacher (task_module.py).

    Builds what it trains: a SequenceClassifier of ``model_cfg`` with ``encoder_state`` loaded (a
    BERT pooler or BERMO's scalar mix missing from the start weights starts fresh), then the
    teacher from its checkpoint, then the pruning masks (in this order: the seeded initialisation
    of the head, a teacher's head and the mask scores does not change)."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        task: Task,
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
        self.task = task
        self.model = SequenceClassifier(model_cfg, task.num_labels)
        if encoder_state is not None:
            missing, unexpected = self.model.encoder.load_state_dict(encoder_state, strict=False)
            # a BERT pooler missing from an ELECTRA-style checkpoint starts fresh; nothing else may
            if unexpected or [k for k in missing if not k.startswith(("pooler.", "scalar_mix."))]:
                raise UserError(
                    f"init weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
                )
        self._teacher = [load_teacher(teacher, task, model_cfg)] if teacher is not None else []  # not saved
        self.prune_model()
        self._val: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        # (logits, labels, idx) of the validation after the last step: the run's dev predictions
        self.final_val: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def training_step(self, batch, batch_idx):
        torch.manual_seed(step_seed(self.seed, batch["first_position"]))  # dropout, resumable
        multiplier = self.pruning_step()
        inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        out = self.model(*inputs, batch["labels"])
        loss = out.loss
        if self._teacher:
            with torch.no_grad():
                teacher_logits = self._teacher[0](*inputs).logits
            d = self.distill
            loss = pruner.distillation_loss(
                out.logits, teacher_logits, out.loss, d.alpha_ce, d.alpha_distil, d.temperature
            )
        loss = self.regularized(loss, multiplier)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

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
        stream = training_stream(self.train, self.seed, COLUMNS, self.batch_size, self.group_by_length)
        return DataLoader(
            stream,
            batch_size=self.batch_size,
            sampler=StreamSampler(self.trainer.global_step * self.batch_size),
            collate_fn=Padded(self.pad_id),
            num_workers=self.num_workers,
        )

    def val_dataloader(self):
        return eval_loader(self.dev, self.pad_id, self.trainer.strategy.root_device.type)


# ----------------------------------------------------------------------------- one run


def check_teacher(cfg: DictConfig) -> None:
    """A bad ``distill.teacher`` fails before any data is prepared or run directory made."""
    if cfg.distill.teacher:
        open_checkpoint(cfg.distill.teacher, label="distill.teacher", weights=False)


def finetune_one(cfg: DictConfig, init: Init, planned: GlueRun, splits: dict) -> Run:
    """Fine-tune one planned run, or reuse it when it has finished."""
    task_name, seed, hp, run, run_cfg = planned.task, planned.seed, planned.hp, planned.run, planned.run_cfg
    task = get_task(task_name)
    if run.finished:
        return run
    run.refuse_diverged(cfg.retry_diverged)
    if run.last_checkpoint() and not cfg.resume:
        raise UserError(f"{run.dir} has an unfinished run; pass resume=true to continue it")
    # opened before any file is written; its classifier is built by the module after the student (seeded order)
    teacher = open_checkpoint(cfg.distill.teacher, label="distill.teacher") if cfg.distill.teacher else None
    with run.removed_on_refusal():
        run.dir.mkdir(parents=True, exist_ok=True)
        run.write_config(run_cfg)
        pl.seed_everything(seed, verbose=False)

        train = splits["train"]
        steps_per_epoch, total, pruning, prune_warmup = schedule(cfg, len(train), hp)
        module = FinetuneModule(
            init.model_cfg,
            task,
            hp,
            total,
            seed,
            # the intermediate tasks start from the same seed's MNLI run; read here, dropped once loaded
            open_checkpoint(planned.start.run.dir, label="from").encoder_state
            if planned.start
            else init.take_state(),
            pruning,
            prune_warmup,
            teacher,
            cfg.distill,
            cfg.trainer.fused_adamw,
        )
        prepare_encoders(module.model, cfg.trainer, whole_step=False)  # gradient checkpointing, compile
        pad = init.tokenizer.pad_id
        group = bool(cfg.get("group_by_length", False))
        data = FinetuneData(
            train, splits[task.dev_splits[0]], seed, hp["batch_size"], pad, cfg.trainer.num_workers, group
        )

        trainer = finetune_trainer(cfg, run, hp, task_name, seed, total, steps_per_epoch, validate=True)

        def finish(seconds: float) -> None:
            evaluate_and_save(
                run,
                module.model,
                task,
                splits,
                pad,
                hp,
                seconds,
                len(train) * hp["epochs"],
                pruning,
                init.tokenizer,
                known={task.dev_splits[0]: module.final_val} if module.final_val is not None else None,
            )

        train_attempt(cfg, run, trainer, module, data, finish, task=task_name, seed=seed)
    return run


# ----------------------------------------------------------------------------- a GLUE invocation


def check_max_len(model_cfg: ModelConfig, cfgs) -> None:
    """task.max_len must fit the model's position table (models without absolute positions have
    none); refused before anything is written."""
    if not model_cfg.absolute_positions:
        return
    for c in cfgs:
        if c.task.max_len > model_cfg.max_position_embeddings:
            raise UserError(
                f"task.max_len={c.task.max_len} ({c.task.name}) exceeds the model's "
                f"max_position_embeddings={model_cfg.max_position_embeddings}; lower task.max_len"
            )


def run_glue(cfg: DictConfig, task_cfgs: Mapping[str, DictConfig], summary: bool = True) -> Path | None:
    """Fine-tune every requested task and seed (finished runs are reused); aggregate; print the
    GLUE table. ``task_cfgs``: the composed config of each task of ``rundirs.glue_task_names(cfg)``
    (the same command for another task: task=all, MNLI before the intermediate tasks).

    summary=False (a sweep's single run) skips the invocation summary; returns its directory."""
    import datasets

    datasets.disable_progress_bars()
    init = resolve_init(cfg)
    check_teacher(cfg)
    check_max_len(init.model_cfg, [cfg, *task_cfgs.values()])
    if cfg.task.name == "custom":  # a user's task: its config says what it is (custom.py)
        register(custom_task(cfg.task), replace=True)
    runs = glue_runs(cfg, init.slug, init.model_cfg.hidden_size, task_cfgs)
    diverged: list[Run] = []
    for p in runs:
        if p.run.finished:
            warn_if_other_version(p.run)
    for name in dict.fromkeys(p.task for p in runs):
        todo = [p for p in runs if p.task == name and not p.run.finished]
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
