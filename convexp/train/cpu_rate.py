"""The --dry-run time estimate of a sweep that runs on this machine's CPU, from short measured steps.

A GPU plan's time comes from a stated rate (``tflops=``, ``launcher.device``). A CPU user has no
such number, so the dry run measures one: masked-LM training steps (forward and backward) of the
plan's first pre-training model at its own length, on this machine, cut short three ways so that
a small model answers in half a second and a base-sized one in three instead of a minute:

* the batch holds at most TOKENS (512) tokens (at least one sequence): a CPU's FLOP rate on such
  a model hardly changes with the batch once the matrices hold a few hundred rows;
* no optimizer: AdamW's update is elementwise work (uncounted FLOPs) of a few milliseconds, a
  share of a step that a real batch makes negligible, and ``torch.optim`` imports torch's compiler
  on first use (1.4 s);
* the model has its first two blocks only, and runs them with one block and with two (the same
  weights, interleaved, the fastest of each): the difference is a block's time, the rest of the
  one-block step the embeddings' and the head's. The whole model's step is the
  one-block step plus the other blocks' FLOPs at the block's rate.

The FLOPs of the whole model's step (the same count as the plan's) over that time is the rate the
whole plan's FLOPs are divided by. Against three steps (with AdamW) of the whole model at 2,048
tokens, in one invocation on a 2-core AMD EPYC: 0.85-1.27x for ELECTRA-, ConvBERT- and
Chang-small, ConvBERT-base 0.96-1.28x, BERT-base at length 512 1.27-1.53x; in 0.5 s instead of 5-7
s for a small model, 2.6-2.9 s instead of 36-53 s for a base one. Fine-tuning steps are shorter and
pad less than the count assumes, so the estimate is rough (within ~2x); it is said so where it is
printed.

A measured rate is kept in ``$CONVEXP_CACHE/cpu_rate.json`` (default ``~/.cache/convexp``) by what
it depends on: the machine's CPU, the threads this process may use, torch's version and the model,
length and batch measured; the next dry run answers without importing torch. It is kept for
KEPT_S (a month), or an hour when the machine was busy as it was measured (a load average above
half its cores: a rate measured beside a training run is low, and should not stand for a month).
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
from .devices import gpu_driver

KEPT_S = 30 * 86_400  # a measured rate is used again for a month
KEPT_BUSY_S = 3_600  # ... or an hour, when the machine was busy as it was measured


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
    measured): :func:`measured_flops`, or the value kept from an earlier dry run (see the module doc)."""
    path = cache_file().with_name("cpu_rate.json")
    key = _machine_key(cfg)
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    hit = kept.get(key)
    if hit and time.time() - hit["time"] < _kept_for(hit):
        return hit["flops"], hit["time"]
    busy = _busy()
    flops = measured_flops(cfg)
    kept = {k: v for k, v in kept.items() if time.time() - v.get("time", 0) < _kept_for(v)}
    kept[key] = {"flops": flops, "time": time.time(), "model": cfg.model.get("name"), "busy": busy}
    try:
        atomic_write(path, json.dumps(kept, indent=1))
    except OSError:  # a cache that cannot be written: measured again next time
        pass
    return flops, kept[key]["time"]


def _kept_for(entry: dict) -> float:
    return KEPT_BUSY_S if entry.get("busy") else KEPT_S


def _busy() -> bool:
    """Whether other work holds this machine's cores: the last minute's load average above half the
    cores this process may use."""
    try:
        return os.getloadavg()[0] > len(os.sched_getaffinity(0)) / 2
    except (OSError, AttributeError):
        return False


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


TOKENS = 512  # the most tokens a measured step holds
TIMED_S = 0.3  # the least time the timed steps take together


def measured_flops(cfg: DictConfig, repeats: int = 2) -> float:
    """Training FLOP/s of this CPU on the model and length of a composed pre-training config, at
    its batch cut to TOKENS tokens, from its first two blocks (see the module doc): one warm-up
    step, then steps with one block and with two, interleaved, ``repeats`` of each at least and
    for TIMED_S at least (a small model's block takes milliseconds: more steps, less noise)."""
    import torch

    from ..config.compose import to_model_config
    from ..models import MaskedLM
    from ..models.stats import flops_per_token

    # the rate does not depend on the weights' values: normal_ initialises in a fraction of the
    # time trunc_normal_ takes on a CPU (seconds for a base-sized model)
    whole = dataclasses.replace(to_model_config(cfg.model), weight_init="normal")
    sizes = whole.layer_sizes
    depths = (1, 2) if whole.num_layers >= 2 else (1,)
    cut = {n: dataclasses.replace(whole, num_layers=n, scalar_mix=False, layer_sizes=sizes[:n] if sizes else None)
           for n in depths}  # fmt: skip
    length = int(cfg.seq_len)
    batch = max(1, min(int(cfg.trainer.batch_size), TOKENS // length))
    torch.manual_seed(0)
    model = MaskedLM(cut[depths[-1]])
    ids = torch.randint(5, whole.vocab_size, (batch, length))
    labels = torch.where(torch.rand(batch, length) < 0.15, ids, torch.full_like(ids, -100))
    blocks = model.encoder.layers

    def step(n: int) -> float:
        model.encoder.layers = blocks[:n]
        start = time.perf_counter()
        model(ids, labels=labels).loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step(depths[-1])
    times = {n: [] for n in depths}
    start = time.perf_counter()
    while len(times[1]) < repeats or time.perf_counter() - start < TIMED_S:
        for n in depths:
            times[n].append(step(n))
    f = {n: flops_per_token(m, length) * batch * length for n, m in cut.items()}
    return whole_rate({n: min(times[n]) for n in depths}, f, flops_per_token(whole, length) * batch * length)


def whole_rate(seconds: dict[int, float], flops: dict[int, float], whole_flops: float) -> float:
    """The whole model's FLOP/s from a step's ``seconds`` and ``flops`` with 1 and 2 blocks: the
    second block's FLOPs over its time is a block's rate; the whole step takes the one-block step's
    time plus the other blocks' FLOPs at that rate. With one block measured, or a second block too
    fast to time apart from the first, the deepest measured model's own rate."""
    if 2 not in seconds or seconds[2] <= seconds[1]:
        deepest = max(seconds)
        return flops[deepest] / seconds[deepest]
    block_rate = (flops[2] - flops[1]) / (seconds[2] - seconds[1])
    return whole_flops / (seconds[1] + (whole_flops - flops[1]) / block_rate)
