"""The trainer's speed options (``conf/trainer/default.yaml``) and what each one turns on.

===========================  ===========  =====================================================
key                          default      effect
===========================  ===========  =====================================================
``tf32``                     true         TF32 matmuls and convolutions on CUDA (Ampere and
                                          later; ~8x fp32 throughput, 10-bit mantissa inputs).
                                          Nothing on a CPU.
``fused_adamw``              auto         PyTorch's fused AdamW kernel (one pass over all
                                          parameters, no temporaries); auto: where it has
                                          one (CUDA and CPU), except under fp16
                                          (gradient scaling). On a 2-core CPU it is 4.7x
                                          faster than the per-tensor loop for a MiniLM-sized
                                          model, same parameters to 1e-8.
``pin_memory``               auto         page-locked loader batches (asynchronous host-to-GPU
                                          copies); auto: on CUDA.
``compile``                  false        ``torch.compile``: ``blocks`` (or ``true``) every
                                          encoder block, in place (the checkpoint keys do not
                                          change); ``step`` pre-training's whole objective
                                          forward (generator, sampling, discriminator, losses)
                                          and so its backward, as one graph; ``graphs`` that
                                          graph replayed as CUDA graphs (``reduce-overhead``:
                                          one launch for the forward and one for the backward);
                                          ``whole`` (one GPU) the step from the batch to the
                                          clipped gradients captured as one CUDA graph
                                          (``captured.py``; elsewhere as ``graphs``).
                                          Fine-tuning compiles its blocks for any of them.
``gradient_checkpointing``   false        recompute each encoder block in the backward pass
                                          (long sequences: activation memory of one block).
===========================  ===========  =====================================================

``precision=bf16-mixed`` (Lightning's) is bf16 autocast: every mixer runs under it, the attention
softmax and scores of the unfused path in fp32. The attention itself always goes through
``F.scaled_dot_product_attention`` where the variant has no score term beyond q kᵀ (BERT, ConvBERT's
bottleneck heads), so that CUDA picks the flash kernel for unpadded batches and the
memory-efficient one with a padding mask; Chang et al.'s convolution terms are an additive bias
(memory-efficient kernel or the math path).

These keys change how a run executes, not what it computes (``run_names.EXECUTION_KEYS``): they are not
part of run ids.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.utils.checkpoint

from ..config.lightning import LOADER_WORKERS_ON_GPU


def on_cuda(trainer_cfg) -> bool:
    """Whether the run's accelerator is a CUDA GPU (``auto``: when one is visible)."""
    accelerator = str(trainer_cfg.accelerator)
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator == "auto" and torch.cuda.is_available()


def usable_cores() -> int:
    """The physical cores this process may run on: its CPU affinity (``taskset``, SLURM's
    ``--cpus-per-task``) with SMT siblings counted once, capped by a cgroup v2 CPU quota (a
    container's ``--cpus``)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topology / "physical_package_id").read_text().strip() + ":" + (topology / "core_id").read_text().strip())
        except OSError:  # no sysfs (macOS, some containers): every CPU counts
            cores.add(str(cpu))
    n = len(cores)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def auto_threads() -> tuple[int, str]:
    """``trainer.threads=auto``'s thread count and why: OMP_NUM_THREADS when set, else
    :func:`usable_cores`."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    return usable_cores(), "the physical cores this process may use"


_THREADS_SAID: list[str] = []


def set_threads(trainer_cfg) -> str:
    """Set torch's intra-op threads from ``trainer.threads`` (auto: OMP_NUM_THREADS when set, else
    :func:`usable_cores`) as a run starts training, and print the line that says so (once per process
    while it stays the same), after it :func:`cpu_on_gpu_host`'s note where one applies: both come
    once every input is checked, so bad input still gets its one line. Data-loader workers run one
    thread each (torch sets that in every worker)."""
    setting = trainer_cfg.get("threads", "auto")
    n, why = (int(setting), "trainer.threads") if setting != "auto" else auto_threads()
    torch.set_num_threads(n)
    line = f"threads: {n} ({why}; set trainer.threads=N)"  # 80 columns at most
    if _THREADS_SAID != [line]:
        if note := cpu_on_gpu_host(trainer_cfg):
            print(note, file=sys.stderr, flush=True)
        print(line, flush=True)
        _THREADS_SAID[:] = [line]
    return line


def new_log() -> None:
    """A new log begins (a sweep worker's next node): :func:`set_threads` says its line again."""
    _THREADS_SAID.clear()


def cpu_on_gpu_host(trainer_cfg) -> str | None:
    """The line to print when a run is set to the CPU (``scale=smoke`` is) where a CUDA GPU is
    visible; None otherwise."""
    if str(trainer_cfg.get("accelerator", "auto")) != "cpu" or not torch.cuda.is_available():
        return None
    return (
        "note: runs on the CPU (scale=smoke's trainer.accelerator=cpu); for the GPU: trainer.accelerator=gpu"
    )


def _auto(value, cuda: bool) -> bool:
    return cuda if value == "auto" else bool(value)


def fused_adamw(setting, device_type: str, precision: str = "32-true") -> bool:
    """Whether AdamW uses the fused kernel (``trainer.fused_adamw``) for parameters on
    ``device_type``. ``auto`` leaves fp16 runs unfused: their gradients are still scaled when
    they are clipped, and the fused kernel unscales them only inside its step."""
    return _auto(setting, device_type in ("cpu", "cuda") and not str(precision).startswith("16"))


def kept_word_grad(device_type: str, world_size: int) -> bool:
    """Whether fine-tuning keeps the word embedding's gradient in one dense buffer that each
    backward adds the batch's rows into (``TaskModule.on_fit_start``): one process on a CPU.

    The default backward makes a fresh dense [V, D] gradient every step (47 MB for MiniLM's
    30522 x 384 table); on a CPU the allocator maps it, zero-fills it page by page and unmaps it
    when it is freed: 3-4% of a GLUE step. A GPU's caching allocator reuses its memory; several
    processes (DDP) reduce the gradients in their own buckets: the default there."""
    return device_type == "cpu" and world_size == 1



def loader_workers(trainer_cfg) -> int:
    """Fine-tuning's loader processes (``trainer.num_workers``): ``auto`` is none on a CPU run, where
    a batch is read and padded in ~0.5 ms (one Arrow take, numpy) and a worker process would take
    a core from the step (3 ms of CPU a GLUE step for two workers, each millisecond of it stalling
    the step's threads on a 2-core machine), and two on a GPU, where they overlap the device."""
    setting = trainer_cfg.num_workers
    if setting != "auto":
        return int(setting)
    return LOADER_WORKERS_ON_GPU if on_cuda(trainer_cfg) else 0


def pin_memory(trainer_cfg, cuda: bool) -> bool:
    return _auto(trainer_cfg.pin_memory, cuda)


def set_tf32(trainer_cfg, cuda: bool) -> None:
    """Allow (or forbid) TF32 in CUDA matmuls and cuDNN convolutions for this process, as
    ``trainer.tf32`` says; on a CPU run the flags are left alone."""
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = bool(trainer_cfg.tf32)
        torch.backends.cudnn.allow_tf32 = bool(trainer_cfg.tf32)


def compile_mode(setting) -> str | None:
    """``trainer.compile`` as ``blocks``, ``step``, ``graphs`` or ``whole`` (schema.py checks the
    value), or None (eager); ``true`` is ``blocks``."""
    if setting is False or setting is None:
        return None
    return "blocks" if setting is True else str(setting)


def compile_objective(objective: torch.nn.Module, trainer_cfg, whole_step: bool = False):
    """The callable the pre-training step runs its objective with: the objective itself, or (with
    ``trainer.compile`` ``step`` / ``graphs``) its forward compiled whole, ``fullgraph`` (the
    objective reads nothing back from the device, so there is nothing to break the graph) and
    with static shapes (pre-training's are fixed).

    The compiled forward is given the batch's tensors and its ``padded`` flag only: Python ints
    that change every step (its seed, token count) would each compile a new graph. With
    ``graphs`` each call marks a new step for the CUDA-graph trees (whose outputs live in memory
    the next replay reuses; the stage clones what it keeps). A plain function, not a module, so
    the objective's parameters are not registered twice. ``whole``: with ``whole_step`` the stage
    captures the whole step itself (``captured.WholeStep``), so it compiles as ``step`` does;
    where the capture does not apply (``captured.whole_step_applies``), as ``graphs``."""
    mode = compile_mode(trainer_cfg.compile)
    if mode not in ("step", "graphs", "whole"):
        return objective
    if mode == "whole":
        mode = "step" if whole_step else "graphs"
    compiled = torch.compile(objective, fullgraph=True, dynamic=False, mode="reduce-overhead" if mode == "graphs" else None)

    def call(batch: dict):
        inputs = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        if mode == "graphs":
            torch.compiler.cudagraph_mark_step_begin()
        out = compiled({**inputs, "padded": bool(batch["padded"])})
        return type(out)(out.loss, {k: v.clone() for k, v in out.metrics.items()})

    return call


BLOCK_VARIANTS = 64  # compiled variants of Block.forward that dynamo may keep (its default: 8)


def prepare_encoders(model: torch.nn.Module, trainer_cfg, backend: str = "inductor", whole_step: bool = True) -> None:
    """Gradient checkpointing and, with ``trainer.compile=blocks``, ``torch.compile`` of every
    block of every encoder in ``model`` (ELECTRA has two). A stage that cannot compile its whole
    step (``whole_step=False``: fine-tuning, whose batches change shape) compiles its blocks for
    ``step`` and ``graphs`` too.

    All blocks share one compiled ``Block.forward``, kept in variants by what its guards see:
    the encoder's width (ELECTRA's generator is narrower), the input's dtype (under CUDA autocast
    the first block reads the bf16 embedding projection, the others fp32 LayerNorm outputs),
    padding, training or evaluation. An ELECTRA objective on a GPU needs 16 of them, and past
    dynamo's default limit of 8 every further variant silently runs eager (seen on an H200:
    ``recompile_limit (8)`` hit in a ConvBERT-small ELECTRA run), so the limit is raised to
    ``BLOCK_VARIANTS``. ``backend``: torch.compile's (the tests trace with ``aot_eager``)."""
    from ..models.encoder import Encoder

    if trainer_cfg.gradient_checkpointing and str(trainer_cfg.accelerator) == "cpu":
        # A CPU run's checkpoints keep the CPU's random state. Left at torch's default ("cuda"),
        # checkpoint refuses a forward during which CUDA came up, and on a GPU host dynamo brings
        # it up as it compiles a block inside one (seen on an H200).
        torch.utils.checkpoint.DefaultDeviceType.set_device_type("cpu")
    for encoder in (m for m in model.modules() if isinstance(m, Encoder)):
        encoder.gradient_checkpointing = bool(trainer_cfg.gradient_checkpointing)
        mode = compile_mode(trainer_cfg.compile)
        if mode == "blocks" or (mode is not None and not whole_step):
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, BLOCK_VARIANTS)
            for block in encoder.layers:
                block.compile(backend=backend)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
GLIBC_MMAP_MAX_MIB = 32  # glibc's ceiling for its adaptive threshold on 64-bit systems


@contextmanager
def heap_mmap_threshold(mib: float | None) -> Iterator[None]:
    """Inside: glibc gives every allocation of ``mib`` MiB or more its own mapping, returned to the
    system when freed (``mallopt(M_MMAP_THRESHOLD)``); ``None``, or not glibc: nothing changes.

    Fine-tuning's batches change shape every step, and glibc's adaptive threshold soon keeps every
    activation in its heap, where the freed blocks of one shape rarely fit the next: a fixed
    threshold returns them, for time. On `convexp bench finetune`'s job (MiniLM shape, 4,000 SST-2
    rows, length-grouped; one run each, quiet 2-core CPU), wall time and peak RSS by threshold:
    1 MiB 55.5 s, 1,314 MiB; 2 MiB 52.6 s, 1,319 MiB; 3 MiB 50.8 s, 1,403 MiB; 8 MiB 48.2 s,
    1,426 MiB; glibc's own 48.3 s, 1,477 MiB. With random batches (scale=paper's) and the padding
    skipped (models/encoder.real_rows), 2 MiB took 8% more of the job's training time (48.5-50.6 s
    against 44.6-44.9 s), so ``malloc_mmap_threshold_mib`` is null (glibc's own, as the plain loop
    and the Trainer have it) unless a run gives MiB to bound its heap; SQuAD's full-length windows
    lose most (every activation mapped and freed: 17.3 s of system time against 3.5 s), pre-training
    (fixed shapes, no fragmentation) 24%. Fixing the threshold ends glibc's adaptation for the
    process, so on leaving it is set to that adaptation's ceiling (32 MiB), where a long-running
    process ends up anyway."""
    libc = _glibc() if mib is not None else None
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, int(mib * 2**20))
    try:
        yield
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, GLIBC_MMAP_MAX_MIB * 2**20)


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:  # musl and others: no libc.so.6
        return None

