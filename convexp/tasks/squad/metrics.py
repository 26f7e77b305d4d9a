"""SQuAD metrics with the official evaluation scripts' semantics (v1.1 and v2.0), in percent.

Answers are normalised before comparison: lower case, punctuation removed, the articles a / an /
the removed (as whole words), whitespace collapsed. Exact match (EM) is 1 when the normalised
prediction equals a normalised gold answer; F1 is the harmonic mean of token precision and recall
(tokens = the normalised text split on whitespace, counted with multiplicity). Both take the
maximum over a question's gold answers and are averaged over questions.

v1.1 and v2.0 differ in one edge: v2.0 drops gold answers that normalise to "" and, when either
side is empty (a no-answer question has the single gold answer ""), F1 is 1 if both are empty
and 0 otherwise; v1.1 gives F1 0 whenever nothing is shared.

v2.0 with no-answer scores (``na_scores``: higher = more likely no answer, e.g. the decoder's
``null_diff``): the prediction counts as "no answer" when its score exceeds ``na_threshold``;
``HasAns_*`` / ``NoAns_*`` restrict the averages to answerable / unanswerable questions; and
``best_exact`` / ``best_f1`` are the scores at the best threshold, searched as the official
script does: questions sorted by score, the threshold moved past them one at a time, starting
from "every question answered no-answer"; ``best_*_thresh`` is the score of the last question
answered at the best point (0.0 if answering none is best).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the official ``normalize_answer``)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def token_f1(gold: str, prediction: str, version_2: bool = True) -> float:
    """Token-level F1 of one prediction against one gold answer (see the module docstring)."""
    g, p = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if version_2 and (not g or not p):
        return float(g == p)
    same = sum((Counter(g) & Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def gold_answers(record: dict, version_2: bool) -> list[str]:
    """The gold texts a prediction is compared with: v2.0 drops those that normalise to "" and
    uses [""] for a question without answers."""
    texts = list(record["answers"]["text"])
    if not version_2:
        return texts
    return [t for t in texts if normalize_answer(t)] or [""]


def raw_scores(records: Sequence[dict], predictions: Mapping[str, str], version_2: bool) -> tuple[dict, dict]:
    """{id: EM}, {id: F1} (0/1 and [0, 1]) of every record that has a prediction."""
    exact, f1 = {}, {}
    for r in records:
        qid = str(r["id"])
        if qid not in predictions:
            continue
        golds, pred = gold_answers(r, version_2), predictions[qid]
        exact[qid] = max(exact_match(g, pred) for g in golds)
        f1[qid] = max(token_f1(g, pred, version_2) for g in golds)
    return exact, f1


def best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_scores: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in percent, threshold): the official v2.0 ``find_best_thresh``."""
    current = best = sum(1 for q in has_answer if not has_answer[q])
    threshold = 0.0
    for qid in sorted(na_scores, key=lambda q: na_scores[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, na_scores[qid]
    return 100.0 * best / len(scores), threshold


def _average(exact: Mapping[str, float], f1: Mapping[str, float], ids: Sequence[str]) -> dict[str, float]:
    return {
        "exact": 100.0 * sum(exact[q] for q in ids) / len(ids),
        "f1": 100.0 * sum(f1[q] for q in ids) / len(ids),
        "total": len(ids),
    }


def squad_evaluate(
    records: Sequence[dict],
    predictions: Mapping[str, str],
    version: str = "v1.1",
    na_scores: Mapping[str, float] | None = None,
    na_threshold: float = 0.0,
) -> dict[str, float]:
    """The official evaluation of ``predictions`` ({id: text}) on ``records``.

    v1.1: exact, f1, total. v2.0: exact, f1, total (no-answer where the na score exceeds
    ``na_threshold``, or where the prediction is ""), HasAns_exact/f1/total, NoAns_exact/f1/total,
    and with ``na_scores`` also best_exact, best_exact_thresh, best_f1, best_f1_thresh.
    A record without a prediction is left out, as the official scripts do (after a warning)."""
    v2 = version == "v2.0"
    exact, f1 = raw_scores(records, predictions, v2)
    if not exact:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    if not v2:
        return _average(exact, f1, list(exact))
    has_answer = {str(r["id"]): bool(r["answers"]["text"]) for r in records}  # official: raw answers
    na = {q: float(na_scores[q]) if na_scores is not None else 0.0 for q in exact}
    exact_t, f1_t = dict(exact), dict(f1)
    for q in exact:
        if na[q] > na_threshold:
            exact_t[q] = f1_t[q] = float(not has_answer[q])
    out = _average(exact_t, f1_t, list(exact))
    for prefix, keep in (("HasAns", True), ("NoAns", False)):
        ids = [q for q in exact if has_answer[q] == keep]
        if ids:
            out.update({f"{prefix}_{k}": v for k, v in _average(exact_t, f1_t, ids).items()})
    if na_scores is not None:
        has = {q: has_answer[q] for q in exact}
        out["best_exact"], out["best_exact_thresh"] = best_threshold(predictions, exact, na, has)
        out["best_f1"], out["best_f1_thresh"] = best_threshold(predictions, f1, na, has)
    return out


def evaluate_spans(
    records: Sequence[dict], predictions: Mapping, version: str = "v1.1", null_threshold: float = 0.0
) -> dict[str, float]:
    """``squad_evaluate`` of decoder output ({id: SpanPrediction}, see ``squad_decode``): v1.1
    scores the predicted texts; v2.0 scores each best non-null span with its ``null_diff`` as the
    no-answer score (no answer above ``null_threshold``), which also gives best_exact / best_f1
    and their thresholds, as ELECTRA's evaluation does."""
    if version != "v2.0":
        return squad_evaluate(records, {q: p.text for q, p in predictions.items()}, version)
    return squad_evaluate(
        records,
        {q: p.best_span for q, p in predictions.items()},
        version,
        na_scores={q: p.null_diff for q, p in predictions.items()},
        na_threshold=null_threshold,
    )
