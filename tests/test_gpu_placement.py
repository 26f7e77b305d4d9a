"""launcher=local on a machine with several GPUs (sweep/gpus.py), checked on a CPU with a fake GPU
count (CONVEXP_GPU_COUNT): each worker pinned to its own GPU(s), a k-GPU job waiting for k free
ones, at most per_gpu jobs on one card, bad values refused before anything is written."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
from helpers import SHRINK, convexp, write_sweep

from convexp.sweep.gpus import GpuPool, pool_from_settings, workers_for
from convexp.sweep.launchers import cuda_devices


def test_one_gpu_jobs_spread_then_share_up_to_per_gpu():
    pool = GpuPool([0, 1], per_gpu=2)
    assert [pool.take(1), pool.take(1)] == [[0], [1]]  # the least-loaded card first
    assert [pool.take(1), pool.take(1)] == [[0], [1]]
    assert pool.take(1) is None  # every card holds per_gpu jobs
    pool.give([1])
    assert pool.take(1) == [1]
    assert pool.take(0) == []  # a CPU job takes no GPU


def test_a_multi_gpu_job_waits_for_empty_cards_and_holds_them_whole():
    pool = GpuPool([0, 1, 2], per_gpu=2)
    one = pool.take(1)
    assert pool.take(3) is None  # GPU 0 is busy
    two = pool.take(2)
    assert sorted(two) == [1, 2]
    assert pool.take(1) == [0]  # GPU 0's second slot; 1 and 2 are the DDP job's alone
    assert pool.take(1) is None
    pool.give(two)
    pool.give(one)
    assert pool.take(-1) is None  # every GPU: GPU 0 still holds one job
    assert pool.take(1, alone=True) == [1]  # an out-of-memory retry: a card to itself
    assert pool.take(1) == [2]


def test_a_worker_sees_its_own_gpus_among_the_parents(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda_devices([2, 3]) == "2,3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,7")  # the sweep itself sees three cards
    assert cuda_devices([1]) == "5" and cuda_devices([0, 2]) == "4,7"


def test_workers_auto_is_every_gpu_slot(monkeypatch):
    monkeypatch.setenv("CONVEXP_GPU_COUNT", "4")
    launcher = {"workers": "auto", "per_gpu": 2, "gpu_ids": None}
    pool = pool_from_settings(launcher)
    assert pool.ids == [0, 1, 2, 3] and workers_for(launcher, pool) == 8
    launcher = {"workers": "auto", "per_gpu": 1, "gpu_ids": [1, 3]}
    assert workers_for(launcher, pool_from_settings(launcher)) == 2
    monkeypatch.setenv("CONVEXP_GPU_COUNT", "0")
    assert workers_for({"workers": "auto"}, pool_from_settings({"workers": "auto"})) == 1


class FakeWorkers:
    """An executor standing in for the worker processes: each job 'runs' for ``seconds`` (``longer``:
    some keys' own) in a timer thread; records which GPUs each job was given, how many ran on each
    at once and which ran beside it on its cards; ``errors``: keys whose first run returns that error."""

    def __init__(self, seconds: float = 0.15, longer: dict | None = None, errors: dict | None = None):
        self.seconds, self.lock = seconds, threading.Lock()
        self.longer, self.errors = dict(longer or {}), dict(errors or {})
        self.devices: dict[str, str] = {}
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.together: list[set] = []
        self.running: set[str] = set()
        self.on: dict[str, set] = {}  # device -> keys running on it now
        self.company: dict[str, set] = {}  # key -> every key that shared one of its cards
        self.starts: list[str] = []

    def submit(self, fn, stage, overrides, log, threads, chosen, devices):
        key = log.rsplit("/", 1)[-1].removesuffix(".log").replace("__", "/")
        future: Future = Future()
        cards = devices.split(",") if devices else []
        with self.lock:
            self.devices[key] = devices
            self.starts.append(key)
            self.running.add(key)
            self.together.append(set(self.running))
            for d in cards:
                self.now[d] = self.now.get(d, 0) + 1
                self.peak[d] = max(self.peak.get(d, 0), self.now[d])
                for other in self.on.setdefault(d, set()):
                    self.company.setdefault(key, set()).add(other)
                    self.company.setdefault(other, set()).add(key)
                self.on[d].add(key)

        def finish():
            with self.lock:
                self.running.discard(key)
                for d in cards:
                    self.now[d] -= 1
                    self.on[d].discard(key)
            future.set_result(self.errors.pop(key, None))

        threading.Timer(self.longer.get(key, self.seconds), finish).start()
        return future

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        time.sleep(self.seconds * 2)


@pytest.fixture
def gpu_sweep(tmp_path, monkeypatch):
    """Two variants; b pre-trains with DDP on 2 GPUs; every stage on the (fake) GPUs."""
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "out"))
    monkeypatch.setenv("CONVEXP_GPU_COUNT", "2")
    sweep = write_sweep(tmp_path / "s.yaml", {"a": {}, "b": {"pretrain": ["trainer.devices=2", "optim.lr=0.0002"]}})
    gpu = ["pretrain.trainer.accelerator=auto", "finetune.trainer.accelerator=auto"]
    return sweep, [*SHRINK, *gpu]


def test_the_pool_pins_each_job_and_a_ddp_job_waits_for_two_free_gpus(gpu_sweep):
    from convexp.sweep.execute import Ledger
    from convexp.sweep.launchers import run_pool
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    sweep, args = gpu_sweep
    plan = build_plan(load_sweep(str(sweep)), [*args, "launcher.workers=auto", "launcher.per_gpu=2"])
    assert {k: n.gpus for k, n in plan.nodes.items()} == {
        "pretrain/a": 1, "pretrain/b": 2, "finetune/a/rte/s42": 1, "finetune/b/rte/s42": 1,
    }  # fmt: skip
    ledger = Ledger(plan)
    fake = FakeWorkers()
    run_pool(plan, ledger, 4, GpuPool([0, 1], per_gpu=2), executor=fake)
    assert {k: o.status for k, o in ledger.outcomes.items()} == dict.fromkeys(plan.nodes, "done")
    assert fake.devices["pretrain/a"] in ("0", "1") and sorted(fake.devices["pretrain/b"].split(",")) == ["0", "1"]
    assert all(len(fake.devices[k]) == 1 for k in plan.nodes if k != "pretrain/b")
    assert max(fake.peak.values()) <= 2  # per_gpu
    # the DDP job never ran beside another job: it held both cards whole
    assert not any("pretrain/b" in group and len(group) > 1 for group in fake.together)
    assert ledger.outcomes["pretrain/b"].gpus in ([0, 1], [1, 0])


def test_one_job_per_gpu_by_default(gpu_sweep):
    from convexp.sweep.execute import Ledger
    from convexp.sweep.launchers import run_pool
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    sweep, args = gpu_sweep
    plan = build_plan(load_sweep(str(sweep)), [*args, "variants=[a]", "seeds=[1,2,3]"])
    fake = FakeWorkers()
    run_pool(plan, Ledger(plan), 4, GpuPool([0, 1], per_gpu=1), executor=fake)
    assert max(fake.peak.values()) == 1 and set(fake.devices.values()) == {"0", "1"}


@pytest.mark.parametrize(
    "extra, words",
    [
        (["launcher.per_gpu=0"], ["launcher.per_gpu", ">= 1"]),
        (["launcher.per_gpu=half"], ["launcher.per_gpu=half", "auto"]),
        (["launcher.per_gpu=auto"], ["CONVEXP_GPU_MEMORY_MIB='x'", "MiB"]),
        (["launcher.gpu_ids=[5]"], ["launcher.gpu_ids=[5]", "GPUs 0-1"]),
        (["launcher.gpu_ids=[0,0]"], ["launcher.gpu_ids", "distinct"]),
        (["launcher.workers=many"], ["launcher.workers", "auto"]),
        (["launcher.gpu_ids=[1]"], ["pretrain/b", "2 GPUs", "launcher.gpu_ids"]),  # DDP on 2 of 1
    ],
)
def test_bad_gpu_settings_are_one_line_exit_2_and_write_nothing(gpu_sweep, tmp_path, extra, words):
    sweep, args = gpu_sweep
    env = {"CONVEXP_GPU_COUNT": "2", "CONVEXP_GPU_MEMORY_MIB": "x"}  # the memory: read by per_gpu=auto only
    res = convexp("ablate", str(sweep), *args, *extra, outputs=tmp_path / "out", env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and all(w in lines[0] for w in words), lines
    assert not (tmp_path / "out" / "sweeps").exists() and not (tmp_path / "out" / "runs").exists()


def test_variants_whose_fine_tunes_are_one_run_train_it_once(tmp_path, monkeypatch):
    """Two variants that differ only in how they run (trainer.compile: not part of a run id) plan
    the same fine-tuning run: the second variant's node waits for the first's and is then cached,
    instead of two workers racing for the run's lock."""
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path / "out"))
    sweep = write_sweep(tmp_path / "s.yaml", {"a": {}, "b": {"finetune": ["trainer.compile=blocks"]}})
    plan = build_plan(load_sweep(str(sweep)), SHRINK)
    a, b = plan.nodes["finetune/a/rte/s42"], plan.nodes["finetune/b/rte/s42"]
    assert [r.dir for r in a.runs] == [r.dir for r in b.runs]
    assert "finetune/a/rte/s42" in b.deps and "finetune/b/rte/s42" not in a.deps


# ----------------------------------------------------------------------------- per_gpu=auto

GIB = 1024


def test_per_gpu_auto_packs_one_gpu_jobs_by_their_estimated_memory():
    pool = GpuPool([0, 1], "auto", card_mib=80 * GIB)  # room: 90% of a card, 72 GiB
    small = 2 * GIB
    assert [pool.take(1, small) for _ in range(4)] == [[0], [1], [0], [1]]  # several a card, spread
    assert [pool.take(1, 67 * GIB), pool.take(1, 67 * GIB)] == [[0], [1]]  # 4 + 67 GiB fit a card's 72
    assert pool.take(1, small) is None  # neither card has 2 GiB left
    pool.give([0], 67 * GIB)
    assert pool.take(1, small) == [0]
    assert pool.take(2) is None  # DDP: two empty cards, none is


def test_per_gpu_auto_runs_a_job_beyond_a_card_or_of_unknown_size_alone():
    pool = GpuPool([0], "auto", card_mib=80 * GIB)
    assert not pool.shares(100 * GIB) and not pool.shares(0) and pool.shares(2 * GIB)
    assert pool.take(1, 100 * GIB) == [0]  # never refused: it runs, alone
    assert pool.take(1, 1) is None
    pool.give([0], 100 * GIB)
    assert pool.take(1, 2 * GIB) == [0]
    assert pool.take(1, 0) is None  # unknown: waits for an empty card
    pool.give([0], 2 * GIB)
    assert pool.take(1, 0) == [0] and pool.take(1, 1) is None


def test_workers_auto_with_per_gpu_auto_is_the_smallest_jobs_a_card(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("CONVEXP_GPU_COUNT", "2")
    monkeypatch.setenv("CONVEXP_GPU_MEMORY_MIB", str(80 * GIB))
    launcher = {"workers": "auto", "per_gpu": "auto", "gpu_ids": None}
    pool = pool_from_settings(launcher)
    assert pool.card_mib == 80 * GIB and pool.room == 72 * GIB

    def job(gpus, gib):
        return SimpleNamespace(gpus=gpus, memory_mib=int(gib * GIB))

    assert workers_for(launcher, pool, [job(1, 12), job(1, 18)]) == 2 * 6  # 72 // 12 a card
    assert workers_for(launcher, pool, [job(1, 2), job(1, 30)]) == 2 * 8  # 36 fit: at most 8 a card
    assert workers_for(launcher, pool, [job(2, 1), job(0, 1), job(1, 0)]) == 2  # none known: one a card
    assert workers_for(launcher, pool, [job(1, 100)]) == 2  # beyond a card: one a card


def test_a_cards_memory_comes_from_the_env_or_nvidia_smi(monkeypatch, tmp_path):
    from convexp.sweep.gpus import MEMORY_ENV, card_mib
    from convexp.sweep.spec import SweepError

    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(SweepError, match=MEMORY_ENV):
        card_mib()
    monkeypatch.delenv(MEMORY_ENV)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with pytest.raises(SweepError, match=f"nvidia-smi.*{MEMORY_ENV}.*per_gpu=K"):
        card_mib()
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 81559\necho 40960\n")
    smi.chmod(0o755)
    assert card_mib() == 40960  # the smallest card


def _auto_plan(gpu_sweep, monkeypatch, *extra):
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_GPU_MEMORY_MIB", str(80 * GIB))
    sweep, args = gpu_sweep
    plan = build_plan(load_sweep(str(sweep)), [*args, "launcher.per_gpu=auto", *extra])
    assert all(n.memory_mib > 0 for n in plan.nodes.values())  # the estimates of the tiny models
    return plan


def test_per_gpu_auto_packs_fine_tunes_and_runs_a_big_pretraining_alone(gpu_sweep, monkeypatch):
    from convexp.sweep.execute import Ledger
    from convexp.sweep.launchers import run_pool

    plan = _auto_plan(gpu_sweep, monkeypatch, "seeds=[1,2,3]", "pretrain.trainer.devices=1")
    for n in plan.nodes.values():  # sizes as a real sweep's: b pre-trains a model beyond a card
        n.memory_mib = {"pretrain/a": 10 * GIB, "pretrain/b": 100 * GIB}.get(n.key, 2 * GIB)
    fake = FakeWorkers(longer={"pretrain/b": 1.5})
    run_pool(plan, Ledger(plan), 8, GpuPool([0, 1], "auto", card_mib=80 * GIB), executor=fake)
    assert fake.devices["pretrain/a"] == "0" and fake.devices["pretrain/b"] == "1"
    assert "pretrain/b" not in fake.company  # alone on its card the whole time
    a_tunes = {f"finetune/a/rte/s{s}" for s in (1, 2, 3)}
    assert fake.peak["0"] == 3 and {fake.devices[k] for k in a_tunes} == {"0"}  # packed, beside b's card


def test_an_out_of_memory_error_in_a_packed_job_runs_it_again_alone(gpu_sweep, monkeypatch):
    from convexp.sweep.execute import Ledger
    from convexp.sweep.launchers import run_pool

    plan = _auto_plan(gpu_sweep, monkeypatch, "variants=[a]", "seeds=[1,2]")
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    fake = FakeWorkers(errors={"finetune/a/rte/s1": oom, "pretrain/a": oom})
    ledger = Ledger(plan)
    run_pool(plan, ledger, 4, GpuPool([0], "auto", card_mib=80 * GIB), executor=fake)
    assert fake.starts.count("finetune/a/rte/s1") == 2  # run again, never lost
    assert fake.starts.count("pretrain/a") == 2  # a tiny model: it shared the card as it may
    assert {k: o.status for k, o in ledger.outcomes.items()} == dict.fromkeys(plan.nodes, "done")


def test_the_dry_runs_placement_says_the_estimates_within_80_columns(gpu_sweep, monkeypatch):
    from convexp.sweep.show import placement_lines

    plan = _auto_plan(gpu_sweep, monkeypatch, "launcher.workers=auto")
    lines = placement_lines(plan, 80)
    text = " ".join(lines)
    assert all(len(line) <= 80 for line in lines), lines
    assert "16 workers on GPUs 0,1 (80 GiB cards)" in text  # the tiny jobs: 8 a card (the cap)
    assert "per_gpu=auto" in text and "90%" in text and "→ up to 8 a card" in text
    pre, tune = (plan.nodes[k].memory_mib / GIB for k in ("pretrain/a", "finetune/a/rte/s42"))
    assert f"pre-training ~{pre:.2g} GiB" in text and f"fine-tunes ~{tune:.2g} GiB" in text
