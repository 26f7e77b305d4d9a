"""Answer spans from per-window logits: n-best search over an example's windows, back to text.

A candidate is a token span (s, e) of one window with s ≤ e, e − s + 1 ≤ ``max_answer_len``,
both tokens in the context (they have character offsets) and, with ``max_context_only``, s in
the window that gives it most context (BERT/ELECTRA; Hugging Face ``run_qa.py`` does not check).
Its text is ``context[offset(s).start : offset(e).end]``, so the answer is the original text,
not a detokenisation. Candidates from all windows of an example compete; the n best (distinct
texts) are kept, the best is the prediction.

Two scorers, as the papers' code:

``decode_independent`` (BERT, ``run_qa.py``): score = start_logit[s] + end_logit[e], with s
  among the ``n_best`` highest start logits and e among the ``n_best`` highest end logits of the
  window. SQuAD v2.0 null score = min over windows of start_logit[CLS] + end_logit[CLS].
``decode_joint`` (ELECTRA): the head gives a beam of the k best starts (log-probabilities) and,
  for each, the k best ends under the end distribution conditioned on that start; score =
  start log-prob + end log-prob. SQuAD v2.0 null score = min over windows of the answerable
  classifier's no-answer logit.

v2.0: ``null_diff`` = null score − best span score for the independent scorer (ELECTRA's
``score_diff``), the null score itself for the joint one; the prediction is "" (no answer) when
``null_diff > null_threshold``. Pass ``null_diff`` as the official evaluation's ``na_probs``
(``metrics.squad_evaluate``) to choose the threshold on dev.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SpanPrediction:
    id: str
    text: str  # the prediction: the best span, or "" when v2.0 predicts no answer
    best_span: str  # the best non-null span ("" if no window had a valid span)
    null_diff: float | None  # v2.0 no-answer score (see the module docstring); None for v1.1
    nbest: list[dict] = field(default_factory=list)  # text, score, probability, start, end (chars)


def _as_array(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor (bf16 has no numpy type; float64 keeps sums exact)
        x = x.detach().cpu()
        x = (x.double() if x.is_floating_point() else x).numpy()
    return np.asarray(x, dtype=np.float64)


def _valid(f: dict, s: np.ndarray, e: np.ndarray, max_answer_len: int, max_context_only: bool) -> np.ndarray:
    """Which spans (s, e) are candidates (the module docstring's rules), for integer arrays ``s``
    and ``e`` that broadcast together (starts [k, 1] against ends [1, k] or [k, k]): a bool array."""
    n = len(f["offsets"])
    inside = np.array([o is not None for o in f["offsets"]] + [False])  # [n + 1]: index n = out of range
    s_at = np.where((s >= 0) & (s < n), s, n)
    e_at = np.where((e >= 0) & (e < n), e, n)
    ok_start = inside[s_at]
    if max_context_only:
        ok_start &= np.append(np.asarray(f["max_context"], dtype=bool), False)[s_at]
    length = e - s + 1
    return ok_start & inside[e_at] & (length >= 1) & (length <= max_answer_len)


def _spans(f: dict, scores: np.ndarray, s: np.ndarray, e: np.ndarray, ok: np.ndarray) -> list:
    """Candidates (score, feature, s, e) where ``ok`` (every array of one broadcast shape), in
    row-major order: the order of a loop over starts, then ends."""
    s, e = np.broadcast_to(s, ok.shape)[ok], np.broadcast_to(e, ok.shape)[ok]
    return [(score, f, a, b) for score, a, b in zip(scores[ok].tolist(), s.tolist(), e.tolist())]


def top_indices(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the k highest scores, highest first (ties: lower index first)."""
    order = np.argsort(-scores, kind="stable")
    return [int(i) for i in order[:k]]


def _group(features: Sequence[dict]) -> dict[int, list[dict]]:
    by_example = defaultdict(list)
    for f in features:
        by_example[f["example_index"]].append(f)
    return by_example


def _finish(
    record: dict,
    candidates: list[tuple[float, dict, int, int]],
    n_best: int,
    null_score: float | None,
    null_is_diff: bool,
    null_threshold: float,
) -> SpanPrediction:
    """Rank candidates (score, feature, s, e), keep n_best distinct texts, apply the null rule."""
    candidates.sort(key=lambda c: -c[0])
    nbest, seen = [], set()
    for score, f, s, e in candidates:
        if len(nbest) >= n_best:
            break
        start, end = f["offsets"][s][0], f["offsets"][e][1]
        text = record["context"][start:end].strip()
        if text in seen:
            continue
        seen.add(text)
        nbest.append({"text": text, "score": float(score), "start": start, "end": end})
    if nbest:
        top = max(c["score"] for c in nbest)
        z = [math.exp(c["score"] - top) for c in nbest]
        for c, p in zip(nbest, z):
            c["probability"] = p / sum(z)
    best = nbest[0]["text"] if nbest else ""
    null_diff = None
    if null_score is not None:
        if not nbest:
            null_diff = math.inf
        else:
            null_diff = float(null_score) if null_is_diff else float(null_score) - nbest[0]["score"]
    text = "" if null_diff is not None and null_diff > null_threshold else best
    return SpanPrediction(str(record["id"]), text, best, null_diff, nbest)


def _decode(records, features, window, n_best, null_is_diff, null_threshold, version_2):
    """The loop both scorers share: each record's windows give candidates and a null score
    (``window(f) -> (candidates, null or None)``); the lowest null over windows counts."""
    out = {}
    by_example = _group(features)
    for ex, record in enumerate(records):
        candidates, null = [], None
        for f in by_example.get(ex, []):
            found, z = window(f)
            candidates += found
            if z is not None:
                null = z if null is None else min(null, z)
        if version_2 and null is None:
            null = math.inf
        out[str(record["id"])] = _finish(record, candidates, n_best, null, null_is_diff, null_threshold)
    return out


def decode_independent(
    records: Sequence[dict],
    features: Sequence[dict],
    start_logits,  # per feature_index: [L_f] (a list of arrays, or an array [N, L] padded)
    end_logits,
    n_best: int = 20,
    max_answer_len: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
    max_context_only: bool = False,
) -> dict[str, SpanPrediction]:
    """BERT / run_qa decoding (independent start and end logits), one prediction per record id."""

    def window(f: dict):
        n = len(f["input_ids"])
        st = _as_array(start_logits[f["feature_index"]])[:n]  # [n]
        en = _as_array(end_logits[f["feature_index"]])[:n]  # [n]
        s = np.array(top_indices(st, n_best))[:, None]  # [k, 1]
        e = np.array(top_indices(en, n_best))[None, :]  # [1, k]
        ok = _valid(f, s, e, max_answer_len, max_context_only)  # [k, k]
        null = st[0] + en[0] if version_2 else None  # [CLS] as start and end
        return _spans(f, st[s] + en[e], s, e, ok), null

    return _decode(records, features, window, n_best, False, null_threshold, version_2)


def decode_joint(
    records: Sequence[dict],
    features: Sequence[dict],
    start_top_log_probs,  # per feature_index: [k]
    start_top_index,  # [k]
    end_top_log_probs,  # [k, k]: row i = the best ends for start i
    end_top_index,  # [k, k]
    null_logits=None,  # per feature_index: the no-answer logit (v2.0), or None (v1.1)
    n_best: int = 20,
    max_answer_len: int = 30,
    null_threshold: float = 0.0,
    max_context_only: bool = True,
) -> dict[str, SpanPrediction]:
    """ELECTRA joint decoding (beam of starts, ends conditioned on each start)."""

    def window(f: dict):
        i_f = f["feature_index"]
        s_lp, s_idx = _as_array(start_top_log_probs[i_f]), _as_array(start_top_index[i_f]).astype(int)
        e_lp, e_idx = _as_array(end_top_log_probs[i_f]), _as_array(end_top_index[i_f]).astype(int)
        s, e = s_idx[:, None], e_idx  # [k, 1] starts, [k, k] the ends of each
        ok = _valid(f, s, e, max_answer_len, max_context_only)  # [k, k]
        null = float(_as_array(null_logits[i_f])) if null_logits is not None else None
        return _spans(f, s_lp[:, None] + e_lp, s, e, ok), null

    return _decode(records, features, window, n_best, True, null_threshold, null_logits is not None)
