"""What every fine-tuning run shares, whatever its task: where it starts (:func:`open_init`) and the
one-run driver (:func:`train_one`) that GLUE, probing and SQuAD give their module, data and
evaluation to.

  open_init(cfg, lengths) -> Init
                                  the start model, weights and tokenizer (init=, tokenizer_path=),
                                  and what only the opened models say: the vocabulary, task.max_len
                                  against the position table, a hub teacher (the command's check
                                  reads the local files before torch)
  FinetuneJob                     one task's part of a run: its module, data module, evaluation
  Trained                         a run just trained, as its task's evaluation reads it
  build(cfg, planned, job)        the seeded module and data a run trains from
  train_one(cfg, init, planned, job) -> Run
                                  reuse a finished run, refuse a diverged or unfinished one, write
                                  the run's config, seed, schedule, build, train, evaluate
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from .. import pruning as pruner
from ..errors import UserError
from ..models import ModelConfig
from ..store.checkpoint import Checkpoint, open_checkpoint
from ..store.rundirs import FinetuneRun
from ..store.runs import Run
from .accel import prepare_encoders
from .clock import StepClock
from .inputs import check_max_len
from .task_module import TaskModule, finetune_trainer, schedule, train_attempt
from .weights import adopt_weights, keeps_weights, say_training_again, wants_weights_again, weights_run




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

    @property
    def width(self) -> int:
        """The hidden size (the protocols' learning rates depend on it; a task kind's ``plan``)."""
        return self.model_cfg.hidden_size

    def take_state(self) -> dict | None:
        """The encoder's start weights (None: random initialisation), for one run to load."""
        if self.ref is None:
            return None
        state, self.state = self.state, None
        return state if state is not None else open_checkpoint(self.ref).encoder_state


def open_init(cfg: DictConfig, lengths=()) -> Init:
    """Where the fine-tuning command starts (:func:`resolve_init`), with what the command's check
    (the task's check, before torch) cannot read: a hub checkpoint, the opened model's position
    table against the ``task.max_len`` of each config in ``lengths``, a hub teacher."""
    init = resolve_init(cfg)
    check_teacher(cfg)
    check_max_len(init.model_cfg, lengths)
    return init


def resolve_init(cfg: DictConfig) -> Init:
    """``init=`` (a checkpoint, see :func:`convexp.store.checkpoint.open_checkpoint`, or ``none`` with
    ``model=<preset>``), the tokenizer (``tokenizer_path=`` or the checkpoint's own) and
    ``scalar_mix=`` (BERMO's layer mixing added to or removed from any model)."""
    from ..config.compose import model_config
    from ..data.tokenizer import Tokenizer
    from ..config.schema import init_none_problem

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


def check_teacher(cfg: DictConfig) -> None:
    """A bad ``distill.teacher`` fails before any data is prepared or run directory made."""
    if cfg.distill.teacher:
        open_checkpoint(cfg.distill.teacher, label="distill.teacher", weights=False)


@dataclasses.dataclass
class Trained:
    """A fine-tuning run just trained, as its task's evaluation reads it."""

    run: Run
    model: torch.nn.Module
    pad: int  # the tokenizer's padding id
    hp: dict
    seconds: float  # training wall time
    examples: int  # training examples seen (rows x epochs)
    pruning: DictConfig | None = None
    tokenizer: object = None
    keep_weights: bool = True  # write model/ (train/weights.py)
    clock: StepClock | None = None  # the training loop's own time (clock.py)

    def speed(self) -> dict:
        """metrics.json's ``examples_per_s`` (training rows per second of training steps: the loop's
        own rate, as clock.py times it) and ``timing``; the results are written now."""
        if self.clock is None:
            return {"examples_per_s": self.examples / self.seconds if self.seconds else None}
        timing = self.clock.record()
        rows = timing["steps"] * self.hp["batch_size"]
        return {"examples_per_s": rows / timing["train_s"] if timing["train_s"] else None, "timing": timing}

    def fold_pruning(self) -> float | None:
        """A fine-pruned model's final masks fixed into its weights (W ⊙ M: the saved model is an
        ordinary one); the percentage of the encoder's weights that remain, None without pruning."""
        if self.pruning is None:
            return None
        pruner.set_threshold(self.model, self.pruning.final_threshold)
        self.model.eval()
        remaining = 100 * pruner.remaining_weights(self.model)
        pruner.fold_masks(self.model)
        return remaining


@dataclasses.dataclass
class FinetuneJob:
    """One task family's part of a fine-tuning run, given to :func:`train_one`.

    ``module(total_steps, pruning, prune_warmup, teacher)`` builds the LightningModule (after the
    run is seeded: its initialisation order is the family's); ``data()`` the LightningDataModule;
    ``finish(module, trained)`` evaluates and saves the trained run; ``check()`` refuses
    what only the family knows is wrong, before any file is written."""

    train_rows: int
    validate: bool  # a dev pass after every epoch (GLUE, probing) or only at the end (SQuAD)
    module: Callable[[int, DictConfig | None, int, Checkpoint | None], TaskModule]
    data: Callable[[], pl.LightningDataModule]
    finish: Callable[[TaskModule, Trained], None]
    check: Callable[[], None] = lambda: None


def build(cfg: DictConfig, planned: FinetuneRun, job: FinetuneJob, teacher: Checkpoint | None = None):
    """(module, data module, steps per epoch, total steps, pruning config or None) of a planned run,
    seeded: what its training starts from (the stage's, and ``convexp bench``'s bare step's)."""
    pl.seed_everything(planned.seed, verbose=False)
    steps_per_epoch, total, pruning, prune_warmup = schedule(cfg, job.train_rows, planned.hp)
    module = job.module(total, pruning, prune_warmup, teacher)
    prepare_encoders(module.model, cfg.trainer, whole_step=False)  # gradient checkpointing, compile
    return module, job.data(), steps_per_epoch, total, pruning


def train_one(cfg: DictConfig, init: Init, planned: FinetuneRun, job: FinetuneJob) -> Run:
    """Fine-tune one planned run, or reuse it when it has finished."""
    seed, hp, run = planned.seed, planned.hp, planned.run
    if run.finished:
        if wants_weights_again(cfg, planned):  # its weights were not kept and are read now
            say_training_again(planned)
            again = weights_run(planned)
            train_one(cfg, init, again, job)
            adopt_weights(planned, again)
        return run
    run.refuse_diverged(cfg.retry_diverged)
    if run.last_checkpoint() and not cfg.resume:
        raise UserError(f"{run.dir} has an unfinished run; pass resume=true to continue it")
    job.check()
    # opened before any file is written; its head is built by the module after the student (seeded order)
    teacher = open_checkpoint(cfg.distill.teacher, label="distill.teacher") if cfg.distill.teacher else None
    with run.removed_on_refusal():
        run.dir.mkdir(parents=True, exist_ok=True)
        run.write_config(planned.run_cfg)
        module, data, steps_per_epoch, total, pruning = build(cfg, planned, job, teacher)
        trainer = finetune_trainer(cfg, run, hp, planned.task, seed, total, steps_per_epoch, validate=job.validate)
        examples = job.train_rows * hp["epochs"]

        def finish(seconds: float, clock: StepClock) -> None:
            trained = Trained(run, module.model, init.tokenizer.pad_id, hp, seconds, examples, pruning, init.tokenizer,
                              keeps_weights(cfg, planned), clock)  # fmt: skip
            job.finish(module, trained)

        train_attempt(cfg, run, trainer, module, data, finish, init.model_cfg, task=planned.task, seed=seed)
    return run
