"""What every stage shares: seeding, loggers (W&B + CSV), the Trainer, the optimiser."""

from __future__ import annotations

import csv
import io
import json
import math
import netrc
import os

import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from ..atomic import atomic_write
from ..errors import UserError
from ..runs import Run


def wandb_mode(logger_cfg: DictConfig) -> str:
    """online when logged in, offline otherwise; WANDB_MODE or logger.mode override."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if logger_cfg.mode != "auto":
        return logger_cfg.mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        return "online" if netrc.netrc().authenticators("api.wandb.ai") else "offline"
    except (FileNotFoundError, netrc.NetrcParseError):
        return "offline"


def make_loggers(cfg: DictConfig, run: Run, job_type: str, tags: list[str] = ()) -> list:
    """CSV metrics in the run directory, and W&B (resuming the same W&B run on resume)."""
    from pytorch_lightning.loggers import WandbLogger

    loggers = [AppendingCSVLogger(save_dir=str(run.dir), name="csv", version="")]
    mode = wandb_mode(cfg.logger)
    if mode != "disabled":
        loggers.append(
            WandbLogger(
                project=cfg.logger.project,
                entity=cfg.logger.entity,
                group=cfg.logger.group,
                job_type=job_type,
                tags=[*cfg.logger.tags, *tags],
                name=run.id,
                id=run.id,
                resume="allow",
                save_dir=str(run.dir),
                mode=mode,
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        )
    return loggers


class _AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer, except that it continues an existing metrics.csv (Lightning's
    deletes it), writes every row as soon as it is logged, and rewrites the file atomically when
    a new column appears."""

    def _check_log_dir_exists(self) -> None:  # keep the previous attempts' rows
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])

    def _rewrite_with_new_header(self, fieldnames: list[str], keep=lambda row: True) -> None:
        with open(self.metrics_file_path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if keep(r)]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.metrics_file_path, out.getvalue())

    def drop_rows(self, redone) -> None:
        self.save()
        if os.path.isfile(self.metrics_file_path):
            self._rewrite_with_new_header(self.metrics_keys, keep=lambda r: not redone(r))


class AppendingCSVLogger(CSVLogger):
    """``csv/metrics.csv`` across resumes: rows of earlier attempts kept, each step exactly once
    (`Health` drops the rows a resumed attempt redoes, via `drop_rows`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, flush_logs_every_n_steps=1, **kwargs)

    @property
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    def drop_rows(self, redone) -> None:
        """Remove the rows (dicts of CSV strings) for which ``redone(row)`` is true."""
        self.experiment.drop_rows(redone)


def log_result(metrics: dict) -> None:
    """Put a run's metrics.json into its W&B summary as ``result`` (what `report --source wandb` reads)."""
    import sys

    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.run.summary["result"] = json.loads(json.dumps(metrics, default=str))


def finish_wandb() -> None:
    """Close the W&B run so that the next run in this process starts a new one."""
    import sys

    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()


def per_device_batch(total: int, trainer_cfg: DictConfig) -> int:
    world = trainer_cfg.devices * trainer_cfg.num_nodes if isinstance(trainer_cfg.devices, int) else 1
    parts = world * trainer_cfg.accumulate_grad_batches
    if total % parts:
        raise UserError(
            f"trainer.batch_size={total} is not divisible by devices x nodes x accumulate_grad_batches = {parts}"
        )
    return total // parts


class OptimizerStep:
    """LightningModule mixin: how convexp's stages step the optimizer.

    * The gradients are freed as soon as the optimizer has used them. Lightning zeroes them only
      inside the next step, after its forward pass, so they would be held through that forward
      (its peak: a whole model's worth of memory more) and through every validation. With
      gradient accumulation the optimizer steps once per window, so the accumulated gradients
      are untouched until then.
    * Gradient clipping with the fused AdamW kernel (``accel.fused_adamw``) when nothing is
      scaled (fp32, bf16): clipped here, as Lightning would, because Lightning refuses to clip for
      any optimizer that can unscale gradients itself. (fp16 runs are not fused by default.)"""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer.zero_grad(set_to_none=True)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        fused = getattr(optimizer, "defaults", {}).get("fused")
        scaled = getattr(self.trainer.precision_plugin, "scaler", None) is not None
        if gradient_clip_val and fused and not scaled and gradient_clip_algorithm in (None, "norm"):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


def adamw_with_linear_schedule(
    model: torch.nn.Module,
    lr: float,
    betas,
    eps: float,
    weight_decay: float,
    warmup_steps: int,
    total_steps: int,
    param_groups: list[dict] | None = None,
    fused: bool = False,
):
    """AdamW (no weight decay on biases, LayerNorms and ScalarMix scalars) with linear warm-up
    to ``lr`` and linear decay to 0 at ``total_steps``; returns Lightning's optimiser dict.
    Step s (0-based) runs at lr·s/warmup during the warm-up (the first update at 0, as Hugging
    Face's ``get_linear_schedule_with_warmup`` and ELECTRA's ``min(1, global_step / warmup)``),
    then lr·(total − s)/(total − warmup).
    ``fused``: PyTorch's fused kernel (``trainer.fused_adamw``; otherwise its default)."""
    groups = param_groups or [{"params": list(model.named_parameters()), "lr": lr}]
    flat = []
    for g in groups:
        decay = [p for n, p in g["params"] if p.requires_grad and p.ndim >= 2]
        no_decay = [p for n, p in g["params"] if p.requires_grad and p.ndim < 2]
        flat.append({"params": decay, "lr": g["lr"], "weight_decay": g.get("weight_decay", weight_decay)})
        flat.append({"params": no_decay, "lr": g["lr"], "weight_decay": 0.0})
    opt = torch.optim.AdamW([g for g in flat if g["params"]], lr=lr, betas=tuple(betas), eps=eps, fused=fused or None)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def layerwise_groups(model: torch.nn.Module, lr: float, decay: float | None) -> list[dict] | None:
    """ELECTRA's layer-wise learning-rate decay (google-research/electra ``model/optimization.py``
    ``_get_layer_lrs``): lr·decay^(L+2−depth) with depth 0 for the embeddings (and their E→D
    projection), i+1 for encoder layer i (0-based) of L, and L+2 for everything else (task head,
    pooler, scalar mix). So the head gets lr, layer i lr·decay^(L+1−i), the embeddings
    lr·decay^(L+2). Returns Adam parameter groups of (name, parameter) pairs, or None without decay.
    """
    if not decay:
        return None
    L = len(model.encoder.layers)
    groups: dict[float, list] = {}
    for name, p in model.named_parameters():
        if name.startswith("encoder.embeddings."):
            depth = 0
        elif name.startswith("encoder.layers."):
            depth = int(name.split(".")[2]) + 1
        else:  # head, pooler, scalar mix: ELECTRA's "task_specific/"
            depth = L + 2
        groups.setdefault(lr * decay ** (L + 2 - depth), []).append((name, p))
    return [{"params": ps, "lr": g_lr} for g_lr, ps in groups.items()]


def step_seed(seed: int, position: int) -> int:
    """A seed for the random choices of the batch that starts at stream position `position`."""
    return (seed * 2_654_435_761 + position * 40_503 + 1) % (2**63 - 1)


def is_finite(x: float) -> bool:
    return x is not None and math.isfinite(x)
