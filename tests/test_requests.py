"""A paper-scale study on a GPU cluster (issue 63): each SLURM job asks for what its own node trains
on (sweep/requests.py), the dry run prints the request the submission makes, SLURM's partition is
asked before anything is submitted, a stage at scale=paper is its paper's run, and one that finds
no GPU says so instead of training a million steps on the CPU."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from convexp.sweep.rates import pack_gain
from helpers import convexp, write_sweep

# a paper-shaped sweep, sizes shrunk: a pre-training on 2 nodes x 4 GPUs (DDP), an ELECTRA pre-training
# on one GPU, and each variant's GLUE and SQuAD fine-tunes; trained on GPUs where they run
SHAPED = {
    "ddp": {"pretrain": ["trainer.devices=4", "trainer.num_nodes=2", "trainer.strategy=ddp"]},
    "electra": {"pretrain": ["objective=electra"]},
}
ON_GPUS = ["scale=smoke", "trainer.accelerator=auto", "tasks=[rte,squad1]", "launcher=submitit"]


def _plan(tmp_path, *args: str, variants=SHAPED):
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    sweep = write_sweep(tmp_path / "shaped.yaml", variants)
    return build_plan(load_sweep(str(sweep)), [*ON_GPUS, f"outputs={tmp_path / 'out'}", *args])


def _jobs(plan, partition=None):
    from convexp.sweep.requests import cluster_throughput, plan_jobs

    todo = list(plan.order())
    return {j.key: j for j in plan_jobs(todo, todo, cluster_throughput(plan, todo), plan.settings.launcher, partition)}


def test_each_job_asks_for_what_its_node_trains_on(tmp_path):
    plan = _plan(tmp_path)
    jobs = _jobs(plan)
    ddp, electra = jobs["pretrain/ddp"].request, jobs["pretrain/electra"].request
    # DDP: 2 nodes x 4 GPUs, a task a GPU, each task its loader workers (none at smoke) + 2 CPUs
    assert (ddp.nodes, ddp.gpus_per_node, ddp.tasks_per_node, ddp.cpus_per_task, ddp.gpus) == (2, 4, 4, 2, 8)
    assert (electra.nodes, electra.gpus_per_node, electra.tasks_per_node) == (1, 1, 1)
    node = plan.nodes["pretrain/ddp"]
    assert ddp.mem_gb == math.ceil(node.host_mib / 1024) and node.host_mib > 4 * 1024  # four processes a node
    for task in ("rte", "squad1"):
        r, n = jobs[f"finetune/electra/{task}/s42"].request, plan.nodes[f"finetune/electra/{task}/s42"]
        assert (r.nodes, r.gpus_per_node, r.tasks_per_node, r.cpus_per_task) == (1, 1, 1, n.workers + 2)
    paper = _plan(tmp_path, "finetune.scale=paper", "variants=electra", "tasks=[rte]")
    assert paper.nodes["finetune/electra/rte/s42"].workers == 2  # auto: two loader workers on a GPU
    # time: the estimate at the measured rate, with its margin, in whole 5 minutes, at least 15
    assert all(j.request.time_min >= 15 and j.request.time_min % 5 == 0 for j in jobs.values())
    # the same sweep trained on the CPU asks for no GPU, and for its threads
    cpu = _jobs(_plan(tmp_path, "trainer.accelerator=cpu", "trainer.threads=3"))
    assert {j.request.gpus for j in cpu.values()} == {0}
    assert cpu["finetune/electra/rte/s42"].request.cpus_per_task == 3
    assert cpu["pretrain/ddp"].request.tasks_per_node == 4  # DDP on the CPU: still a task a device


def test_the_launcher_keys_override_every_job_and_the_partition_caps_them(tmp_path):
    from convexp.sweep.slurm import Partition

    jobs = _jobs(_plan(tmp_path, "launcher.gpus_per_node=8", "launcher.mem_gb=100", "launcher.timeout_min=60"))
    assert {(j.request.gpus_per_node, j.request.mem_gb) for j in jobs.values()} == {(8, 100)}
    assert {j.request.time_min for j in jobs.values()} <= set(range(15, 61))
    small = Partition("p", 8, 64, 50 * 1024, 10)
    capped = _jobs(_plan(tmp_path, "launcher.mem_gb=100"), small)
    assert {j.request.mem_gb for j in capped.values()} == {50}
    assert {j.request.time_min for j in capped.values()} == {10}  # the partition's limit: requeued there
    assert all(set(j.capped) == {"time", "memory"} for j in capped.values())


def test_time_asked_for_an_estimate():
    from convexp.sweep.requests import MIN_TIME_MIN, STARTUP_MIN, TIME_MARGIN, time_min

    assert time_min(0.0, 4320) == (4320, False)  # unknown: the ceiling
    assert time_min(0.01, 4320) == (MIN_TIME_MIN, False)
    minutes, cut = time_min(10.0, 4320)
    assert minutes == math.ceil((600 * TIME_MARGIN + STARTUP_MIN) / 5) * 5 and not cut
    assert time_min(100.0, 2880) == (2880, True)  # a longer job is requeued at its limit and resumes


def test_a_partition_that_cannot_hold_a_job_is_refused_in_one_line(tmp_path):
    from convexp.sweep.requests import check_partition
    from convexp.sweep.slurm import Partition
    from convexp.sweep.spec import SweepError

    plan = _plan(tmp_path)
    jobs = list(_jobs(plan).values())
    launcher = plan.settings.launcher
    parts = {"gpu": Partition("gpu", 8, 64, 512_000, 2880, default=True), "cpu": Partition("cpu", 0, 64, 256_000, None),
             "small": Partition("small", 2, 64, 256_000, None), "thin": Partition("thin", 8, 4, 256_000, None)}  # fmt: skip
    assert check_partition(jobs, launcher, parts).name == "gpu"  # the default
    assert check_partition(jobs, launcher, None) is None  # SLURM not asked: nothing checked
    cases = [
        ("cpu", "launcher.partition=cpu has no GPUs (sinfo: no gpu in its nodes' GRES), but pretrain/ddp trains on 8 GPUs: "
                "send it to launcher.partition=gpu, or train on the CPU (trainer.accelerator=cpu)"),
        ("small", "pretrain/ddp asks for 4 GPUs a node but launcher.partition=small's nodes have 2"),
        ("thin", "pretrain/ddp asks for 8 CPUs a node (4 tasks x 2) but launcher.partition=thin's nodes have 4"),
        ("nope", "launcher.partition='nope': SLURM has no such partition; sinfo lists: gpu, cpu, small, thin"),
    ]  # fmt: skip
    for name, line in cases:
        with pytest.raises(SweepError) as e:
            check_partition(jobs, OmegaConf.merge(launcher, {"partition": name}), parts)
        assert str(e.value).startswith(line), str(e.value)
    no_default = {k: v for k, v in parts.items() if k != "gpu"}
    with pytest.raises(SweepError, match="SLURM has no default partition; name one: launcher.partition=NAME"):
        check_partition(jobs, launcher, no_default)


def test_fine_tunes_pack_several_to_a_gpu_job_as_the_local_pool_packs_them(tmp_path, monkeypatch):
    plan = _plan(tmp_path, "launcher.per_gpu=2", "seeds=[1,2,3]", variants={"electra": SHAPED["electra"]})
    jobs = _jobs(plan)
    packs = [j for j in jobs.values() if len(j.nodes) > 1]
    # rte's and squad1's three seeds each, all waiting for the same pre-training: three packs of two
    assert sorted(len(j.nodes) for j in jobs.values() if j.stage == "finetune") == [2, 2, 2]
    for j in packs:
        r, member = j.request, plan.nodes[j.nodes[0].key]
        assert r.gpus == 1 and j.deps == ["pretrain/electra"]
        assert r.cpus_per_task == 2 * (member.workers + 2) and r.mem_gb == 2 * math.ceil(member.host_mib / 1024)
        # one after another, over what two small fine-tunes were measured to gain by sharing a card
        gain = pack_gain(2, member.workload.width)[0]
        assert gain > 1.5 and j.hours == pytest.approx(sum(jobs_hours(plan, n) for n in j.nodes) / gain)
    # by memory: CONVEXP_GPU_MEMORY_MIB's card holds as many as fit its 90%
    mib = plan.nodes["finetune/electra/rte/s1"].memory_mib
    monkeypatch.setenv("CONVEXP_GPU_MEMORY_MIB", str(int(mib * 2 / 0.9) + 1))
    auto = _jobs(_plan(tmp_path, "launcher.per_gpu=auto", "seeds=[1,2,3]", variants={"electra": SHAPED["electra"]}))
    assert max(len(j.nodes) for j in auto.values()) == 2


def jobs_hours(plan, node) -> float:
    from convexp.sweep.requests import cluster_throughput

    return cluster_throughput(plan, [node]).hours(node)


def test_a_node_another_reads_is_never_packed(tmp_path):
    """Chang et al.'s protocol starts RTE, MRPC and STS-B from the MNLI run: that run is a job of its own."""
    from convexp.sweep.plan import build_plan
    from convexp.sweep.requests import cluster_throughput, plan_jobs
    from convexp.sweep.spec import load_sweep

    plan = build_plan(load_sweep("key-based-conv"), ["scale=smoke", "trainer.accelerator=auto", "launcher=submitit",
                                                      "launcher.per_gpu=4", "variants=composite"])  # fmt: skip
    todo = list(plan.order())
    jobs = plan_jobs(todo, todo, cluster_throughput(plan, todo), plan.settings.launcher)
    read = {d for n in todo for d in n.deps if d.startswith("finetune/")}
    assert read and all(len(j.nodes) == 1 for j in jobs if j.nodes[0].key in read)
    assert any(len(j.nodes) > 1 for j in jobs)


class _Recorder:
    """A submitit executor that records each array's parameters instead of submitting it."""

    def __init__(self):
        self.params, self.arrays, self.n = {}, [], 0

    def update_parameters(self, **kw):
        self.params.update(kw)

    def map_array(self, fn, *args):
        import types

        self.arrays.append((dict(self.params), type(fn).__name__, args))
        out = []
        for _ in args[0]:
            self.n += 1
            out.append(types.SimpleNamespace(job_id=f"7_{self.n}", paths=types.SimpleNamespace(stderr="err", stdout="out")))
        return out


def test_the_submission_asks_for_what_the_dry_run_printed(tmp_path, monkeypatch):
    from convexp.sweep import launchers
    from convexp.sweep.execute import Ledger
    from convexp.sweep.requests import slurm_jobs

    plan = _plan(tmp_path, "launcher.cluster=slurm", "launcher.additional={account: myproj, qos: high}")
    recorder = _Recorder()
    monkeypatch.setattr(launchers, "make_executor", lambda plan, cfg: recorder)
    monkeypatch.setattr(launchers, "_submit_array", lambda plan, ex, group: ex.map_array(object(), group))
    ledger = Ledger(plan)
    launchers.submit_plan(plan, ledger, plan.settings.launcher)
    printed, _, _ = slurm_jobs(plan, list(plan.order()), asked=False)
    asked = {}
    for params, _, (group,) in recorder.arrays:
        assert params["slurm_additional_parameters"]["account"] == "myproj"
        assert params["slurm_additional_parameters"]["qos"] == "high"
        for job in group:
            asked[job.key] = {k: params[k] for k in job.request.params()}
    assert asked == {j.key: j.request.params() for j in printed}
    # one array a (dependencies, request): the DDP pre-training alone, each variant's fine-tunes by task
    assert len(recorder.arrays) == len({(tuple(j.deps), j.request) for j in printed})


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The SLURM stand-in's commands on PATH (sinfo: partitions gpu, 8 GPUs a node, the default; cpu)."""
    import os

    import fakeslurm

    env = fakeslurm.install(tmp_path / "bin", tmp_path / "slurm")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield {**os.environ, **env}
    fakeslurm.shutdown(tmp_path / "slurm")


def test_the_dry_run_prints_each_class_of_job_and_refuses_a_partition_without_gpus(tmp_path, stand_in):
    sweep = write_sweep(tmp_path / "shaped.yaml", SHAPED)
    out = tmp_path / "out"
    res = convexp("ablate", str(sweep), *ON_GPUS, "--dry-run", outputs=out, env=stand_in)
    assert res.returncode == 0, res.stderr[-2000:]
    text = res.stdout
    assert "jobs on SLURM (partition gpu: 8 GPUs, 64 CPUs, 500 GB a node, 2-00:00 at most (sinfo)" in text
    assert "pre-training: 1 job, 2 nodes x 4 GPUs, 4 tasks a node, 2 CPUs a task" in text, text
    assert "pre-training: 1 job, 1 GPU, 2 CPUs a task" in text and "fine-tuning: 4 jobs, 1 GPU, 2 CPUs a task" in text
    lines = [ln for ln in text.split("jobs on SLURM")[1].splitlines() if ln.startswith(("  pre-training: ", "  fine-tuning: "))]
    assert [ln.split(":")[0].strip() for ln in lines] == ["pre-training", "pre-training", "fine-tuning"]
    assert "rates (h100: the rates measured on a card" in text and "GPU-hours: pretrain" in text
    res = convexp("ablate", str(sweep), *ON_GPUS, "launcher.partition=cpu", "--dry-run", outputs=out, env=stand_in)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "launcher.partition=cpu has no GPUs" in res.stderr and "send it to launcher.partition=gpu" in res.stderr
    # submitted for real: refused the same way, before anything is written or submitted
    res = convexp("ablate", str(sweep), *ON_GPUS, "launcher.partition=cpu", outputs=out, env=stand_in)
    assert res.returncode == 2 and "launcher.partition=cpu has no GPUs" in res.stderr, res.stderr
    assert not out.exists() or not any(out.rglob("*.json")), sorted(out.rglob("*"))
    # a CPU stage goes to the CPU partition
    res = convexp("ablate", str(sweep), *ON_GPUS, "trainer.accelerator=cpu", "launcher.partition=cpu", "--dry-run",
                  outputs=out, env=stand_in)  # fmt: skip
    assert res.returncode == 0 and "partition cpu: no GPU" in res.stdout, res.stderr


# ----------------------------------------------------------------------------- a stage at scale=paper


@pytest.mark.parametrize(
    "model, corpus, tokenizer, objective, examples",
    [
        ("convbert_small", "Skylion007/openwebtext", "pretrained", "electra", "electra"),
        ("chang_small_composite", None, "unigram", "mlm", "sentence_pairs"),
        ("bert_base", "Skylion007/openwebtext", "pretrained", "mlm", "packed"),
    ],
)
def test_a_stage_at_paper_scale_composes_its_papers_corpus_vocabulary_and_objective(
    model, corpus, tokenizer, objective, examples
):
    from convexp.config.compose import compose_stage

    cfg = compose_stage("pretrain", [f"model={model}", "scale=paper"])
    parts = [p.path for p in cfg.data.parts] if cfg.data.get("parts") else [cfg.data.path]
    assert (corpus in parts if corpus else "bookcorpus" in str(parts).lower()), parts
    assert cfg.data.source == "hub" and cfg.tokenizer.kind == tokenizer and cfg.objective.name == objective
    assert cfg.data.examples == examples and cfg.trainer.precision == "32-true"  # the authors' fp32
    assert "paper" not in cfg.recipe  # applied, then dropped: not part of the run id
    # the command line wins, and smoke stays a laptop's run
    assert compose_stage("pretrain", [f"model={model}", "scale=paper", "data=wikitext103"]).choices.data == "wikitext103"
    smoke = compose_stage("pretrain", [f"model={model}", "scale=smoke"])
    assert smoke.data.source == "synthetic" and smoke.objective.name == "mlm"


def test_synthetic_data_at_paper_scale_only_by_name(tmp_path):
    from convexp.config.compose import compose_stage

    assert compose_stage("pretrain", ["scale=paper", "data=synthetic"]).data.source == "synthetic"
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - electra_small\n  - _self_\nrecipe:\n  name: mine\n  paper: {corpus: null}\n"
    )
    res = convexp("--user-dir", str(tmp_path), "pretrain", "scale=paper", "recipe=mine", outputs=tmp_path / "out")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "scale=paper would train on the synthetic corpus: recipe mine names no corpus" in res.stderr
    assert "ask for the synthetic corpus by name: data=synthetic" in res.stderr
    assert not (tmp_path / "out").exists()


def test_a_paper_scale_stage_without_a_gpu_stops_at_once_with_its_cpu_cost(tmp_path):
    res = convexp("pretrain", "model=convbert_small", "scale=paper", outputs=tmp_path / "out", env={"CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    line = res.stderr.strip()
    assert line.startswith("error: scale=paper found no GPU here (trainer.accelerator=auto): its 1,000,000 steps")
    assert "days (1.8e+18 training FLOPs at" in line and "GFLOP/s measured on it" in line
    assert line.endswith("or ask for the CPU by name: trainer.accelerator=cpu")
    assert not (tmp_path / "out").exists()
