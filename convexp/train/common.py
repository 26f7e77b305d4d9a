"""What every stage shares: seeding, loggers (W&B + CSV), the Trainer, the optimiser."""

from __future__ import annotations

import contextlib
import json
import math
import sys

import torch
from omegaconf import DictConfig, OmegaConf

from ..errors import UserError
from ..store.run_names import run_key
from ..store.runs import Run, error_line
from .grad_norm import clip_with_norm
from .metrics_csv import AppendingCSVLogger
from ..noise import is_quiet
from .wandb_mode import own_service, skip_unstaged_launch_inputs, wandb_mode


def make_loggers(cfg: DictConfig, run: Run, job_type: str, tags: list[str] = ()) -> list:
    """CSV metrics in the run directory, and W&B (resuming the same W&B run on resume)."""
    from pytorch_lightning.utilities import rank_zero_only

    from .wandb_logger import SturdyWandbLogger

    loggers = [AppendingCSVLogger(run.dir / "csv")]
    mode, why = wandb_mode(cfg.logger)
    silent = mode == "offline" and is_quiet()  # W&B's own lines: convexp/noise.py
    if rank_zero_only.rank == 0:  # one line per run, at its start
        print(f"W&B: {mode} ({why})", file=sys.stderr, flush=True)
        if silent:  # what wandb itself would have said
            print("  `wandb sync RUN/wandb/offline-run-*` uploads it (RUN: the run directory)", file=sys.stderr, flush=True)
    if mode != "disabled":
        import wandb

        own_service()
        skip_unstaged_launch_inputs()
        if silent:  # set up silent before the run: wandb validates the run's settings (and warns
            wandb.setup(settings=wandb.Settings(silent=True))  # about Lightning's anonymous=None) first
        loggers.append(
            SturdyWandbLogger(
                project=cfg.logger.project,
                entity=cfg.logger.entity,
                group=cfg.logger.group,
                job_type=job_type,
                tags=[*(cfg.logger.tags or _env_tags()), *tags],
                name=run.id,
                id=run.id,
                resume="allow",
                save_dir=str(run.dir),
                mode=mode,
                config=OmegaConf.to_container(cfg, resolve=True),
                **({"settings": wandb.Settings(silent=True)} if silent else {}),
            )
        )
    return loggers


def _env_tags() -> list[str]:
    """W&B's own ``WANDB_TAGS`` (comma-separated), where the config names no tags (logger.tags)."""
    import os

    return [t.strip() for t in os.environ.get("WANDB_TAGS", "").split(",") if t.strip()]


def cluster_plugins() -> list:
    """The Trainer's cluster environment under SLURM, with Lightning's auto-requeue off: `Health`
    handles the time-limit signal (checkpoint, record ``interrupted``, requeue; see
    `convexp.train.health`), so it must never be left to which handler is installed first.
    Elsewhere (and under torchrun, which Lightning prefers) Lightning's own choice."""
    from pytorch_lightning.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if SLURMEnvironment.detect() and not TorchElasticEnvironment.detect():
        return [SLURMEnvironment(auto_requeue=False)]
    return []


def log_result(metrics: dict, run: Run) -> None:
    """Put a run's metrics.json into its W&B summary as ``result`` (what `report --source wandb`
    reads); with ``logger.log_model=true`` (in the run's W&B config) also its ``model/`` and, for a
    fine-tuning run, its ``predictions/`` as W&B artifacts ``model-<key>``, ``predictions-<key>`` (key:
    run_names.run_key of the run's name)."""
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.run.summary["result"] = json.loads(json.dumps(metrics, default=str))
            if (wandb.run.config.get("logger") or {}).get("log_model"):
                for kind, folder in (("model", run.model_dir), ("predictions", run.dir / "predictions")):
                    if folder.is_dir():
                        # W&B artifact names allow no '+': the run's name without its tokens
                        artifact = wandb.Artifact(f"{kind}-{run_key(run.id)}", type=kind)
                        artifact.add_dir(str(folder))
                        wandb.run.log_artifact(artifact)


def finish_wandb() -> None:
    """Close the W&B run so that the next run in this process starts a new one. As far as it can:
    when W&B cannot (its service process gone — SLURM signals every process of a job it stops or
    requeues — or its files unwritable) that is one line on stderr, and the run's own outcome
    (finished, interrupted) stands; an offline run's records written so far are kept."""
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            try:
                wandb.finish()
            except Exception as e:  # noqa: BLE001 - W&B's failure is not the run's
                print(f"warning: W&B could not finish its run: {error_line(e)}", file=sys.stderr)
                with contextlib.suppress(Exception):  # nothing left for W&B's exit hook to fail at
                    wandb.teardown()


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
      any optimizer that can unscale gradients itself. (fp16 runs are not fused by default.) The
      gradients' norm is the one ``health.Health`` computed for its divergence check just before
      (``step_grad_norm``; ``grad_norm.py``): they are read once for both."""

    step_grad_norm: torch.Tensor | None = None  # this step's gradient norm, set by health.Health

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer.zero_grad(set_to_none=True)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        norm, self.step_grad_norm = self.step_grad_norm, None
        fused = getattr(optimizer, "defaults", {}).get("fused")
        scaled = getattr(self.trainer.precision_plugin, "scaler", None) is not None
        if gradient_clip_val and fused and not scaled and gradient_clip_algorithm in (None, "norm"):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            if norm is None:
                torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
            else:
                clip_with_norm(params, gradient_clip_val, norm)
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


def seed_step(seed: int, device: torch.device) -> None:
    """Seed a training step's random draws (dropout) on ``device``: the CPU's generator and, for a
    CUDA device, that device's; the streams ``torch.manual_seed(seed)`` gives them. Without its walk
    over every backend (CUDA, XPU, MTIA, each saving a formatted stack while uninitialised): 0.5-1 ms
    a step inside Lightning's loop, 25 µs here."""
    seed = int(seed)
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)


def is_finite(x: float) -> bool:
    return x is not None and math.isfinite(x)
