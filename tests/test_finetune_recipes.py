"""The fine-tuning recipes as the papers and their code ran them (conf/protocol/), read from the
composed config: every protocol x model size x task against the values below with their sources;
ConvBERT's grid at scale=paper in its sweeps (and what the dry-run counts for it); ``--cfg`` shows
no null for a value the run uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from convexp.cli import app
from convexp.config.compose import compose_stage
from convexp.errors import UserError
from convexp.tasks import Invocation, command
from convexp.tasks.finetune_runs import hyperparameters

SMALL, BASE = 256, 768  # ConvBERT-small / ELECTRA-small width; BERT-base / ConvBERT-base width
GLUE = ("mnli", "qqp", "qnli", "sst2", "cola", "stsb", "mrpc", "rte", "wnli")

# --- the papers' / reference code's values ------------------------------------------------------
# ConvBERT = ELECTRA's fine-tuning code (yitu-opensource/ConvBert configure_finetuning.py = C-ft,
# google-research/electra configure_finetuning.py = E-ft, model/optimization.py = E-opt):
#   lr 3e-4 small (C-ft:154), 1e-4 base (C-ft:156); batch 32 (E-ft:73); 3 epochs, 10 for RTE and
#   STS-B (E-ft:136-146), 2 for SQuAD; warm-up 10% (E-ft:60); layer-wise decay 0.8 (E-ft:56);
#   weight decay 0.01 (E-ft:55); Adam eps 1e-6, betas 0.9/0.999, clip 1.0 (E-opt:53-55, 62).
CONVBERT = {"batch_size": 32, "warmup_fraction": 0.1, "layerwise_lr_decay": 0.8, "weight_decay": 0.01}
CONVBERT |= {"adam_epsilon": 1e-6, "adam_betas": [0.9, 0.999], "grad_clip": 1.0}
CONVBERT_LR = {SMALL: 3e-4, BASE: 1e-4}
CONVBERT_EPOCHS = {"rte": 10, "stsb": 10, "squad1": 2, "squad2": 2}  # else 3
# Chang et al.: mlpc-ucsd/BERT_Convolutions run_glue.py (Ch-glue) with HF Trainer defaults
# (training_args.py = Ch-args): lr 3e-4, QNLI 1e-4, base 1e-4 (Ch-glue:237,251,255); batch 32,
# MNLI/QQP 128 (Ch-glue:238,243); steps = 3 epochs, 10 RTE/STS-B, 4 MNLI/QQP at batch 128, 5 WNLI
# (Ch-glue:235-246); warm-up max_steps // 10; no layer-wise decay; weight decay 0, Adam eps 1e-8,
# betas 0.9/0.999, clip 1.0 (Ch-args:207-211).
CHANG = {"warmup_fraction": 0.1, "layerwise_lr_decay": 1.0, "weight_decay": 0.0}
CHANG |= {"adam_epsilon": 1e-8, "adam_betas": [0.9, 0.999], "grad_clip": 1.0}
CHANG_EPOCHS = {"rte": 10, "stsb": 10, "mnli": 4, "qqp": 4, "wnli": 5}  # else 3
CHANG_BATCH = {"mnli": 128, "qqp": 128}  # else 32
# BERMO appendix A.1.1 (lr 5e-5, 3 epochs, batch 32; SQuAD batch 16) with Sanh et al.'s script
# defaults (no warm-up, no weight decay, Adam eps 1e-8, clip 1.0); §4: mixing scalars at 1e-2.
# Fine-pruning: lr 3e-5 (Tables 6, 8, 9), epochs SST-2 25 (T6), MNLI 6, QQP 10, SQuAD 10 (T8-T10),
# Sanh et al.'s 10 elsewhere.
BERMO = {"lr": 5e-5, "epochs": 3, "warmup_fraction": 0.0, "layerwise_lr_decay": 1.0, "weight_decay": 0.0}
BERMO |= {"adam_epsilon": 1e-8, "adam_betas": [0.9, 0.999], "grad_clip": 1.0, "scalar_mix_lr": 1e-2}
BERMO_PRUNING_EPOCHS = {"sst2": 25, "mnli": 6, "qqp": 10, "squad1": 10}  # else 10


def expected(protocol: str, task: str, width: int, pruning: bool = False) -> dict:
    if protocol == "convbert":
        return {**CONVBERT, "lr": CONVBERT_LR[width], "epochs": CONVBERT_EPOCHS.get(task, 3)}
    if protocol == "chang":
        lr = 1e-4 if width == BASE or task == "qnli" else 3e-4
        return {**CHANG, "lr": lr, "epochs": CHANG_EPOCHS.get(task, 3), "batch_size": CHANG_BATCH.get(task, 32)}
    batch = 16 if task.startswith("squad") else 32
    if pruning:
        return {**BERMO, "lr": 3e-5, "epochs": BERMO_PRUNING_EPOCHS.get(task, 10), "batch_size": batch}
    return {**BERMO, "batch_size": batch}


def recipe(*overrides: str, width: int) -> list[dict]:
    return hyperparameters(compose_stage("finetune", ["init=x", "grid=false", *overrides]), width)


@pytest.mark.parametrize("protocol", ["convbert", "chang", "bermo"])
@pytest.mark.parametrize("width", [SMALL, BASE])
def test_every_protocol_size_and_task_runs_the_papers_recipe(protocol, width):
    tasks = [*GLUE, "squad1", "squad2"] if protocol != "chang" else GLUE  # Chang et al. run no SQuAD
    for task in tasks:
        [hp] = recipe(f"protocol={protocol}", f"task={task}", width=width)
        assert hp == expected(protocol, task, width), (protocol, task, width)


def test_bermo_fine_pruning_recipe():
    for task in ("sst2", "mnli", "qqp", "rte", "squad1"):
        [hp] = recipe("protocol=bermo", f"task={task}", "pruning=movement", width=BASE)
        assert hp == expected("bermo", task, BASE, pruning=True), task
    # a given value wins over the protocol's (bermo-prune-convergence's epochs=2 variants)
    [hp] = recipe("protocol=bermo", "task=mnli", "pruning=movement", "epochs=2", "lr=1e-5", width=BASE)
    assert (hp["epochs"], hp["lr"]) == (2, 1e-5)


def test_command_line_values_win_and_smoke_keeps_its_own():
    [hp] = recipe("task=rte", "lr=2e-5", "epochs=4", "batch_size=16", width=BASE)
    assert (hp["lr"], hp["epochs"], hp["batch_size"]) == (2e-5, 4, 16)
    [hp] = recipe("task=rte", "lr={small: 1e-3, base: 1e-5}", width=SMALL)
    assert hp["lr"] == 1e-3
    [hp] = hyperparameters(compose_stage("finetune", ["init=x", "task=rte", "scale=smoke", "lr=2e-5"]), SMALL)
    assert (hp["lr"], hp["epochs"]) == (2e-5, 2)  # conf/finetune_scale/smoke.yaml: 2 epochs
    # the grid would replace a given lr: refused with the fix, by the command's one pass of checks
    given = compose_stage("finetune", ["init=x", "task=rte", "lr=2e-5"])
    with pytest.raises(UserError, match="grid=false"):
        command("glue").check(Invocation(given, {}), planned=True)
    with pytest.raises(Exception, match="no grid"):
        compose_stage("finetune", ["init=x", "task=rte", "protocol=chang", "grid=true"])


# --- ConvBERT's grid at scale=paper --------------------------------------------------------------

GRID = {(lr, wd, ep) for lr in (5e-5, 1e-4, 2e-4, 3e-4) for wd in (0.01, 0.1) for ep in (3, 10)}


def test_convbert_grid_is_on_at_paper_only_and_for_glue_only():
    paper = hyperparameters(compose_stage("finetune", ["init=x", "task=cola"]), SMALL)
    assert {(h["lr"], h["weight_decay"], h["epochs"]) for h in paper} == GRID  # ConvBERT appendix
    assert all({k: v for k, v in h.items() if k not in ("lr", "weight_decay", "epochs")}
               == {k: v for k, v in CONVBERT.items() if k not in ("weight_decay",)} for h in paper)
    for scale in ("smoke", "small"):
        assert len(hyperparameters(compose_stage("finetune", ["init=x", "task=cola", f"scale={scale}"]), SMALL)) == 1
    for protocol in ("chang", "bermo"):
        assert not compose_stage("finetune", ["init=x", f"protocol={protocol}"]).grid
    for task in ("squad1", "squad2", "tense"):  # the grid is GLUE's (ConvBERT appendix)
        assert len(hyperparameters(compose_stage("finetune", ["init=x", f"task={task}"]), SMALL)) == 1


def test_the_convbert_sweeps_are_the_ones_with_the_grid_at_paper():
    """Every named sweep fine-tuning GLUE tasks under protocol=convbert runs the grid at
    scale=paper; every other sweep (Chang et al.'s, BERMO's, SQuAD, probing) runs one setting."""
    from convexp.config.compose import group_options
    from convexp.sweep.spec import load_sweep

    with_grid = set()
    for name in group_options("sweep"):
        sweep = load_sweep(name)
        if sweep.finetune is None:
            continue
        task = sweep.finetune.tasks[0]
        cfg = compose_stage("finetune", ["init=x", "scale=paper", *sweep.finetune.overrides, f"task={task}"])
        if cfg.grid:
            with_grid.add(name)
        assert cfg.grid == (cfg.protocol == "convbert" and task in GLUE), name
    assert {"convbert-components", "convbert-conv-type", "convbert-kernel-size", "convbert-sizes",
            "objective"} <= with_grid


def _rte_node(scale: str, *extra: str):
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    args = [f"scale={scale}", "variants=[electra]", "tasks=[rte]", "seeds=[1]", *extra]
    plan = build_plan(load_sweep("objective"), args)
    return plan.nodes["finetune/electra/rte/s1"]


def test_dry_run_plan_runs_and_counts_the_whole_grid_at_paper():
    grid, one = _rte_node("paper"), _rte_node("paper", "finetune.grid=false")
    assert len(grid.runs) == 16 and len({r.id for r in grid.runs}) == 16 and len(one.runs) == 1
    # FLOPs: the grid trains 8 settings x (3 + 10) epochs against one setting's 10 (RTE)
    assert grid.flops == pytest.approx(one.flops * 8 * (3 + 10) / 10)
    assert len(_rte_node("smoke").runs) == 1


def test_the_report_keeps_each_tasks_best_grid_setting():
    """ConvBERT's numbers are best of grid: per task, the setting with the best mean dev score over
    the seeds, then that setting's seed statistics (median for ConvBERT's tables)."""
    from convexp.report.tables import chosen_runs

    def run(task, lr, seed, score):
        return {"task": task, "seed": seed, "hp": {"lr": lr}, "score": score}

    runs = [run("rte", 1e-4, s, v) for s, v in ((1, 60), (2, 70))]
    runs += [run("rte", 3e-4, s, v) for s, v in ((1, 66), (2, 67))]  # best mean: 66.5 > 65
    runs += [run("cola", 1e-4, 1, 50), run("cola", 3e-4, 1, 40)]
    chosen = chosen_runs(runs)
    assert {r["hp"]["lr"] for r in chosen["rte"]} == {3e-4} and len(chosen["rte"]) == 2
    assert [r["hp"]["lr"] for r in chosen["cola"]] == [1e-4]


# --- --cfg shows the numbers that run ------------------------------------------------------------

# nulls a fine-tuning --cfg may show: optional settings whose null means "not used / not given"
OPTIONAL_NULLS = {
    "tokenizer_path",  # default: the init model's
    "scalar_mix",  # null: as the init model has it (known only from the checkpoint)
    "classifier",  # null: the init model's head (by family, known only from the checkpoint)
    "name",
    "glue.path",  # glue.source=local|disk only
    "glue.revision",  # the hub dataset's default branch
    "distill.teacher",  # distillation off
    "task.max_train_samples",  # all rows
    "task.max_eval_samples",
    "logger.entity",  # W&B defaults
    "logger.group",
    "malloc_mmap_threshold_mib",  # glibc's own heap threshold
}

# what fine-tuning reads of its trainer node (conf/trainer/finetune.yaml): key -> (module, the read)
TRAINER_READS = {
    "accelerator": ("train/task_module.py", "accelerator=cfg.trainer.accelerator"),
    "precision": ("train/task_module.py", "precision=cfg.trainer.precision"),
    "log_every_n_steps": ("train/task_module.py", "log_every_n_steps=cfg.trainer.log_every_n_steps"),
    "num_workers": ("train/accel.py", "setting = trainer_cfg.num_workers"),  # loader_workers(cfg.trainer)
    "fused_adamw": ("tasks/classification/stage.py", "cfg.trainer.fused_adamw"),
    "nonfinite_patience": ("train/task_module.py", "Health(cfg.trainer.nonfinite_patience"),
    "requeue_signal": ("train/task_module.py", "cfg.trainer.requeue_signal"),
    "lock_wait": ("train/task_module.py", "wait=cfg.trainer.lock_wait"),
    "threads": ("train/accel.py", 'trainer_cfg.get("threads", "auto")'),  # finetune_trainer: set_threads(cfg.trainer)
    "compile": ("train/accel.py", "compile_mode(trainer_cfg.compile)"),  # prepare_encoders(..., cfg.trainer)
    "gradient_checkpointing": ("train/accel.py", "bool(trainer_cfg.gradient_checkpointing)"),
}


def _nulls(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nulls(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nulls(v, f"{path}[{i}]")
    elif node is None:
        yield path


@pytest.mark.parametrize("protocol", ["convbert", "chang", "bermo"])
def test_cfg_prints_no_null_for_a_value_the_run_uses(protocol):
    res = CliRunner().invoke(app, ["finetune", "glue", "task=rte", "init=X", f"protocol={protocol}", "--cfg"])
    assert res.exit_code == 0, res.output
    cfg = yaml.safe_load(res.output)
    assert set(_nulls(cfg)) <= OPTIONAL_NULLS, set(_nulls(cfg)) - OPTIONAL_NULLS
    assert cfg["protocol"] == protocol and cfg["lr"] and cfg["epochs"] and cfg["batch_size"]
    assert cfg["grid"] == (protocol == "convbert")  # scale=paper is the default


def test_finetune_cfg_holds_only_keys_the_stage_reads():
    """`convexp finetune glue task=rte init=<dir> --cfg` (issue 22, item 11): no pre-training key
    (trainer.max_steps, trainer.batch_size, ...), no other task family's keys, no per-protocol
    tables beside the values they resolved to, no init=none's model= beside an init checkpoint."""
    import convexp

    root = Path(convexp.__file__).parent
    res = CliRunner().invoke(app, ["finetune", "glue", "task=rte", "init=X", "--cfg"])
    assert res.exit_code == 0, res.output
    cfg = yaml.safe_load(res.output)
    assert set(cfg["trainer"]) == set(TRAINER_READS)
    for key, (module, read) in TRAINER_READS.items():
        assert read in (root / module).read_text(), (key, module)  # the stage does read it
    assert "squad" not in cfg and "init_model" not in cfg and cfg["choices"]["trainer"] == "finetune"
    assert set(cfg["task"]) == {"name", "max_len", "max_train_samples", "max_eval_samples"}
    assert (cfg["epochs"], cfg["batch_size"], cfg["lr"]) == (10, 32, {"small": 3e-4, "base": 1e-4})
    squad = yaml.safe_load(CliRunner().invoke(app, ["finetune", "squad", "init=X", "--cfg"]).output)
    assert "glue" not in squad and squad["squad"]["source"] == "hub"
    assert squad["group_by_length"] is False  # SQuAD reads it too: random batches at scale=paper
    assert (squad["epochs"], squad["batch_size"]) == (2, 32)
    # a key the stage does not have is refused (it would do nothing), as is model= beside init=<dir>
    for extra, needle in (("trainer.max_steps=5", "trainer.max_steps"), ("model=bert_small", "init=none")):
        res = CliRunner().invoke(app, ["finetune", "glue", "task=rte", "init=X", extra, "--cfg"])
        assert res.exit_code == 2 and needle in res.output, res.output
