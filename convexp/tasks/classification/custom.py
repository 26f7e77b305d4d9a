"""A user's own sentence(-pair) classification or regression task from CSV / JSON-lines files.

    convexp finetune glue task=custom init=... task.train_file=train.csv task.validation_file=dev.csv \
        [task.test_file=test.csv] task.text_fields=[premise,hypothesis] task.label_field=label \
        task.num_labels=3          (or task.regression=true)

Files: ``.csv``, ``.tsv`` (tab-separated CSV) or ``.json`` / ``.jsonl`` (one JSON object per line),
read with the ``datasets`` csv / json builders (local files: no network). ``text_fields`` names
one column (single sentences) or two (pairs); ``label_field`` the label column (a test file may
leave it out: its rows are unlabelled, -1).

Labels. Regression: numbers, scored by Pearson and Spearman correlation. Classification:
integers 0..num_labels-1 are class ids; text labels are mapped to ids in sorted order of the
training file's labels (the mapping is the task's ``label_names`` and is logged), scored by
accuracy, and for two classes also by F1 of class 1 (the task score is their mean, as MRPC's).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from ...data.datasets_cache import local_read
from ...data.errors import TaskError, TaskFileError, TaskLabelError
from ...data.text_files import quoted
from .registry import Task

log = logging.getLogger(__name__)

NAME = "custom"
FILE_KEYS = {"train": "train_file", "validation": "validation_file", "test": "test_file"}
# the task config keys that say what a custom task's data is (part of its runs' identity)
KEYS = (*FILE_KEYS.values(), "text_fields", "label_field", "num_labels", "regression")
_BUILDERS = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
}


def custom_task(task_cfg) -> Task:
    """The ``Task`` a ``task=custom`` config describes (label names: filled by ``load_custom``)."""
    for key in ("train_file", "validation_file"):
        if not task_cfg.get(key):
            raise TaskError(f"task=custom needs task.{key}=<a .csv, .tsv or .jsonl file>")
    fields = task_cfg.get("text_fields")
    if (
        isinstance(fields, str)
        or not fields
        or len(fields) > 2
        or not all(isinstance(f, str) for f in fields)
    ):
        raise TaskError(
            f"task.text_fields={fields!r}: give one or two column names, e.g. task.text_fields=[sentence] "
            "or task.text_fields=[premise,hypothesis]"
        )
    if not isinstance(task_cfg.get("label_field"), str) or not task_cfg.label_field:
        raise TaskError("task=custom needs task.label_field=<the label column>")
    regression, n = bool(task_cfg.get("regression")), task_cfg.get("num_labels")
    if regression and n not in (None, 1):
        raise TaskError(f"task.regression=true predicts one number: drop task.num_labels={n}")
    if not regression and (isinstance(n, bool) or not isinstance(n, int) or n < 2):
        given = "" if n is None else f"task.num_labels={n}: "
        raise TaskError(
            f"{given}a custom classification task needs task.num_labels=<classes, at least 2> "
            "(or task.regression=true)"
        )
    if regression:
        metrics, main = ("pearson", "spearman"), "spearman"
    else:
        metrics, main = (("accuracy", "f1") if n == 2 else ("accuracy",)), "accuracy"
    return Task(
        name=NAME,
        folder="",
        text_fields=tuple(fields),
        num_labels=1 if regression else n,
        label_names=(),
        dev_splits=("validation",),
        test_splits=("test",),
        metrics=metrics,
        convbert_metric=main,
        submission=(),
        submission_labels="int",
        int_file_labels=False,
        in_average=False,
        benchmark="custom",
    )


def load_custom(task_cfg) -> tuple[Task, dict[str, dict[str, list]]]:
    """(the task with its label names, {split: columns}) of a ``task=custom`` config."""
    t = custom_task(task_cfg)
    with local_read():  # a refused file leaves no copy in the datasets cache
        rows = {
            split: _read(t, task_cfg[key], key, task_cfg.label_field, labelled=split != "test")
            for split, key in FILE_KEYS.items()
            if task_cfg.get(key)
        }
    raw = {split: columns.pop("_raw_label") for split, columns in rows.items()}
    if not t.is_regression and any(isinstance(x, str) for x in raw["train"]):
        names = tuple(sorted({str(x) for x in raw["train"]}))
        if len(names) > t.num_labels:
            raise TaskLabelError(
                f"{task_cfg.train_file}: {len(names)} different labels ({', '.join(names[:5])}, ...) but "
                f"task.num_labels={t.num_labels}; set task.num_labels={len(names)}"
            )
        log.info("custom task labels: %s", ", ".join(f"{n}={i}" for i, n in enumerate(names)))
        t = replace(t, label_names=names)
    out = {}
    for split, columns in rows.items():
        where = task_cfg[FILE_KEYS[split]]
        labels = [_label(t, x, f"{where} row {i + 1}") for i, x in enumerate(raw[split])]
        out[split] = {**{f: columns[f] for f in t.text_fields}, "label": labels, "idx": columns["idx"]}
    return t, out


PEEK_ROWS = 20  # the rows check_files reads of each file: what a glance at it shows


def check_files(task_cfg) -> Task:
    """A custom task's settings and files, before the stage's imports: each given file exists, has
    a known suffix, and its head — the header (or first JSON object) and the first ``PEEK_ROWS``
    rows, read with the standard library in milliseconds — has the columns the task reads, a row at
    least, and numbers for a regression's labels. Its Task (label names: filled by ``load_custom``)."""
    t = custom_task(task_cfg)
    for split, key in FILE_KEYS.items():
        if task_cfg.get(key):
            path = _file(task_cfg[key], key)
            _peek(t, path, task_cfg[key], key, task_cfg.label_field, labelled=split != "test")
    return t


def _peek(t: Task, path: Path, file: str, key: str, label_field: str, labelled: bool) -> None:
    import csv
    import json

    try:
        with open(path, encoding="utf-8", newline="") as f:
            head = [f.readline(1 << 16) for _ in range(PEEK_ROWS + 1)]
    except (OSError, UnicodeDecodeError):
        return  # left to the reader, which says what is wrong with the file
    if path.suffix.lower() in (".json", ".jsonl"):
        try:
            rows = [json.loads(line) for line in head if line.strip()]
        except ValueError:
            return  # a JSON array or a malformed line: the reader's words
        if not all(isinstance(r, dict) for r in rows):
            return
        columns = list(dict.fromkeys(k for r in rows for k in r))
    else:
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        table = list(csv.reader([line for line in head if line.strip()], delimiter=delimiter))
        if not table:
            raise TaskFileError(f"task.{key}={file} has no rows; give a file with rows")
        columns, rows = table[0], [dict(zip(table[0], r)) for r in table[1:]]
    need = [*t.text_fields, *([label_field] if labelled else [])]
    lacking = [c for c in need if c not in columns]
    if lacking:
        raise TaskFileError(
            f"task.{key}={file} has no column {', '.join(lacking)} (has {', '.join(columns)}); "
            "set task.text_fields / task.label_field to its columns"
        )
    if not rows and head[-1] == "":  # the whole file read: nothing but a header
        raise TaskFileError(f"task.{key}={file} has no rows; give a file with rows")
    if labelled and t.is_regression:
        for i, r in enumerate(rows):
            if r.get(label_field) not in (None, ""):
                _label(t, r[label_field], f"{file} row {i + 1}")


def _file(file: str, key: str) -> Path:
    """A custom task's file: it exists and its suffix says how to read it."""
    path = Path(file).expanduser()
    if not path.is_file():
        raise TaskFileError(f"task.{key}={file}: no such file; give a .csv, .tsv or .jsonl file")
    if path.suffix.lower() not in _BUILDERS:
        raise TaskFileError(
            f"task.{key}={file}: unknown file type {path.suffix!r}; use .csv, .tsv, .json or .jsonl"
        )
    return path


def _read(t: Task, file: str, key: str, label_field: str, labelled: bool) -> dict[str, list]:
    """The columns of one file: the text fields, ``_raw_label`` (as read) and ``idx``."""
    import datasets

    path = _file(file, key)
    builder, options = _BUILDERS[path.suffix.lower()]
    try:
        ds = datasets.load_dataset(builder, data_files={"rows": str(path.resolve())}, split="rows", **options)
    except Exception as e:  # a malformed file: the builder's message, on one line
        if path.stat().st_size == 0 or "corresponds to no data" in str(e):  # empty, or a header only
            raise TaskFileError(f"task.{key}={file} has no rows; give a file with rows") from e
        raise TaskFileError(f"task.{key}={file}: cannot read it: {' '.join(str(e).split())[:160]}") from e
    need = [*t.text_fields, *([label_field] if labelled else [])]
    lacking = [c for c in need if c not in ds.column_names]
    if lacking:
        raise TaskFileError(
            f"task.{key}={file} has no column {', '.join(lacking)} (has {', '.join(ds.column_names)}); "
            "set task.text_fields / task.label_field to its columns"
        )
    if len(ds) == 0:
        raise TaskFileError(f"task.{key}={file} has no rows")
    columns = {f: ["" if x is None else str(x) for x in ds[f]] for f in t.text_fields}
    columns["_raw_label"] = ds[label_field] if label_field in ds.column_names else [None] * len(ds)
    columns["idx"] = list(range(len(ds)))
    return columns


def _label(t: Task, raw, where: str) -> int | float:
    """A label as read -> class id, float score, or -1 (an unlabelled test row)."""
    if raw is None:
        return -1.0 if t.is_regression else -1
    if t.is_regression:
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise TaskLabelError(
                f"{where}: label {quoted(raw)} is not a number; a regression task needs numbers"
            ) from None
    if t.label_names:
        if str(raw) not in t.label_names:
            raise TaskLabelError(
                f"{where}: label {quoted(raw)} is not among the training labels "
                f"({', '.join(t.label_names)}); fix the file"
            )
        return t.label_names.index(str(raw))
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < t.num_labels:
        raise TaskLabelError(
            f"{where}: label {quoted(raw)} is not a class id 0..{t.num_labels - 1}; fix the file or task.num_labels"
        )
    return raw
