"""`convexp pretrain`: MLM or ELECTRA pre-training of any model preset, into the run store."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import datasets
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ...store.checkpoint import Checkpoint, open_checkpoint
from ...config.compose import to_model_config
from .pretraining import prepare_pretraining_data
from .readers import Layout, ReaderBatches, check_shares, gather_positions, resume_positions, share_note
from .streaming import StreamingExamples, prepare_streaming
from ...errors import UserError
from ...models import ModelConfig, ReplacedTokenDetector
from ...models.io import save_model_dir
from ...store.record import warn_if_other_version, write_record
from ...store.runs import Run, RunDiverged, non_finite, said
from ...train.common import (
    OptimizerStep,
    adamw_with_linear_schedule,
    cluster_plugins,
    finish_wandb,
    log_result,
    make_loggers,
    per_device_batch,
)
from ...train.captured import WholeStep, whole_step_applies
from ...train.health import Health, fit
from ...train.progress import refresh_every, step_progress
from .objectives import ElectraObjective, MLMObjective, TokenInfo
from .chunks import compact_columns
from .batches import Masker, PositionBatches, Prefetched, StreamBatches, ValBatches
from ...train.accel import compile_objective, fused_adamw, on_cuda, pin_memory, prepare_encoders, set_tf32, set_threads
from ...train.streams import PermutedStream, StreamSampler

COLUMNS = ("input_ids", "attention_mask", "token_type_ids")


class PretrainModule(OptimizerStep, pl.LightningModule):
    """Runs the objective on batches the data pipeline has already masked (``batches.py``; the
    masks are seeded by the batch's stream position, so resumed runs repeat uninterrupted ones
    exactly), logs losses and tokens/s.

    The step reads nothing back from the device: the batch carries its seed, padding flag and
    prediction slots as host values (``batches.Masker``), the objective keeps its metrics on the
    device, and Lightning reads the logged values every ``log_every_n_steps``. With
    ``trainer.compile=step`` the objective's forward (and so its backward) is one compiled graph;
    ``graphs`` also captures it as CUDA graphs (``accel.compile_objective``)."""

    def __init__(self, model_cfg: ModelConfig, cfg: DictConfig, tokens: TokenInfo, total_steps: int):
        super().__init__()
        self.cfg, self.tokens, self.total_steps = cfg, tokens, total_steps
        obj = cfg.objective
        if obj.name == "mlm":
            self.objective = MLMObjective(model_cfg, pair_head=obj.pair_format in ("nsp", "sop"))
        elif obj.name == "electra":
            self.objective = ElectraObjective(
                model_cfg, obj.generator_fraction, obj.gen_weight, obj.disc_weight, obj.temperature
            )
        else:
            raise UserError(f"unknown objective {obj.name!r}; use objective=mlm or objective=electra")
        self.masker = Masker.from_objective(tokens, obj, slot_multiple=64 if on_cuda(cfg.trainer) else 8)
        whole = whole_step_applies(cfg.trainer, on_cuda(cfg.trainer))
        self.train_objective = compile_objective(self.objective, cfg.trainer, whole_step=whole)
        # trainer.compile=whole on one GPU: the step up to the clipped gradients is one CUDA graph
        # (captured.py), and the module steps AdamW and the schedule itself
        self.automatic_optimization = not whole
        self.whole_step: WholeStep | None = None
        self.captured_grad_norm: torch.Tensor | None = None  # this step's, for Health's check
        self._t0, self.tokens_seen, self.train_seconds = None, 0.0, 0.0

    def mask(self, batch: dict, seed: int) -> dict:
        """The batch masked as the objective's masking settings say (as the data pipeline does)."""
        return self.masker(batch, seed)

    def training_step(self, batch: dict, batch_idx: int):
        torch.manual_seed(batch["seed"])  # dropout and the generator's samples of this batch
        out = self.train_objective(batch) if self.automatic_optimization else self._whole_step(batch)
        n = len(batch["input_ids"])  # sequences: said, not inferred by Lightning from the batch dict
        self.log("train/loss", out.loss.detach(), prog_bar=True, batch_size=n)
        self.log_dict({f"train/{k}": v for k, v in out.metrics.items()}, batch_size=n)
        return out.loss

    def _whole_step(self, batch: dict):
        """The step as one CUDA graph (captured.py), then AdamW through Lightning's optimizer (its
        step count, the divergence check's hook) and the learning-rate schedule."""
        opt = self.optimizers()
        if self.whole_step is None:
            params = [p for group in opt.optimizer.param_groups for p in group["params"]]
            capture = self.device.type == "cuda"
            self.whole_step = WholeStep(self.train_objective, params, self.cfg.optim.grad_clip, capture)
        out, self.captured_grad_norm = self.whole_step(batch)
        for health in (c for c in self.trainer.callbacks if isinstance(c, Health)):
            health.on_before_backward(self.trainer, self, out.loss)  # no backward hook runs: the graph did it
        opt.step()
        self.lr_schedulers().step()
        return out

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._t0 is not None:  # tokens/s of this device over the last batch, and since the start
            tokens = batch["num_tokens"]
            self.tokens_seen += tokens
            self.train_seconds += now - self._t0
            # a device scalar made by a fill kernel: logging a Python float would copy it to the GPU
            # from pageable memory, a copy that waits for every step queued before it
            rate = torch.full((), tokens / (now - self._t0), device=self.device)
            self.log("train/tokens_per_s", rate, prog_bar=True)
        self._t0 = now

    def on_validation_end(self) -> None:
        self._t0 = None  # validation time is not training time

    @property
    def mean_tokens_per_s(self) -> float | None:
        return self.tokens_seen / self.train_seconds if self.train_seconds else None

    def validation_step(self, batch: dict, batch_idx: int):
        torch.manual_seed(batch["seed"])  # fixed masks and samples: comparable across steps and runs
        out = self.objective(batch)
        n = len(batch["input_ids"])  # the weight of this batch in the validation means
        self.log("val/loss", out.loss, sync_dist=True, batch_size=n)
        self.log_dict({f"val/{k}": v for k, v in out.metrics.items()}, sync_dist=True, batch_size=n)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A checkpoint from before the MLM objective froze its unused pooler (``objectives.py``)
        lists the pooler in AdamW's groups (with no state: it never had a gradient): drop it from
        them, so that such runs resume."""
        params = list(self.objective.parameters())
        states = checkpoint.get("optimizer_states") or []
        order = [p for p in params if p.ndim >= 2] + [p for p in params if p.ndim < 2]  # the groups, nothing frozen
        if all(p.requires_grad for p in params) or len(states) != 1:
            return
        saved = states[0]
        if sum(len(g["params"]) for g in saved["param_groups"]) != len(order):
            return  # written with the pooler frozen
        kept = [i for i, p in enumerate(order) if p.requires_grad]
        index = {old: new for new, old in enumerate(kept)}
        for group in saved["param_groups"]:
            group["params"] = [index[i] for i in group["params"] if i in index]
        saved["state"] = {index[i]: v for i, v in saved["state"].items() if i in index}

    def configure_optimizers(self):
        o = self.cfg.optim
        return adamw_with_linear_schedule(
            self.objective,
            o.lr,
            o.betas,
            o.eps,
            o.weight_decay,
            o.warmup_steps,
            self.total_steps,
            fused=fused_adamw(self.cfg.trainer.fused_adamw, self.device.type, self.cfg.trainer.precision),
        )


class PretrainData(pl.LightningDataModule):
    """Batches made and masked in the data pipeline (``batches.py``): in ``num_workers`` loader
    processes, or with none, in a background thread when ``background`` (a GPU run: the step
    waits for the device, the thread fills that wait) and inline on a CPU run (the step keeps every
    core busy; a thread only takes cycles from it — stage/bare-step 0.84 with it, 0.96 without on 2
    cores). A prepared corpus's stream starts where the restored global step says (see
    streams.py); a streaming corpus's readers (``readers.py``, one per rank and loader worker) where
    the checkpoint's data position says: the positions after the last batches the training loop
    took, recorded as it takes them and kept by :meth:`state_dict`."""

    def __init__(
        self,
        train,
        val,
        seed: int,
        batch_size: int,
        num_workers: int,
        columns: tuple[str, ...],
        masker: Masker,
        pin_memory: bool = False,
        background: bool = False,
    ):
        super().__init__()
        self.train, self.val, self.seed, self.masker = train, val, seed, masker
        self.batch_size, self.num_workers, self.columns = batch_size, num_workers, columns
        self.pin_memory, self.background = pin_memory, background
        self.compact = compact_columns("pair_label" in columns)  # what the prepared rows hold
        self._prefetchers: list[Prefetched] = []
        self.positions: dict[int, dict] = {}  # streaming: reader -> its position after its last batch taken
        self._saved: dict | None = None  # streaming: the restored checkpoint's data position

    def _prefetched(self, loader):
        """``loader`` read ahead in a background thread (when ``background``), else as it is."""
        if not self.background:
            return loader
        self._prefetchers.append(Prefetched(loader))
        return self._prefetchers[-1]

    def teardown(self, stage: str) -> None:
        """Stop the prefetch threads: the endless train stream's iterator is never exhausted."""
        for p in self._prefetchers:
            p.close()
        self._prefetchers.clear()

    def train_dataloader(self):
        t = self.trainer
        if isinstance(self.train, StreamingExamples):
            return self._streaming_loader()
        start = t.global_step * t.accumulate_grad_batches * self.batch_size * t.world_size
        loader = DataLoader(
            StreamBatches(PermutedStream(self.train, self.seed, self.compact), self.masker, self.seed),
            batch_size=None,  # the sampler yields whole batches of positions
            sampler=PositionBatches(StreamSampler(start, t.global_rank, t.world_size), self.batch_size),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=self.pin_memory,
        )
        return loader if self.num_workers else self._prefetched(loader)

    def _streaming_loader(self):
        """This rank's readers' batches, from the restored positions (``readers.py``)."""
        t = self.trainer
        layout = Layout(t.world_size, max(1, self.num_workers))
        check_shares(self.train, layout, t.global_rank)
        consumed = t.global_step * t.accumulate_grad_batches
        positions, offset, line = resume_positions(self._saved, layout, t.global_rank, consumed)
        for note in (share_note(self.train.num_shards, layout), line):
            if note and t.is_global_zero:
                print(f"note: {note}", file=sys.stderr)
        self.layout, self.positions = layout, dict(positions)
        batches = ReaderBatches(
            self.train, layout, t.global_rank, positions, offset, self.batch_size, self.masker, self.seed
        )
        loader = DataLoader(batches, batch_size=None, num_workers=self.num_workers, pin_memory=self.pin_memory)
        return loader if self.num_workers else self._prefetched(loader)

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        """A training batch the loop takes now: its reader's position after it is the one to keep."""
        taken = batch.pop("data_position", None) if isinstance(batch, dict) else None
        if taken is not None:
            self.positions[taken["reader"]] = taken["position"]
        return batch

    def state_dict(self) -> dict:
        """The data position of a streaming corpus (every rank's readers), kept in the checkpoint."""
        if not isinstance(self.train, StreamingExamples) or not hasattr(self, "layout"):
            return {}
        layout = self.layout
        return {"layout": [layout.world, layout.workers], "positions": gather_positions(self.positions)}

    def load_state_dict(self, state: dict) -> None:
        self._saved = state or None

    def val_dataloader(self):
        batches = ValBatches(self.val, self.compact, self.batch_size, self.masker, self.seed)
        return DataLoader(batches, batch_size=None, num_workers=self.num_workers, pin_memory=self.pin_memory)


def run_pretrain(cfg: DictConfig, run: Run, callbacks: tuple = ()) -> Run:
    """Pre-train as configured into ``run`` (planned: command.py's ``plan``, runs.py); returns it. A
    finished run is reused. ``callbacks``: Lightning callbacks added to the stage's own (``bench
    pretrain --profile``)."""
    if run.finished:
        warn_if_other_version(run)
        print(said("already finished", run.dir, "(nothing to do)"))
        return run
    run.refuse_diverged(cfg.retry_diverged)
    if run.last_checkpoint() and not cfg.resume:
        raise UserError(
            f"{run.dir} has an unfinished run; pass resume=true to continue it or name=<label> for a new run"
        )
    init = open_checkpoint(cfg.init, label="init") if cfg.init else None  # a bad one fails before any file is written
    model_cfg = to_model_config(cfg.model)  # seq_len fits its positions: checked when composed (config/schema.py)
    datasets.disable_progress_bars()
    prepare = prepare_streaming if cfg.data.get("streaming") else prepare_pretraining_data
    data = prepare(
        cfg.data, cfg.tokenizer, cfg.seq_len, Path(cfg.outputs) / "cache", cfg.seed, cfg.objective.pair_format
    )
    tok = data.tokenizer
    model_cfg = dataclasses.replace(model_cfg, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id)
    if init is not None and init.model_cfg.vocab_size != model_cfg.vocab_size:
        raise UserError(
            f"init={cfg.init} has a vocabulary of {init.model_cfg.vocab_size} tokens but the tokenizer has "
            f"{model_cfg.vocab_size}; use the checkpoint's own tokenizer (tokenizer=pretrained "
            "tokenizer.path=<its vocab.txt or tokenizer.json>)"
        )
    with run.removed_on_refusal(), run.attempt(wait=cfg.trainer.lock_wait, stage="pretrain") as started:
        if not started:
            print(said("already finished", run.dir, "(by another process)"))
            return run
        try:
            _train(cfg, run, model_cfg, data, init, callbacks)
        finally:
            finish_wandb()
    return run


def token_info(tok) -> TokenInfo:
    """What masking needs to know about a tokenizer's vocabulary."""
    return TokenInfo(tok.vocab_size, tok.mask_id, tuple(sorted(tok.special_ids)), tok.continuation_mask())


def _train(
    cfg: DictConfig, run: Run, model_cfg: ModelConfig, data, init: Checkpoint | None, callbacks: tuple = ()
) -> None:
    """One attempt (the run's lock held): train from the last intact checkpoint, then finish."""
    tok = data.tokenizer
    run.write_config(cfg)
    write_record(run, cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    tokens = token_info(tok)

    steps = cfg.trainer.max_steps
    cuda = on_cuda(cfg.trainer)
    set_tf32(cfg.trainer, cuda)
    module = PretrainModule(model_cfg, cfg, tokens, steps)
    if init is not None:
        _init_weights(module.objective.encoder, init, model_cfg)
    prepare_encoders(module.objective, cfg.trainer)
    columns = COLUMNS + (("pair_label",) if cfg.objective.pair_format in ("nsp", "sop") else ())
    batch = per_device_batch(cfg.trainer.batch_size, cfg.trainer)
    datamodule = PretrainData(
        data.train, data.val, cfg.seed, batch, cfg.trainer.num_workers, columns, module.masker,
        pin_memory(cfg.trainer, cuda),
        background=cuda,
    )

    from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint

    t = cfg.trainer
    reads_every = refresh_every(t, cuda)  # steps between reads of device values
    set_threads(t)
    trainer = pl.Trainer(
        default_root_dir=str(run.dir),
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=t.strategy,
        plugins=cluster_plugins(),
        precision=t.precision,
        max_steps=steps,
        accumulate_grad_batches=t.accumulate_grad_batches,
        gradient_clip_val=cfg.optim.grad_clip if module.automatic_optimization else None,  # else in the graph
        val_check_interval=t.val_every_n_steps * t.accumulate_grad_batches,
        check_val_every_n_epoch=None,
        limit_val_batches=t.val_batches,
        num_sanity_val_steps=0,
        log_every_n_steps=t.log_every_n_steps,
        deterministic=t.deterministic,
        use_distributed_sampler=False,
        logger=make_loggers(cfg, run, "pretrain", tags=[cfg.choices.model, cfg.objective.name]),
        callbacks=[
            ModelCheckpoint(
                dirpath=str(run.checkpoints),
                filename="step={step}",
                auto_insert_metric_name=False,
                every_n_train_steps=t.checkpoint_every_n_steps,
                save_top_k=1,  # the newest step checkpoint, the one before it deleted once it is written
                save_last="link",  # last.ckpt links to it (one file's disk); an interrupt writes it whole
            ),
            LearningRateMonitor(logging_interval="step"),
            step_progress(reads_every, speed=False),  # tokens/s instead of batches/s
            Health(t.nonfinite_patience, t.requeue_signal, check_every=reads_every),
            *callbacks,
        ],
        enable_model_summary=False,
    )
    started = time.time()
    ckpt = run.resume_checkpoint()
    health = fit(trainer, module, datamodule=datamodule, ckpt_path=str(ckpt) if ckpt else None)
    metrics = health.final_metrics(trainer)
    final = trainer.global_step  # 0 in the main process of ddp_spawn (the workers trained)
    if final and final % t.val_every_n_steps == 0 and health.val_step != final:
        trainer.validate(module, datamodule=datamodule, verbose=False)  # the checkpoint predates it
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    if trainer.global_rank == 0:
        _finish(run, trainer, module, model_cfg, data, metrics, time.time() - started)


def _init_weights(encoder, init: Checkpoint, model_cfg: ModelConfig) -> None:
    """Continue pre-training from a checkpoint (see :func:`convexp.store.checkpoint.open_checkpoint`;
    its vocabulary was checked against the tokenizer before the run started)."""
    missing, unexpected = encoder.load_state_dict(init.encoder_state, strict=False)
    if missing or unexpected:
        raise UserError(
            f"{init.name} does not match model={model_cfg.name}: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )


def _finish(
    run: Run,
    trainer: pl.Trainer,
    module: PretrainModule,
    model_cfg: ModelConfig,
    data,
    m: dict,
    seconds: float,
) -> None:
    """Check the final metrics are finite (else the run diverged: nothing is exported), export the
    model (the discriminator for ELECTRA), then metrics.json and status finished (`Run.finish`).
    The attempt removed any exports of an earlier finishing step that did not complete."""
    bad = non_finite(m)
    if bad:
        raise RunDiverged(
            f"training diverged: final {bad[0][0]}={bad[0][1]}; nothing exported. Lower the learning rate",
            step=trainer.global_step, result=dict(bad),
        )
    obj = module.objective
    model = obj.discriminator if isinstance(obj, ElectraObjective) else obj.model
    tok_dir = run.dir / "tokenizer"
    data.tokenizer.save(tok_dir)
    save_model_dir(model.cpu().float(), model_cfg, run.model_dir, extra_files=sorted(tok_dir.iterdir()))
    hf_export = _export_hf(model, model_cfg, run.dir / "hf", tok_dir, data.tokenizer)
    steps = trainer.global_step
    if steps == 0 and run.last_checkpoint():  # ddp_spawn: the main process did not train; its checkpoint did
        steps = torch.load(run.last_checkpoint(), map_location="cpu", weights_only=False)["global_step"]
    metrics = {
        "steps": steps,
        "final_train_loss": m.get("train/loss"),
        "val_loss": m.get("val/loss"),
        "val_mlm_loss": m.get("val/mlm_loss"),
        "unigram_entropy": data.stats.get("unigram_entropy"),
        "tokens_per_s": module.mean_tokens_per_s
        or m.get("train/tokens_per_s"),  # mean over this process's steps
        "wall_time_s": seconds,
        "hf_export": hf_export,
        "metrics": m,
        "data": {k: v for k, v in data.stats.items() if isinstance(v, (int, float, str, bool))},
    }
    log_result(metrics, run)
    run.finish(metrics)
    run.keep_last_checkpoint()  # the final model and the last resumable checkpoint
    print(said("finished", run.dir))


def _export_hf(model, model_cfg: ModelConfig, out: Path, tok_dir: Path, tokenizer) -> str:
    """Also write a Hugging Face ``transformers`` directory (ConvBERT, BERT or ELECTRA, with the
    tokenizer and its ``tokenizer_config.json`` for ``AutoTokenizer``) where the architecture
    allows; returns the directory or the reason it was not written. ``convexp hf export`` writes the
    same from a finished run, checked against transformers."""
    from ...models.hf_export import CLASSES, check_exportable, export_hf
    from ...models.hf_keys import ExportError

    if out.exists():
        return str(out)
    try:
        model_type = check_exportable(model_cfg)
    except ExportError as e:
        return f"not exported: {e}"
    from ...atomic import atomic_dir

    with atomic_dir(out) as tmp:  # a crash leaves no half-written export
        # ELECTRA's discriminator is ElectraForPreTraining; ConvBERT's and BERT's have no RTD head there
        rtd = isinstance(model, ReplacedTokenDetector) and (model_type, "rtd") not in CLASSES
        export_hf(model.encoder if rtd else model, model_cfg, tmp / "hf")
        for f in (tmp / "hf").iterdir():
            f.rename(tmp / f.name)
        (tmp / "hf").rmdir()
        for f in tok_dir.iterdir():
            shutil.copy2(f, tmp / f.name)
        config = tokenizer.hf_config(model_cfg.max_position_embeddings)
        (tmp / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return str(out)
