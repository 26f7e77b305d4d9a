"""The pre-training recipes are config (conf/recipe/), `--cfg` shows every value a run uses, and the
recipe card of every sweep at scale=paper carries the papers' / the authors' code's values."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from convexp.config.compose import compose_stage, group_options, model_configs
from convexp.errors import ConfigError
from convexp.sweep.args import sweep_settings
from convexp.sweep.cards import Grid, finetune_cards, pretrain_cards
from convexp.sweep.nodes import pretrain_node
from convexp.sweep.spec import load_sweep
from convexp.sweep.start import checkpoint_for


@dataclasses.dataclass(frozen=True)
class Ref:
    lr: float
    batch_size: int
    steps: int
    masking: tuple  # (mask_prob, replace_mask, replace_random)
    max_predictions: int | None  # None: Bernoulli masking, no count
    generator_fraction: float | None
    seq_len: int = 128
    warmup_steps: int = 10_000
    adam_eps: float = 1e-6
    weight_decay: float = 0.01
    # how examples are made: ELECTRA's build_pretraining_dataset.py (ConvBERT builds its data with
    # it), BERT's packed blocks (a deviation: create_pretraining_data.py), Chang et al.'s pairs
    examples: str = "electra"


ELECTRA_MASKING = (0.15, 0.85, 0.0)  # google-research/electra pretrain_helpers.py:202 (tf.less(u, 0.85))
HF_MASKING = (0.15, 0.8, 0.1)  # Hugging Face DataCollatorForLanguageModeling (Chang et al.'s code)

# The papers' and the reference code's pre-training values. E-pre / C-pre: configure_pretraining.py
# of google-research/electra / yitu-opensource/ConvBert; E-opt: electra model/optimization.py
# (eps 1e-6 :55, weight decay 0.01); E-flops: electra flops_computation.py.
REFERENCE = {
    # ELECTRA-Small-OWT: lr 5e-4 E-pre:43, batch 128 E-pre:83, 1M steps E-pre:51, warm-up 10k E-pre:46,
    # 19 predictions E-pre:106, generator 1/4 E-pre:75
    "electra_small": Ref(5e-4, 128, 1_000_000, ELECTRA_MASKING, 19, 0.25),
    # BERT-Small of ELECTRA (ConvBERT Table 1's BERT_SMALL): ELECTRA-Small's settings, 1.45M steps (E-flops:174)
    "bert_small": Ref(5e-4, 128, 1_450_000, ELECTRA_MASKING, 19, 0.25),
    # ConvBERT small: lr 3e-4 C-pre:115; ConvBERT §4.1: batch 128, length 128, 1M updates
    "convbert_small": Ref(3e-4, 128, 1_000_000, ELECTRA_MASKING, 19, 0.25),
    # ConvBERT medium-small: the code's default lr 5e-4 (C-pre:28)
    "convbert_medium_small": Ref(5e-4, 128, 1_000_000, ELECTRA_MASKING, 19, 0.25),
    # ConvBERT base: generator 1/3 C-pre:117, lr 2e-4 C-pre:118, batch 256 C-pre:119
    "convbert_base": Ref(2e-4, 256, 1_000_000, ELECTRA_MASKING, 19, 1 / 3),
    # ELECTRA-Base (Table 6 of Clark et al.): length 512, lr 2e-4, 1/3 generator, batch 256 (E-pre:123-128),
    # 766k steps (E-flops:178), int(0.155 * 512) = 79 predictions (E-pre:106)
    "electra_base": Ref(2e-4, 256, 766_000, ELECTRA_MASKING, 79, 1 / 3, seq_len=512),
    # BERT-Base (Devlin et al. §A.2): lr 1e-4, batch 256, 1M steps; create_pretraining_data.py: 80/10/10,
    # at most 20 predictions; optimization.py: eps 1e-6
    "bert_base": Ref(1e-4, 256, 1_000_000, (0.15, 0.8, 0.1), 20, 1 / 3, examples="packed"),  # (generator: objective=electra only)
    # Chang et al. Table 4: small lr 3e-4, batch 128, 125k steps; base lr 1e-4, batch 256, 1M steps;
    # warm-up 10k, eps 1e-6, weight decay 0.01, mask proportion 0.15
    # examples: their line-by-line pair dataset (README --line_by_line), one sentence pair per example
    "chang_small": Ref(3e-4, 128, 125_000, HF_MASKING, None, 0.25, examples="sentence_pairs"),  # (generator: objective=electra only)
    "chang_base": Ref(1e-4, 256, 1_000_000, HF_MASKING, None, 1 / 3, examples="sentence_pairs"),
}

CHANG = "bookcorpus/bookcorpus + Salesforce/wikitext (wikitext-103-raw-v1)"  # Chang et al. §4, appendix A.1
OWT = "Skylion007/openwebtext"  # ConvBERT §4.1: OpenWebText
# every sweep: {variant: (recipe, steps multiplier)} of its pre-training at scale=paper, and its
# corpus; None: the sweep fine-tunes a released checkpoint at scale=paper (BERMO: bert-base-uncased)
SWEEPS = {
    "bermo-distill": None,
    "bermo-glue": None,
    "bermo-probing": None,
    "bermo-prune-convergence": None,
    "bermo-prune-methods": None,
    "bermo-prune-stability": None,
    "conv-injection": (CHANG, {v: "chang_small" for v in (
        "abs", "conv_qk", "conv_v", "conv_qkv", "composite", "composite_conv_qk", "composite_conv_v",
        "composite_conv_qkv")}),
    "convbert-components": (OWT, {
        "bert_small": "bert_small", "electra_small": "electra_small", "small_bnk": "convbert_small",
        "small_bnk_sdconv": "convbert_small", "electra_ms": "convbert_medium_small",
        "ms_bnk": "convbert_medium_small", "ms_bnk_gl": "convbert_medium_small",
        "ms_bnk_gl_larger": "convbert_medium_small", "ms_bnk_gl_sdconv": "convbert_medium_small",
        "bert_base": "bert_base", "electra_base": "electra_base", "base_bnk": "convbert_base",
        "base_bnk_sdconv": "convbert_base"}),
    "convbert-conv-type": (OWT, {"electra_small": "electra_small", "conventional": "convbert_small",
                                 "dynamic": "convbert_small", "sdconv": "convbert_small"}),
    "convbert-kernel-size": (OWT, {f"k{k}": "convbert_small" for k in (1, 3, 5, 7, 9, 11, 17, 33)}),
    "convbert-sizes": (OWT, {  # "train longer for 4M updates" (Table 3): 4x
        "small": "convbert_small", "small_4m": ("convbert_small", 4),
        "medium_small": "convbert_medium_small", "medium_small_4m": ("convbert_medium_small", 4),
        "base": "convbert_base", "base_4m": ("convbert_base", 4)}),
    "convbert-squad": (OWT, {
        "electra_small": "electra_small", "bert_base": "bert_base", "electra_base": "electra_base",
        "small": "convbert_small", "small_4m": ("convbert_small", 4), "medium_small": "convbert_medium_small",
        "medium_small_4m": ("convbert_medium_small", 4), "base": "convbert_base"}),
    "convbert-vs-integrated": (CHANG, {"convbert": "chang_small", "integrated": "chang_small"}),
    "depthwise-conv": (CHANG, {v: "chang_small" for v in ("abs", "composite", "depthwise", "composite_depthwise")}),
    "key-based-conv": (CHANG, {v: "chang_small" for v in ("composite", "composite_key")}),
    # the objective sweep: each row with its paper's recipe (BERT-Small 1.45M, ELECTRA-Small-OWT 1M)
    "objective": (OWT, {"mlm": "bert_small", "electra": "electra_small"}),
    "relative-positions": (CHANG, {
        **{v: "chang_small" for v in ("nopos", "abs", "fixed", "dynamic", "composite")},
        **{v: "chang_base" for v in ("base_abs", "base_fixed", "base_dynamic", "base_composite")}}),
}


def test_the_table_covers_every_sweep():
    builtin = {n for n in group_options("sweep")}
    assert builtin == set(SWEEPS)


# composing a sweep's pre-training costs ~0.3 s a variant: these three cover every recipe (and a
# "train longer" multiplier) in the default tier, ~10 s; the others are slow
FAST = ("convbert-components", "convbert-sizes", "relative-positions")


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in sorted(SWEEPS)]
)
def test_pretraining_cards_at_paper_scale_carry_the_papers_values(name):
    sweep = load_sweep(name)
    settings = sweep_settings(["scale=paper"])
    expected = SWEEPS[name]
    if expected is None:
        assert checkpoint_for(sweep, settings) is not None  # fine-tunes a released checkpoint
        return
    corpus, recipes = expected
    assert set(recipes) == set(sweep.variants), f"{name}: the table lists other variants"
    cfgs = {v.name: pretrain_node(sweep, v, settings, [])[1] for v in sweep.variants.values()}
    cards = pretrain_cards(cfgs)
    assert sorted(v for c in cards for v in c.variants) == sorted(recipes)  # every variant on one card
    for card in cards:
        for variant in card.variants:
            recipe, times = recipes[variant] if isinstance(recipes[variant], tuple) else (recipes[variant], 1)
            ref = REFERENCE[recipe]
            got = dict(card.rows)
            where = f"{name}/{variant}"
            assert got["recipe"] == recipe, where
            assert got["lr"] == pytest.approx(ref.lr), where
            assert (got["batch_size"], got["steps"], got["warmup_steps"]) == (ref.batch_size, ref.steps * times, ref.warmup_steps), where
            assert (got["adam_eps"], got["weight_decay"], got["adam_betas"]) == (ref.adam_eps, ref.weight_decay, (0.9, 0.999)), where
            assert (got["mask_prob"], got["replace_mask"], got["replace_random"]) == ref.masking, where
            assert got["exact_count"] == (ref.max_predictions is not None), where
            assert got["max_predictions"] == ref.max_predictions, where
            if got["objective"] == "electra":
                assert got["generator_fraction"] == pytest.approx(ref.generator_fraction), where
            else:
                assert "generator_fraction" not in got, where
            assert got["seq_len"] == ref.seq_len and got["corpus"] == corpus, where
            assert got["examples"] == ref.examples, where
    # variants that share a recipe share its card
    assert len(cards) == len({tuple(sorted(dict(c.rows).items(), key=str)) for c in cards})


# keys that may be null in a pre-training config: optional inputs, not values the run uses
NULLABLE = {
    "init",  # no start checkpoint: random initialisation
    "name",  # no label
    "data.path", "data.name", "data.max_docs", "data.val_docs", "data.val_split",  # synthetic data: no files, no limits
    "data.revision",  # no hub dataset (a hub one: its default branch)
    "data.num_docs", "data.val_fraction",  # a hub corpus (OpenWebText, the recipe's): every document; val_docs held out
    "tokenizer.path", "tokenizer.train_docs",  # the tokenizer is trained (on all documents), not loaded
    "logger.entity", "logger.group",  # W&B: the default entity, no group
}


def _nulls(node, prefix: str = "") -> list[str]:
    out = []
    items = node.items() if isinstance(node, DictConfig) else enumerate(node)
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, (DictConfig, ListConfig)):
            out += _nulls(v, key + ".")
        elif v is None:
            out.append(key)
    return out


def test_electra_small_cfg_prints_no_null_for_a_value_the_run_uses():
    from typer.testing import CliRunner

    from convexp.cli import app

    res = CliRunner().invoke(app, ["pretrain", "model=electra_small", "objective=electra", "--cfg"])
    assert res.exit_code == 0, res.output
    printed = OmegaConf.create(res.output)
    nulls = set(_nulls(printed))
    assert nulls <= NULLABLE, sorted(nulls - NULLABLE)
    # the values the issue names, as ELECTRA-Small-OWT runs them
    assert (printed.optim.lr, printed.trainer.max_steps, printed.trainer.batch_size) == (5e-4, 1_000_000, 128)
    assert printed.objective.generator_fraction == 0.25 and printed.objective.max_predictions == 19


def test_scale_and_the_command_line_override_the_recipe():
    base = ["model=convbert_small", "objective=electra"]
    smoke = compose_stage("pretrain", [*base, "scale=smoke"])
    assert (smoke.optim.lr, smoke.trainer.max_steps, smoke.trainer.batch_size, smoke.seq_len) == (1e-3, 600, 32, 64)
    assert smoke.objective.generator_fraction == 0.25  # the recipe's, kept at every scale
    small = compose_stage("pretrain", [*base, "scale=small"])
    assert (small.optim.lr, small.trainer.max_steps, small.optim.warmup_steps) == (3e-4, 50_000, 2500)
    given = compose_stage("pretrain", [*base, "optim.lr=1e-5", "trainer.batch_size=64", "objective.replace_random=0.1"])
    assert (given.optim.lr, given.trainer.batch_size, given.objective.replace_random) == (1e-5, 64, 0.1)
    other = compose_stage("pretrain", [*base, "recipe=electra_small"])  # another recipe for this preset
    assert (other.recipe.name, other.optim.lr, other.model.name) == ("electra_small", 5e-4, "convbert-small")


def test_steps_multiplier_is_shown_as_the_steps_that_run():
    four = ["model=convbert_small", "trainer.steps_multiplier=4"]
    assert compose_stage("pretrain", four).trainer.max_steps == 4_000_000
    assert compose_stage("pretrain", [*four, "scale=smoke"]).trainer.max_steps == 2400
    assert compose_stage("pretrain", [*four, "trainer.max_steps=77"]).trainer.max_steps == 77  # as given


def test_a_preset_without_a_recipe_is_one_line_with_the_fix(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "bare.yaml").write_text(
        "name: bare\nhidden_size: 64\nnum_heads: 4\nnum_layers: 2\nintermediate_size: 128\n"
    )
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"names no pre-training recipe.*\+recipe@_global_=NAME"):
        compose_stage("pretrain", ["model=bare"])
    cfg = compose_stage("pretrain", ["model=bare", "+recipe@_global_=chang_small"])
    assert (cfg.optim.lr, cfg.trainer.max_steps) == (3e-4, 125_000)
    assert model_configs(["bare"])["bare"].hidden_size == 64  # presets without a recipe still list


def test_electra_generator_size_follows_the_recipe():
    # MLM recipes give ELECTRA's generator size for their width, for objective=electra
    assert compose_stage("pretrain", ["model=chang_small", "objective=electra"]).objective.generator_fraction == 0.25
    assert compose_stage("pretrain", ["model=bert_base", "objective=electra"]).objective.generator_fraction == pytest.approx(1 / 3)
    assert "generator_fraction" not in compose_stage("pretrain", ["model=bert_base"]).objective  # MLM: none
    given = compose_stage("pretrain", ["model=convbert_small", "objective=electra", "objective.generator_fraction=0.5"])
    assert given.objective.generator_fraction == 0.5
    with pytest.raises(ConfigError, match="objective.generator_fraction"):
        compose_stage("pretrain", ["model=convbert_small", "objective=electra", "recipe.generator_fraction=null"])


def test_every_preset_composes_alone_and_together():
    names = group_options("model")
    assert set(model_configs(names)) == set(names)  # their recipes do not clash
    for n in ("electra_small", "chang_base_fixed", "convbert_base"):
        assert compose_stage("pretrain", [f"model={n}"]).recipe.name in REFERENCE


def test_finetune_cards_group_variants_and_tasks_and_show_grids():
    class N:  # a fine-tuning node: its variant, task and runs' settings
        stage = "finetune"

        def __init__(self, variant, task, hparams):
            self.variant, self.task, self.hparams = variant, task, hparams

    hp = {"lr": 3e-4, "batch_size": 32, "epochs": 3, "weight_decay": 0.01, "pruning.method": "none"}
    nodes = [
        N("small", "rte", {"a": hp}),
        N("medium", "rte", {"b": hp}),
        N("small", "cola", {"c": {**hp, "epochs": 10}, "d": {**hp, "epochs": 3}}),
    ]
    first, grid = finetune_cards(nodes)
    assert (first.title, first.variants, first.get("lr")) == ("rte", ("small", "medium"), 3e-4)
    assert grid.get("epochs") == Grid((10, 3)) and isinstance(grid.get("epochs"), Grid)
    assert [k for k, _ in first.rows][:3] == ["lr", "batch_size", "epochs"]


def test_dry_run_prints_one_card_per_recipe(capsys):
    from convexp.sweep.plan import build_plan
    from convexp.sweep.show import print_plan

    plan = build_plan(load_sweep("convbert-sizes"), ["scale=paper", "variants=[small,small_4m]", "tasks=[rte]"])
    print_plan(plan)
    out = capsys.readouterr().out
    assert "pre-training recipe convbert_small — variants: small\n" in out
    assert "steps 4,000,000" in out and "lr 3e-04" in out
    assert "fine-tuning recipe rte — variants: small, small_4m" in out


# --- issue 22 (the last recipe deviations), items 5, 6, 7, 9 and 10: at scale=paper each value is the
# source's, or the card says how it differs. Rows: (item, what is checked, its source).


def _item5_continuation_only_for_the_rows_that_had_it():
    from convexp.sweep.plan import build_plan

    plan = build_plan(load_sweep("convbert-squad"), ["scale=paper", "seeds=[42]"])
    continued = {k.split("/", 1)[1] for k in plan.nodes if k.startswith("continue/")}
    assert continued == {"bert_base", "small", "small_4m", "medium_small", "medium_small_4m", "base"}
    for variant in ("electra_small", "electra_base"):  # their SQuAD runs start from the pre-training itself
        node = plan.nodes[f"finetune/{variant}/squad1/s42"]
        assert node.deps == [f"pretrain/{variant}"], node.deps


def _item6_bert_small_fine_tunes_with_electras_classifier():
    from convexp.config.compose import model_config

    cfg = model_config("bert_small")
    assert (cfg.pooler, cfg.classifier_head) == (False, "cls")
    assert load_sweep("objective").pretrain == ("model=bert_small",)  # both of its rows: bert_small


def _item7_cited_base_rows_are_marked():
    sweep = load_sweep("convbert-components")
    settings = sweep_settings(["scale=paper"])
    for name in ("bert_base", "electra_base"):
        v = sweep.variants[name]
        [card] = pretrain_cards({name: pretrain_node(sweep, v, settings, [])[1]})
        assert card.notes and card.notes[0].startswith("cited, re-run on another corpus"), name
        assert "Wikipedia + BooksCorpus" in card.notes[0] and "(cited, re-run on another corpus)" in v.label
    assert any("cited, re-run on another corpus" in n for n in sweep.report.notes)
    small = sweep.variants["small_bnk_sdconv"]
    assert not pretrain_cards({"s": pretrain_node(sweep, small, settings, [])[1]})[0].notes


def _finetune_card(sweep: str, *args: str):
    from convexp.sweep.cards import recipe_cards
    from convexp.sweep.plan import build_plan

    plan = build_plan(load_sweep(sweep), ["scale=paper", "tasks=[rte]", "seeds=[42]", *args])
    return [c for c in recipe_cards(plan) if c.stage == "finetune"][0]


def _item9_random_batches_at_paper():
    for scale, grouped in (("paper", False), ("small", True), ("smoke", True)):
        assert compose_stage("finetune", ["init=x", f"scale={scale}"]).group_by_length is grouped, scale
    args = ("variants=[bert_small]",)
    card = _finetune_card("convbert-components", *args)
    assert "group_by_length" not in dict(card.rows) and not card.notes
    opted = _finetune_card("convbert-components", *args, "finetune.group_by_length=true")
    assert opted.get("group_by_length") is True and opted.notes[0].startswith("deviation: training batches")


def _item10_changs_adam_epsilon_is_stated():
    card = _finetune_card("key-based-conv", "variants=[composite]")
    assert card.get("protocol") == "chang" and card.get("adam_epsilon") == 1e-8  # their run_glue.py's
    assert any("Table 5 prints 1e-6" in n for n in card.notes)


ISSUE_22 = [
    (5, "the 512 continuation only for rows that had it",
     "ConvBERT §4.3 / Table 4; ELECTRA configure_pretraining.py", _item5_continuation_only_for_the_rows_that_had_it),
    (6, "BERT-Small: ELECTRA's classifier, no pooler",
     "google-research/electra model/modeling.py (pooled_output = sequence_output[:, 0]), "
     "finetune/classification/classification_tasks.py", _item6_bert_small_fine_tunes_with_electras_classifier),
    (7, "cited base rows marked on the card and in the report",
     "BERT §3.1, ELECTRA §3.1: Wikipedia + BooksCorpus", _item7_cited_base_rows_are_marked),
    (9, "random training batches at scale=paper",
     "ELECTRA finetune/ (shuffled tf.data), HF Trainer / run_glue.py and Sanh et al. (RandomSampler)",
     _item9_random_batches_at_paper),
    (10, "Chang et al.'s fine-tuning Adam ε stated",
     "Chang et al. Table 5 (1e-6); their run_glue.py (HF Trainer's 1e-8)", _item10_changs_adam_epsilon_is_stated),
]


@pytest.mark.parametrize("item, what, source, check", ISSUE_22, ids=[f"item{r[0]}" for r in ISSUE_22])
def test_issue_22_rows_at_paper_scale(item, what, source, check):
    check()


# --- fine-tuning cards: the data each task trains on ---------------------------------------------
# (sweep, setting, {task: value at scale=paper}, source) rows of the fine-tuning cards; None: no row.
FINETUNE_DATA_ROWS = [
    # ELECTRA's double_unordered = True (google-research/electra configure_finetuning.py:76,
    # yitu-opensource/ConvBert configure_finetuning.py:69): MRPC and STS train on both sentence
    # orders (finetune/classification/classification_tasks.py, MRPC/STS _create_examples); the
    # other tasks once, as given
    ("convbert-sizes", "both_orders", {"mrpc": True, "stsb": True, "rte": None, "qqp": None},
     "electra configure_finetuning.py:76"),
    # ELECTRA's answerable classifier on every SQuAD version (configure_finetuning.py:84
    # answerable_classifier = True; finetune/qa/qa_tasks.py: v1.1 labels all 0)
    ("convbert-squad", "qa.answerable", {"squad1": True, "squad2": True}, "electra configure_finetuning.py:84"),
]


@pytest.mark.parametrize("sweep,setting,by_task,source", FINETUNE_DATA_ROWS)
def test_finetune_cards_at_paper_scale_carry_the_data_settings_of_the_code(sweep, setting, by_task, source):
    from convexp.sweep.plan import build_plan

    variant = next(iter(load_sweep(sweep).variants))
    args = ["scale=paper", f"variants=[{variant}]", f"tasks=[{','.join(by_task)}]", "seeds=[1]"]
    plan = build_plan(load_sweep(sweep), args)
    cards = {task: card for card in finetune_cards(plan.order()) for task in card.title.split(", ")}
    for task, value in by_task.items():
        assert dict(cards[task].rows).get(setting) == value, (setting, task, source)
