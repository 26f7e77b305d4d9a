"""The task-independent part of fine-tuning: fine-pruning, distillation and the optimiser.

:class:`TaskModule` is the LightningModule base of every fine-tuning stage (GLUE/probing
classification in tasks/classification/stage.py, SQuAD span extraction in tasks/squad/stage.py). A subclass builds
``self.model`` (an encoder under ``model.encoder`` plus a head), ``self._teacher`` (a list
holding a frozen teacher or nothing, so the teacher is not saved) and the pruning masks with
:meth:`build`, and says what a training batch's loss is (``forward_batch``) and what its teacher's
logits are (``teacher_logits``); the training step, with distillation and the pruning penalty, is
written once here.

Fine-pruning (cfg.pruning: masks on the encoder's matrices, their threshold on Sanh et al.'s
cubic schedule, an optional L0 / L1 penalty ramped with the schedule) is evaluated at the final
threshold. The optimiser: AdamW with linear warm-up and decay, ELECTRA's layer-wise learning-rate
decay, BERMO's scalar-mix rate, and the mask scores' own rate (no weight decay).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.callbacks import ModelCheckpoint

from .. import pruning as pruner
from ..errors import UserError
from ..store.checkpoint import Checkpoint
from ..store.record import write_record
from ..store.runs import Run
from .accel import fused_adamw, heap_mmap_threshold, kept_word_grad, on_cuda, set_threads
from .common import (
    OptimizerStep,
    adamw_with_linear_schedule,
    cluster_plugins,
    finish_wandb,
    layerwise_groups,
    make_loggers,
    seed_step,
    step_seed,
)
from .clock import StepClock
from .health import Health, fit
from .progress import refresh_every, step_progress


class TaskModule(OptimizerStep, pl.LightningModule):
    """Fine-tuning state shared by the task stages (see the module docstring)."""

    def build(
        self,
        model: Callable[[], torch.nn.Module],
        encoder_state: dict | None,
        teacher: Checkpoint | None,
        load_teacher: Callable[[Checkpoint], torch.nn.Module],
    ) -> None:
        """Build what the stage trains, in the seeded initialisation order (a head, a teacher's head
        and the mask scores start the same for a given seed): ``self.model = model()`` with
        ``encoder_state`` loaded (:meth:`load_encoder`), then ``self._teacher``: ``[load_teacher(teacher)]``
        (frozen; in a list, so that it is not saved) or ``[]`` without a teacher, then the pruning masks
        (:meth:`prune_model`)."""
        self.model = model()
        self.load_encoder(encoder_state)
        self._teacher = [load_teacher(teacher)] if teacher is not None else []
        self.prune_model()

    # --- the training step: the task's loss, distilled from a teacher and regularised when asked

    def forward_batch(self, batch):
        """The model's output on a training batch, with ``.loss`` (the subclass's)."""
        raise NotImplementedError

    @staticmethod
    def student_logits(out) -> torch.Tensor:
        """What a teacher's logits are compared with in ``out`` (SQuAD: start and end)."""
        return out.logits

    def teacher_logits(self, batch) -> torch.Tensor:
        """The frozen teacher's logits on ``batch``, shaped as :meth:`student_logits` (the subclass's)."""
        raise NotImplementedError

    def training_step(self, batch, batch_idx):
        """One update's loss: the task's (:meth:`forward_batch`), mixed with the teacher's soft
        targets under distillation (Sanh et al.: ``alpha_ce`` x KL at ``temperature`` + ``alpha_distil``
        x the task's), plus the pruning penalty; dropout seeded by the batch's stream position, so a
        resumed run draws what the uninterrupted one would."""
        seed_step(step_seed(self.seed, batch["first_position"]), self.device)
        multiplier = self.pruning_step()
        out = self.forward_batch(batch)
        loss = out.loss
        if self._teacher:
            with torch.no_grad():
                teacher = self.teacher_logits(batch)
            d = self.distill
            loss = pruner.distillation_loss(
                self.student_logits(out), teacher, out.loss, d.alpha_ce, d.alpha_distil, d.temperature
            )
        loss = self.regularized(loss, multiplier)
        self.log_step("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def load_encoder(self, encoder_state: dict | None) -> None:
        """The start weights into ``self.model.encoder`` (None: keep the random initialisation). A
        BERT pooler or BERMO's scalar mix missing from them starts fresh; nothing else may."""
        if encoder_state is None:
            return
        missing, unexpected = self.model.encoder.load_state_dict(encoder_state, strict=False)
        if unexpected or [k for k in missing if not k.startswith(("pooler.", "scalar_mix."))]:
            raise UserError(f"init weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")

    def __init__(
        self,
        hp: dict,
        total_steps: int,
        seed: int,
        pruning: DictConfig | None = None,
        prune_warmup: int = 0,
        distill: DictConfig | None = None,
        fused_adamw="auto",
    ):
        super().__init__()
        self.hp, self.total_steps, self.seed = hp, total_steps, seed
        self.fused_adamw = fused_adamw  # trainer.fused_adamw
        self.pruning, self.prune_warmup, self.distill = pruning, prune_warmup, distill
        self._teacher: list = []
        self._word_grad: torch.Tensor | None = None  # the kept word-embedding gradient (on_fit_start)
        self._word_rows: list[torch.Tensor] = []  # the rows backward wrote since it was last zeroed
        self._word_hook = None

    def on_fit_start(self) -> None:
        """On one CPU process (``accel.kept_word_grad``), the word embedding's gradient is one dense
        buffer for the whole fit: the lookup's backward is sparse (the batch's rows) and adds into
        it, and :meth:`optimizer_zero_grad` zeroes the rows the last window wrote. The same sums and
        the same dense gradient for clipping and AdamW, without a fresh [V, D] tensor each step.
        A table tied to another weight (an output layer) gets dense gradients: the default there."""
        self.keep_word_grad(kept_word_grad(self.device.type, self.trainer.world_size))

    def keep_word_grad(self, keep: bool) -> None:
        """:meth:`on_fit_start`'s kept word gradient where ``keep`` (and the table is not tied)."""
        self._release_word_grad()  # a fit before this one that raised kept it
        word = self.model.encoder.embeddings.word
        tied = sum(p is word.weight for _, p in self.model.named_parameters(remove_duplicate=False)) > 1
        if keep and word.weight.requires_grad and not tied:
            word.sparse = True
            self._word_grad = torch.zeros_like(word.weight)
            word.weight.grad = self._word_grad
            self._word_hook = word.weight.register_hook(self._note_word_rows)

    def _note_word_rows(self, grad: torch.Tensor) -> None:
        """The lookup's sparse gradient, before it is added into the buffer: note its rows."""
        self._word_rows.append(grad._indices()[0])

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer) -> None:
        """Lightning's call before each accumulation window's first backward: the gradients freed
        (``OptimizerStep`` freed them after the step already), and the kept word gradient put back
        with the rows the last window wrote zeroed (a few hundred of its 30,522: no 47 MB fill)."""
        optimizer.zero_grad(set_to_none=True)
        if self._word_grad is not None:
            if self._word_rows:
                self._word_grad.index_fill_(0, torch.cat(self._word_rows), 0.0)
                self._word_rows.clear()
            self.model.encoder.embeddings.word.weight.grad = self._word_grad

    def on_fit_end(self) -> None:
        """The model leaves the fit as it came: a dense lookup, no gradient held."""
        self._release_word_grad()

    def _release_word_grad(self) -> None:
        if self._word_grad is not None:
            word = self.model.encoder.embeddings.word
            self._word_hook.remove()
            word.sparse, word.weight.grad, self._word_grad, self._word_hook = False, None, None, None
            self._word_rows.clear()

    def log_step(self, name: str, value, **kwargs) -> None:
        """``self.log`` of a training value on the steps whose logs are written: every
        ``log_every_n_steps`` and the last. Lightning's logging of a value costs about a millisecond
        of the step's loop on a CPU; the progress bar shows the value logged last (on a GPU it reads
        it at the same steps)."""
        step = self.global_step + 1  # this step's, as Lightning's loggers count it
        if step % self.trainer.log_every_n_steps == 0 or step >= self.trainer.max_steps:
            self.log(name, value, **kwargs)

    def prune_model(self) -> None:
        """Put the masks on ``self.model``: after the start weights are loaded and the teacher is
        built (the seeded initialisation order), before the optimiser."""
        if self.pruning is not None:
            p = self.pruning
            pruner.prune(self.model, p.method, mask_scale=p.mask_scale, mask_init=p.mask_init)

    def threshold(self) -> tuple[float, float]:
        """(mask threshold, regularisation multiplier) at this step (Sanh et al.'s cubic schedule)."""
        p = self.pruning
        return pruner.cubic_threshold(
            self.global_step,
            self.total_steps,
            self.prune_warmup,
            p.initial_threshold,
            p.final_threshold,
            p.initial_warmup,
            p.final_warmup,
        )

    def pruning_step(self) -> float:
        """Set this step's mask threshold; the regularisation multiplier (0 without pruning)."""
        if self.pruning is None:
            return 0.0
        t, multiplier = self.threshold()
        pruner.set_threshold(self.model, t)
        self.log_step("train/threshold", t)
        return multiplier

    def regularized(self, loss: torch.Tensor, multiplier: float) -> torch.Tensor:
        """loss + λ · multiplier · (L0 or L1 of the mask scores), when the pruning method has one."""
        if self.pruning is not None and self.pruning.regularization:
            reg = pruner.regularization(self.model, self.pruning.regularization)
            loss = loss + self.pruning.final_lambda * multiplier * reg
            self.log_step("train/regularization", reg)
        return loss

    def on_validation_epoch_start(self) -> None:
        if self.pruning is not None:  # evaluated at the final threshold, as the reference does
            pruner.set_threshold(self.model, self.pruning.final_threshold)

    def log_remaining_weights(self) -> None:
        if self.pruning is not None:
            self.log("val/remaining_weights", 100 * pruner.remaining_weights(self.model))

    def configure_optimizers(self):
        hp = self.hp
        groups = layerwise_groups(self.model, hp["lr"], hp["layerwise_lr_decay"]) or [
            {"params": list(self.model.named_parameters()), "lr": hp["lr"]}
        ]
        warmup = int(hp["warmup_fraction"] * self.total_steps)
        if hp.get("scalar_mix_lr"):  # protocol=bermo: the layer-mixing scalars have their own rate
            is_mix = lambda name: name.startswith("encoder.scalar_mix.")  # noqa: E731
            groups = [{**g, "params": [(n, p) for n, p in g["params"] if not is_mix(n)]} for g in groups]
            mix = [(n, p) for n, p in self.model.named_parameters() if is_mix(n)]
            groups.append({"params": mix, "lr": hp["scalar_mix_lr"]})
        if self.pruning is not None:  # the scores: their own learning rate, no weight decay
            scores = {id(p) for p in pruner.score_parameters(self.model)}
            groups = [
                {**g, "params": [(n, p) for n, p in g["params"] if id(p) not in scores]} for g in groups
            ]
            named = [(n, p) for n, p in self.model.named_parameters() if id(p) in scores]
            groups.append({"params": named, "lr": self.pruning.score_lr, "weight_decay": 0.0})
            warmup = self.prune_warmup  # Sanh et al.: one warm-up for the LR and the schedule
        return adamw_with_linear_schedule(
            self.model,
            hp["lr"],
            hp["adam_betas"],
            hp["adam_epsilon"],
            hp["weight_decay"],
            warmup,
            self.total_steps,
            param_groups=groups,
            fused=fused_adamw(self.fused_adamw, self.device.type, self.trainer.precision if self._trainer else "32-true"),
        )


class TimedCheckpoint(ModelCheckpoint):
    """``last.ckpt`` every ``every_n_train_steps`` steps, but only once ``min_seconds`` of training
    have passed since the start or the last save, and never at the last step."""

    def __init__(self, min_seconds: float, **kwargs):
        super().__init__(**kwargs)
        self.min_seconds, self._since, self._saved = min_seconds, time.monotonic(), False

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._since = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= trainer.max_steps or time.monotonic() - self._since < self.min_seconds:
            return
        self._saved = False
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self._saved:  # the interval starts again when the save is done
            self._since = time.monotonic()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        self._saved = True  # Lightning calls this hook of every callback as it saves a checkpoint

    def on_train_end(self, trainer, pl_module) -> None:
        """Nothing: Lightning's saves ``last.ckpt`` here when none was saved, but the results
        and model/ are written right after training."""


def schedule(cfg: DictConfig, rows: int, hp: dict) -> tuple[int, int, DictConfig | None, int]:
    """(steps per epoch, total steps, the pruning config or None, the pruning warm-up in steps) of
    a fine-tuning run on ``rows`` training rows."""
    steps_per_epoch = math.ceil(rows / hp["batch_size"])
    total = steps_per_epoch * hp["epochs"]
    pruning = cfg.pruning if cfg.pruning.method != "none" else None
    prune_warmup = 0
    if pruning is not None:
        prune_warmup = pruner.prune_warmup(
            pruning.warmup_steps, steps_per_epoch, total, pruning.initial_warmup, pruning.final_warmup
        )
    return steps_per_epoch, total, pruning, prune_warmup


def finetune_trainer(
    cfg: DictConfig, run: Run, hp: dict, task: str, seed: int, total: int, steps_per_epoch: int, validate: bool
) -> pl.Trainer:
    """The Lightning Trainer of one fine-tuning run (GLUE, probing, SQuAD): one device, ``total``
    steps, the run's loggers (its config with ``run: {task, seed, hp}``) and callbacks
    (:func:`run_callbacks`). ``validate``: on the dev split after every epoch (GLUE, probing);
    else never while training (SQuAD: decoding every window is costly; evaluated once after)."""
    logged = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    with open_dict(logged):
        logged.run = {"task": task, "seed": seed, "hp": hp}
    when = {"val_check_interval": steps_per_epoch, "check_val_every_n_epoch": None} if validate else {"limit_val_batches": 0}
    set_threads(cfg.trainer)
    return pl.Trainer(
        default_root_dir=str(run.dir),
        accelerator=cfg.trainer.accelerator,
        devices=1,
        plugins=cluster_plugins(),
        precision=cfg.trainer.precision,
        max_steps=total,
        **when,
        num_sanity_val_steps=0,
        gradient_clip_val=hp["grad_clip"],
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        use_distributed_sampler=False,
        enable_model_summary=False,
        logger=make_loggers(logged, run, "finetune", tags=[task, f"seed{seed}"]),
        callbacks=run_callbacks(cfg, run, steps_per_epoch),
    )


def run_callbacks(cfg: DictConfig, run: Run, steps_per_epoch: int) -> list:
    """A fine-tuning run's callbacks: ``last.ckpt`` (model + AdamW, to resume) at half-epoch
    boundaries but at most every ``checkpoint_every_s`` seconds of training and never at the last
    step (the results are written right after it), the steps progress bar, and divergence /
    SLURM time-limit handling (which checkpoints whenever the signal comes).

    A run shorter than ``checkpoint_every_s`` writes no checkpoint at all: killed, it starts
    again (no more than that much work is ever lost); a long one pays a few seconds per interval."""
    reads_every = refresh_every(cfg.trainer, on_cuda(cfg.trainer))  # steps between reads of device values
    return [
        TimedCheckpoint(
            float(cfg.get("checkpoint_every_s", 0)),
            dirpath=str(run.checkpoints),
            every_n_train_steps=max(1, steps_per_epoch // 2),
            save_last=True,
            save_top_k=0,
        ),
        step_progress(reads_every),
        Health(cfg.trainer.nonfinite_patience, cfg.trainer.requeue_signal, check_every=reads_every),
        StepClock(),
    ]


def drop_checkpoints(run: Run) -> None:
    """Delete a finished run's resume checkpoints (model + optimizer state): its results and
    model/ are written, and a finished run is never resumed."""
    if run.checkpoints.is_dir():
        for path in run.checkpoints.glob("*.ckpt"):
            path.unlink(missing_ok=True)
        if not any(run.checkpoints.iterdir()):
            run.checkpoints.rmdir()


def train_attempt(
    cfg: DictConfig, run: Run, trainer: pl.Trainer, module, datamodule, finish: Callable[[float, StepClock], None],
    model=None, **info,
) -> None:
    """One attempt at a fine-tuning run, under its lock (status running -> finished | failed |
    diverged | interrupted): record the invocation (with ``model``'s user parts: the ModelConfig it
    trains), resume from the newest intact checkpoint, fit,
    then ``finish(seconds, clock)`` evaluates (on the training device) and saves, and the checkpoints
    are dropped (``clock``: the run's StepClock, clock.py). Nothing is done when another process finished the run while this one waited for the
    lock."""
    started = time.time()
    [clock] = [c for c in trainer.callbacks if isinstance(c, StepClock)]
    clock.started = started
    with run.attempt(wait=cfg.trainer.lock_wait, stage="finetune", **info) as fresh:
        try:
            if fresh:
                write_record(run, cfg, model)
                ckpt = run.resume_checkpoint()
                with heap_mmap_threshold(cfg.malloc_mmap_threshold_mib):
                    fit(trainer, module, datamodule=datamodule, ckpt_path=str(ckpt) if ckpt else None)
                    # Lightning's teardown has moved the model to the CPU: what the final validation
                    # did not predict (SQuAD's dev set, MNLI's mismatched dev, test splits) goes
                    # through it where it trained, under the run's precision as that validation
                    module.to(trainer.strategy.root_device)
                    with trainer.precision_plugin.forward_context():
                        finish(time.time() - started, clock)
                drop_checkpoints(run)
        finally:
            finish_wandb()
