"""`convexp export` and per-layer sizes: ModelConfig.layer_sizes rebuilds the exact shapes of a
structurally pruned model, the export reproduces the fine-pruned model's outputs with fewer
parameters, loads through `convexp finetune`'s init path, and the CLI refuses bad input with exit 2."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import VARIANTS, batch, kill_ffn_units, kill_heads, logits, make_cfg, make_model
from typer.testing import CliRunner

from convexp.cli import app
from convexp.errors import UserError
from convexp.export import export_model
from convexp.models import Encoder, ModelConfig, SequenceClassifier
from convexp.models.io import load_model_dir, read_model_config, save_model_dir
from convexp.pruning import fold_masks, prunable_layers, prune, remove_dead_structures, set_threshold
from convexp.pruning.masked import weight_mask
from convexp.pruning.structured import layers_parameters, pruned_config

runner = CliRunner()
FAST = dict(batch=2, seq_len=16, repeats=1, warmup=0)  # a tiny speed measurement


pytestmark = pytest.mark.usefixtures("single_thread")


def shapes(model: torch.nn.Module) -> dict:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def pruned_model(name: str) -> SequenceClassifier:
    """A test_pruning variant with dead FFN units (layer 0) and dead heads (both layers), cut out."""
    model = make_model(name)
    kill_ffn_units(model)
    kill_heads(model)
    remove_dead_structures(model)
    return model


def save_run(model, run, tokenizer_files=()):
    """A fine-tuning run directory: RUN/model + RUN/metrics.json."""
    save_model_dir(model, model.encoder.cfg, run / "model", extra_files=list(tokenizer_files))
    metrics = {"task": "rte", "remaining_weights": 42.0, "pruning": "topk"}
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


# ---------------------------------------------------------------------------------------------
# ModelConfig.layer_sizes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, heads_after",
    [
        ("self_attention", [2, 1]),
        ("chang_composite_conv_qkv", [2, 1]),
        ("chang_depthwise_conv_qk", [2, 1]),
        ("convbert_conventional", [2, 1]),
        ("convbert_sdconv", [2, 2]),  # heads shared with the convolution branch: FFN units only
    ],
)
def test_layer_sizes_round_trip_and_rebuild_the_pruned_shapes(tmp_path, name, heads_after):
    model = pruned_model(name)
    cfg = pruned_config(model)
    assert [s["heads"] for s in cfg.layer_sizes] == heads_after
    assert cfg.layer_sizes[0]["intermediate"] < cfg.intermediate_size
    save_model_dir(model, cfg, tmp_path / "m")
    assert json.loads((tmp_path / "m" / "model_config.json").read_text())["layer_sizes"] == cfg.layer_sizes
    again = read_model_config(tmp_path / "m")
    assert again == cfg
    assert shapes(SequenceClassifier(again, 3)) == shapes(model)
    ids, mask = batch()
    torch.testing.assert_close(logits(load_model_dir(tmp_path / "m"), ids, mask), logits(model, ids, mask))


def test_conv_qkv_layers_with_no_or_only_convolution_heads():
    """conv_qkv splits heads [conv ; linear]; a pruned layer may keep only linear heads (conv=None)
    or only convolution heads (nn.Linear(D, 0)) — both rebuild from conv_heads."""
    model = make_model("chang_composite_conv_qkv")  # 4 heads of 8: heads 0, 1 convolutional
    with torch.no_grad():
        model.encoder.layers[0].mixer.out.weight[:, :16] = 0  # layer 0: heads 0, 1 dead
        model.encoder.layers[1].mixer.out.weight[:, 16:] = 0  # layer 1: heads 2, 3 dead
    ids, mask = batch()
    before = logits(model, ids, mask)
    remove_dead_structures(model)
    cfg = pruned_config(model)
    assert [s["conv_heads"] for s in cfg.layer_sizes] == [0, 2]
    rebuilt = SequenceClassifier(ModelConfig.from_dict(cfg.to_dict()), 3).eval()
    assert rebuilt.encoder.layers[0].mixer.v.conv is None
    assert rebuilt.encoder.layers[1].mixer.v.linear.weight.shape == (0, 32)
    rebuilt.load_state_dict(model.state_dict())
    torch.testing.assert_close(logits(rebuilt, ids, mask), before, atol=1e-5, rtol=1e-4)


def test_default_sizes_are_unchanged_and_old_configs_load():
    """layer_sizes=None and explicit uniform sizes build the same parameters from the same seed;
    a model_config.json written before layer_sizes existed still reads."""
    for kw in (VARIANTS["self_attention"], VARIANTS["chang_composite_conv_qkv"], VARIANTS["convbert_sdconv"]):
        plain = make_cfg(**kw)
        sizes = [{"heads": plain.attn_heads, "intermediate": plain.intermediate_size}] * plain.num_layers
        if plain.conv_qkv:
            sizes = [{**s, "conv_heads": plain.attn_heads // 2} for s in sizes]
        torch.manual_seed(0)
        a = Encoder(plain).state_dict()
        torch.manual_seed(0)
        b = Encoder(make_cfg(**kw, layer_sizes=sizes)).state_dict()
        assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    old = {k: v for k, v in make_cfg().to_dict().items() if k != "layer_sizes"}
    assert ModelConfig.from_dict(old).layer_sizes is None


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(layer_sizes=[{"heads": 2, "intermediate": 8}]), "one entry per layer: got 1, num_layers is 2"),
        (
            dict(layer_sizes=[{"heads": 0, "intermediate": 8}] * 2),
            "layer_sizes[0].heads must be an integer >= 1",
        ),
        (dict(layer_sizes=[{"heads": 2, "intermediate": -3}] * 2), "intermediate must be an integer >= 1"),
        (dict(layer_sizes=[{"heads": 2}] * 2), "heads, intermediate required"),
        (
            dict(ffn_groups=2, layer_sizes=[{"heads": 2, "intermediate": 7}] * 2),
            "must be a multiple of ffn_groups 2",
        ),
        (
            dict(mixer="mixed", conv_type="sdconv", layer_sizes=[{"heads": 1, "intermediate": 8}] * 2),
            "layer_sizes[0].heads must be 2: conv_type sdconv shares its heads",
        ),
        (
            dict(conv_qkv="qk", layer_sizes=[{"heads": 2, "intermediate": 8, "conv_heads": 3}] * 2),
            "conv_heads 3 exceeds heads 2",
        ),
        (dict(conv_qkv="v", layer_sizes=[{"heads": 3, "intermediate": 8}] * 2), "needs conv_heads"),
    ],
)
def test_bad_layer_sizes_is_one_clear_line(kw, message):
    with pytest.raises(ValueError) as e:
        make_cfg(**kw)
    assert message in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# export_model
# ---------------------------------------------------------------------------------------------


def fine_pruned(seed: int = 0) -> tuple[SequenceClassifier, torch.Tensor]:
    """A movement-pruned (top-k, keep 75 %) self-attention model whose scores rank FFN units 0-15
    (fc1 rows), head 0's output columns and head 1's value rows lowest: after folding, each layer
    has 48 FFN units and heads 2, 3 alive. Returns (folded model, the masked model's logits)."""
    model = make_model("self_attention", seed)
    prune(model, "topk")
    with torch.no_grad():
        for name, layer in prunable_layers(model):
            scores = weight_mask(layer).scores
            if name.endswith("ffn.fc1"):
                scores[:16] = -1.0  # [I, D]: 16 of 64 rows
            elif name.endswith("mixer.out"):
                scores[:, :8] = -1.0  # [D, H·d]: head 0's 8 of 32 columns
            elif name.endswith("mixer.v.linear"):
                scores[8:16] = -1.0  # [H·d, D]: head 1's 8 of 32 rows
    set_threshold(model, 0.75)
    masked = logits(model, *batch())
    return fold_masks(model), masked


def test_export_reproduces_the_fine_pruned_model_with_fewer_parameters(tmp_path):
    model, masked = fine_pruned()
    run = save_run(model, tmp_path / "run")
    info = export_model(run, **FAST)
    out = run / "export"
    assert info["out"] == str(out) and sorted(p.name for p in out.iterdir()) == [
        "export.json",
        "model.safetensors",
        "model_config.json",
    ]
    exported = load_model_dir(out)
    torch.testing.assert_close(logits(exported, *batch()), masked, atol=1e-5, rtol=0)
    assert layers_parameters(exported) < layers_parameters(model)
    assert sum(p.numel() for p in exported.parameters()) < sum(p.numel() for p in model.parameters())
    saved = json.loads((out / "export.json").read_text())
    assert saved["layer_sizes_before"] == [{"heads": 4, "intermediate": 64}] * 2
    assert saved["layer_sizes_after"] == [{"heads": 2, "intermediate": 48}] * 2
    assert saved["run"] == {"task": "rte", "remaining_weights": 42.0, "pruning": "topk"}
    assert saved["params_after"]["layers"] == layers_parameters(exported)
    assert max(saved["max_abs_diff"].values()) <= 1e-4
    assert min(saved["timing"][k] for k in ("dense_ms", "pruned_ms", "speedup")) > 0
    assert 0 < saved["remaining_weights_pct"] < 100
    assert saved["tokenizer"] == [] and any("tokenizer_path" in n for n in saved["notes"])


def test_no_structured_keeps_the_sizes(tmp_path):
    model, _ = fine_pruned()
    info = export_model(save_run(model, tmp_path / "run"), out=tmp_path / "plain", structured=False, **FAST)
    assert info["layer_sizes_after"] == info["layer_sizes_before"]
    assert read_model_config(tmp_path / "plain").layer_sizes is None
    assert shapes(load_model_dir(tmp_path / "plain")) == shapes(model)


@pytest.mark.slow
def test_export_loads_through_finetune_init(tmp_path, pretrained):
    """A pre-trained model with dead heads/units, saved like a fine-tuning run (no tokenizer files),
    exported with --tokenizer: `convexp finetune glue init=<export>` resolves it and its encoder
    loads strictly, giving the pruned model's features."""
    from convexp.config.compose import compose_stage
    from convexp.train.finetune import resolve_init

    source = load_model_dir(pretrained / "model")
    kill_ffn_units(source)
    kill_heads(source)
    save_model_dir(source, source.encoder.cfg, tmp_path / "run" / "model")
    info = export_model(tmp_path / "run", tokenizer=pretrained / "model", **FAST)
    out = tmp_path / "run" / "export"
    assert info["tokenizer"] and all((out / f).is_file() for f in info["tokenizer"])
    assert info["layer_sizes_after"][0]["intermediate"] < info["layer_sizes_before"][0]["intermediate"]

    init = resolve_init(compose_stage("finetune", [f"init={out}", "task=rte"]))
    assert init.model_cfg.layer_sizes == info["layer_sizes_after"]
    clf = SequenceClassifier(init.model_cfg, 2).eval()
    missing, unexpected = clf.encoder.load_state_dict(init.state, strict=False)
    assert not unexpected and not [k for k in missing if not k.startswith(("pooler.", "scalar_mix."))]
    ids, mask = batch()
    ids = ids % init.model_cfg.vocab_size
    with torch.no_grad():
        want = source.encoder(ids, mask).features
        torch.testing.assert_close(clf.encoder(ids, mask).features, want, atol=1e-5, rtol=1e-4)


def test_export_refuses_bad_tokenizer_and_existing_out(tmp_path):
    model, _ = fine_pruned()
    run = save_run(model, tmp_path / "run")
    (tmp_path / "other.txt").write_text("x\n")
    with pytest.raises(UserError, match="give a tokenizer.json or vocab.txt"):
        export_model(run, tokenizer=tmp_path / "other.txt", **FAST)
    (run / "export").mkdir()
    with pytest.raises(UserError, match="exists; refusing to overwrite"):
        export_model(run, **FAST)


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def one_error_line(res) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1, (res.exit_code, res.output)
    return lines[0]


def test_cli_missing_or_non_model_path_exits_2(tmp_path):
    assert "does not exist" in one_error_line(runner.invoke(app, ["export", str(tmp_path / "nope")]))
    assert "is not a convexp run or model directory" in one_error_line(
        runner.invoke(app, ["export", str(tmp_path)])
    )


def test_cli_export_twice_refuses_and_keeps_the_first(tmp_path):
    model, _ = fine_pruned()
    run = save_run(model, tmp_path / "run")
    args = ["export", str(run), "--out", str(tmp_path / "exp"), "--batch", "2", "--seq-len", "16"]
    res = runner.invoke(app, args, terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "speed-up" in res.stdout and "2 2" in res.stdout  # heads per layer after export
    first = {p.name: p.read_bytes() for p in (tmp_path / "exp").iterdir()}
    assert "exists; refusing to overwrite" in one_error_line(runner.invoke(app, args))
    assert {p.name: p.read_bytes() for p in (tmp_path / "exp").iterdir()} == first
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []  # no leftovers


@pytest.mark.parametrize("head", ["bert", "electra"])
def test_a_squad_run_is_refused_in_one_line_with_what_to_use(tmp_path, head):
    from convexp.models.qa import QuestionAnswerer

    run = tmp_path / "squad-run"
    model = QuestionAnswerer(make_cfg(), head=head)
    save_model_dir(model, model.encoder.cfg, run / "model")
    res = CliRunner().invoke(app, ["export", str(run)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "SQuAD run" in res.output and f"init={run / 'model'}" in " ".join(res.output.split())
    assert not (run / "export").exists()
