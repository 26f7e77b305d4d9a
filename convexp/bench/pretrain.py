"""``convexp bench pretrain``: the ``pretrain`` stage's throughput against its bare training step.

One invocation, one composed pre-training config (any ``convexp pretrain`` overrides; default
``scale=smoke``), the same model, batch and length for both:

* **bare step**: the stage's objective on one fixed batch of the stage's own data, masked once —
  forward, backward, gradient clipping (when ``optim.grad_clip`` is set) and AdamW, under the
  trainer's precision; mean wall time of ``--steps`` calls after two warm-up steps (a mean, as
  the stage's tokens/s is: tokens over wall time). Timed before and after the stage
  (the machine may be shared: the two bracket it) and reported as the mean of both.
* **stage**: ``convexp pretrain`` itself, run to ``trainer.max_steps`` in a scratch run store
  (the data cache is shared with the real one), reporting the tokens/s its own log records:
  real (non-padding) training tokens per second of wall time between training batches,
  validation excluded, everything else (data loading, masking, logging, checkpoint writes)
  included.

Both count real tokens, so the ratio stage / bare is the share of the step's speed the stage
keeps. Memory (Linux): what the bare steps add to the resident memory at their peak
(activations, gradients, AdamW state), and the process's peak resident memory over the whole
benchmark (the stage included). The record (configuration, the numbers, ratio, torch version,
threads) is printed and written as JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

DEFAULT_OVERRIDES = ("scale=smoke",)


def _autocast(precision: str, device: torch.device):
    if str(precision).startswith("bf16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def profile_steps(step, device: torch.device, steps: int = 3) -> None:
    """Print where ``steps`` bare steps spend their time (torch.profiler: the top operators by
    device time on a GPU, by CPU time on a CPU) and the kernels launched per step."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=60))
    if device.type == "cuda":
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy = sum(e.device_time for e in kernels) / 1e3 / steps
        print(f"per step: {len(kernels) / steps:.0f} kernels, {busy:.2f} ms of kernel time")


def bare_step(cfg, data, steps: int, profile: bool = False) -> dict:
    """Mean seconds of one training step of the stage's objective on its first batch, and the
    batch's real tokens. ``cfg`` is composed, ``data`` the prepared data. On the device the stage
    trains on (a GPU when ``trainer.accelerator`` picks one), with the stage's own compile mode,
    AdamW kernel and precision; GPU steps are timed between a device synchronisation before the
    first and after the last."""
    import dataclasses

    from ..config.compose import to_model_config
    from ..train.accel import fused_adamw, on_cuda, prepare_encoders, set_tf32
    from ..train.captured import WARMUP_STEPS, WholeStep
    from ..train.common import adamw_with_linear_schedule, per_device_batch
    from ..tasks.pretraining.batches import numpy_rows, stack_rows
    from ..tasks.pretraining.chunks import compact_columns
    from ..tasks.pretraining.stage import PretrainModule, token_info
    from ..train.streams import PermutedStream

    tok = data.tokenizer
    model_cfg = dataclasses.replace(
        to_model_config(cfg.model), vocab_size=tok.vocab_size, pad_token_id=tok.pad_id
    )
    device = torch.device("cuda" if on_cuda(cfg.trainer) else "cpu")
    set_tf32(cfg.trainer, device.type == "cuda")
    torch.manual_seed(cfg.seed)
    module = PretrainModule(model_cfg, cfg, token_info(tok), cfg.trainer.max_steps)
    columns = compact_columns(cfg.objective.pair_format in ("nsp", "sop"))
    stream = PermutedStream(data.train, cfg.seed, columns)
    size = per_device_batch(cfg.trainer.batch_size, cfg.trainer)
    batch = stack_rows(numpy_rows(data.train, columns), [stream.row_index(i) for i in range(size)], columns)
    batch = module.mask(batch, cfg.seed)
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    prepare_encoders(module.objective, cfg.trainer)
    module.objective.to(device)
    o = cfg.optim
    opt = adamw_with_linear_schedule(
        module.objective, cfg.optim.lr, o.betas, o.eps, o.weight_decay, o.warmup_steps, cfg.trainer.max_steps,
        fused=fused_adamw(cfg.trainer.fused_adamw, device.type, cfg.trainer.precision),
    )["optimizer"]
    module.objective.train()
    params = [p for p in module.objective.parameters() if p.requires_grad]
    whole = None if module.automatic_optimization else WholeStep(
        module.train_objective, params, o.grad_clip, capture=device.type == "cuda"
    )  # trainer.compile=whole on one GPU: the stage's captured step (captured.py)

    def step() -> None:
        torch.manual_seed(batch["seed"])
        if whole is not None:
            with _autocast(cfg.trainer.precision, device):
                whole(batch)
            opt.step()
            return
        with _autocast(cfg.trainer.precision, device):
            loss = module.train_objective(batch).loss
        loss.backward()
        if o.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, o.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    resident = _resident_mib()
    captures = WARMUP_STEPS + 1 if whole is not None else 0  # eager steps, then the capture
    for _ in range((3 if device.type == "cuda" else 2) + captures):  # warm-up (a compiled step compiles here)
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = (time.perf_counter() - start) / steps
    if profile:
        profile_steps(step, device)
    gpu_mib = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    return {
        "seconds": seconds,
        "tokens": float(batch["attention_mask"].sum()),
        # what training adds to the model and batch (activations, gradients, AdamW state): a lower
        # bound when the process had peaked higher before (preparing data)
        "memory_mib": gpu_mib if gpu_mib is not None else max(0.0, _peak_rss_mib() - resident),
        "device": device.type,
    }


def _batch_tokens(cfg, data) -> float:
    """The real tokens of the stage's first batch (what :func:`bare_step` times on)."""
    from ..train.common import per_device_batch
    from ..tasks.pretraining.chunks import COMPACT_COLUMNS
    from ..train.streams import PermutedStream

    stream = PermutedStream(data.train, cfg.seed, COMPACT_COLUMNS)
    size = per_device_batch(cfg.trainer.batch_size, cfg.trainer)
    return float(sum(int(stream[i]["length"]) for i in range(size)))  # real tokens of each row


def _resident_mib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * int(Path("/proc/self/statm").read_text().split()[1]) / 2**20


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def stage_tokens_per_s(cfg, profile: bool = False) -> dict:
    """Run the stage on ``cfg`` (its outputs a scratch store); its own tokens/s and wall time, and
    with ``profile`` where its steps' time goes (stage_profile.py), timed from its middle on."""
    from ..tasks.pretraining.runs import pretrain_run
    from ..tasks.pretraining.stage import run_pretrain
    from .stage_profile import PHASE_STEPS, PROFILE_STEPS, StageProfile

    steps = int(cfg.trainer.max_steps)
    probe = StageProfile(start=max(3, steps - PHASE_STEPS - PROFILE_STEPS - 5)) if profile else None
    run = run_pretrain(cfg, pretrain_run(cfg), callbacks=(probe,) if probe else ())
    m = json.loads((run.dir / "metrics.json").read_text())
    out = {"tokens_per_s": m["tokens_per_s"], "wall_time_s": m["wall_time_s"], "steps": m["steps"],
           "final_train_loss": m["final_train_loss"], "val_loss": m["val_loss"]}  # fmt: skip
    if probe is not None:
        out["profile"] = probe.result
    return out


def bench_pretrain(
    overrides: list[str], steps: int, record_dir: Path | None = None, profile: bool = False, bare: bool = True
) -> dict:
    """Bare step, stage, bare step (interleaved on a shared machine); returns the record, also
    written to ``record_dir`` (default ``<outputs>/bench``) as ``pretrain-<UTC time>.json``.
    ``bare=False``: the stage alone (with ``trainer.compile=graphs`` each bare step compiles for
    minutes); the record's bare-step fields are then null."""
    from omegaconf import open_dict

    from ..config.compose import compose_stage
    from ..tasks.pretraining.pretraining import prepare_pretraining_data

    cfg = compose_stage("pretrain", [*DEFAULT_OVERRIDES, *overrides])
    outputs = Path(cfg.outputs)
    scratch = Path(tempfile.mkdtemp(prefix="convexp-bench-pretrain-"))
    try:
        (outputs / "cache").mkdir(parents=True, exist_ok=True)
        (scratch / "cache").symlink_to((outputs / "cache").resolve(), target_is_directory=True)
        with open_dict(cfg):
            cfg.outputs = str(scratch)
            cfg.resume = False
        data = prepare_pretraining_data(
            cfg.data, cfg.tokenizer, cfg.seq_len, scratch / "cache", cfg.seed, cfg.objective.pair_format
        )
        before = bare_step(cfg, data, steps, profile) if bare else None
        stage = stage_tokens_per_s(cfg, profile)
        after = bare_step(cfg, data, steps) if bare else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = statistics.mean([before["seconds"], after["seconds"]]) if bare else None
    real_tokens = before["tokens"] if bare else _batch_tokens(cfg, data)
    bare_rate = real_tokens / seconds if bare else None
    cuda = torch.cuda.is_available() and (before["device"] if bare else cfg.trainer.accelerator) != "cpu"
    from .jobs import cpu_name

    record = {
        "benchmark": "pretrain",
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "overrides": [*DEFAULT_OVERRIDES, *overrides],
        "model": cfg.model.name,
        "objective": cfg.objective.name,
        "batch_size": cfg.trainer.batch_size,
        "seq_len": cfg.seq_len,
        "precision": cfg.trainer.precision,
        "stage_steps": stage["steps"],
        "bare_steps": steps if bare else 0,
        "bare_step_s": [before["seconds"], after["seconds"]] if bare else None,
        "bare_tokens_per_s": bare_rate,
        "bare_step_memory_mib": before["memory_mib"] if bare else None,  # GPU: the device's peak allocation
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "cpu": cpu_name(),  # the plots' machine on a CPU run
        "peak_rss_mib": _peak_rss_mib(),
        "stage_tokens_per_s": stage["tokens_per_s"],
        "stage_wall_time_s": stage["wall_time_s"],
        "stage_final_train_loss": stage["final_train_loss"],  # the same losses in every compile mode
        "stage_val_loss": stage["val_loss"],
        "ratio": stage["tokens_per_s"] / bare_rate if bare else None,
        "bare_steps_per_s": 1.0 / seconds if bare else None,
        "stage_steps_per_s": stage["tokens_per_s"] / real_tokens,  # the first batch's real tokens per step
        "stage_profile": stage.get("profile"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),  # the plots say how busy the machine was
    }
    out = Path(record_dir) if record_dir else outputs / "bench"
    out.mkdir(parents=True, exist_ok=True)
    stamp = record["time"].replace(":", "").replace("+0000", "Z")
    path = out / f"pretrain-{stamp}.json"
    path.write_text(json.dumps(record, indent=1))
    record["path"] = str(path)
    return record


def print_record(record: dict) -> None:
    from rich.table import Table

    from .step import console

    table = Table(
        title=f"pretrain stage vs bare step: {record['model']} {record['objective']}, "
        f"batch {record['batch_size']} x length {record['seq_len']}, {record['precision']}, {record['device']}"
    )
    memory = "step memory MiB" if record["device"] == "cpu" else "GPU peak MiB"
    for col in ("bare step tok/s", "stage tok/s", "stage / bare", "bare steps/s", "stage steps/s", memory,
                "peak RSS MiB"):  # fmt: skip
        table.add_column(col, justify="right")
    def cell(key: str, form: str) -> str:
        return "-" if record[key] is None else format(record[key], form)

    table.add_row(
        cell("bare_tokens_per_s", ",.0f"), cell("stage_tokens_per_s", ",.0f"), cell("ratio", ".2f"),
        cell("bare_steps_per_s", ",.1f"), cell("stage_steps_per_s", ",.1f"),
        cell("bare_step_memory_mib", ",.0f"), cell("peak_rss_mib", ",.0f"),
    )  # fmt: skip
    out = console()
    if record.get("stage_profile") is not None:
        from .stage_profile import print_profile

        print_profile(record["stage_profile"], out)
    out.print(table)
    out.print(f"record: {record['path']}")
