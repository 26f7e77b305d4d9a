"""SQuAD: loading, windows and offsets, n-best decoding, official metrics, QA heads, a tiny training run."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from convexp.tasks.squad.data import SquadError, load_squad, read_squad_json, synthetic_squad
from convexp.tasks.squad.decode import decode_independent, decode_joint, top_indices
from convexp.tasks.squad.features import collate_squad, squad_features, window_starts
from convexp.tasks.squad.metrics import best_threshold, normalize_answer, squad_evaluate, token_f1
from convexp.data.tokenizer import build_tokenizer
from convexp.errors import UserError
from convexp.models.config import ModelConfig
from convexp.models.qa import JointSpanHead, QuestionAnswerer, SpanHead


@pytest.fixture(scope="module")
def data():
    return synthetic_squad(200, seed=0, version="v2.0")


@pytest.fixture(scope="module")
def tokenizer(data):
    texts = [r["context"] + " " + r["question"] for r in data["train"] + data["validation"]]
    return build_tokenizer({"kind": "wordpiece", "vocab_size": 800}, lambda: iter([texts]))


def _record(qid, context, question, answers=(), impossible=False):
    return {
        "id": qid,
        "title": "t",
        "context": context,
        "question": question,
        "answers": {"text": [a for a, _ in answers], "answer_start": [s for _, s in answers]},
        "is_impossible": impossible,
    }


# ---------------------------------------------------------------------------- data


def test_synthetic_answers_are_spans_and_v2_has_unanswerable(data):
    train = data["train"]
    assert len(train) == 200 and len(data["validation"]) == 50
    impossible = [r for r in train if r["is_impossible"]]
    assert 0.2 < len(impossible) / len(train) < 0.5
    for r in train:
        for text, start in zip(r["answers"]["text"], r["answers"]["answer_start"]):
            assert r["context"][start : start + len(text)] == text
    assert synthetic_squad(10, 0, "v2.0")["train"] == train[:10]  # prefix-stable
    assert not any(r["is_impossible"] for r in synthetic_squad(50, 0, "v1.1")["train"])


def _official(path, qas, context="Tesla was born in Smiljan in 1856."):
    path.write_text(
        json.dumps(
            {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": context, "qas": qas}]}]}
        )
    )


def test_local_json_loads(tmp_path):
    ok = [{"id": "q1", "question": "where?", "answers": [{"text": "Smiljan", "answer_start": 18}]}]
    _official(tmp_path / "train-v2.0.json", ok)
    _official(
        tmp_path / "dev-v2.0.json",
        ok + [{"id": "q2", "question": "who?", "answers": [], "is_impossible": True}],
    )
    splits = load_squad({"version": "v2.0", "source": "local", "path": str(tmp_path)})
    assert [r["id"] for r in splits["validation"]] == ["q1", "q2"]
    assert splits["train"][0]["answers"] == {"text": ["Smiljan"], "answer_start": [18]}
    assert splits["validation"][1]["is_impossible"] and splits["validation"][1]["answers"]["text"] == []


@pytest.mark.parametrize(
    "content, needle",
    [
        ("not json", "not valid JSON"),
        ('{"data": [{"paragraphs": [{"qas": []}]}]}', "malformed"),
        ("EMPTY", "no questions"),
        ("OFFSET", "'q7'"),
    ],
)
def test_bad_files_raise_one_line(tmp_path, content, needle):
    path = tmp_path / "dev-v1.1.json"
    if content == "EMPTY":
        _official(path, [])
    elif content == "OFFSET":
        _official(
            path, [{"id": "q7", "question": "where?", "answers": [{"text": "Smiljan", "answer_start": 3}]}]
        )
    else:
        path.write_text(content)
    with pytest.raises(UserError) as e:
        read_squad_json(path)
    assert needle in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)
    with pytest.raises(SquadError, match="no such SQuAD file"):
        load_squad({"source": "local", "path": str(tmp_path / "nowhere")})


# ---------------------------------------------------------------------------- windows and offsets


def test_window_starts_cover_the_context():
    assert window_starts(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert window_starts(3, 4, 2) == [(0, 3)]
    assert window_starts(0, 4, 2) == [(0, 0)]


def test_answer_straddling_two_windows_is_found_in_the_window_that_holds_it(tokenizer):
    words = [f"w{i}" for i in range(30)]
    context = " ".join(words)
    answer = "w10 w11 w12 w13"  # one token per word; windows 0-11, 4-15, ...: the first cuts it
    rec = _record("x", context, "q", [(answer, context.index(answer))])
    feats = squad_features([rec], tokenizer, max_len=16, doc_stride=4, max_query_len=4)
    n_ctx = len(tokenizer.backend.encode(context, add_special_tokens=False).ids)
    assert len(feats) > 2
    a0, a1 = context.index(answer), context.index(answer) + len(answer)
    holding = [f for f in feats if f["start_position"] > 0]
    assert holding  # found whole in at least one window...
    straddled = 0
    for f in feats:
        cls_only = f["start_position"] == f["end_position"] == 0
        ctx = [o for o in f["offsets"] if o is not None]
        whole = (
            ctx and ctx[0][0] <= context.index(answer) and ctx[-1][1] >= context.index(answer) + len(answer)
        )
        assert cls_only != bool(whole)  # ...and exactly those windows point at it
        straddled += bool(not whole and any(a0 <= o[0] < a1 for o in ctx))
        if not cls_only:
            s, e = f["offsets"][f["start_position"]][0], f["offsets"][f["end_position"]][1]
            assert context[s:e] == answer
        assert len(f["input_ids"]) <= 16 and f["input_ids"][0] == tokenizer.cls_id
        assert sum(f["context_mask"]) == len(ctx)
    assert straddled  # a window that cuts the answer points at [CLS]
    # every context token is the max-context token of exactly one window
    covered = {}
    for f in feats:
        for o, m in zip(f["offsets"], f["max_context"]):
            if m:
                assert o not in covered
                covered[o] = True
    assert len(covered) == n_ctx
    batch = collate_squad(feats)
    assert batch["input_ids"].shape == (len(feats), max(len(f["input_ids"]) for f in feats))


def test_overlap_stride_mode_shares_tokens(tokenizer):
    context = " ".join(f"w{i}" for i in range(40))
    rec = _record("x", context, "q", impossible=True)
    step = squad_features([rec], tokenizer, max_len=20, doc_stride=5, stride_mode="step")
    overlap = squad_features([rec], tokenizer, max_len=20, doc_stride=5, stride_mode="overlap")
    ctx = [[o for o in f["offsets"] if o is not None] for f in step]
    assert ctx[1][0] == ctx[0][5] and ctx[2][0] == ctx[0][10]  # window starts 5 tokens apart
    ctx0 = [o for o in overlap[0]["offsets"] if o is not None]
    ctx1 = [o for o in overlap[1]["offsets"] if o is not None]
    assert len(set(ctx0) & set(ctx1)) == 5
    with pytest.raises(SquadError):
        squad_features([rec], tokenizer, max_len=4)


@pytest.mark.parametrize("task", ["squad1", "squad2"])
def test_bermo_windows_start_every_128_tokens_as_sanhs_script(tokenizer, task):
    """Sanh et al.'s masked_run_squad.py (huggingface/block_movement_pruning) calls the legacy
    transformers ``squad_convert_examples_to_features`` with doc_stride 128, max_seq_length 384,
    max_query_length 64: windows start 128 context tokens apart (``len(spans) * doc_stride``), the
    last one ending at the context's end, as in BERT's run_squad.py; not run_qa.py's 128-token overlap."""
    from convexp.config.compose import compose_stage
    from convexp.tasks.squad.runs import qa_settings

    qa = qa_settings(compose_stage("finetune", ["init=x", f"task={task}", "protocol=bermo"]))
    assert (qa["max_len"], qa["doc_stride"], qa["stride_mode"], qa["max_query_len"]) == (384, 128, "step", 64)
    context = " ".join(f"w{i}" for i in range(700))
    rec = _record("x", context, "which word comes first", impossible=True)
    whole = [tuple(o) for o in tokenizer.backend.encode(context, add_special_tokens=False).offsets]
    feats = squad_features([rec], tokenizer, **{k: qa[k] for k in ("max_len", "doc_stride", "max_query_len", "stride_mode")})
    windows = [[o for o in f["offsets"] if o is not None] for f in feats]
    starts = [whole.index(w[0]) for w in windows]
    assert starts == [128 * k for k in range(len(windows))] and len(windows) > 2
    room = len(windows[0])  # 384 - question - 3
    assert all(len(w) == room for w in windows[:-1]) and windows[-1][-1] == whole[-1]
    assert starts[-2] + room < len(whole)  # no window more than the legacy loop makes


# ---------------------------------------------------------------------------- decoding


def _brute_force(rec, feats, score, max_len, allow):
    """Best valid (score, text) over every window and every (s, e) pair that ``allow`` admits."""
    best = None
    for f in feats:
        n = len(f["input_ids"])
        for s, e in itertools.product(range(n), range(n)):
            if not allow(f, s, e) or e < s or e - s + 1 > max_len:
                continue
            if f["offsets"][s] is None or f["offsets"][e] is None:
                continue
            sc = score(f, s, e)
            if best is None or sc > best[0]:
                best = (sc, rec["context"][f["offsets"][s][0] : f["offsets"][e][1]].strip())
    return best


def test_independent_decoder_matches_brute_force(tokenizer, data):
    recs = data["validation"][:6]
    feats = squad_features(recs, tokenizer, max_len=32, doc_stride=8, max_query_len=12)
    rng = np.random.default_rng(0)
    st = [rng.normal(size=len(f["input_ids"])) for f in feats]
    en = [rng.normal(size=len(f["input_ids"])) for f in feats]
    # n_best covering every position: the exact best valid span
    preds = decode_independent(recs, feats, st, en, n_best=64, max_answer_len=5, version_2=True)
    for i, r in enumerate(recs):
        fs = [f for f in feats if f["example_index"] == i]
        sc, text = _brute_force(
            r,
            fs,
            lambda f, s, e: st[f["feature_index"]][s] + en[f["feature_index"]][e],
            5,
            lambda f, s, e: True,
        )
        p = preds[r["id"]]
        assert p.best_span == text and math.isclose(p.nbest[0]["score"], sc)
        null = min(st[f["feature_index"]][0] + en[f["feature_index"]][0] for f in fs)
        assert math.isclose(p.null_diff, null - sc)
        assert p.text == ("" if null - sc > 0 else text)
        assert len({c["text"] for c in p.nbest}) == len(p.nbest)
        assert math.isclose(sum(c["probability"] for c in p.nbest), 1.0)
    # small n_best: the best span among the n_best top starts x n_best top ends
    preds = decode_independent(recs, feats, st, en, n_best=3, max_answer_len=5)
    for i, r in enumerate(recs):
        fs = [f for f in feats if f["example_index"] == i]
        tops = {
            f["feature_index"]: (
                top_indices(st[f["feature_index"]], 3),
                top_indices(en[f["feature_index"]], 3),
            )
            for f in fs
        }
        found = _brute_force(
            r,
            fs,
            lambda f, s, e: st[f["feature_index"]][s] + en[f["feature_index"]][e],
            5,
            lambda f, s, e, tops=tops: s in tops[f["feature_index"]][0] and e in tops[f["feature_index"]][1],
        )
        assert preds[r["id"]].text == (found[1] if found else "") and preds[r["id"]].null_diff is None


def test_joint_decoder_matches_brute_force(tokenizer, data):
    recs = data["validation"][6:12]
    feats = squad_features(recs, tokenizer, max_len=32, doc_stride=8, max_query_len=12)
    rng = np.random.default_rng(1)
    L = 32
    k = L  # a full beam: every start, every end
    full = {}  # feature -> (start log-probs [L], end log-probs [L, L] given each start)
    s_lp, s_ix, e_lp, e_ix, null = [], [], [], [], []
    for f in feats:
        a = torch.log_softmax(torch.tensor(rng.normal(size=L)), -1)
        b = torch.log_softmax(torch.tensor(rng.normal(size=(L, L))), -1)
        full[f["feature_index"]] = (a, b)
        sv, si = a.topk(k)
        ev, ei = b[si].topk(k, -1)
        s_lp.append(sv), s_ix.append(si), e_lp.append(ev), e_ix.append(ei), null.append(rng.normal())
    preds = decode_joint(recs, feats, s_lp, s_ix, e_lp, e_ix, null, n_best=20, max_answer_len=6)
    for i, r in enumerate(recs):
        fs = [f for f in feats if f["example_index"] == i]
        sc, text = _brute_force(
            r,
            fs,
            lambda f, s, e: float(full[f["feature_index"]][0][s] + full[f["feature_index"]][1][s, e]),
            6,
            lambda f, s, e: bool(f["max_context"][s]),
        )
        p = preds[r["id"]]
        assert p.best_span == text and math.isclose(p.nbest[0]["score"], sc, rel_tol=1e-9)
        assert math.isclose(p.null_diff, min(null[f["feature_index"]] for f in fs))


# ---------------------------------------------------------------------------- metrics


def test_normalisation_em_f1_by_hand():
    assert normalize_answer("  The Cat, an  apple!") == "cat apple"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    golds = _record("a", "c", "q", [("the big red dog", 0), ("a dog", 0)])
    m = squad_evaluate([golds], {"a": "big dog"}, "v1.1")
    # vs "big red dog": P 2/2, R 2/3 -> F1 0.8; vs "dog": P 1/2, R 1 -> 2/3; max 0.8, EM 0
    assert m["exact"] == 0.0 and math.isclose(m["f1"], 80.0)
    assert squad_evaluate([golds], {"a": "Dog."}, "v1.1")["exact"] == 100.0
    assert token_f1("", "", version_2=False) == 0.0 and token_f1("", "", version_2=True) == 1.0


def test_v2_splits_and_best_threshold_by_hand():
    recs = [
        _record("h1", "c", "q", [("paris", 0)]),
        _record("h2", "c", "q", [("blue whale", 0)]),
        _record("n1", "c", "q", impossible=True),
        _record("n2", "c", "q", impossible=True),
    ]
    preds = {"h1": "paris", "h2": "whale", "n1": "rome", "n2": "x"}
    na = {"h1": -2.0, "h2": 1.0, "n1": 0.5, "n2": 3.0}
    m = squad_evaluate(recs, preds, "v2.0", na_scores=na, na_threshold=0.0)
    # at threshold 0: h1 answered (EM 1, F1 1); h2, n1, n2 no-answer -> h2 0, n1 1, n2 1
    assert m["exact"] == 75.0 and m["f1"] == 75.0
    assert m["HasAns_exact"] == 50.0 and m["NoAns_exact"] == 100.0 and m["HasAns_total"] == 2
    # sorted by na: h1 (-2) +1 -> 3, n1 (0.5) -1 -> 2, h2 (1) +EM 0 -> 2 / +F1 2/3, n2 (3) -1
    # EM: start 2 (no-answers), after h1 3 (best, thresh -2); F1: after h2 2 2/3 < 3
    assert m["best_exact"] == 75.0 and m["best_exact_thresh"] == -2.0
    assert m["best_f1"] == 75.0 and m["best_f1_thresh"] == -2.0
    preds2 = dict(preds, n1="")  # an empty prediction for a no-answer question costs nothing
    best, thresh = best_threshold(
        preds2, {"h1": 1, "h2": 1, "n1": 1, "n2": 1}, na, {"h1": True, "h2": True, "n1": False, "n2": False}
    )
    assert best == 100.0 and thresh == 1.0


# ---------------------------------------------------------------------------- heads


def _cfg(vocab=100):
    return ModelConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


def test_span_head_shapes_and_loss():
    head = SpanHead(_cfg())
    h = torch.randn(3, 10, 32)
    out = head(h, start_positions=torch.tensor([1, 2, 0]), end_positions=torch.tensor([3, 2, 0]))
    assert out.start_logits.shape == out.end_logits.shape == (3, 10)
    ce = torch.nn.functional.cross_entropy
    want = (ce(out.start_logits, torch.tensor([1, 2, 0])) + ce(out.end_logits, torch.tensor([3, 2, 0]))) / 2
    assert torch.allclose(out.loss, want)


def test_joint_head_masks_beam_and_answerable():
    torch.manual_seed(0)
    head = JointSpanHead(_cfg(), hidden=16, beam_size=4, answerable=True)
    h = torch.randn(2, 12, 32)
    ctx = torch.zeros(2, 12, dtype=torch.long)
    ctx[:, 5:11] = 1
    sp, ep, imp = torch.tensor([6, 0]), torch.tensor([8, 0]), torch.tensor([0.0, 1.0])
    head.train()
    out = head(h, ctx, sp, ep, imp)
    assert out.start_logits.shape == out.end_logits.shape == (2, 12) and out.null_logit.shape == (2,)
    assert (out.start_logits[:, 1:5] < -500).all() and (out.start_logits[:, 11] < -500).all()
    assert (out.start_logits[:, 0] > -500).all() and (out.end_logits[:, 5:11] > -500).all()
    ce = torch.nn.functional.cross_entropy
    span = (ce(out.start_logits, sp) + ce(out.end_logits, ep)) / 2
    bce = torch.nn.functional.binary_cross_entropy_with_logits(out.null_logit, imp)
    assert torch.allclose(out.loss, span + 0.5 * bce)
    # the end logits depend on the start: a different gold start gives different end logits
    assert not torch.allclose(head(h, ctx, torch.tensor([7, 0]), ep, imp).end_logits[0], out.end_logits[0])
    head.eval()
    ev = head(h, ctx)
    assert ev.start_top_index.shape == (2, 4) and ev.end_top_index.shape == (2, 4, 4)
    allowed = set(range(5, 11)) | {0}
    assert (
        set(ev.start_top_index.flatten().tolist()) <= allowed
        and set(ev.end_top_index.flatten().tolist()) <= allowed
    )
    # the beam's end scores equal the teacher-forced end distribution for that start
    s0 = ev.start_top_index[:, 0]
    forced = torch.log_softmax(head(h, ctx, s0, s0).end_logits, -1)
    assert torch.allclose(ev.end_top_log_probs[:, 0, 0], forced.max(-1).values, atol=1e-5)


@pytest.mark.parametrize("head", ["bert", "electra"])
def test_tiny_question_answerer_learns_synthetic_task(tokenizer, data, head):
    torch.manual_seed(0)
    feats = squad_features(data["train"][:64], tokenizer, max_len=64, doc_stride=32, max_query_len=16)
    kw = {"hidden": 32, "beam_size": 5, "answerable": True} if head == "electra" else {}
    model = QuestionAnswerer(_cfg(tokenizer.vocab_size), head, **kw)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = collate_squad(feats[:32], tokenizer.pad_id)
    inputs = {
        k: batch[k]
        for k in (
            "input_ids",
            "attention_mask",
            "token_type_ids",
            "context_mask",
            "start_positions",
            "end_positions",
            "is_impossible",
        )
    }
    model.train()
    losses = []
    for _ in range(30):
        loss = model(**inputs).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]
    model.eval()
    with torch.no_grad():
        out = model(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["context_mask"]
        )
    recs = data["train"][:64]
    if head == "bert":
        preds = decode_independent(recs, feats[:32], out.start_logits, out.end_logits, version_2=True)
    else:
        preds = decode_joint(
            recs,
            feats[:32],
            out.start_top_log_probs,
            out.start_top_index,
            out.end_top_log_probs,
            out.end_top_index,
            out.null_logit,
        )
    assert preds and all(p.text in recs[int(p.id.split("-")[1])]["context"] for p in preds.values())


def test_v11_trains_electras_answerable_classifier_with_label_0(tokenizer):
    """ELECTRA trains its answerable classifier on SQuAD 1.1 too (configure_finetuning.py:84
    answerable_classifier = True for every QA task; qa_tasks.py: v1.1's is_impossible is False, so
    every label is 0, sigmoid CE weighted 0.5); v1.1 decoding ignores its score (qa_metrics.py reads
    it under v2 only)."""
    from convexp.config.compose import compose_stage
    from convexp.tasks.squad.stage import build_qa_model
    from convexp.tasks.squad.evaluate import predict_spans
    from convexp.tasks.squad.runs import qa_settings

    qa = qa_settings(compose_stage("finetune", ["init=x", "task=squad1"]))  # protocol=convbert
    assert (qa["version"], qa["head"], qa["answerable"]) == ("v1.1", "electra", True)
    v1 = synthetic_squad(40, seed=1, version="v1.1")["train"]
    feats = squad_features(v1, tokenizer, max_len=64, doc_stride=32, max_query_len=16)
    batch = collate_squad(feats[:16], tokenizer.pad_id)
    assert not batch["is_impossible"].any()  # every label 0
    torch.manual_seed(0)
    model = build_qa_model(_cfg(tokenizer.vocab_size), qa)
    keys = ("input_ids", "attention_mask", "token_type_ids", "context_mask", "start_positions", "end_positions")
    inputs = {k: batch[k] for k in keys}
    model.train()
    out = model(**inputs, is_impossible=batch["is_impossible"])
    span = model(**inputs).loss  # without labels: the span loss alone
    bce = torch.nn.functional.binary_cross_entropy_with_logits(out.null_logit, torch.zeros(16))
    assert torch.allclose(out.loss, span + 0.5 * bce)
    opt = torch.optim.SGD(model.head.answerable.parameters(), lr=0.5)
    first = torch.sigmoid(out.null_logit).mean().item()
    for _ in range(20):  # trained on label 0: the no-answer probability falls
        opt.zero_grad()
        model(**inputs, is_impossible=batch["is_impossible"]).loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        assert torch.sigmoid(model(**inputs).null_logit).mean().item() < first / 2
    # v1.1 predictions never read the no-answer score: a classifier pushed to "no answer" changes nothing
    before = predict_spans(model, v1, feats, qa, tokenizer.pad_id)
    with torch.no_grad():
        model.head.answerable[-1].bias.fill_(1e4)
    after = predict_spans(model, v1, feats, qa, tokenizer.pad_id)
    assert {k: p.text for k, p in before.items()} == {k: p.text for k, p in after.items()}
    assert all(p.text for p in after.values())


@pytest.mark.parametrize("head", ["bert", "electra"])
def test_predictions_do_not_depend_on_how_the_dev_windows_are_batched(tokenizer, head):
    """The dev windows are read in length-sorted batches of a token budget (the device's
    EVAL_TOKENS): one window per batch or all at once, each question gets the same answer and
    score."""
    from convexp.config.compose import compose_stage
    from convexp.tasks.squad.stage import build_qa_model
    from convexp.tasks.squad.evaluate import predict_spans
    from convexp.tasks.squad.runs import qa_settings

    protocol = {"bert": "bermo", "electra": "convbert"}[head]
    qa = qa_settings(compose_stage("finetune", ["init=x", "task=squad1", f"protocol={protocol}"]))
    assert qa["head"] == head
    records = synthetic_squad(30, seed=3, version="v1.1")["validation"]
    feats = squad_features(records, tokenizer, max_len=64, doc_stride=24, max_query_len=16)
    assert len({len(f["input_ids"]) for f in feats}) > 1  # windows of several lengths: padding differs
    torch.manual_seed(0)
    model = build_qa_model(_cfg(tokenizer.vocab_size), qa)
    one = predict_spans(model, records, feats, qa, tokenizer.pad_id, max_tokens=1)
    every = predict_spans(model, records, feats, qa, tokenizer.pad_id, max_tokens=10**6)
    assert one.keys() == every.keys() == {r["id"] for r in records}
    for q in one:
        assert one[q].text == every[q].text
        assert math.isclose(one[q].nbest[0]["score"], every[q].nbest[0]["score"], rel_tol=1e-4, abs_tol=1e-4)


def test_distillation_logits_give_sanh_span_distillation():
    from convexp.pruning.distill import distillation_loss, soft_target_loss

    torch.manual_seed(0)
    student, teacher = SpanHead(_cfg()), SpanHead(_cfg())
    h = torch.randn(3, 9, 32)
    sp, ep = torch.tensor([1, 2, 3]), torch.tensor([2, 2, 5])
    s, t = student(h, None, sp, ep), teacher(h, None, sp, ep)
    assert s.distillation_logits.shape == (6, 9)
    got = distillation_loss(
        s.distillation_logits, t.distillation_logits, s.loss, alpha_ce=0.1, alpha_distil=0.9
    )
    kl = (soft_target_loss(s.start_logits, t.start_logits) + soft_target_loss(s.end_logits, t.end_logits)) / 2
    assert torch.allclose(got, 0.1 * s.loss + 0.9 * kl)


def test_evaluate_spans_v2_uses_best_span_and_null_diff():
    from convexp.tasks.squad.decode import SpanPrediction
    from convexp.tasks.squad.metrics import evaluate_spans

    recs = [_record("h", "c", "q", [("paris", 0)]), _record("n", "c", "q", impossible=True)]
    preds = {"h": SpanPrediction("h", "", "paris", 0.5), "n": SpanPrediction("n", "", "rome", 2.0)}
    m = evaluate_spans(recs, preds, "v2.0")  # threshold 0: both no-answer -> h wrong, n right
    assert m["exact"] == 50.0 and m["best_exact"] == 100.0 and m["best_exact_thresh"] == 0.5
    assert evaluate_spans(recs, preds, "v2.0", null_threshold=1.0)["exact"] == 100.0


def test_hub_rows_become_records(monkeypatch):
    """The hub path's conversion, on a DatasetDict with rajpurkar/squad_v2's columns (no network)."""
    import datasets

    rows = {
        "id": ["a", "b"],
        "title": ["T", "T"],
        "context": ["Tesla was born in Smiljan.", "Tesla was born in Smiljan."],
        "question": ["where?", "when?"],
        "answers": [{"text": ["Smiljan"], "answer_start": [18]}, {"text": [], "answer_start": []}],
    }
    dd = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s in ("train", "validation")})
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, *a, **k: asked.append(name) or dd)
    splits = load_squad({"version": "v2.0", "source": "hub"})
    assert asked == ["rajpurkar/squad_v2"]
    assert [r["is_impossible"] for r in splits["validation"]] == [False, True]
    assert splits["train"][0]["answers"] == {"text": ["Smiljan"], "answer_start": [18]}

    def offline(name, *a, **k):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(SquadError, match="cannot load SQuAD v1.1 from hub dataset 'rajpurkar/squad'"):
        load_squad({"source": "hub"})
