"""The synthetic language's data never changes by accident: the corpus, every synthetic GLUE task
and every synthetic SentEval probing task hash to the digests recorded in
tests/data/synthetic_digests.json (run ids and tokenised caches depend on this data).

Regenerate the file ONLY for an intended change of the data (and say so in the commit):
    python tests/test_synthetic_digests.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from convexp.tasks.classification.synthetic_glue import synthetic_task
from convexp.tasks.classification.registry import GLUE_TASKS, PROBING_ORDER
from convexp.tasks.classification.synthetic_probing import synthetic_probing_task
from convexp.data.synthetic import synthetic_corpus

RECORD = Path(__file__).parent / "data" / "synthetic_digests.json"
CORPUS = ((40, 0), (25, 7))  # (documents, seed)
TASK_DATA = ((60, 0), (90, 3))  # (synthetic_size, seed)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _cases():
    for n, seed in CORPUS:
        yield f"corpus/{n}/{seed}", lambda n=n, seed=seed: synthetic_corpus(n, seed)
    for size, seed in TASK_DATA:
        for name in GLUE_TASKS:
            yield f"glue/{name}/{size}/{seed}", lambda t=name, s=size, d=seed: synthetic_task(t, s, d)
        for name in PROBING_ORDER:
            yield (
                f"probing/{name}/{size}/{seed}",
                lambda t=name, s=size, d=seed: synthetic_probing_task(t, s, d),
            )


def _digests(data) -> dict[str, str]:
    """One digest per split (or one for a corpus), so that a failure names the split."""
    if isinstance(data, list):
        return {"all": _digest(data)}
    return {split: _digest(columns) for split, columns in data.items()}


@pytest.mark.parametrize("key, make", list(_cases()), ids=[k for k, _ in _cases()])
def test_synthetic_data_is_unchanged(key, make):
    recorded = json.loads(RECORD.read_text())
    assert _digests(make()) == recorded[key]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    RECORD.write_text(
        json.dumps({k: _digests(make()) for k, make in _cases()}, indent=1, sort_keys=True) + "\n"
    )
    print(f"wrote {RECORD}")
