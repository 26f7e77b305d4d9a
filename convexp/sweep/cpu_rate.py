"""The --dry-run time estimate of a sweep that runs on this machine's CPU, from a short measured step.

A GPU plan's time comes from a stated rate (``tflops=``, ``launcher.device``). A CPU user has no
such number, so the dry run measures one: a few masked-LM training steps (forward, backward, fused
AdamW) of the plan's first pre-training model at its own length, on this machine, now. The batch
is cut to at most TOKENS tokens (at least one sequence): a paper recipe's batch of 256 x 512 takes
minutes a step on a laptop, and a dry run answers in seconds; a CPU's FLOP rate on such a model
hardly changes with the batch once the matrices hold a few thousand rows.
The FLOPs of those steps (the same count as the plan's) over their wall time is the rate the whole
plan's FLOPs are divided by. Fine-tuning steps are shorter and pad less than the count assumes, so
the estimate is rough (within ~2x); it is said so where it is printed.
"""

from __future__ import annotations

import dataclasses
import time

from omegaconf import DictConfig


def runs_on_cpu(cfg: DictConfig) -> bool:
    """Whether a composed stage config trains on the CPU here (``cpu``, or ``auto`` without CUDA)."""
    import torch

    accelerator = str(cfg.trainer.accelerator)
    return accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())


TOKENS = 2048  # the most tokens a measured step holds


def measured_flops(cfg: DictConfig, steps: int = 3) -> float:
    """Training FLOP/s of this CPU on the model and length of a composed pre-training config, at
    its batch cut to TOKENS tokens (one warm-up step, then ``steps`` timed)."""
    import torch

    from ..config.compose import to_model_config
    from ..models import MaskedLM
    from .compute import flops_per_token

    # the rate does not depend on the weights' values: normal_ initialises in a fraction of the
    # time trunc_normal_ takes on a CPU (seconds for a base-sized model)
    model_cfg = dataclasses.replace(to_model_config(cfg.model), weight_init="normal")
    length = int(cfg.seq_len)
    batch = max(1, min(int(cfg.trainer.batch_size), TOKENS // length))
    torch.manual_seed(0)
    model = MaskedLM(model_cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(5, model_cfg.vocab_size, (batch, length))
    labels = torch.where(torch.rand(batch, length) < 0.15, ids, torch.full_like(ids, -100))

    def step() -> None:
        model(ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    return flops_per_token(model_cfg, length) * batch * length / seconds
