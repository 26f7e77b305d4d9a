"""Your own idea beside the paper's: a user's mixer or FFN from their own file (``--user-dir``,
``model.mixer=module:Class``), checked before anything runs, counted, identified by its source,
and run through the commands like a built-in part."""

from __future__ import annotations

import csv
import json
import shutil
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import SHRINK, TINY, convexp

from convexp.bench.plugin import COPY
from convexp.cli import app

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gated_conv"
runner = CliRunner()

# a user's file: the plug-in benchmark's copy of the built-in self-attention, and modules good and bad
MODULE = COPY + '''
import torch


class Options(nn.Module):
    def __init__(self, cfg, layer, width: int = 2):
        super().__init__()
        self.lin = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, keep):
        return self.lin(x)


class Leaks(nn.Module):
    """Every position sees the mean of all positions, padding included."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.lin = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, keep):
        return self.lin(x) + x.mean(dim=1, keepdim=True)


class WrongShape(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()

    def forward(self, x, keep):
        return x[:, :, :3]


class Raises(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()

    def forward(self, x, keep):
        raise RuntimeError("my bug")


class NonFinite(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()

    def forward(self, x, keep):
        return x / 0.0


class NotAModule:
    def __init__(self, cfg, layer):
        pass


class GLU(nn.Module):
    """A gated linear unit FFN: (x W1 ⊙ σ(x W2)) W3."""

    def __init__(self, cfg, layer, hidden: int = 64):
        super().__init__()
        D = cfg.hidden_size
        self.a, self.b, self.c = nn.Linear(D, hidden), nn.Linear(D, hidden), nn.Linear(hidden, D)

    def forward(self, x):
        return self.c(self.a(x) * torch.sigmoid(self.b(x)))
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder of a user's code (``mine_<test>.py``, a fresh module name per test: nothing cached
    from another test) and a preset of theirs; CONVEXP_USER_DIR left as it was found."""
    d = tmp_path / "mine"
    (d / "model").mkdir(parents=True)
    name = f"mine_{abs(hash(str(tmp_path))) % 10**8}"
    (d / f"{name}.py").write_text(MODULE)
    (d / "model" / "tiny_copy.yaml").write_text(
        f"defaults:\n  - chang_small\n  - _self_\nname: tiny-copy\nmixer: {name}:CopiedAttention\n"
    )
    monkeypatch.setenv("CONVEXP_USER_DIR", "")
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", "")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return d, name


SMALL = ["model=chang_small", "model.num_layers=2", "model.hidden_size=32", "model.embedding_size=16",
         "model.intermediate_size=64"]  # fmt: skip


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.mixer=no_such_module:Mixer", ["no module 'no_such_module'", "--user-dir"]),
        ("model.mixer={mod}:Nope", ["has no 'Nope'", "its classes: CopiedAttention"]),
        ("model.mixer={mod}:NotAModule", ["NotAModule is not a torch.nn.Module class"]),
        ("model.mixer={mod}:WrongShape", ["returned shape [2, 8, 3], expected [2, 8, 32]"]),
        ("model.mixer={mod}:Raises", ["raised RuntimeError: my bug"]),
        ("model.mixer={mod}:NonFinite", ["non-finite values"]),
        ("model.mixer={mod}:Leaks", ["lets padding into real positions", "model.reads_padding=true"]),
        ("+model.mixer_options.width=3,model.mixer={mod}:CopiedAttention", ["unexpected keyword argument 'width'"]),
        ("+model.mixer_options.depth=3,model.mixer={mod}:Options", ["it takes width after (cfg, layer)"]),
        ("+model.mixer_options.width=3", ["the built-in mixer 'attention' takes no options"]),
        ("model.ffn={mod}:WrongShape", ["model.ffn=", "forward on x [2, 5, 32] raised TypeError"]),
        ("model.mixer=not-a-path", ["mixer must be one of ('attention', 'mixed') or an import path"]),
    ],
)
def test_a_bad_module_is_one_line_exit_2_and_writes_nothing(tmp_path, user_dir, override, words):
    d, mod = user_dir
    out = tmp_path / "out"
    args = ["--user-dir", str(d), "pretrain", *SMALL, f"outputs={out}", *override.format(mod=mod).split(",")]
    res = runner.invoke(app, args, terminal_width=400)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, res.output + repr(res.exception)
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for w in words:
        assert w in lines[0], lines[0]
    assert not out.exists()


def test_a_mixer_that_means_to_read_padding_says_so_and_runs(user_dir):
    from convexp.config.compose import model_config
    from convexp.models.check import check_parts
    from convexp.models.parts import PartError
    from convexp.user_code import add_user_dirs

    d, mod = user_dir
    add_user_dirs([d])
    with pytest.raises(PartError, match="lets padding into real positions: appending 3 padding tokens"):
        check_parts(model_config("chang_small", [f"mixer={mod}:Leaks", "hidden_size=32", "num_layers=1"]))
    meant = model_config("chang_small", [f"mixer={mod}:Leaks", "reads_padding=true", "hidden_size=32"])
    check_parts(meant)
    assert meant.reads_padding_positions  # and then no block skips its padding rows (encoder.real_rows)


def test_user_parts_build_count_and_pass_their_checks(user_dir):
    import torch

    from convexp.config.compose import model_config
    from convexp.models import Encoder
    from convexp.models.check import check_parts
    from convexp.user_code import add_user_dirs
    from convexp.models.stats import is_measured, model_stats

    d, mod = user_dir
    add_user_dirs([d])
    cfg = model_config("chang_small", [f"mixer={mod}:CopiedAttention", f"ffn={mod}:GLU", "+ffn_options.hidden=48"])
    check_parts(cfg)
    enc = Encoder(cfg)
    assert type(enc.layers[0].ffn).__name__ == "GLU" and enc.layers[0].ffn.a.out_features == 48
    params, flops = model_stats(cfg)
    assert is_measured(cfg)
    mlm_head = (256 * 128 + 128) + 2 * 128 + 30004  # dense D->E, LayerNorm(E), output bias (tied)
    assert params == sum(p.numel() for p in enc.parameters() if p is not enc.pooler.weight
                         and p is not enc.pooler.bias) + mlm_head  # fmt: skip
    # the copy of self-attention measures what the formula gives the built-in, the FFN its own 3 products
    base = model_config("chang_small")
    D, L = 256, 128
    ffn_flops = lambda units: 2 * 2 * D * units  # noqa: E731
    glu_flops = 2 * 3 * D * 48
    assert flops == pytest.approx(model_stats(base)[1] + 3 * 12 * (glu_flops - ffn_flops(1024)), rel=1e-9)
    x = enc(torch.randint(5, 100, (2, 12)), torch.ones(2, 12, dtype=torch.long))
    assert x.features.shape == (2, 12, 256)


def test_a_user_model_is_shared_loaded_pruned_and_refused_by_transformers(tmp_path, user_dir):
    """save_pretrained keeps the import path; from_pretrained imports it again (and names it, with
    the fix, where it cannot); masked pruning masks the user's nn.Linears; export keeps the user's
    parts whole and says so; a transformers export is refused in one line."""
    import torch

    from convexp.config.compose import model_config
    from convexp.models import SequenceClassifier
    from convexp.models.hf_export import export_hf
    from convexp.models.hf_keys import ExportError
    from convexp.models.parts import PartError
    from convexp.user_code import add_user_dirs
    from convexp.pruning.masked import fold_masks, prune, prunable_layers
    from convexp.pruning.structured import remove_dead_structures

    d, mod = user_dir
    add_user_dirs([d])
    cfg = model_config("chang_small", [f"mixer={mod}:CopiedAttention", "num_layers=2", "hidden_size=32",
                                       "embedding_size=16", "intermediate_size=64", "vocab_size=100"])  # fmt: skip
    torch.manual_seed(0)
    model = SequenceClassifier(cfg, num_labels=2).eval()
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "model_config.json").read_text())
    assert saved["mixer"] == f"{mod}:CopiedAttention"
    ids = torch.randint(5, 100, (2, 9))
    loaded = SequenceClassifier.from_pretrained(tmp_path / "m").eval()
    assert torch.equal(loaded(ids).logits, model(ids).logits)

    import sys

    sys.modules.pop(mod)
    sys.path.remove(str(d.resolve()))
    import os

    os.environ["CONVEXP_USER_DIR"] = ""
    with pytest.raises(PartError, match=f"no module '{mod}'.*--user-dir"):
        SequenceClassifier.from_pretrained(tmp_path / "m")
    add_user_dirs([d])

    names = [n for n, _ in prunable_layers(model)]
    assert "encoder.layers.0.mixer.q" in names and "encoder.layers.0.mixer.out" in names
    prune(model, "magnitude")
    fold_masks(model)
    summary = remove_dead_structures(model)
    assert any("is your own module: its heads are not removed" in n for n in summary.notes)
    with pytest.raises(ExportError, match="is your own module, which transformers has no class for"):
        export_hf(model, None, tmp_path / "hf")


@pytest.mark.parametrize("preset", ["chang_small_composite", "convbert_small", "chang_small_conv_qkv", "bert_small"])
def test_a_measured_block_counts_what_the_formula_counts_for_the_presets(preset):
    """The measurement a user's part gets (FlopCounterMode, the built module) agrees with the papers'
    formulas where both apply."""
    from convexp.config.compose import model_config
    from convexp.models.stats import _layer, _measure_layer

    cfg = model_config(preset, ["num_layers=1"])
    assert _measure_layer(cfg, 0) == _layer(cfg, 0)


def test_the_run_id_follows_the_module_source(tmp_path, user_dir):
    from convexp.config.compose import compose_stage
    from convexp.models.parts import code_digests
    from convexp.user_code import add_user_dirs
    from convexp.tasks.pretraining.runs import pretrain_run

    d, mod = user_dir
    add_user_dirs([d])
    over = [*SMALL, f"model.mixer={mod}:CopiedAttention", f"outputs={tmp_path}"]
    first = pretrain_run(compose_stage("pretrain", over)).id
    assert pretrain_run(compose_stage("pretrain", over)).id == first  # unchanged: the same run
    src = d / f"{mod}.py"
    src.write_text(src.read_text().replace("cfg.attention_dropout", "cfg.attention_dropout * 1.0"))
    edited = pretrain_run(compose_stage("pretrain", over)).id
    assert edited != first  # one line edited: a new run
    moved = tmp_path / "elsewhere"
    shutil.copytree(d, moved)
    add_user_dirs([moved])  # the same source in another folder: the same run
    assert pretrain_run(compose_stage("pretrain", over)).id == edited
    assert code_digests(compose_stage("pretrain", SMALL).model) == {}  # the presets' ids hash no code


def test_a_finetune_record_names_the_user_code_it_trains(user_dir):
    """A fine-tune's config holds no model (its init does): its record names the user's mixer of
    the model it trains, with the files, as a pre-training's does."""
    from convexp.config.compose import compose_stage, model_config
    from convexp.user_code import add_user_dirs
    from convexp.store.record import invocation_record

    d, mod = user_dir
    add_user_dirs([d])
    cfg = compose_stage("finetune", ["init=x", "task=rte"])
    assert "model_code" not in invocation_record(cfg)
    code = invocation_record(cfg, model_config("chang_small", [f"mixer={mod}:CopiedAttention"]))["model_code"]
    assert code["mixer"]["import"] == f"{mod}:CopiedAttention"
    assert code["mixer"]["files"] == [str((d / f"{mod}.py").resolve())]


def _losses(run: Path) -> list[float]:
    rows = list(csv.DictReader((run / "csv" / "metrics.csv").open()))
    return [float(r[k]) for k in ("train/loss", "val/loss") for r in rows if r.get(k)]


@pytest.mark.slow  # two pre-trainings
def test_a_copy_of_self_attention_trains_as_the_builtin(tmp_path, user_dir):
    """The plug-in path costs nothing in the math: a user's file with the built-in's self-attention
    gives the built-in's losses, step for step."""
    d, mod = user_dir
    tiny = [o for o in TINY] + ["model=chang_small", "trainer.max_steps=8", "trainer.val_every_n_steps=4",
                                "trainer.log_every_n_steps=1"]  # fmt: skip
    env = {"WANDB_MODE": "disabled", "CONVEXP_USER_DIR": ""}
    res = convexp("pretrain", *tiny, outputs=tmp_path / "a", env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    res = convexp("--user-dir", str(d), "pretrain", *tiny, f"model.mixer={mod}:CopiedAttention",
                  outputs=tmp_path / "b", env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    [a] = (tmp_path / "a" / "runs" / "pretrain").iterdir()
    [b] = (tmp_path / "b" / "runs" / "pretrain").iterdir()
    la, lb = _losses(a), _losses(b)
    assert len(la) >= 8 and la == pytest.approx(lb, abs=1e-5)
    record = json.loads((b / "record.json").read_text())["created"]
    assert record["model_code"]["mixer"]["import"] == f"{mod}:CopiedAttention"
    assert record["model_code"]["mixer"]["files"] == [str((d / f"{mod}.py").resolve())]


def _example_here(where: Path) -> Path:
    where.mkdir(parents=True)
    for part in ("gated_conv.py", "model", "sweep"):
        src = EXAMPLE / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, where / part)
    return where


@pytest.mark.slow  # a whole sweep and its report
def test_the_example_runs_beside_the_paper_row_and_reports_both(tmp_path):
    """examples/gated_conv at smoke size on a tiny model: the sweep pre-trains both rows, fine-tunes
    them, and the report puts the user's row beside the paper's, its parameters and FLOPs filled."""
    mine = _example_here(tmp_path / "mine")
    env = {"WANDB_MODE": "disabled", "CONVEXP_USER_DIR": ""}
    args = ["--user-dir", str(mine), "ablate", "gated-conv", *SHRINK, "seeds=[1]"]
    out = mine / "outputs"  # the run store inside the user's folder (`--user-dir .`): not a config group
    res = convexp(*args, outputs=out, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = convexp("--user-dir", str(mine), "report", "gated-conv", outputs=out, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in res.stdout.splitlines() if line.startswith("| ")}  # fmt: skip
    ours = next(v for k, v in rows.items() if "Gated depthwise conv (yours)" in k)
    assert ours[0] not in ("", "–", "-") and ours[1] not in ("", "–", "-"), res.stdout  # params, flops
    assert any("Composite" in k for k in rows), res.stdout


@pytest.mark.slow
def test_the_example_smoke_sweep_end_to_end(tmp_path):
    """The README's walk-through as a user runs it: the example's whole sweep at scale=smoke (two
    pre-trainings, eight GLUE tasks each), then its report with the user's row filled in."""
    mine = _example_here(tmp_path / "mine")
    env = {"WANDB_MODE": "disabled", "CONVEXP_USER_DIR": "", "CONVEXP_CONFIG_PATH": ""}
    res = convexp("--user-dir", str(mine), "ablate", "gated-conv", "scale=smoke", "launcher.workers=2",
                  outputs=tmp_path / "out", env=env, timeout=1800)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = convexp("--user-dir", str(mine), "report", "gated-conv", outputs=tmp_path / "out", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ours = next(line for line in res.stdout.splitlines() if "Gated depthwise conv (yours)" in line)
    cells = [c.strip() for c in ours.split("|")[3:-1]]  # after the label and "ours"
    assert len(cells) == 12 and all(c not in ("", "–", "-") for c in cells), res.stdout


@pytest.mark.slow
def test_the_user_dir_reaches_the_slurm_jobs(tmp_path):
    """launcher=submitit on the SLURM stand-in: the jobs start in fresh processes on the "cluster",
    where only --user-dir (carried in the environment SLURM exports) makes the module importable."""
    import fakeslurm

    from helpers import ledger

    mine = _example_here(tmp_path / "mine")
    slurm = fakeslurm.install(tmp_path / "bin", tmp_path / "slurm", slots=1, kill_wait=3)
    try:
        env = {**slurm, "WANDB_MODE": "disabled", "CONVEXP_USER_DIR": "", "CONVEXP_CONFIG_PATH": ""}
        args = ["--user-dir", str(mine), "ablate", "gated-conv", *SHRINK, "seeds=[1]", "variants=[gated]",
                "launcher=submitit", "launcher.timeout_min=30", "--follow"]  # fmt: skip
        res = convexp(*args, outputs=tmp_path / "out", env=env, timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        nodes = ledger(tmp_path / "out", "gated-conv")["nodes"]
        assert {n["status"] for n in nodes.values()} == {"done"}, nodes
        [pre] = (tmp_path / "out" / "runs" / "pretrain").iterdir()
        record = json.loads((pre / "record.json").read_text())["created"]
        assert record["model_code"]["mixer"]["import"] == "gated_conv:GatedDepthwiseConv"
        for run in (tmp_path / "out" / "runs" / "finetune").iterdir():  # the fine-tunes built it too
            record = json.loads((run / "record.json").read_text())["created"]
            assert record["model_code"]["mixer"]["import"] == "gated_conv:GatedDepthwiseConv", run
    finally:
        fakeslurm.shutdown(tmp_path / "slurm")
