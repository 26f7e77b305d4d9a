"""Run names show what varies (``<preset>-<objective>+<varied>-<hash>``), and a run is found by its
hash whatever its name: runs named before names showed what varies, or named by a sweep where a
command would name them by its own overrides, are reused and resumed, never trained again."""

from __future__ import annotations

import re


from convexp.config.compose import compose_stage
from convexp.store.run_names import NAME_MAX, VARIED_MAX, SharedHash, name_token, run_hash, run_key, run_name
from convexp.store.runs import Run, said
from convexp.config.name_tokens import command_tokens, variant_tokens
from convexp.tasks.pretraining.runs import pretrain_run
from convexp.tasks.finetune_runs import finetune_run
from convexp.sweep.args import sweep_settings
from convexp.sweep.nodes import pretrain_node
from convexp.sweep.spec import load_sweep

SAFE = re.compile(r"[A-Za-z0-9_.+-]+")


def finished(run_dir):
    """Make ``run_dir`` a finished run of the store, as an earlier command left it."""
    run = Run(run_dir)
    run.set_status("finished")
    run.write_json("metrics.json", {"val_loss": 1.0})
    return run


# ----------------------------------------------------------------------------- the naming function


def test_tokens_use_the_last_key_component_and_safe_characters():
    assert name_token("model.kernel_size", 9) == "kernel_size9"
    assert name_token("optim.lr", 0.0001) == "lr0.0001"
    assert name_token("model.mixers", ["conv", "attn"]) == "mixersconv_attn"
    assert name_token("both_orders", True) == "both_orderstrue"
    odd = name_token("data.path", "/home/me/my corpus:v2/*.txt")
    assert SAFE.fullmatch(odd) and "+" not in odd and "-" not in odd and "/" not in odd, odd


def test_name_shows_name_tokens_before_the_hash_and_is_capped():
    name = run_name("convbert-small-mlm", ["kernel_size9"], "1a2b3c4d5e")
    assert name == "convbert-small-mlm+kernel_size9-1a2b3c4d5e"
    assert run_name("convbert-small-mlm", [], "1a2b3c4d5e") == "convbert-small-mlm-1a2b3c4d5e"
    many = [name_token(f"model.key{i}", "x" * 12) for i in range(10)]
    name = run_name("convbert-small-mlm", many, "1a2b3c4d5e")
    # whole tokens while they fit, then "+..." for the rest: a value is never cut
    assert name == "convbert-small-mlm+key0xxxxxxxxxxxx+key1xxxxxxxxxxxx+...-1a2b3c4d5e", name
    assert len(name) <= len("convbert-small-mlm") + VARIED_MAX + 11 and len(name) <= NAME_MAX
    assert SAFE.fullmatch(name) and run_key(name) == "convbert-small-mlm-1a2b3c4d5e"
    assert run_name("convbert-small-mlm", ["lr0.003"] * 3, "1a2b3c4d5e").count("lr0.003") == 3
    # a fine-tune of an init named with many tokens: the whole name stays within NAME_MAX
    init = run_name("convbert-small-mlm", many, "1a2b3c4d5e")
    ft = run_name(f"{init}-bermo-mnli-s42", ["pruningmovement", "alpha_ce0.1"], "0f0f0f0f0f")
    assert ft == "convbert-small-mlm+...-1a2b3c4d5e-bermo-mnli-s42+pruningmovement+...-0f0f0f0f0f"
    assert len(ft) <= NAME_MAX and run_key(ft) == run_key(f"{run_key(init)}-bermo-mnli-s42-0f0f0f0f0f")


def test_run_key_is_the_name_without_its_tokens():
    """What another run's id hashes when it names this one: the old-style name."""
    assert run_key("convbert-small-mlm+kernel_size9+lr0.001-1a2b3c4d5e") == "convbert-small-mlm-1a2b3c4d5e"
    ft = "convbert-small-mlm+kernel_size9-1a2b3c4d5e-mnli-s42+methodmovement-0f0f0f0f0f"
    assert run_key(ft) == "convbert-small-mlm-1a2b3c4d5e-mnli-s42-0f0f0f0f0f"
    for plain in ("convbert-small-mlm-1a2b3c4d5e", "bert-base-uncased", "/ckpt/my+model", ""):
        assert run_key(plain) == plain


# ----------------------------------------------------------------------------- sweep and command names


def test_sweep_names_show_the_variant_overrides_not_the_base(outputs):
    sweep = load_sweep("convbert-kernel-size")  # base: model=convbert_small objective=electra
    settings = sweep_settings(["scale=smoke"])
    ids = {}
    for name in ("k3", "k9"):
        node, _, _ = pretrain_node(sweep, sweep.variants[name], settings, ["trainer.max_steps=7"])
        ids[name] = node.runs[0].id
    assert re.fullmatch(r"convbert-small-electra\+kernel_size3-[0-9a-f]{10}", ids["k3"]), ids
    assert re.fullmatch(r"convbert-small-electra\+kernel_size9-[0-9a-f]{10}", ids["k9"]), ids
    for base in ("modelconvbert", "objective", "scale", "max_steps", "group", "tags", "outputs"):
        assert base not in ids["k3"]


def test_command_names_its_overrides_that_differ_from_the_defaults(outputs):
    given = ["scale=smoke", "model.kernel_size=5", "optim.lr=0.003", "logger.group=x"]
    cfg = compose_stage("pretrain", given)
    assert re.fullmatch(r"convbert-small-mlm\+kernel_size5\+lr0.003-[0-9a-f]{10}", pretrain_run(cfg).id)
    default_k = compose_stage("pretrain", ["scale=smoke"]).model.kernel_size
    same = compose_stage("pretrain", ["scale=smoke", f"model.kernel_size={default_k}"])
    assert re.fullmatch(r"convbert-small-mlm-[0-9a-f]{10}", pretrain_run(same).id)  # equal to the default
    assert pretrain_run(same).dir == pretrain_run(compose_stage("pretrain", ["scale=smoke"])).dir


# ----------------------------------------------------------------------------- found by hash


def test_an_old_style_run_is_found_by_a_sweep_and_by_a_command(outputs):
    sweep = load_sweep("convbert-kernel-size")
    settings = sweep_settings(["scale=smoke"])
    node, cfg, _ = pretrain_node(sweep, sweep.variants["k5"], settings, [])
    planned = node.runs[0]
    assert "+kernel_size5-" in planned.id and not planned.dir.exists()
    digest = planned.id[-10:]
    old = finished(outputs / "runs" / "pretrain" / f"convbert-small-electra-{digest}")  # before this change
    node, _, _ = pretrain_node(sweep, sweep.variants["k5"], settings, [])
    assert node.runs[0].dir == old.dir and node.runs[0].finished and node.state == "cached"
    command = compose_stage("pretrain", [*node.overrides])  # the same run as a command: its own name
    assert pretrain_run(command).dir == old.dir
    direct = compose_stage(
        "pretrain", ["scale=smoke", "model=convbert_small", "objective=electra", "model.kernel_size=5"]
    )
    assert pretrain_run(direct).dir == old.dir  # `convexp pretrain` with the variant's settings


def test_a_command_writes_into_the_run_its_sweep_named(outputs):
    """A sweep makes its runs' directories before their commands run (sweep.launchers.reserve): the
    command, which would name the run by all of its overrides, finds the sweep's by its hash."""
    sweep = load_sweep("convbert-kernel-size")
    settings = sweep_settings(["scale=smoke"])
    node, _, _ = pretrain_node(sweep, sweep.variants["k5"], settings, ["optim.lr=0.01"])
    cfg = compose_stage("pretrain", node.overrides)
    own = pretrain_run(cfg)
    assert "lr0.01" in own.id and own.id != node.runs[0].id  # the command alone names the base too
    node.runs[0].dir.mkdir(parents=True)
    assert pretrain_run(cfg).dir == node.runs[0].dir


def test_two_directories_of_one_run_prefer_the_finished_one(outputs):
    cfg = compose_stage("pretrain", ["scale=smoke", "model.kernel_size=5"])
    planned = pretrain_run(cfg)
    planned.dir.mkdir(parents=True)  # an empty (reserved) directory under the new name
    old = finished(planned.dir.parent / f"convbert-small-mlm-{planned.id[-10:]}")
    assert pretrain_run(cfg).dir == old.dir


def test_fine_tune_ids_hash_the_init_without_its_tokens(outputs):
    """A fine-tune of a run named with tokens has the id it had when the run was named without them,
    so fine-tunes made before this change are found again."""
    cfg = compose_stage("finetune", ["scale=smoke", "protocol=convbert", "task=rte", "init=none"])
    hp = {"lr": 1e-4}
    new, _ = finetune_run(cfg, "convbert-small-mlm+kernel_size5-1a2b3c4d5e", "rte", 42, hp)
    old, _ = finetune_run(cfg, "convbert-small-mlm-1a2b3c4d5e", "rte", 42, hp)
    assert new.id == "convbert-small-mlm+kernel_size5-1a2b3c4d5e-rte-s42-" + old.id[-10:]
    finished(old.dir)
    init = "convbert-small-mlm+kernel_size5-1a2b3c4d5e"
    again, _ = finetune_run(cfg, init, "rte", 42, hp, tokens=["lr0.01"])
    assert again.dir == old.dir  # found by its hash


def test_shared_hash_is_run_hash_of_the_merged_config():
    """A sweep hashes its fine-tuning runs' shared keys once (tasks/finetune_runs.RunNamer): the same
    digest as run_hash of each whole config, execution keys, nested ones and a key in both included."""
    shared = {
        "glue": {"source": "hub", "path": None, "b": [1, 2.5, "x"]},
        "logger": {"project": "p"},
        "trainer": {"accelerator": "auto", "num_workers": 2, "log_every_n_steps": 50},
        "name": None,
        "seed": 7,  # a key the run gives too: the shared value wins, as in {**own, **shared}
        "pruning": {"method": "movement", "warmup": (1, 2), "é": "ü"},
    }
    namer = SharedHash(shared)
    for own in [{}, {"stage": "finetune", "hp": {"lr": 1e-4, "adam_betas": [0.9, 0.999], "z": 3, "a": None},
                     "seed": 42, "init": "x-0123456789", "from": "", "outputs": "/tmp/o"}]:
        assert namer.digest(own) == run_hash({**own, **shared})
    assert SharedHash({}).digest({"a": 1, "B": {"c": True}}) == run_hash({"a": 1, "B": {"c": True}})


def test_variant_tokens_leave_out_slug_and_execution_keys():
    unnamed = ["model=convbert_base", "logger.group=g", "trainer.devices=2", "scalar_mix=true", "~name",
               "checkpoint_every_s=0"]  # fmt: skip
    assert variant_tokens(["model.kernel_size=9", *unnamed]) == ["kernel_size9"]
    assert variant_tokens(["pruning=movement", "pruning.final_threshold=0.1", "seeds=[1,2]", "task=rte"]) == [
        "pruningmovement",
        "final_threshold0.1",
    ]



def test_names_show_no_path_and_no_data_source(outputs, tmp_path):
    """Where the data comes from is no part of a name (the hash tells those runs apart): a path, as
    a key's value or named by the key, and the data-source settings give no token; a corpus preset
    by its name and the keys that shape the examples do."""
    paths = [f"tokenizer_path={tmp_path}/vocab.txt", f"distill.teacher={tmp_path}/runs/finetune/t", "task.train_file=x.tsv"]
    sources = ["glue.source=synthetic", "glue.synthetic_size=160", "glue.seed=3", "squad.source=local",
               "squad.path=squad", "data.source=files", "data.num_docs=300", "data.seed=1", "protocol=chang"]  # fmt: skip
    assert variant_tokens([*paths, *sources]) == []
    kept = ["data=openwebtext", "data.examples=sentence_pairs", "squad.max_len=256", "model.kernel_size=5"]
    assert variant_tokens([*paths, *kept, *sources]) == [
        "dataopenwebtext",
        "examplessentence_pairs",
        "max_len256",
        "kernel_size5",
    ]
    # a command given all of them names only what it changes in the model or recipe
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n")
    given = ["scale=smoke", "data=files", f"data.path={corpus}", "data.val_fraction=0.5", "model.kernel_size=5"]
    run = pretrain_run(compose_stage("pretrain", given))
    assert re.fullmatch(r"convbert-small-mlm\+datafiles\+kernel_size5-[0-9a-f]{10}", run.id), run.id
    ft_sources = [o for o in sources if not o.startswith("data.")]  # pre-training's
    cfg = compose_stage("finetune", ["scale=smoke", "task=rte", "init=none", *paths[:1], *ft_sources, "lr=0.01"])
    assert command_tokens(cfg) == ["lr0.01"]


def test_a_long_name_is_printed_in_80_columns():
    from pathlib import Path

    short = Path("outputs/runs/pretrain/convbert-small-mlm-1a2b3c4d5e")
    assert said("finished", short) == f"finished: {short}"
    many = [name_token(f"model.key{i}", "x" * 12) for i in range(10)]
    long = short.parent / run_name("convbert-small-mlm", many, "1a2b3c4d5e")
    lines = said("finished", long).splitlines()
    assert lines == [f"finished: {long.name}", "  in outputs/runs/pretrain"]
    assert all(len(line) <= 80 for line in lines)
