"""Whether this machine has a GPU, asked without torch where the answer is no (importing torch takes
seconds): the checks that run before the heavy imports, and the sweep's GPU placement, ask here."""

from __future__ import annotations

import os
from pathlib import Path


def gpu_driver() -> bool:
    """Whether this machine may have a GPU torch can use, from the driver's files alone (no torch):
    NVIDIA's device nodes or /proc entry, or ROCm's /dev/kfd. False: certainly none."""
    nvidia = Path("/proc/driver/nvidia/gpus")
    return any(Path("/dev").glob("nvidia[0-9]*")) or (nvidia.is_dir() and any(nvidia.iterdir())) or Path("/dev/kfd").exists()


def gpu_visible() -> bool:
    """Whether this process can train on a GPU: none where ``CUDA_VISIBLE_DEVICES`` is empty or no
    driver is installed (no torch imported), else torch's answer."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None and not os.environ["CUDA_VISIBLE_DEVICES"].strip():
        return False
    if not gpu_driver():
        return False
    import torch

    return torch.cuda.is_available()


def refuse_the_cpu_at_paper_scale(cfg, scale: str | None, what) -> None:
    """A stage at ``scale=paper`` with ``trainer.accelerator=auto`` where no GPU is visible: refused in
    one line (``what()``: what would train on this CPU, and its cost where known), rather than a
    paper's run started on the CPU. ``trainer.accelerator=cpu`` asks for the CPU by name. ``scale``:
    the stage's composed scale choice."""
    if scale != "paper" or str(cfg.trainer.accelerator) != "auto" or gpu_visible():
        return
    from ..errors import UserError

    raise UserError(
        f"scale=paper found no GPU here (trainer.accelerator=auto): {what()}; run it where a GPU is (a sweep "
        "on SLURM: launcher=submitit), or ask for the CPU by name: trainer.accelerator=cpu"
    )
