"""SQuAD records -> model windows ("features"): question + a window of the context, with offsets.

A window is ``[CLS] question [SEP] context[a:b] [SEP]`` (token types 0 for the first part, 1
for the context and its [SEP]), as in BERT's and ELECTRA's ``run_squad``. The question keeps its
first ``max_query_len`` tokens. A context longer than the room left in ``max_len`` is split into
overlapping windows; ``doc_stride`` is, as in BERT/ELECTRA, the distance between the starts of
consecutive windows (``stride_mode="step"``), or, as in Hugging Face ``run_qa.py``, the number of
tokens two consecutive windows share (``stride_mode="overlap"``).

Every feature (a dict, one per window) holds:

  feature_index     its position in the returned list (what the decoder matches logits by)
  example_index     the record it comes from
  input_ids, token_type_ids
  offsets           per token: (start, end) character span in the context, None off the context
  context_mask      per token: 1 for context tokens, else 0
  max_context       per token: 1 where this window gives the token its most context (BERT's
                    ``_check_is_max_context``: the window maximising min(left, right) context
                    + 0.01 · window length; the first such window on ties)
  start_position, end_position
                    training targets: the answer's token span in this window, or 0 / 0 (the
                    [CLS] token) when the question is unanswerable or the answer is not inside
                    this window whole (it is then found in a window that holds it whole)
  is_impossible     the question has no answer (the answerable classifier's target)

The tokenizer is a convexp :class:`~convexp.data.tokenizer.Tokenizer`; its ``tokenizers``
backend gives the character offsets (into the original text, through normalisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .data import SquadError

STRIDE_MODES = ("step", "overlap")


def window_starts(num_tokens: int, window: int, step: int) -> list[tuple[int, int]]:
    """(start, length) of the windows covering ``num_tokens`` tokens: windows of at most
    ``window`` tokens whose starts are ``step`` apart, the last one ending at the last token."""
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, window)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, step)


def max_context_owner(spans: Sequence[tuple[int, int]]) -> list[int]:
    """Per token of the context the windows ``spans`` cover: the window that gives it the most
    context (BERT's ``_check_is_max_context``: the window maximising min(left, right) context
    + 0.01 · window length; the first such window on ties)."""
    end = spans[-1][0] + spans[-1][1]
    if len(spans) == 1:  # most contexts: one window owns every token
        return [0] * end
    owner, best = [0] * end, [float("-inf")] * end
    for k, (s, n) in enumerate(spans):
        for p in range(s, s + n):
            score = min(p - s, s + n - 1 - p) + 0.01 * n
            if score > best[p]:  # a later window only where it gives more: the first wins ties
                owner[p], best[p] = k, score
    return owner


def max_context_flags(spans: Sequence[tuple[int, int]], index: int) -> list[int]:
    """For window ``index`` of ``spans``: 1 per token where no other window gives more context."""
    start, length = spans[index]
    return [int(k == index) for k in max_context_owner(spans)[start : start + length]]


def answer_token_span(
    offsets: Sequence[tuple[int, int]], start_char: int, end_char: int
) -> tuple[int, int] | None:
    """(first, last) index of the context tokens covering characters [start_char, end_char), or
    None when no token overlaps them."""
    inside = [i for i, (s, e) in enumerate(offsets) if e > start_char and s < end_char and e > s]
    return (inside[0], inside[-1]) if inside else None


def squad_features(
    records: Sequence[dict],
    tokenizer,
    max_len: int = 384,
    doc_stride: int = 128,
    max_query_len: int = 64,
    stride_mode: str = "step",
) -> list[dict]:
    """The windows of every record, in record order (see the module docstring)."""
    if stride_mode not in STRIDE_MODES:
        raise SquadError(f"unknown stride_mode {stride_mode!r}; use one of: {', '.join(STRIDE_MODES)}")
    backend = tokenizer.backend
    questions = backend.encode_batch([r["question"] for r in records], add_special_tokens=False)
    contexts = backend.encode_batch([r["context"] for r in records], add_special_tokens=False)
    features: list[dict] = []
    for ex, (r, q, c) in enumerate(zip(records, questions, contexts)):
        q_ids = q.ids[:max_query_len]
        room = max_len - len(q_ids) - 3
        if room < 1:
            raise SquadError(
                f"max_len {max_len} leaves no room for the context after a {len(q_ids)}-token question; "
                "raise max_len or lower max_query_len"
            )
        step = doc_stride if stride_mode == "step" else room - doc_stride
        if step < 1:
            raise SquadError(
                f"doc_stride {doc_stride} overlaps the whole {room}-token window; "
                "lower doc_stride or raise max_len"
            )
        answer = None  # the first answer's token span in the whole context
        if not r["is_impossible"] and r["answers"]["text"]:
            a_start = r["answers"]["answer_start"][0]
            answer = answer_token_span(c.offsets, a_start, a_start + len(r["answers"]["text"][0]))
        spans = window_starts(len(c.ids), room, step)
        owner = max_context_owner(spans)
        for w, (start, length) in enumerate(spans):
            doc_offset = len(q_ids) + 2
            ids = [
                tokenizer.cls_id,
                *q_ids,
                tokenizer.sep_id,
                *c.ids[start : start + length],
                tokenizer.sep_id,
            ]
            types = [0] * doc_offset + [1] * (length + 1)
            offsets = [None] * doc_offset + [tuple(o) for o in c.offsets[start : start + length]] + [None]
            context_mask = [0] * doc_offset + [1] * length + [0]
            max_context = [0] * doc_offset + [int(k == w) for k in owner[start : start + length]] + [0]
            s_pos = e_pos = 0
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                s_pos, e_pos = answer[0] - start + doc_offset, answer[1] - start + doc_offset
            features.append(
                {
                    "feature_index": len(features),
                    "example_index": ex,
                    "input_ids": ids,
                    "token_type_ids": types,
                    "offsets": offsets,
                    "context_mask": context_mask,
                    "max_context": max_context,
                    "start_position": s_pos,
                    "end_position": e_pos,
                    "is_impossible": bool(r["is_impossible"]),
                }
            )
    return features


FORMAT_VERSION = 1  # part of the windows cache's key: bump when squad_features changes what it makes


def cached_features(records: Sequence[dict], tokenizer, cache_dir: Path | None, **window) -> list[dict]:
    """:func:`squad_features` of ``records``, kept in ``cache_dir`` (``squad-windows-<key>.pkl``; key:
    a hash of FORMAT_VERSION, the records themselves, the tokenizer's JSON and the window settings):
    a sweep's fine-tunes of one task window its questions once (all of SQuAD v1.1's: minutes of
    Python) and read them back in seconds; processes asking at once (every DDP rank) window them
    once. Written atomically; None: not kept."""
    import hashlib
    import json
    import pickle

    from ...atomic import atomic_write, config_hash, entry_lock

    if cache_dir is None:
        return squad_features(records, tokenizer, **window)
    digest = hashlib.sha256(json.dumps(list(records), sort_keys=True).encode()).hexdigest()
    key = config_hash("squad-windows", FORMAT_VERSION, digest, tokenizer.to_json(), window)
    path = Path(cache_dir) / f"squad-windows-{key}.pkl"
    if not path.is_file():
        with entry_lock(path):  # one process (a DDP rank) windows them; the others wait, then load
            if not path.is_file():
                features = squad_features(records, tokenizer, **window)
                atomic_write(path, pickle.dumps(features, protocol=pickle.HIGHEST_PROTOCOL))
                return features
    with open(path, "rb") as f:
        return pickle.load(f)


def collate_squad(rows: list[dict], pad_id: int = 0, pad_to: int | None = None) -> dict:
    """Pad features into tensors: input_ids, token_type_ids, attention_mask, context_mask
    (int64 [B, T]), start_positions, end_positions, feature_index (int64 [B]), is_impossible
    (float32 [B])."""
    import torch

    from ...data.length_batches import pad_rows

    out = pad_rows(rows, (("input_ids", pad_id), ("token_type_ids", 0), ("context_mask", 0)), pad_to)
    lengths = torch.tensor([min(len(r["input_ids"]), out["input_ids"].shape[1]) for r in rows])
    out["attention_mask"] = (torch.arange(out["input_ids"].shape[1]) < lengths[:, None]).long()
    out["start_positions"] = torch.tensor([r["start_position"] for r in rows], dtype=torch.long)
    out["end_positions"] = torch.tensor([r["end_position"] for r in rows], dtype=torch.long)
    out["is_impossible"] = torch.tensor([float(r["is_impossible"]) for r in rows], dtype=torch.float32)
    out["feature_index"] = torch.tensor([r["feature_index"] for r in rows], dtype=torch.long)
    return out
