"""Batches of rows of similar length, so that padding to each batch's longest row costs little.

A sentence task's rows vary a lot in length (SST-2: 13 tokens on average, up to 66), and a batch
padded to its longest row is mostly padding: random batches of 32 SST-2 rows at max_len 64 hold
about three times the tokens their rows have.

  row_lengths(ds)                          tokens per row of a tokenised split (or SQuAD's windows)
  grouped_permutation(lengths, B, g, o)    training: a random order in which every run of B rows
                                           (after the first o) has similar lengths
  sorted_batches(lengths, max_tokens)      evaluation: batches of length-sorted rows, as many
                                           rows as fit ``max_tokens`` padded tokens (eval_tokens)
  pad_rows(rows, keys, pad_to)             a batch's token lists as padded int64 tensors

Training order as Hugging Face ``transformers``' Trainer (``group_by_length``,
``LengthGroupedSampler``): shuffle, cut into mega-batches of 50 batches, sort each by length;
then the batches are shuffled among themselves (so the loss does not follow a length cycle) and
the one holding the longest row goes first (running out of memory shows at once).
"""

from __future__ import annotations

import torch

MEGA_BATCHES = 50  # batches per sorted mega-batch, as transformers' get_length_grouped_indices

# Padded tokens per evaluation batch (sorted_batches), by device type: on a GPU few large batches
# (256 rows of 32 tokens, 16 of 512); on a CPU a quarter of that, whose activations stay in cache
# and under the fine-tuning heap threshold (SST-2's 872 dev rows, MiniLM-L6, 2 cores: 2.2 s at 2,048
# tokens, 2.5 s at 4,096, 3.1 s at 8,192).
EVAL_TOKENS = {"cpu": 2048, "gpu": 8192}


def eval_tokens(device_type: str) -> int:
    """EVAL_TOKENS of a torch device type ("cpu"; "cuda", "mps"... count as "gpu")."""
    return EVAL_TOKENS["cpu" if device_type == "cpu" else "gpu"]


def row_lengths(ds) -> torch.Tensor:
    """int64 [N]: the number of tokens of each row of a tokenised split (``input_ids`` lists): a
    ``datasets.Dataset``, or a list of row dicts (SQuAD's windows)."""
    if isinstance(ds, list):
        return torch.tensor([len(r["input_ids"]) for r in ds], dtype=torch.long)
    if getattr(ds, "_indices", None) is None:  # a plain Arrow table: lengths without reading rows
        import pyarrow.compute as pc  # 0.3 s to import: not for SQuAD's lists

        col = ds.data.column("input_ids")
        return torch.tensor(pc.list_value_length(col).to_numpy(zero_copy_only=False), dtype=torch.long)
    return torch.tensor([len(x) for x in ds["input_ids"]], dtype=torch.long)


def grouped_permutation(
    lengths: torch.Tensor, batch_size: int, generator: torch.Generator, offset: int = 0
) -> torch.Tensor:
    """A permutation of range(N) whose batches [offset + kB, offset + (k+1)B) hold rows of similar
    length (the first ``offset`` rows complete a batch begun before, in a stream of epochs).

    Deterministic in ``generator``'s state: the same seed gives the same order (resumable)."""
    n = len(lengths)
    perm = torch.randperm(n, generator=generator)
    head, rest = perm[:offset], perm[offset:]
    mega = batch_size * MEGA_BATCHES
    groups = []
    for start in range(0, len(rest), mega):
        chunk = rest[start : start + mega]
        order = torch.sort(lengths[chunk], descending=True, stable=True).indices
        groups.append(chunk[order])
    rest = torch.cat(groups) if groups else rest
    batches = list(torch.split(rest, batch_size))
    full = [b for b in batches if len(b) == batch_size]
    tail = batches[len(full) :]  # a short last batch stays last: it straddles into the next epoch
    if full:
        full = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()]
        longest = max(range(len(full)), key=lambda i: int(lengths[full[i]].max()))
        full.insert(0, full.pop(longest))
    return torch.cat([head, *full, *tail])


def sorted_batches(lengths: torch.Tensor, max_tokens: int = 8192, max_rows: int = 256) -> list[list[int]]:
    """Row indices in batches, longest rows first: each batch as many rows as fit ``max_tokens``
    once padded to its first (longest) row, at most ``max_rows``."""
    order = torch.sort(lengths, descending=True, stable=True).indices.tolist()
    batches, i = [], 0
    while i < len(order):
        size = max(1, min(max_rows, max_tokens // max(1, int(lengths[order[i]]))))
        batches.append(order[i : i + size])
        i += size
    return batches


def pad_rows(rows: list[dict], keys, pad_to: int | None = None) -> dict:
    """{key: int64 [B, T]} of the rows' token lists ``keys`` ((key, fill) pairs), each row's list
    cut at and padded to T (the longest row's ``input_ids``, or ``pad_to``) with its fill."""
    import numpy as np

    length = pad_to or max(len(r["input_ids"]) for r in rows)
    out = {}
    for key, fill in keys:
        batch = np.full((len(rows), length), fill, dtype=np.int64)
        for i, r in enumerate(rows):
            seq = r[key][:length]
            batch[i, : len(seq)] = seq
        out[key] = torch.from_numpy(batch)
    return out
