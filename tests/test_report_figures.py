"""What `convexp report`'s figures say: every title names what the sweep varies and its values,
every colour map has a labelled colour bar, attention grids carry the example's tokens, the
paper's numbers stand beside ours. Checked on the matplotlib figures as they are saved."""


import pytest
import torch
from helpers import analysis_model_dir, record_figures

from convexp.models import ModelConfig
from convexp.report import analysis, figures
from convexp.report.tables import Cell, Row
from convexp.report.varied import describe, settings, varied
from convexp.sweep.spec import load_sweep


@pytest.fixture
def drawn(monkeypatch):
    return record_figures(monkeypatch)


def texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


def colour_bar_labels(fig) -> list[str]:
    """The label of every colour bar drawn for the figure's images."""
    bars = [im.colorbar for ax in fig.axes for im in ax.images if im.colorbar]
    return list(dict.fromkeys(bar.ax.get_ylabel() for bar in bars))


def test_what_a_sweep_varies_comes_from_its_variants():
    kernel = load_sweep("convbert-kernel-size")
    v = varied(kernel, ["k9", "k17"])
    assert v == {"k9": {"model.kernel_size": "9"}, "k17": {"model.kernel_size": "17"}}
    assert describe(v) == "varies model.kernel_size: 9 vs 17" and settings(v, "k17") == "model.kernel_size=17"
    assert describe(varied(kernel, ["k9"])) == "one variant"
    bermo = varied(load_sweep("bermo-glue"), ["bert", "bermo"])  # a key one variant leaves to its default
    assert bermo == {"bert": {"scalar_mix": "default"}, "bermo": {"scalar_mix": "true"}}
    methods = varied(load_sweep("bermo-prune-methods"), ["bert_l0", "bermo_l0"])
    assert list(methods["bermo_l0"]) == ["scalar_mix", "pruning.tasks.mnli.final_lambda"]  # not the shared one


def test_the_curve_names_the_swept_key_and_shows_the_papers_points(tmp_path, drawn):
    sweep = load_sweep("bermo-prune-convergence")
    ours = [{"mnli-m": Cell(70.0 + i), "qqp.accuracy": Cell(80.0), "squad1.f1": Cell(None)} for i in (0, 1)]
    rows = [
        Row(v, sweep.variants[v].label, ours[i], {"mnli-m": 80.0 + i})
        for i, v in enumerate(["bert_e2", "bert_e4"])
    ]
    v = varied(sweep, ["bert_e2", "bert_e4"])
    figures.curve(sweep, rows, v, f"title\n{describe(v)}", tmp_path / "figure.png")
    fig = drawn["figure.png"]
    assert "varies epochs: 2 vs 4" in fig.get_suptitle()
    assert [ax.get_title() for ax in fig.axes] == ["MNLI-m", "QQP acc"]  # SQuAD not run: no empty panel
    ax = fig.axes[0]
    assert ax.get_xlabel() == "epochs" and texts(ax.get_xticklabels()) == ["2", "4"]
    assert ax.get_ylabel() == "MNLI-m, mean over seeds (points)"
    assert sorted(texts(ax.get_legend().get_texts())) == ["BERT_BASE, ours", "BERT_BASE, paper"]

    kernel = load_sweep("convbert-kernel-size")
    rows = [Row(k, k[1:], {"glue": Cell(float(k[1:]))}, {}) for k in ("k9", "k17")]
    figures.curve(kernel, rows, varied(kernel, ["k9", "k17"]), "t", tmp_path / "kernel.png")
    ax = drawn["kernel.png"].axes[0]
    assert ax.get_xlabel() == "kernel size (model.kernel_size)" and texts(ax.get_xticklabels()) == ["9", "17"]


def test_attention_and_kernel_figures_are_labelled(tmp_path, drawn):
    """The attention grid: the first example's tokens on both axes (thinned to MAX_TICKS), a colour
    bar saying what the colour is; the kernels: a labelled colour bar per kind; both titled with the
    variant's values of the swept keys."""
    from convexp.data.synthetic import synthetic_corpus
    from convexp.data.tokenizer import build_tokenizer

    texts_ = synthetic_corpus(20, seed=3)
    tok = build_tokenizer({"kind": "wordpiece", "vocab_size": 300}, lambda: iter([texts_]))
    cfg = ModelConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, kernel_size=5,
        fixed_conv=True, depthwise_conv=True, absolute_positions=False, initializer_range=0.5,
    )  # fmt: skip
    files = sorted(tok.save(tmp_path / "tok").iterdir())
    model_dir, _ = analysis_model_dir(tmp_path, "m", cfg, extra_files=files)
    about = "toy (scale=smoke), variant m: model.kernel_size=5"
    result = analysis.analyze_model(model_dir, tmp_path / "out", "m", about=about)
    examples, _ = analysis.default_examples(model_dir, cfg)

    fig = drawn["attention_m.png"]
    assert fig.get_suptitle().startswith(about + "\nattention maps of example 1 (synthetic corpus, 64 tokens")
    tokens = [tok.backend.id_to_token(i) for i in examples[0]]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    step = -(-64 // analysis.MAX_TICKS)
    bottom_left = next(ax for ax in fig.axes if ax.get_xlabel() == "key token j")  # the shared axes' labels
    assert bottom_left.get_ylabel() == "query token i"
    ticks = [t[:10] for t in tokens[::step]]
    assert texts(bottom_left.get_xticklabels()) == texts(bottom_left.get_yticklabels()) == ticks
    assert len(ticks) <= analysis.MAX_TICKS
    assert colour_bar_labels(fig) == [r"attention probability $\alpha_{ij}$ (each row sums to 1; log scale)"]
    assert f"C = {result['C']:.2f}" in fig.get_suptitle()  # the examples' C as report.json holds it

    fig = drawn["kernels_m.png"]
    assert fig.get_suptitle().startswith(about)
    bars = colour_bar_labels(fig)
    assert [b.replace("\n", " ") for b in bars] == list(analysis.KERNEL_BARS.values())  # fixed, depthwise
    assert all(ax.get_xlabel() == "offset j − i (tokens)" for ax in fig.axes if ax.images)


def test_long_sequences_get_thinned_ticks():
    tokens = [f"t{i}" for i in range(512)]
    positions, labels = analysis.thinned_ticks(tokens)
    assert len(positions) <= analysis.MAX_TICKS and positions[:2] == [0, 32] and labels[1] == "t32"
    maps = torch.softmax(torch.randn(1, 1, 40, 40), -1)
    fig = analysis.attention_figure(maps, [f"w{i}" for i in range(40)], "t")
    assert texts(fig.axes[-2].get_xticklabels()) == [f"w{i}" for i in range(0, 40, 3)]  # -1: the colour bar


def test_the_figures_name_the_report_styles_own_score():
    from convexp.report.figures import units

    assert "Spearman for STS-B" in units("convbert")  # ConvBERT's and ELECTRA's tables
    assert "mean of the task's metrics" in units("chang")  # Chang et al.: (F1 + acc) / 2 for MRPC
    assert "accuracy" in units("probing") and "Chang" not in units("probing")
