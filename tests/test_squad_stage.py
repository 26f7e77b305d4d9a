"""`convexp finetune squad`: SQuAD runs in the run store, protocols, resume, errors, sweeps."""

import json
from pathlib import Path

import pytest
from helpers import convexp, kill_when, official_json, write_vocab

SMOKE = ["scale=smoke", "squad.synthetic_size=200", "epochs=1", "squad.max_len=96"]


def squad_runs_in(outputs: Path) -> list[Path]:
    return sorted((outputs / "runs" / "finetune").glob("*squad*"))


def local_squad(root: Path, version: str = "v1.1", size: int = 120) -> Path:
    from convexp.tasks.squad.data import synthetic_squad

    data = synthetic_squad(size, 3, version)
    root.mkdir(parents=True, exist_ok=True)
    official_json(root / f"train-{version}.json", data["train"], version)
    official_json(root / f"dev-{version}.json", data["validation"], version)
    return root


def official_v2_scores(dataset: dict, predictions: dict, na_probs: dict, na_prob_thresh: float = 0.0) -> dict:
    """What SQuAD's official evaluate-v2.0.py prints for these files, written out again here
    (independently of convexp's tasks/squad/metrics.py): answers normalised (lower case, no
    punctuation, no articles, single spaces), exact match and token F1 against the best gold
    answer ("" when there is none), "no answer" where the na score exceeds the threshold, and
    best_exact / best_f1: the best of the scores reached by answering exactly the questions
    whose na score is at most some threshold (the official search over the sorted scores)."""
    import collections
    import re
    import string

    def normal(text):
        text = "".join(c for c in text.lower() if c not in set(string.punctuation))
        return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())

    def f1(gold, pred):
        g, p = normal(gold).split(), normal(pred).split()
        if not g or not p:
            return float(g == p)
        same = sum((collections.Counter(g) & collections.Counter(p)).values())
        return 0.0 if same == 0 else 2 * same / (len(g) + len(p))

    exact, f1s, has = {}, {}, {}
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                golds = [a["text"] for a in qa["answers"] if normal(a["text"])] or [""]
                has[qa["id"]] = bool(qa["answers"])
                pred = predictions[qa["id"]]
                exact[qa["id"]] = max(float(normal(g) == normal(pred)) for g in golds)
                f1s[qa["id"]] = max(f1(g, pred) for g in golds)
    out = {}
    for name, raw in (("exact", exact), ("f1", f1s)):
        scored = {q: float(not has[q]) if na_probs[q] > na_prob_thresh else v for q, v in raw.items()}
        out[name] = 100 * sum(scored.values()) / len(raw)
        score = best = sum(not h for h in has.values())  # every question answered "no answer"
        for q in sorted(na_probs, key=na_probs.get):  # answer the questions in order of na score
            score += raw[q] if has[q] else (0 if not predictions[q] else -1)
            best = max(best, score)
        out[f"best_{name}"] = 100 * best / len(raw)
    return out


def test_official_v2_script_reproduces_the_scores_from_the_written_files(tmp_path):
    """The official script with --na-prob-file null_odds.json --na-prob-thresh 0 gives metrics.json's
    exact, f1, best_exact and best_f1 - also where the best threshold answers a question that
    threshold 0 leaves unanswered (predictions.json must hold that answer, not "")."""
    from convexp.tasks.squad.decode import SpanPrediction
    from convexp.tasks.squad.metrics import evaluate_spans
    from convexp.store.runs import Run
    from convexp.tasks.squad.evaluate import write_predictions

    def record(i, answer):
        return {"id": f"q{i}", "context": "the red fox ran", "question": "?", "is_impossible": not answer,
                "answers": {"text": [answer] if answer else [], "answer_start": [0] if answer else []}}

    records = [record(0, "red fox"), record(1, "fox"), record(2, ""), record(3, "ran"), record(4, "")]
    spans = {  # (best non-null span, no-answer score): q1 is right only above threshold 0.5
        "q0": ("red fox", -2.0), "q1": ("fox", 0.5), "q2": ("ran", 3.0), "q3": ("the red", -1.0), "q4": ("fox", 0.7)
    }  # fmt: skip
    predictions = {q: SpanPrediction(q, "" if na > 0 else text, text, na) for q, (text, na) in spans.items()}
    scores = evaluate_spans(records, predictions, "v2.0")
    run = Run(tmp_path)
    write_predictions(run, predictions, "v2.0")
    official_json(tmp_path / "dev-v2.0.json", records, "v2.0")
    official = official_v2_scores(
        json.loads((tmp_path / "dev-v2.0.json").read_text()),
        json.loads((tmp_path / "predictions.json").read_text()),
        json.loads((tmp_path / "null_odds.json").read_text()),
    )
    for key in ("exact", "f1", "best_exact", "best_f1"):
        assert official[key] == pytest.approx(scores[key], abs=0.01), key
    assert scores["best_f1"] > scores["f1"]  # the case that needs the non-null answer in the file


# ----------------------------------------------------------------------------- planning (fast)


def test_protocol_settings_and_run_ids():
    from convexp.config.compose import compose_stage
    from convexp.store.run_names import run_hash
    from convexp.tasks.squad.runs import squad_runs

    def plan(*over):
        return squad_runs(compose_stage("finetune", ["init=x", "seeds=[1]", *over]), "m", 256)

    def ident(planned) -> str:
        return run_hash(planned.run_cfg)

    [electra] = plan("task=squad2")
    assert electra.run_cfg["qa"] == {
        "head": "electra", "max_len": 512, "doc_stride": 128, "stride_mode": "step", "max_query_len": 64,
        "n_best": 20, "max_answer_len": 30, "answerable": True, "version": "v2.0",
    }  # fmt: skip
    assert (electra.hp["epochs"], electra.hp["batch_size"], electra.hp["layerwise_lr_decay"]) == (2, 32, 0.8)
    [bert] = plan("task=squad1", "protocol=bermo")
    assert (bert.run_cfg["qa"]["head"], bert.run_cfg["qa"]["max_len"], bert.run_cfg["qa"]["stride_mode"]) == (
        "bert",
        384,
        "step",
    )
    assert (bert.hp["epochs"], bert.hp["batch_size"]) == (3, 16)
    # BERMO fine-pruning on SQuAD: 10 epochs, Tables 7-10's SQuAD column
    [l0] = plan("task=squad1", "protocol=bermo", "pruning=l0")
    p = l0.run_cfg["pruning"]
    assert l0.hp["epochs"] == 10 and (p["final_lambda"], p["score_lr"], p["warmup_steps"]) == (175.0, 0.1, 5400)
    [soft] = plan("task=squad1", "protocol=bermo", "pruning=soft_movement")
    assert soft.run_cfg["pruning"]["final_lambda"] == 500.0
    assert (soft.run_cfg["pruning"]["initial_warmup"], soft.run_cfg["pruning"]["final_warmup"]) == (1, 2)
    # the same command, the same run; windows and data source are part of the id
    # (a run is its hash: names show the overrides given, and the store finds a run by its hash)
    assert plan("task=squad1", "protocol=bermo")[0].run.dir == bert.run.dir
    assert ident(plan("task=squad1", "protocol=bermo", "squad.max_len=256")[0]) != ident(bert)
    assert ident(plan("task=squad1", "protocol=bermo", "squad.source=synthetic")[0]) != ident(bert)
    assert ident(plan("task=squad1")[0]) != ident(plan("task=squad2")[0])
    assert ident(plan("task=squad1", "protocol=bermo", "glue.synthetic_size=7")[0]) == ident(bert)
    assert ident(plan("task=squad1", "protocol=bermo", "task.max_len=32")[0]) == ident(bert)  # GLUE's key
    # length-grouped batches (the default at smoke and small) are part of the id; off, the id is as before
    grouped = plan("task=squad1", "protocol=bermo", "group_by_length=true")[0]
    assert grouped.run_cfg["group_by_length"] is True and ident(grouped) != ident(bert)
    assert "group_by_length" not in bert.run_cfg


def test_squad_training_batches_hold_windows_of_similar_length():
    import torch

    from convexp.tasks.squad.stage import COLUMNS, SquadData

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 257, (640,), generator=g).tolist()
    windows = [{c: torch.zeros(k if c in ("input_ids", "token_type_ids", "context_mask") else (), dtype=torch.long)
                for c in COLUMNS} for k in lengths]  # fmt: skip

    def spread(group: bool) -> float:
        data = SquadData(windows, 42, 16, 0, 0, group)
        data.trainer = type("T", (), {"global_step": 0})()
        batches = iter(data.train_dataloader())
        widths = [next(batches)["input_ids"].shape[1] for _ in range(40)]  # one epoch: padded to each longest
        return sum(widths) * 16 / sum(lengths)  # padded tokens per real token

    assert spread(True) < 1.05 < 1.4 < spread(False)


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_hugging_face_bert_fine_tunes_on_local_squad_json(tmp_path):
    from transformers import BertConfig, BertModel

    from convexp.data.synthetic import vocabulary_words

    ckpt = tmp_path / "bert"
    ckpt.mkdir()
    write_vocab(ckpt / "vocab.txt", sorted(vocabulary_words())[:400])
    cfg = BertConfig(
        vocab_size=405,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(cfg).save_pretrained(ckpt)
    data = local_squad(tmp_path / "squad", "v2.0")
    args = ["finetune", "squad", "task=squad2", "protocol=bermo", f"init={ckpt}", "squad.source=local"]
    res = convexp(*args, f"squad.path={data}", *SMOKE[2:], "squad.doc_stride=32", "epochs=2", "seeds=[42]",
                  "trainer.accelerator=cpu", outputs=tmp_path, env={"WANDB_MODE": "disabled"})  # scale=paper, by name on the CPU
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = squad_runs_in(tmp_path)
    m = json.loads((run / "metrics.json").read_text())
    dev = m["dev"]["validation"]
    for key in ("exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"):
        assert key in dev, dev
    assert 0 <= dev["exact"] <= dev["f1"] <= 100 and m["score"] == dev["best_f1"]
    assert m["examples_per_s"] > 0 and m["eval_time_s"] > 0 and m["qa"]["head"] == "bert"
    assert m["eval_device"] == "cpu"  # where it trained (tests/test_gpu.py: on a GPU, there)
    dev_ids = [q["id"] for p in json.loads((data / "dev-v2.0.json").read_text())["data"][0]["paragraphs"] for q in p["qas"]]
    predictions = json.loads((run / "predictions.json").read_text())
    assert sorted(predictions) == sorted(dev_ids) and all(isinstance(t, str) for t in predictions.values())
    # the official v2.0 script's scores from the two files (--na-prob-file null_odds.json --na-prob-thresh 0)
    null_odds = json.loads((run / "null_odds.json").read_text())
    official = official_v2_scores(json.loads((data / "dev-v2.0.json").read_text()), predictions, null_odds)
    for key in ("exact", "f1", "best_exact", "best_f1"):
        assert official[key] == pytest.approx(dev[key], abs=0.01), key
    assert (run / "record.json").exists() and (run / "model" / "vocab.txt").exists()
    assert "squad2 seed 42: EM" in res.stdout
    # finished runs are reused: nothing is trained again
    again = convexp(*args, f"squad.path={data}", *SMOKE[2:], "squad.doc_stride=32", "epochs=2", "seeds=[42]",
                    "trainer.accelerator=cpu", outputs=tmp_path, env={"WANDB_MODE": "disabled"})
    assert again.returncode == 0 and "Trainer.fit" not in again.stderr + again.stdout


@pytest.mark.slow
def test_killed_squad_run_resumes_to_the_same_result(tmp_path, pretrained):
    args = ["finetune", "squad", "task=squad1", f"init={pretrained}", *SMOKE[:1], "squad.synthetic_size=600"]
    args += ["epochs=3", "batch_size=16", "squad.max_len=96", "checkpoint_every_s=0"]  # every half epoch
    ref = convexp(*args, outputs=tmp_path / "ref", env={"WANDB_MODE": "disabled"})
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = tmp_path / "killed"
    kill_when(args, out, "runs/finetune/*/checkpoints/last.ckpt")
    [run] = squad_runs_in(out)
    assert not (run / "metrics.json").exists(), "the run finished before it could be killed"
    res = convexp(*args, outputs=out, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-3000:]
    a = json.loads((squad_runs_in(tmp_path / "ref")[0] / "metrics.json").read_text())
    b = json.loads((run / "metrics.json").read_text())
    assert b["dev"]["validation"] == pytest.approx(a["dev"]["validation"])
    assert json.loads((run / "predictions.json").read_text()) == json.loads(
        (squad_runs_in(tmp_path / "ref")[0] / "predictions.json").read_text()
    )


def _bad_answer(root: Path) -> list[str]:
    local_squad(root)
    dev = json.loads((root / "dev-v1.1.json").read_text())
    dev["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    (root / "dev-v1.1.json").write_text(json.dumps(dev))
    return ["squad.source=local", f"squad.path={root}"]


def _not_json(root: Path) -> list[str]:
    local_squad(root)
    (root / "train-v1.1.json").write_text("{not json")
    return ["squad.source=local", f"squad.path={root}"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "make, message",
    [
        (_not_json, "is not valid JSON"),
        (_bad_answer, "dev-v1.1.json"),
        (lambda root: ["squad.source=local", f"squad.path={root}/none"], "no such SQuAD file"),
        (lambda root: ["task=mrpc"], "task=mrpc is not a SQuAD task"),
        (lambda root: ["protocol=chang"], "protocol=chang has no SQuAD settings"),
        (lambda root: ["squad.max_len=512"], "exceeds the model's"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, pretrained, make, message):
    over = make(tmp_path / "data")
    res = convexp("finetune", "squad", f"init={pretrained}", *SMOKE, *over, outputs=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr[-2000:]


# ----------------------------------------------------------------------------- the sweep


@pytest.mark.slow  # a sweep's dry run in a process
def test_convbert_squad_sweep_plans_squad_nodes(tmp_path):
    res = convexp("ablate", "convbert-squad", "scale=smoke", "--dry-run", outputs=tmp_path, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "finetune/small/squad1/s42" in res.stdout and "finetune/base/squad2/s42" in res.stdout
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    plan = build_plan(load_sweep("convbert-squad"), ["scale=smoke", f"outputs={tmp_path}"])
    node = plan.nodes["finetune/small/squad2/s42"]
    assert node.command.startswith("convexp finetune squad ") and "task=squad2" in node.command
    assert node.deps == ["continue/small"] and node.flops > 0  # SQuAD starts from the continuation
    assert "continue/small" in res.stdout  # the dry-run shows the continuation node


@pytest.mark.slow  # plans a sweep
def test_length_512_continuation_is_a_node_between_pretraining_and_squad(tmp_path):
    """ConvBERT Table 4: 10% more updates at length 512 before SQuAD, from the pre-training run;
    GLUE tasks of the same variant keep the length-128 model; at smoke, the smoke length 128."""
    from convexp.config.compose import compose_stage
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    sweep = load_sweep("convbert-squad")
    args = ["scale=paper", "variants=[small,small_4m]", "tasks=[squad1,rte]", f"outputs={tmp_path}"]
    paper = build_plan(sweep, args)
    for v, pre_steps in (("small", 1_000_000), ("small_4m", 4_000_000)):  # 1M updates; "train longer": 4M
        pre, cont = paper.nodes[f"pretrain/{v}"], paper.nodes[f"continue/{v}"]
        assert cont.deps == [pre.key] and cont.command.startswith("convexp pretrain ")
        cfg = compose_stage("pretrain", cont.overrides)
        assert (cfg.seq_len, cfg.trainer.max_steps) == (512, pre_steps // 10)
        assert cfg.objective.max_predictions == 79  # ELECTRA's cap at length 512
        assert cfg.init == str(pre.runs[0].dir.resolve())
        assert cfg.model.name == compose_stage("pretrain", pre.overrides).model.name
        assert paper.nodes[f"finetune/{v}/squad1/s42"].deps == [cont.key]
        assert f"init={cont.runs[0].dir.resolve()}" in paper.nodes[f"finetune/{v}/squad1/s42"].overrides
        rte = paper.nodes[f"finetune/{v}/rte/s42"]  # GLUE: the length-128 pre-training
        assert rte.deps == [pre.key] and f"init={pre.runs[0].dir.resolve()}" in rte.overrides
    order = [n.key for n in paper.order()]
    assert order.index("pretrain/small") < order.index("continue/small") < order.index("finetune/small/squad1/s42")
    glue_only = build_plan(sweep, ["scale=paper", "variants=[small]", "tasks=[rte]", f"outputs={tmp_path}"])
    assert "continue/small" not in glue_only.nodes  # only SQuAD tasks ask for it
    smoke = build_plan(sweep, ["scale=smoke", "variants=[small]", f"outputs={tmp_path}"])
    cfg = compose_stage("pretrain", smoke.nodes["continue/small"].overrides)
    assert (cfg.seq_len, cfg.model.max_position_embeddings, cfg.trainer.max_steps) == (128, 128, 60)


def test_continuation_is_reused_across_sweeps(tmp_path):
    """Another sweep continuing the same pre-training plans the same run, and finds it cached."""
    from convexp.sweep.plan import build_plan
    from convexp.sweep.spec import load_sweep

    other = tmp_path / "my-squad.yaml"
    other.write_text(
        "pretrain: [objective=electra]\n"
        "squad_continuation: {fraction: 0.1, seq_len: 512}\n"
        "finetune: {tasks: [squad1], overrides: [protocol=convbert]}\n"
        "variants:\n  mine: {pretrain: [model=convbert_small]}\n"
    )
    out = tmp_path / "out"
    a = build_plan(load_sweep("convbert-squad"), ["scale=smoke", "variants=[small]", f"outputs={out}"])
    b = build_plan(load_sweep(str(other)), ["scale=smoke", f"outputs={out}"])
    run = a.nodes["continue/small"].runs[0]
    assert b.nodes["continue/mine"].runs[0] == run and b.nodes["continue/mine"].state == "new"
    run.dir.mkdir(parents=True)
    (run.dir / "metrics.json").write_text('{"val_loss": 2.0}')
    run.set_status("finished")
    b = build_plan(load_sweep(str(other)), ["scale=smoke", f"outputs={out}"])
    assert b.nodes["continue/mine"].state == "cached"
    assert b.nodes["finetune/mine/squad1/s42"].runs[0].id.startswith(run.id)


@pytest.mark.slow
def test_convbert_squad_sweep_runs_and_reports(tmp_path):
    from helpers import SHRINK

    shrink = [o for o in SHRINK if not o.startswith(("tasks=", "finetune.glue.", "finetune.task."))]
    args = ["convbert-squad", *shrink, "variants=[electra_small,small]", "finetune.squad.synthetic_size=120"]
    res = convexp("ablate", *args, outputs=tmp_path, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    nodes = json.loads((tmp_path / "sweeps" / "convbert-squad" / "last.json").read_text())["nodes"]
    assert {k for k, n in nodes.items() if n["status"] == "done"} == {
        f"{stage}/{v}{task}" for v in ("electra_small", "small") for stage, task in
        (("pretrain", ""), ("continue", ""), ("finetune", "/squad1/s42"), ("finetune", "/squad2/s42"))
    } - {"continue/electra_small"}  # fmt: skip  (ELECTRA-small's row: official code, 128 throughout)
    res = convexp("report", "convbert-squad", outputs=tmp_path, env={"WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((tmp_path / "reports" / "convbert-squad" / "report.json").read_text())
    small = next(r for r in report["rows"] if r["variant"] == "small")
    run = Path(nodes["finetune/small/squad2/s42"]["runs"][0])
    dev = json.loads((run / "metrics.json").read_text())["dev"]["validation"]
    assert small["ours"]["squad2.best_f1"]["value"] == pytest.approx(dev["best_f1"])
    assert small["ours"]["squad1.exact"]["value"] is not None and small["paper"]["squad1.f1"] == 84.1
    assert "SQuAD v1.1 EM" in res.stdout and "SQuAD v2.0 F1 (best thr.)" in res.stdout
    assert "; SQuAD dev, " in res.stdout  # what the numbers are, in the report's header


def test_a_seeds_line_fits_80_columns_with_a_long_run_name(capsys, tmp_path):
    """print_squad: the run's name goes to a line of its own where the seed's line would pass 80."""
    import types

    from convexp.store.runs import Run

    short, long = (tmp_path / "squad1-s42-abc", tmp_path / "convbert-small-mlm-62a3db4b30-squad1-bermo-s42-lr3e-05-epochs2-9cc84bed6f")
    runs = []
    for d in (short, long):
        d.mkdir()
        (d / "metrics.json").write_text(json.dumps({"dev": {"validation": {"exact": 12.5, "f1": 20.25}}}))
        runs.append(types.SimpleNamespace(seed=42, run=Run(d)))
    from convexp.tasks.squad.stage import print_squad

    print_squad("squad1", runs)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "squad1 seed 42: EM 12.50  F1 20.25  (squad1-s42-abc)"
    assert lines[1:3] == ["squad1 seed 42: EM 12.50  F1 20.25", f"  ({long.name})"]
    assert all(len(x) <= 80 for x in lines)
