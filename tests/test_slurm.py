"""Sweeps on SLURM: the time estimate of --dry-run (GPU-hours, wall-clock with dependencies vs
waves), and, against the SLURM stand-in (tests/fakeslurm.py), every node submitted at once with
afterok dependencies, --status, requeue on pre-emption, a failure blocking only its dependants, and
the environment a multi-node pre-training gets."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from helpers import convexp, write_sweep

# ----------------------------------------------------------------------------- the time estimate


def _node(key: str, tflop: float, deps=()):
    from convexp.sweep.nodes import Node

    return Node(key, key.split("/")[0], key.split("/")[1], [], [], list(deps), flops=tflop * 1e12)


def test_dependencies_let_a_fast_variant_fine_tune_while_a_slow_one_pre_trains():
    """a pre-trains 10 h, b 2 h; b's fine-tuning takes 8 h, a's 1 h, on 3 GPUs at 1 TFLOP/s.
    With dependencies b's fine-tuning runs beside a's pre-training (11 h); in waves it waits for a
    (10 h, then 8 h)."""
    from convexp.sweep.schedule import job_hours, makespan, throughput

    h = 3600  # TFLOP at 1 TFLOP/s = 1 h
    nodes = [
        _node("pretrain/a", 10 * h),
        _node("pretrain/b", 2 * h),
        _node("finetune/a/rte", 1 * h, ["pretrain/a"]),
        _node("finetune/b/rte", 8 * h, ["pretrain/b"]),
    ]
    settings = OmegaConf.create({"tflops": 100, "launcher": {"gpus": 3, "tflops": 1, "nodes": 1, "gpus_per_node": 1}})
    tp = throughput(settings)
    hours = {n.key: job_hours(n, tp, 256) for n in nodes}
    assert hours == {"pretrain/a": 10, "pretrain/b": 2, "finetune/a/rte": 1, "finetune/b/rte": 8}
    m = makespan(nodes, hours, tp)
    assert m.gpu_hours == {"pretrain": 12, "finetune": 9}
    assert (m.dependencies, m.waves, m.critical) == (11, 18, 11)
    one = makespan(nodes, hours, throughput(OmegaConf.merge(settings, {"launcher": {"gpus": 1}})))
    assert (one.dependencies, one.waves) == (21, 21)  # one GPU: nothing runs beside anything
    # a job on 2 nodes x 4 GPUs takes an eighth of the time and holds 8 GPUs
    wide = throughput(OmegaConf.merge(settings, {"launcher": {"gpus": 16, "nodes": 2, "gpus_per_node": 4}}))
    assert job_hours(nodes[0], wide, 256) == 10 / 8 and wide.slots == 2


def test_device_throughput_and_bad_launcher_settings():
    from convexp.sweep.schedule import MFU, PEAK_TFLOPS, throughput
    from convexp.sweep.spec import SweepError

    base = {"tflops": 100, "launcher": {"nodes": 1, "gpus_per_node": 1, "gpus": 8, "tflops": None}}
    tp = throughput(OmegaConf.create({**base, "launcher": {**base["launcher"], "device": "h100"}}))
    assert tp.rate(256) == PEAK_TFLOPS["h100"] * MFU[0][1] and tp.rate(768) == PEAK_TFLOPS["h100"] * MFU[1][1]
    assert throughput(OmegaConf.create(base)).rate(768) == 100  # the sweep's tflops
    for bad, message in [
        ({"device": "tpu"}, "launcher.device='tpu' is not known; use one of v100, a100, h100"),
        ({"gpus": 0}, "launcher.gpus=0: give a positive number"),
        ({"tflops": -1}, "launcher.tflops=-1: give a positive number"),
        ({"gpus": 2, "gpus_per_node": 4}, "launcher.gpus=2 is fewer than one job's 4 GPUs"),
    ]:
        with pytest.raises(SweepError, match=message):
            throughput(OmegaConf.create({**base, "launcher": {**base["launcher"], **bad}}))


def test_dry_run_prints_gpu_hours_and_the_wall_clock_both_ways(tmp_path):
    sweep = write_sweep(tmp_path / "two.yaml", {"a": {}, "b": {"pretrain": ["model=convbert_small"]}})
    args = [str(sweep), "scale=smoke", "launcher=submitit", "launcher.gpus=2", "launcher.device=a100", "--dry-run"]
    res = convexp("ablate", *args, outputs=tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert "time on the cluster (a100: 312 TFLOP/s peak x MFU 3.3% / 19.2%" in res.stdout
    assert "GPU-hours: pretrain" in res.stdout and "finetune" in res.stdout
    assert "wall-clock on 2 GPUs:" in res.stdout and "with dependencies (SLURM afterok) vs" in res.stdout
    assert not (tmp_path / "out" / "runs").exists()
    res = convexp("ablate", *args[:-2], "launcher.device=k80", "--dry-run", outputs=tmp_path / "out")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "launcher.device='k80' is not known" in res.stderr
