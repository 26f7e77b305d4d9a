"""SentEval probing files: one ``data/probing/<task>.txt`` of SentEval -> {split: columns}.

File format (SentEval's): one line per example, tab-separated, ``split<TAB>label<TAB>sentence``
(the split is tr, va or te; the sentence is the last field, fields in between are ignored).
Splits map to train / validation / test (100k / 10k / 10k; the test rows have labels too). As
in SentEval, class i is the i-th label in sorted (string) order; the label set is the task's
(``tasks.PROBING_TASKS``), except WC's, which is the sorted set of the training rows' labels.
"""

from __future__ import annotations

from pathlib import Path

from ...data.errors import TaskFileError, TaskLabelError
from ...data.text_files import quoted, read_lines
from .registry import Task

SPLITS = {"tr": "train", "va": "validation", "te": "test"}


def senteval_file(t: Task, root: Path) -> Path:
    """The task's file in a SentEval ``data/probing`` folder (one-line error when missing)."""
    if not root.is_dir():
        raise TaskFileError(
            f"no such SentEval probing folder: {root}; set path to SentEval's data/probing folder "
            f"(holding {t.folder}.txt etc.)"
        )
    path = root / f"{t.folder}.txt"
    if not path.is_file():
        raise TaskFileError(
            f"missing SentEval probing file {path}; put SentEval's {t.folder}.txt (data/probing) "
            f"under {root}, or use source=synthetic"
        )
    return path


def read_senteval(t: Task, path: Path) -> dict[str, dict[str, list]]:
    """{split: {"sentence", "label", "idx"}} of one SentEval probing file (module docstring).

    Raises TaskFileError / TaskLabelError naming the file and line for a malformed line, a
    split without rows or a label the task does not know."""
    rows: dict[str, list] = {split: [] for split in SPLITS.values()}  # (line number, label, sentence)
    for n, line in enumerate(read_lines(path, TaskFileError), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        where = f"{path}:{n}"
        if len(fields) < 3:
            raise TaskFileError(
                f"{where}: {len(fields)} tab-separated field(s), expected split<TAB>label<TAB>sentence; "
                "fix the line"
            )
        split = SPLITS.get(fields[0].strip())
        if split is None:
            raise TaskFileError(f"{where}: split {quoted(fields[0])} is not tr, va or te; fix the line")
        label, sentence = fields[1].strip(), fields[-1].strip()
        if not label or not sentence:
            raise TaskFileError(f"{where}: empty label or sentence; fix the line")
        rows[split].append((n, label, sentence))
    empty = [tok for tok, split in SPLITS.items() if not rows[split]]
    if empty:
        raise TaskFileError(
            f"{path} has no {'/'.join(empty)} rows; a SentEval probing file holds tr, va and te rows"
        )
    names = t.label_names or tuple(sorted({label for _, label, _ in rows["train"]}))
    if len(names) > t.num_labels:
        raise TaskLabelError(
            f"{path}: {len(names)} different labels in the tr rows, but {t.name} has {t.num_labels} "
            f"classes; give SentEval's {t.folder}.txt"
        )
    index = {name: i for i, name in enumerate(names)}
    out = {}
    for split, split_rows in rows.items():
        columns: dict[str, list] = {"sentence": [], "label": [], "idx": []}
        for i, (n, label, sentence) in enumerate(split_rows):
            if label not in index:
                known = ", ".join(names) if t.label_names else "the labels of the tr rows"
                raise TaskLabelError(
                    f"{path}:{n}: unknown {t.name} label {quoted(label)} (known: {known}); "
                    f"fix the file (is it SentEval's {t.folder}.txt?)"
                )
            columns["sentence"].append(sentence)
            columns["label"].append(index[label])
            columns["idx"].append(i)
        out[split] = columns
    return out
