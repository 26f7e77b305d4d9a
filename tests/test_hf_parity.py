"""Step-by-step parity with Hugging Face: convexp's fine-tuning stages against plain `transformers`.

A tiny Hugging Face BERT (made here, dropout off) is the init of both sides. convexp runs its real
stage (the task's command, in-process, W&B off); the reference is a plain loop over
``BertForQuestionAnswering`` / ``BertForSequenceClassification`` with Hugging Face Trainer's
optimiser (torch AdamW, no weight decay on biases and LayerNorm weights, linear schedule, gradient
norm clipped at the recipe's value), fed the same training rows in the same order (the order
convexp's stream gives) and padded the same way. Both start from the same task head: the only seam
is that convexp's freshly initialised head takes the Hugging Face model's head weights.

Checked: every step's training loss, the fine-tuned model's start / end (class) logits on the dev
rows, and, for SQuAD, the answers: convexp's windows against run_qa.py's ``prepare_train_features``
(the fast tokenizer's overflowing windows), and convexp's n-best decoding against run_qa.py's
``postprocess_qa_predictions`` (examples/pytorch/question-answering/utils_qa.py), re-stated below.
"""

from __future__ import annotations

import collections
import csv
import re

import numpy as np
import pytest
import torch
from helpers import official_json, write_vocab

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from convexp.config.compose import compose_stage  # noqa: E402
from convexp.tasks.squad.data import synthetic_squad  # noqa: E402
from convexp.tasks.squad.decode import decode_independent  # noqa: E402
from convexp.tasks.squad.features import collate_squad, squad_features  # noqa: E402
from convexp.data.tokenizer import Tokenizer  # noqa: E402
from convexp.store.checkpoint import open_checkpoint  # noqa: E402
from convexp.models.qa import QuestionAnswerer  # noqa: E402
from convexp.train.streams import PermutedStream  # noqa: E402

TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=128,
    hidden_dropout_prob=0.0,  # dropout off: the two sides draw different random numbers
    attention_probs_dropout_prob=0.0,
)
LOSS_TOL = 2e-5  # fp32, other kernels (convexp: SDPA, fused AdamW; HF: eager attention, foreach AdamW)
LOGIT_TOL = 2e-4


def words_of(texts) -> list[str]:
    """Every lower-cased word and punctuation mark of ``texts`` (BERT's basic tokenisation)."""
    return sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})


def hf_init(tmp_path, cls_name: str, texts, seed: int = 0, **kw):
    """A tiny Hugging Face BERT task model saved with its vocab.txt (every word of ``texts``)."""
    d = tmp_path / "hf"
    d.mkdir()
    vocab = write_vocab(d / "vocab.txt", words_of(texts))
    torch.manual_seed(seed)
    size = len(vocab.read_text().splitlines())
    model = getattr(transformers, cls_name)(transformers.BertConfig(vocab_size=size, **TINY, **kw))
    with torch.no_grad():  # biases and LayerNorms away from 0 / 1: a wrong mapping cannot hide
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    model.save_pretrained(d)
    return d


def hf_optimizer(model, hp: dict, total: int):
    """Hugging Face Trainer's AdamW and linear schedule for the recipe ``hp``."""
    no_decay = ("bias", "LayerNorm.weight")
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not n.endswith(no_decay)], "weight_decay": hp["weight_decay"]},
        {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=hp["lr"], betas=tuple(hp["adam_betas"]), eps=hp["adam_epsilon"])
    warmup = int(hp["warmup_fraction"] * total)
    return opt, transformers.get_linear_schedule_with_warmup(opt, warmup, total)


INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def hf_losses(model, batches: list[dict], hp: dict, targets: tuple[str, ...]) -> list[float]:
    """Train ``model`` one step per batch as Hugging Face Trainer does (``hf_optimizer``, the
    gradient norm clipped at ``grad_clip``); each step's loss."""
    opt, sched = hf_optimizer(model, hp, len(batches))
    model.train()
    losses = []
    for b in batches:
        out = model(**{k: b[k] for k in (*INPUTS, *targets)})
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hp["grad_clip"])
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(out.loss.item())
    return losses


def train_losses(run_dir) -> list[float]:
    """The stage's per-step training loss, from the run's csv/metrics.csv."""
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    return [float(r["train/loss"]) for r in sorted(rows, key=lambda r: int(r["step"]))]


def assert_same_up_to_a_constant(ours: torch.Tensor, ref: torch.Tensor) -> None:
    """Logits equal up to one constant added to all of them. The last LayerNorm's bias β gets no
    gradient through a softmax over positions (w·Σ ∂L/∂logit = 0) and leaves it unchanged, but
    Adam normalises its rounding noise into lr-sized steps that differ between implementations:
    every logit moves by the same w·Δβ, which no softmax, loss or span ranking can see."""
    diff = ours.double() - ref.double()
    torch.testing.assert_close(diff, torch.full_like(diff, diff.mean().item()), rtol=0, atol=LOGIT_TOL)


def take_head(monkeypatch, module, name: str, head_state: dict) -> None:
    """The seam: ``module.name`` (a model builder) gives its model the Hugging Face head's weights."""
    build = getattr(module, name)

    def built(*args, **kwargs):
        model = build(*args, **kwargs)
        model.head.load_state_dict(head_state)
        return model

    monkeypatch.setattr(module, name, built)


# ----------------------------------------------------------------------------- SQuAD


@pytest.fixture(scope="module")
def squad_records():
    return synthetic_squad(24, seed=5, version="v1.1")["train"]


def run_qa_train_windows(records, hf_tok, max_len: int, stride: int) -> list[dict]:
    """run_qa.py's ``prepare_train_features`` (the question first, ``truncation="only_second"``,
    overflowing windows sharing ``stride`` tokens; an answer not wholly inside a window -> [CLS])."""
    enc = hf_tok(
        [r["question"] for r in records],
        [r["context"] for r in records],
        truncation="only_second",
        max_length=max_len,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    out = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        ids, seq = enc["input_ids"][i], enc.sequence_ids(i)
        r = records[enc["overflow_to_sample_mapping"][i]]
        a0 = r["answers"]["answer_start"][0]
        a1 = a0 + len(r["answers"]["text"][0])
        first = seq.index(1)
        last = len(seq) - 1 - seq[::-1].index(1)
        s = e = 0
        if offsets[first][0] <= a0 and offsets[last][1] >= a1:
            s = first
            while s <= last and offsets[s][0] <= a0:
                s += 1
            s -= 1
            e = last
            while e >= first and offsets[e][1] >= a1:
                e -= 1
            e += 1
        out.append({"input_ids": ids, "token_type_ids": enc["token_type_ids"][i], "start": s, "end": e})
    return out


def test_windows_are_run_qa_windows(tmp_path, squad_records):
    """stride_mode=overlap (BERMO's / run_qa's windows) gives run_qa's windows and answer positions."""
    d = hf_init(tmp_path, "BertModel", [t for r in squad_records for t in (r["context"], r["question"])])
    hf_tok = transformers.BertTokenizerFast(str(d / "vocab.txt"), do_lower_case=True)
    tok = Tokenizer.load(d / "vocab.txt")
    if len(run_qa_train_windows(squad_records[:1], hf_tok, 24, 4)) < 3:
        pytest.skip(f"tokenizers {tokenizers.__version__} returns at most one overflowing window "
                    "(a bug of 0.23.2, the GPU image's), so run_qa's reference would be short")  # fmt: skip
    for max_len, stride in ((32, 8), (24, 4), (40, 16)):
        ours = squad_features(squad_records, tok, max_len=max_len, doc_stride=stride, stride_mode="overlap")
        ref = run_qa_train_windows(squad_records, hf_tok, max_len, stride)
        assert len(ours) == len(ref) > len(squad_records)  # contexts do overflow
        for f, r in zip(ours, ref):
            assert f["input_ids"] == r["input_ids"] and f["token_type_ids"] == r["token_type_ids"]
            assert (f["start_position"], f["end_position"]) == (r["start"], r["end"])


def postprocess_qa_predictions(
    examples, features, start_logits, end_logits, version_2: bool, n_best: int = 20, max_answer_len: int = 30
) -> dict[str, str]:
    """run_qa.py's post-processing (utils_qa.py ``postprocess_qa_predictions``), re-stated: per
    example, over its windows, the ``n_best`` highest start and end logits of each window pair up
    into spans inside the context (offsets not None), end ≥ start, at most ``max_answer_len``
    tokens, scored start + end logit; the best span's text is the answer. v2.0: the null score is
    the lowest [CLS] start + end over the windows; "" when it beats the best span's score by more
    than the threshold 0. Logits are padded with -100 to the longest window, as run_qa gathers them."""
    by_example = collections.defaultdict(list)
    for i, f in enumerate(features):
        by_example[f["example_index"]].append(i)
    answers = {}
    for ex, example in enumerate(examples):
        prelim, null = [], None
        for i in by_example[ex]:
            st, en, offsets = start_logits[i], end_logits[i], features[i]["offsets"]
            if null is None or st[0] + en[0] < null:
                null = st[0] + en[0]
            for s in np.argsort(st)[-1 : -n_best - 1 : -1].tolist():
                for e in np.argsort(en)[-1 : -n_best - 1 : -1].tolist():
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                        continue
                    if e < s or e - s + 1 > max_answer_len:
                        continue
                    prelim.append((st[s] + en[e], offsets[s][0], offsets[e][1]))
        if version_2:
            prelim.append((null, 0, 0))
        preds = sorted(prelim, key=lambda p: p[0], reverse=True)[:n_best]
        texts = [(score, example["context"][a:b]) for score, a, b in preds]
        if not texts or (len(texts) == 1 and texts[0][1] == ""):
            texts.insert(0, (0.0, "empty"))
        if not version_2:
            answers[example["id"]] = texts[0][1]
        else:
            best = next(t for t in texts if t[1] != "")
            answers[example["id"]] = "" if null - best[0] > 0.0 else best[1]
    return answers


def padded(logits: list[np.ndarray]) -> np.ndarray:
    """Per-window logits as run_qa gathers them: one array, padded with -100 to the longest window."""
    out = np.full((len(logits), max(len(x) for x in logits)), -100.0)
    for i, x in enumerate(logits):
        out[i, : len(x)] = x
    return out


@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_nbest_decoding_gives_run_qa_answers(tmp_path, version):
    """On the same logits (random, so that every rule is exercised), convexp's decoder answers as
    run_qa's post-processing does, for every question."""
    data = synthetic_squad(60, seed=2, version=version)["train"]
    d = hf_init(tmp_path, "BertModel", [t for r in data for t in (r["context"], r["question"])])
    tok = Tokenizer.load(d / "vocab.txt")
    feats = squad_features(data, tok, max_len=28, doc_stride=8, stride_mode="overlap")
    g = np.random.default_rng(0)
    start = [g.normal(size=len(f["input_ids"])) * 3 for f in feats]
    end = [g.normal(size=len(f["input_ids"])) * 3 for f in feats]
    if version == "v2.0":  # some windows prefer no answer
        for s, e in zip(start, end):
            s[0] += g.uniform(-2, 6)
            e[0] += g.uniform(-2, 6)
    for max_answer_len in (30, 3):
        ours = decode_independent(
            data, feats, start, end, max_answer_len=max_answer_len, version_2=version == "v2.0"
        )
        ref = postprocess_qa_predictions(
            data, feats, padded(start), padded(end), version == "v2.0", max_answer_len=max_answer_len
        )
        assert {q: p.text for q, p in ours.items()} == ref
    if version == "v2.0":
        assert 0 < sum(a == "" for a in ref.values()) < len(ref)  # both kinds of answer occur


def test_squad_bert_head_training_matches_transformers(tmp_path, monkeypatch, squad_records):
    """`convexp finetune squad protocol=bermo` (BERT's head) on a tiny HF BERT: the same per-step
    losses and dev start / end logits as BertForQuestionAnswering trained on the same windows in
    the same order, and the same answers as run_qa's post-processing of those logits."""
    import convexp.tasks.squad.stage as squad_stage
    from convexp.store.runs import Run
    from convexp.tasks import Invocation, command
    from convexp.tasks.squad.stage import squad_data

    monkeypatch.setenv("WANDB_MODE", "disabled")
    data = tmp_path / "squad"
    data.mkdir()
    records = {"train": squad_records[:16], "validation": squad_records[16:]}
    for split, name in (("train", "train-v1.1.json"), ("validation", "dev-v1.1.json")):
        official_json(data / name, records[split], "v1.1")
    texts = [t for r in squad_records for t in (r["context"], r["question"])]
    init = hf_init(tmp_path, "BertForQuestionAnswering", texts)
    hf = transformers.BertForQuestionAnswering.from_pretrained(init)
    head = {"qa_outputs." + k: v for k, v in hf.qa_outputs.state_dict().items()}
    take_head(monkeypatch, squad_stage, "build_qa_model", head)
    cfg = compose_stage(
        "finetune",
        [
            "task=squad1", "protocol=bermo", f"init={init}", "squad.source=local", f"squad.path={data}",
            "squad.max_len=32", "squad.doc_stride=8", "seeds=[3]", f"outputs={tmp_path / 'out'}",
            "batch_size=4", "epochs=2", "lr=5e-3", "weight_decay=0.01", "warmup_fraction=0.2",
            "trainer.log_every_n_steps=1",
        ],
    )  # fmt: skip
    command("squad").run(Invocation(cfg, {}))
    [run] = [Run(d) for d in (tmp_path / "out" / "runs" / "finetune").iterdir()]
    hp = run.read_json("metrics.json")["hp"]
    ours = train_losses(run.dir)

    # the reference: the same windows, in the order of convexp's stream, padded the same way
    windows = squad_data(cfg, Tokenizer.load(init / "vocab.txt"))
    stream = PermutedStream(windows["train"], 3, ())
    B, total = hp["batch_size"], len(ours)
    assert total == -(-len(windows["train"]) // B) * hp["epochs"] and total > 8
    train = windows["train"]
    batches = [collate_squad([train[stream.row_index(step * B + i)] for i in range(B)]) for step in range(total)]
    ref = hf_losses(hf, batches, hp, ("start_positions", "end_positions"))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=LOSS_TOL)
    assert ref[-1] < ref[0] - 0.5  # it learnt something: the comparison is not of two flat lines

    # the fine-tuned models give the same logits on the dev windows ...
    saved = open_checkpoint(run.dir)
    model = QuestionAnswerer(saved.model_cfg, "bert")
    model.load_state_dict(saved.state)
    model.eval()
    hf.eval()
    dev = windows["dev"]
    b = collate_squad(dev)
    with torch.no_grad():
        mine = model(b["input_ids"], b["attention_mask"], b["token_type_ids"])
        theirs = hf(**{k: b[k] for k in INPUTS})
    n = b["attention_mask"].bool()
    for a, r in ((mine.start_logits, theirs.start_logits), (mine.end_logits, theirs.end_logits)):
        assert_same_up_to_a_constant(a[n], r[n])
    # ... and the run's answers are run_qa's post-processing of them
    lengths = [len(f["input_ids"]) for f in dev]
    start = [x[:k].double().numpy() for x, k in zip(theirs.start_logits, lengths)]
    end = [x[:k].double().numpy() for x, k in zip(theirs.end_logits, lengths)]
    expected = postprocess_qa_predictions(windows["dev_records"], dev, padded(start), padded(end), False)
    assert run.read_json("predictions.json") == expected


# ----------------------------------------------------------------------------- GLUE


def rte_folder(root, records) -> None:
    """A classic RTE folder (train.tsv, dev.tsv) of pairs from ``records``: the context's first
    sentence and the question, labels alternating by a fixed rule."""
    (root / "RTE").mkdir(parents=True)
    for name, part in (("train.tsv", records[:40]), ("dev.tsv", records[40:])):
        lines = ["index\tsentence1\tsentence2\tlabel"]
        for i, r in enumerate(part):
            label = "entailment" if (len(r["question"]) + i) % 3 else "not_entailment"
            lines.append(f"{i}\t{r['context'].split('.')[0]}.\t{r['question']}\t{label}")
        (root / "RTE" / name).write_text("\n".join(lines) + "\n")


def test_glue_classifier_training_matches_transformers(tmp_path, monkeypatch):
    """`convexp finetune glue` with BERT's classifier (pooler -> dropout -> linear) on a tiny HF
    BERT: the same per-step losses and dev logits as BertForSequenceClassification trained on the
    same rows in the same order."""
    import convexp.tasks.classification.stage as finetune_stage
    from convexp.tasks.classification.encoding import collate, tokenize_task
    from convexp.tasks.classification.loading import prepare_task
    from convexp.models.io import load_model_dir
    from convexp.tasks import Invocation, command
    from convexp.config.compose import compose_stage
    from convexp.tasks.classification.runs import classification_runs

    monkeypatch.setenv("WANDB_MODE", "disabled")
    records = synthetic_squad(60, seed=4, version="v1.1")["train"]
    rte_folder(tmp_path / "glue", records)
    init = hf_init(
        tmp_path, "BertForSequenceClassification", [t for r in records for t in (r["context"], r["question"])]
    )
    hf = transformers.BertForSequenceClassification.from_pretrained(init)
    head = {"out." + k: v for k, v in hf.classifier.state_dict().items()}
    take_head(monkeypatch, finetune_stage, "SequenceClassifier", head)
    over = (
        [
            "task=rte", "protocol=chang", "intermediate=false", f"init={init}", "glue.source=local",
            f"glue.path={tmp_path / 'glue'}", "seeds=[5]", f"outputs={tmp_path / 'out'}", "task.max_len=64",
            "batch_size=8", "epochs=3", "lr=3e-3", "weight_decay=0.01", "warmup_fraction=0.2",
            "group_by_length=false", "trainer.log_every_n_steps=1",
        ]
    )  # fmt: skip
    cfg, others = command("glue").compose(over, compose_stage("finetune", over))
    command("glue").run(Invocation(cfg, others))
    [planned] = classification_runs(cfg, "x", TINY["hidden_size"], others)
    run = next((tmp_path / "out" / "runs" / "finetune").glob("*-rte-*"))
    hp = planned.hp
    ours = train_losses(run)

    task, raw = prepare_task(cfg.task, cfg.glue)
    rows = tokenize_task(task, raw, Tokenizer.load(init / "vocab.txt"), cfg.task.max_len)
    train = rows["train"]
    stream = PermutedStream(train, 5, ())
    B, total = hp["batch_size"], len(ours)
    assert total == -(-len(train) // B) * hp["epochs"] and total > 10
    batches = [collate([train[stream.row_index(step * B + i)] for i in range(B)]) for step in range(total)]
    ref = hf_losses(hf, batches, hp, ("labels",))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=LOSS_TOL)
    assert min(ref[-3:]) < ref[0] - 0.1  # it learnt something

    model = load_model_dir(run / "model")
    hf.eval()
    b = collate(list(rows["validation"]))
    with torch.no_grad():
        mine = model(b["input_ids"], b["attention_mask"], b["token_type_ids"]).logits
        theirs = hf(**{k: b[k] for k in INPUTS}).logits
    torch.testing.assert_close(mine, theirs, rtol=0, atol=LOGIT_TOL)
