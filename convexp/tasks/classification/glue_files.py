"""GLUE's sources: the hub (``nyu-mll/glue``), a classic TSV folder, a ``save_to_disk`` folder.

  load_hub(task, name, revision)  {split: Dataset} of a hub dataset at a revision (null: its default
                            branch; needs the network or HF's cache)
  load_disk(task, path)     {split: Dataset} of a ``DatasetDict.save_to_disk`` folder (the task's
                            own, or one holding one such folder per task name)
  read_classic(task, root)  {split: columns} of the classic GLUE layout: root holds CoLA/, SST-2/,
                            MRPC/, STS-B/, QQP/, MNLI/, QNLI/, RTE/, WNLI/ (and optionally
                            diagnostic/diagnostic.tsv). Test files are optional: GLUE's test sets
                            are unlabelled and often not kept, so a folder with train and dev
                            files only loads without test splits.

A saved DatasetDict may lack the test splits too. Each returns the task's splits with its columns
(``registry.py``: text fields, label, idx); problems raise ``TaskFileError`` / ``TaskLabelError``
with one line naming the file and the fix.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from ...data.errors import TaskError, TaskFileError
from ...data.hub import load_hub as load_hub_dataset
from ...data.hub import load_hub_or
from ...data.text_files import quoted, read_lines
from .registry import PAIR, Task

log = logging.getLogger(__name__)


def load_hub(t: Task, name: str, revision: str | None = None) -> dict:
    what = f"cannot load GLUE task {t.name!r} from hub dataset {name!r}"
    fix = "go online or use source=local with the classic TSV files"
    dd = load_hub_or(TaskError, what, fix, name, t.name, revision, "glue.revision")
    splits = dict(dd)
    if "test_ax" in t.test_splits:
        try:
            splits["test_ax"] = load_hub_dataset(name, "ax", revision, "glue.revision", split="test")
        except Exception as e:  # the diagnostic set is optional
            log.warning("no diagnostic (ax) split from %s: %s", name, e)
    return _checked_splits(t, splits, f"hub dataset {name!r}")


def load_disk(t: Task, path: Path) -> dict:
    import datasets

    folder = path / t.name if (path / t.name).is_dir() else path
    if not folder.is_dir():
        raise TaskFileError(f"no such folder: {folder}; set path to a DatasetDict.save_to_disk folder")
    try:
        dd = datasets.load_from_disk(str(folder))
    except Exception as e:
        raise TaskFileError(
            f"cannot read a saved dataset from {folder}: {' '.join(str(e).split())[:160]}; "
            "write it with DatasetDict.save_to_disk"
        ) from e
    if not isinstance(dd, datasets.DatasetDict):
        raise TaskFileError(
            f"{folder} holds one split, not a DatasetDict; save a DatasetDict with its splits"
        )
    return _checked_splits(t, dict(dd), str(folder))


def _checked_splits(t: Task, splits: dict, where: str) -> dict:
    """Keep the task's splits and columns, with uniform label/idx types."""
    from datasets import Value

    missing = [s for s in t.splits if s not in splits and s not in (*t.optional_splits, *t.test_splits)]
    if missing:  # test splits may be absent (GLUE's are unlabelled): no test predictions then
        raise TaskFileError(
            f"{where} has no split {', '.join(missing)} for task {t.name} "
            f"(splits: {', '.join(splits)}); provide splits {', '.join(t.splits)}"
        )
    out = {}
    for split in t.splits:
        if split not in splits:
            continue
        ds = splits[split]
        need = [*t.text_fields, "label", "idx"]
        lacking = [c for c in need if c not in ds.column_names]
        if lacking:
            raise TaskFileError(
                f"{where} split {split} lacks column(s) {', '.join(lacking)} (has {', '.join(ds.column_names)}); "
                f"provide columns {', '.join(need)}"
            )
        ds = ds.select_columns(need)
        ds = ds.cast_column("label", Value("float32" if t.is_regression else "int64"))
        out[split] = ds.cast_column("idx", Value("int32"))
    return out


# ---------------------------------------------------------------------------- classic TSV layout


@dataclass(frozen=True)
class _TsvSpec:
    """One classic file: its columns (header names, or positions for headerless files) for the
    text fields, the label (None: unlabelled) and the index (None: row number)."""

    file: str
    fields: tuple[str | int, ...]
    label: str | int | None = None
    index: str | None = None
    header: bool = True
    width: int | None = None  # headerless files: the number of columns


def _classic_specs(t: Task) -> dict[str, _TsvSpec]:
    """{split: spec} of the classic layout (as the old GLUE download script wrote it)."""
    test_pair = _TsvSpec("test.tsv", PAIR, index="index")
    labelled_pair = _TsvSpec("{}.tsv", PAIR, label="label")
    specs: dict[str, dict[str, _TsvSpec]] = {
        "cola": {
            "train": _TsvSpec("train.tsv", (3,), label=1, header=False, width=4),
            "validation": _TsvSpec("dev.tsv", (3,), label=1, header=False, width=4),
            "test": _TsvSpec("test.tsv", ("sentence",), index="index"),
        },
        "sst2": {
            "train": _TsvSpec("train.tsv", ("sentence",), label="label"),
            "validation": _TsvSpec("dev.tsv", ("sentence",), label="label"),
            "test": _TsvSpec("test.tsv", ("sentence",), index="index"),
        },
        "mrpc": {
            "train": _TsvSpec("train.tsv", ("#1 String", "#2 String"), label="Quality"),
            "validation": _TsvSpec("dev.tsv", ("#1 String", "#2 String"), label="Quality"),
            "test": _TsvSpec("test.tsv", ("#1 String", "#2 String"), index="index"),
        },
        "stsb": {
            "train": _TsvSpec("train.tsv", PAIR, label="score"),
            "validation": _TsvSpec("dev.tsv", PAIR, label="score"),
            "test": test_pair,
        },
        "qqp": {
            "train": _TsvSpec("train.tsv", ("question1", "question2"), label="is_duplicate"),
            "validation": _TsvSpec("dev.tsv", ("question1", "question2"), label="is_duplicate"),
            "test": _TsvSpec("test.tsv", ("question1", "question2"), index="id"),
        },
        "mnli": {
            "train": _TsvSpec("train.tsv", PAIR, label="gold_label"),
            "validation_matched": _TsvSpec("dev_matched.tsv", PAIR, label="gold_label"),
            "validation_mismatched": _TsvSpec("dev_mismatched.tsv", PAIR, label="gold_label"),
            "test_matched": _TsvSpec("test_matched.tsv", PAIR, index="index"),
            "test_mismatched": _TsvSpec("test_mismatched.tsv", PAIR, index="index"),
            "test_ax": _TsvSpec("../diagnostic/diagnostic.tsv", PAIR, index="index"),
        },
        "qnli": {
            "train": _TsvSpec("train.tsv", ("question", "sentence"), label="label"),
            "validation": _TsvSpec("dev.tsv", ("question", "sentence"), label="label"),
            "test": _TsvSpec("test.tsv", ("question", "sentence"), index="index"),
        },
    }
    if t.name in ("rte", "wnli"):
        return {
            "train": replace(labelled_pair, file="train.tsv"),
            "validation": replace(labelled_pair, file="dev.tsv"),
            "test": test_pair,
        }
    return specs[t.name]


def classic_files(t: Task, root: Path) -> dict[str, Path]:
    """{split: file} of a task in the classic layout under ``root``: train and dev must be there
    (one-line error naming the file), optional and test splits are left out when missing. Reads
    nothing: the check made before a run is planned."""
    if not root.is_dir():
        raise TaskFileError(
            f"no such GLUE folder: {root}; set path to the classic GLUE root (holding {t.folder}/ etc.)"
        )
    out = {}
    for split, spec in _classic_specs(t).items():
        path = (root / t.folder / spec.file).resolve()
        if not path.is_file():
            if split in (*t.optional_splits, *t.test_splits):  # train and dev are what fine-tuning needs
                log.info("no %s: %s has no %s split", path, t.name, split)
                continue
            raise TaskFileError(
                f"missing GLUE file {path}; put the classic {t.folder}/{Path(spec.file).name} under {root} "
                "(or use source=hub or synthetic)"
            )
        out[split] = path
    return out


def read_classic(t: Task, root: Path) -> dict[str, dict[str, list]]:
    """{split: columns} of a task in the classic layout under ``root``."""
    specs = _classic_specs(t)
    return {split: _read_tsv(t, path, specs[split]) for split, path in classic_files(t, root).items()}


PEEK_ROWS = 20  # the rows check_headers reads after a header: what a glance at the file shows


def check_headers(t: Task, root: Path) -> None:
    """The header line and the first ``PEEK_ROWS`` rows of each classic file of a task (read alone,
    the check made before a run is planned: milliseconds), with :func:`_read_tsv`'s lines for a
    header that lacks a column, a file with no rows, a row of the wrong width or a label outside
    the task's. A head that is not plain text is left to the reader, which says what is wrong."""
    specs = _classic_specs(t)
    for split, path in classic_files(t, root).items():
        spec = specs[split]
        if not spec.header:
            continue
        try:
            with open(path, encoding="utf-8-sig") as f:
                head = [f.readline(1 << 16) for _ in range(PEEK_ROWS + 1)]
        except (OSError, UnicodeDecodeError):
            continue
        lines = [(n, line.rstrip("\r\n")) for n, line in enumerate(head, 1) if line.strip()]
        if not lines or not all(x.replace("\t", " ").isprintable() for _, x in lines):
            continue
        width, pos = _columns(t, path, spec, lines[0][1].split("\t"))
        if len(lines) == 1 and head[-1] == "":  # the whole file read: a header and no row
            raise TaskFileError(
                f"{t.name}: {path} has a header and no rows; give files with examples"
            )
        for i, (n, line) in enumerate(lines[1:]):
            _row(t, path, spec, width, pos, line.split("\t"), f"{path}:{n}", i)


def _columns(t: Task, path: Path, spec: _TsvSpec, header: list[str]) -> tuple[int, dict]:
    """(width, {column: position}) of a classic file's header, or a TaskFileError naming what lacks."""
    wanted = [c for c in (*spec.fields, spec.label, spec.index) if c is not None]
    lacking = [c for c in wanted if c not in header]
    if lacking:
        raise TaskFileError(
            f"{path}: header lacks column(s) {', '.join(lacking)} (has {quoted(chr(9).join(header))}); "
            f"use the classic {t.folder} file"
        )
    width, pos = len(header), {c: header.index(c) for c in wanted}
    if spec.label == "gold_label":  # MNLI: the gold label is the last column
        pos["gold_label"] = width - 1
    return width, pos


def _read_tsv(t: Task, path: Path, spec: _TsvSpec) -> dict[str, list]:
    """Rows of one classic file. Quotes are literal (no CSV quoting): lines are split on tabs."""
    lines = read_lines(path, TaskFileError, "utf-8-sig")
    rows = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(lines, 1) if line.strip()]
    if spec.header:
        if not rows:
            raise TaskFileError(f"{path} is empty; it needs a header line and rows")
        width, pos = _columns(t, path, spec, rows.pop(0)[1])
    else:
        width, pos = spec.width, {c: c for c in (*spec.fields, spec.label) if c is not None}
    columns: dict[str, list] = {f: [] for f in (*t.text_fields, "label", "idx")}
    for i, (n, row) in enumerate(rows):
        for name, value in _row(t, path, spec, width, pos, row, f"{path}:{n}", i).items():
            columns[name].append(value)
    return columns


def _row(t: Task, path: Path, spec: _TsvSpec, width: int, pos: dict, row: list[str], where: str, i: int) -> dict:
    """One row's text fields, label (-1: none) and index, or a TaskFileError naming what is wrong."""
    if len(row) != width:
        raise TaskFileError(
            f"{where}: {len(row)} tab-separated columns, expected {width}; "
            f"use the classic {t.folder} file (tabs inside text break rows)"
        )
    out = {name: row[pos[col]] for name, col in zip(t.text_fields, spec.fields)}
    out["label"] = -1 if spec.label is None else t.parse_label(row[pos[spec.label]], where)
    if spec.index is None:
        out["idx"] = i
    else:
        raw = row[pos[spec.index]].strip()
        if not raw.isdigit():
            raise TaskFileError(f"{where}: index {quoted(raw)} is not a number; fix the file")
        out["idx"] = int(raw)
    return out
