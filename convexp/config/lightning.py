"""The trainer's Lightning values (accelerator, strategy, precision, devices), checked as Lightning
would check them but without importing it (3-5 s with torch): a mistake is refused at once."""

from __future__ import annotations

from .ranges import choose


# Lightning's names (2.x: its AcceleratorRegistry, StrategyRegistry and precision flags), written
# here so a value is checked without importing Lightning and torch (3-5 s): a mistake is refused at
# once. tests/test_config.py checks every name against the installed Lightning. A strategy a newer
# Lightning adds is refused until it is added here (the message lists what is accepted).
LIGHTNING_NAMES = {
    # convexp runs on CPUs and GPUs (train/accel.py); "gpu" is Lightning's alias of the first GPU kind
    "accelerator": ("auto", "cpu", "gpu", "cuda", "mps"),
    "strategy": (
        "auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "fsdp", "fsdp_cpu_offload", "deepspeed",
        "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_2_offload", "deepspeed_stage_3",
        "deepspeed_stage_3_offload", "deepspeed_stage_3_offload_nvme", "single_device",
        *(f"{ddp}_find_unused_parameters_{flag}" for ddp in ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
          for flag in ("false", "true")),
    ),
    "precision": ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "64", "16",
                  "bf16", "transformer-engine", "transformer-engine-float16"),
}
LOADER_WORKERS_ON_GPU = 2  # fine-tuning's trainer.num_workers=auto on a GPU run (train/accel.py)
EXAMPLES = {"accelerator": "cpu", "strategy": "ddp", "precision": "bf16-mixed"}


def lightning_values(accelerator: str, strategy: str, precision, devices) -> None:
    """accelerator, strategy, precision and devices as Lightning accepts them (LIGHTNING_NAMES),
    without importing it; whether the hardware is here is not asked (a sweep is planned on a login
    node for GPU jobs)."""
    check_devices(devices)
    given = {"accelerator": accelerator, "strategy": strategy, "precision": str(precision)}
    for key, value in given.items():
        if key == "strategy" and value not in LIGHTNING_NAMES[key]:  # 30 names: the families, not each
            raise ValueError(
                f"trainer.strategy={value!r}: choose one of auto, ddp, ddp_spawn, ddp_fork, ddp_notebook "
                "(each also with _find_unused_parameters_true/_false), fsdp, fsdp_cpu_offload, deepspeed, "
                "deepspeed_stage_1/2/3 (2 and 3 also _offload; 3 also _offload_nvme), single_device; "
                "e.g. trainer.strategy=ddp"
            )
        choose(f"trainer.{key}", value, LIGHTNING_NAMES[key], EXAMPLES[key])
    given_devices = devices
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    cpu_count = devices == "auto" or (type(devices) is int and devices >= 1)
    if accelerator == "cpu" and not cpu_count:  # as Lightning's CPUAccelerator.parse_devices
        raise ValueError(
            f"trainer.devices={given_devices!r} with trainer.accelerator=cpu: a CPU takes a number of "
            "processes (an int > 0), not device ids; e.g. trainer.devices=1"
        )


def check_devices(devices) -> None:
    """Lightning's ``devices``: a count >= 1, -1 (all), "auto", or device ids (a list, or "0,1")."""
    ids = None
    if isinstance(devices, str) and devices != "auto":
        parts = [p.strip() for p in devices.split(",") if p.strip()]
        if parts and all(p.lstrip("-").isdigit() for p in parts):
            ids = [int(p) for p in parts]
            devices = ids[0] if len(ids) == 1 and "," not in str(devices) else ids
    ok = (
        devices == "auto"
        or (isinstance(devices, int) and not isinstance(devices, bool) and (devices >= 1 or devices == -1))
        or (isinstance(devices, (list, tuple)) and devices and len(set(devices)) == len(devices)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices))
    )
    if not ok:
        raise ValueError(
            f"trainer.devices={devices!r}: give a count >= 1, -1 (all), auto or device ids; "
            "e.g. trainer.devices=2 or trainer.devices=[0,1]"
        )
