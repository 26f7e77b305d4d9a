"""Tokenising a task's splits for a sequence classifier, and padding batches.

tokenize_task(task, splits, tokenizer, max_len, cache_dir)  -> {split: Dataset} with
    input_ids, token_type_ids, attention_mask, label, idx (cached on disk)
collate(rows, pad_id)  pads a batch into tensors (data/length_batches.pad_rows)
encode_example / truncated_lengths  one row: [CLS] a [SEP] (b [SEP]), "longest first"
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from ...atomic import building, config_hash
from ...data.errors import TaskError
from .registry import Task, get_task

log = logging.getLogger(__name__)

FORMAT_VERSION = 1  # part of the tokenised-cache key: bump when tokenisation changes


def truncated_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths after "longest first" truncation of a pair to ``budget`` tokens: one token at a
    time from the longer sequence, from the second on ties (as Hugging Face tokenizers do)."""
    if len_a + len_b <= budget:
        return len_a, len_b
    a = min(len_a, max(budget - len_b, (budget + 1) // 2))
    return a, min(len_b, budget - a)


def encode_example(a: list[int], b: list[int] | None, max_len: int, cls_id: int, sep_id: int):
    """(input_ids, token_type_ids): [CLS] a [SEP] or [CLS] a [SEP] b [SEP], at most max_len."""
    if b is None:
        ids = [cls_id, *a[: max_len - 2], sep_id]
        return ids, [0] * len(ids)
    la, lb = truncated_lengths(len(a), len(b), max_len - 3)
    return [cls_id, *a[:la], sep_id, *b[:lb], sep_id], [0] * (la + 2) + [1] * (lb + 1)


def _token_features(t: Task):
    from datasets import Features, List, Value

    return Features(
        {
            "input_ids": List(Value("int32")),
            "token_type_ids": List(Value("int8")),
            "attention_mask": List(Value("int8")),
            "label": Value("float32" if t.is_regression else "int64"),
            "idx": Value("int32"),
        }
    )


def _tokenize_split(t: Task, ds, tokenizer, max_len: int, batch_size: int = 2000):
    """(tokenised Dataset, number of truncated rows)."""
    import datasets

    cols: dict[str, list] = {k: [] for k in ("input_ids", "token_type_ids", "attention_mask", "label", "idx")}
    truncated = 0
    for start in range(0, len(ds), batch_size):
        batch = ds[start : start + batch_size]
        encoded = [tokenizer.encode_batch(batch[f]) for f in t.text_fields]
        pairs = zip(encoded[0], encoded[1]) if t.is_pair else ((a, None) for a in encoded[0])
        for a, b in pairs:
            ids, types = encode_example(a, b, max_len, tokenizer.cls_id, tokenizer.sep_id)
            truncated += len(ids) < len(a) + (len(b) + 1 if b is not None else 0) + 2
            cols["input_ids"].append(ids)
            cols["token_type_ids"].append(types)
            cols["attention_mask"].append([1] * len(ids))
        cols["label"] += batch["label"]
        cols["idx"] += batch["idx"]
    return datasets.Dataset.from_dict(cols, features=_token_features(t)), truncated


def _split_digest(ds) -> str:
    """A content hash of a split (features and every row)."""
    h = hashlib.sha256(json.dumps(ds.features.to_dict(), sort_keys=True).encode())
    for batch in ds.iter(batch_size=10_000):
        h.update(json.dumps(batch, sort_keys=True, default=str).encode())
    return h.hexdigest()


def check_length(t: Task, max_len: int) -> None:
    """``max_len`` holds a row's [CLS] and [SEP] tokens and one token of each sentence."""
    if max_len < (4 if t.is_pair else 3):
        raise TaskError(f"max_len {max_len} is too short for {t.name}; use e.g. 128")


def tokenize_task(task: str | Task, splits: Mapping, tokenizer, max_len: int, cache_dir: Path | None = None):
    """{split: Dataset} with input_ids, token_type_ids, attention_mask, label and idx.

    Rows are [CLS] a [SEP] (single sentences) or [CLS] a [SEP] b [SEP] with token types 0/1,
    truncated to ``max_len`` (pairs: longest first) and NOT padded: ``collate`` pads each batch
    to its longest row (or to a fixed length). ``tokenizer`` is a convexp ``Tokenizer``.

    With ``cache_dir``, the result is saved under ``cache_dir/glue-<task>-<hash>/<split>`` (hash
    of the task, the splits' content, the tokenizer's JSON and max_len) and a second call loads
    it from there without tokenising; processes asking for it at once (every DDP rank) tokenise it
    once (``atomic.building``)."""
    import datasets

    t = get_task(task)
    check_length(t, max_len)
    if cache_dir is None:
        return {name: _tokenize_split(t, ds, tokenizer, max_len)[0] for name, ds in splits.items()}
    digests = {name: _split_digest(ds) for name, ds in splits.items()}
    key = config_hash("glue-tokenized", FORMAT_VERSION, t.name, max_len, tokenizer.to_json(), digests)
    entry = Path(cache_dir) / f"glue-{t.name}-{key}"
    with building(entry) as tmp:  # one process (a DDP rank) tokenises; the others wait, then load it
        if tmp is None:
            log.info("tokenised %s loaded from cache %s", t.name, entry)
        else:
            info = {"task": t.name, "max_len": max_len, "splits": {}}
            for name, ds in splits.items():
                tokenized, truncated = _tokenize_split(t, ds, tokenizer, max_len)
                tokenized.save_to_disk(str(tmp / name))
                info["splits"][name] = {"rows": len(tokenized), "truncated": truncated}
                if truncated:
                    log.info("%s %s: %d of %d rows truncated to %d tokens", t.name, name, truncated, len(ds), max_len)
            (tmp / "info.json").write_text(json.dumps(info, indent=1))
    return {name: datasets.load_from_disk(str(entry / name)) for name in splits}


def collate(rows: list[dict], pad_id: int = 0, pad_to: int | None = None) -> dict:
    """Pad tokenised rows into tensors: input_ids, token_type_ids, attention_mask (int64 [B, T],
    T = the longest row, or ``pad_to``), labels (int64, or float32 for STS-B) and idx [B]."""
    import torch

    from ...data.length_batches import pad_rows

    out = pad_rows(rows, (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0)), pad_to)
    labels = [r["label"] for r in rows]
    is_float = any(isinstance(x, float) for x in labels)
    out["labels"] = torch.tensor(labels, dtype=torch.float32 if is_float else torch.long)
    out["idx"] = torch.tensor([r["idx"] for r in rows], dtype=torch.long)
    return out
