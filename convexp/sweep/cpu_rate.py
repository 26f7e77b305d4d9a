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

A measured rate is kept for a day in ``$CONVEXP_CACHE/cpu_rate.json`` (default ``~/.cache/convexp``),
by the machine's CPU, the threads this process may use, torch's version and the model, length and
batch measured: the next dry run (or ``--status``) answers without importing torch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from importlib import metadata

from omegaconf import DictConfig, OmegaConf

from ..atomic import atomic_write, config_hash
from ..data.digests import cache_file
from .gpus import gpu_driver

KEPT_S = 86_400  # a measured rate is used again for a day


def runs_on_cpu(cfg: DictConfig) -> bool:
    """Whether a composed stage config trains on the CPU here (``cpu``, or ``auto`` without CUDA;
    torch is asked only where a GPU driver is installed)."""
    accelerator = str(cfg.trainer.accelerator)
    if accelerator == "cpu" or (accelerator == "auto" and not gpu_driver()):
        return True
    import torch

    return accelerator == "auto" and not torch.cuda.is_available()


def cpu_rate(cfg: DictConfig) -> tuple[float, float]:
    """(training FLOP/s of this CPU on a composed pre-training config's model, when it was
    measured): :func:`measured_flops`, or its value of the last day (see the module doc)."""
    path = cache_file().with_name("cpu_rate.json")
    key = _machine_key(cfg)
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    hit = kept.get(key)
    if hit and time.time() - hit["time"] < KEPT_S:
        return hit["flops"], hit["time"]
    flops = measured_flops(cfg)
    kept = {k: v for k, v in kept.items() if time.time() - v.get("time", 0) < KEPT_S}
    kept[key] = {"flops": flops, "time": time.time(), "model": cfg.model.get("name")}
    try:
        atomic_write(path, json.dumps(kept, indent=1))
    except OSError:  # a cache that cannot be written: measured again next time
        pass
    return flops, kept[key]["time"]


def _machine_key(cfg: DictConfig) -> str:
    """What a measured rate depends on: this CPU, the threads this process may use, torch's version,
    and the model, length and batch measured."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    threads = os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0))
    model = OmegaConf.to_container(cfg.model, resolve=True)
    shape = (int(cfg.seq_len), min(int(cfg.trainer.batch_size), max(1, TOKENS // int(cfg.seq_len))))
    return config_hash(cpu, threads, metadata.version("torch"), model, shape)


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
