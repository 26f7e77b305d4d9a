"""GLUE: task registry, loading, tokenisation, metrics, scores and server submissions.

Sections of this module (each usable alone):

  registry      ``TASKS`` / ``get_task``: fields, labels (the ``nyu-mll/glue`` integer order),
                splits, metrics and submission format of the nine tasks; ``get_task`` also knows
                the ten SentEval probing tasks of ``probing.py`` (``benchmark="probing"``, never
                in ``TASKS`` nor in a GLUE average), which ``load_glue_task`` hands to that module
  loading       ``load_glue_task(task, source_cfg)`` -> {split: Dataset} from the synthetic
                tasks, the hub, a classic local TSV folder or a ``save_to_disk`` folder
  synthetic     GLUE-shaped tasks generated from the synthetic language (no download)
  tokenising    ``tokenize_task`` -> input_ids / token_type_ids / attention_mask / label / idx,
                cached on disk; ``collate`` pads a batch
  metrics       ``compute_metrics`` (torchmetrics, in percent), ``task_score``,
                ``convbert_score``, ``score_columns``, ``glue_average``
  submission    ``write_submission`` / ``zip_submission``: the GLUE server's files

Splits. Every task has ``train``, its dev splits (``validation``; MNLI: ``validation_matched``
and ``validation_mismatched``) and its test splits (``test``; MNLI: ``test_matched``,
``test_mismatched`` and the optional diagnostic ``test_ax``, predicted with the MNLI model).
Every split has the same columns: the task's text fields (named as in ``nyu-mll/glue``),
``label`` (int64 class id in the hub's order, float32 for STS-B, -1 for unlabelled test rows)
and ``idx`` (int32: the row number, or the ``index``/``id`` column of a classic test file,
which is what the server expects in submissions).

Source config keys (missing keys take ``GLUE_SOURCE_DEFAULTS``):

  source          synthetic | hub | local | disk
  path            hub: dataset name (null: "nyu-mll/glue"); local: the classic GLUE root folder
                  holding CoLA/, SST-2/, MRPC/, STS-B/, QQP/, MNLI/, QNLI/, RTE/, WNLI/ (and
                  optionally diagnostic/diagnostic.tsv); disk: a ``DatasetDict.save_to_disk``
                  folder, either the task's own or one holding one such folder per task name
  seed            synthetic tasks: the data seed
  synthetic_size  synthetic tasks: training rows per task (dev and test: a quarter, at least 50)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import warnings
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..atomic import atomic_dir, atomic_write, config_hash
from .corpus import with_defaults
from .errors import DataError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1  # part of the tokenised-cache key: bump when tokenisation changes
HUB_NAME = "nyu-mll/glue"
SOURCES = ("synthetic", "hub", "local", "disk")
GLUE_SOURCE_DEFAULTS: dict[str, Any] = {
    "source": "synthetic",
    "path": None,
    "seed": 0,
    "synthetic_size": 2000,
}


# ============================================================================ errors


class GlueError(DataError):
    """A GLUE task, file or label problem; the message is one line naming it and the fix."""


class UnknownTaskError(GlueError):
    """A task name that is not one of ``TASKS``."""


class GlueFileError(GlueError):
    """A missing GLUE file, a file with the wrong columns, or a malformed row."""


class GlueLabelError(GlueError):
    """A label string that the task does not know."""


# ============================================================================ registry


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: what its rows hold and how it is scored and submitted.

    label_names      class i's name is label_names[i] (``nyu-mll/glue`` order); () for STS-B
    metrics          the keys ``compute_metrics`` returns; their mean is the task's GLUE score
    convbert_metric  the single metric ConvBERT/ELECTRA report (Spearman for STS, MCC for CoLA,
                     accuracy for the others, MRPC included)
    submission       (test split, server file name) pairs
    submission_labels  how predictions are written: "int" (class id), "name" (label name) or
                     "float" (clipped to [0, 5])
    int_file_labels  classic TSV files write the label as a class id (0/1); label names are
                     accepted as well
    folder           the task's folder in the classic layout (probing: the SentEval file's stem)
    optional_splits  splits that may be absent from a source (MNLI's diagnostic test_ax)
    benchmark        "glue", or "probing" for the SentEval tasks of ``probing.py``
    """

    name: str
    folder: str
    text_fields: tuple[str, ...]
    num_labels: int
    label_names: tuple[str, ...]
    dev_splits: tuple[str, ...]
    test_splits: tuple[str, ...]
    metrics: tuple[str, ...]
    convbert_metric: str
    submission: tuple[tuple[str, str], ...]
    submission_labels: str
    int_file_labels: bool
    in_average: bool = True
    optional_splits: tuple[str, ...] = ()
    benchmark: str = "glue"

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    @property
    def is_pair(self) -> bool:
        return len(self.text_fields) == 2

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", *self.dev_splits, *self.test_splits)

    def submission_file(self, split: str) -> str:
        """The server file name for predictions on a test split."""
        for s, name in self.submission:
            if s == split:
                return name
        raise GlueError(
            f"task {self.name} has no submission file for split {split!r}; "
            f"use one of: {', '.join(s for s, _ in self.submission)}"
        )

    def parse_label(self, raw: str, where: str) -> int | float:
        """A label as written in a classic TSV file -> class id (or float score)."""
        raw = raw.strip()
        if self.is_regression:
            try:
                return float(raw)
            except ValueError:
                raise GlueLabelError(f"{where}: score {raw!r} is not a number; fix the file") from None
        if raw in self.label_names:
            return self.label_names.index(raw)
        if self.int_file_labels and raw.isdigit() and int(raw) < self.num_labels:
            return int(raw)
        known = list(self.label_names) + (
            [str(i) for i in range(self.num_labels)] if self.int_file_labels else []
        )
        raise GlueLabelError(
            f"{where}: unknown {self.name} label {raw!r} (known: {', '.join(known)}); fix the file"
        )


_PAIR = ("sentence1", "sentence2")
_ENT2 = ("entailment", "not_entailment")


def _task(name, folder, fields, labels, metrics, *, score, submit, int_file_labels, **kw) -> GlueTask:
    dev, test = kw.pop("dev_splits", ("validation",)), kw.pop("test_splits", ("test",))
    return GlueTask(
        name=name,
        folder=folder,
        text_fields=fields,
        num_labels=len(labels) or 1,
        label_names=labels,
        dev_splits=dev,
        test_splits=test,
        metrics=metrics,
        convbert_metric=score,
        submission=kw.pop("submission", ((test[0], f"{folder}.tsv"),)),
        submission_labels=submit,
        int_file_labels=int_file_labels,
        **kw,
    )


_BINARY = {"submit": "int", "int_file_labels": True}  # 0/1 in the files and in submissions
_NLI = {"score": "accuracy", "submit": "name", "int_file_labels": False}  # label names

TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        _task(
            "cola", "CoLA", ("sentence",), ("unacceptable", "acceptable"), ("mcc",), score="mcc", **_BINARY
        ),
        _task(
            "sst2",
            "SST-2",
            ("sentence",),
            ("negative", "positive"),
            ("accuracy",),
            score="accuracy",
            **_BINARY,
        ),
        _task(
            "mrpc",
            "MRPC",
            _PAIR,
            ("not_equivalent", "equivalent"),
            ("f1", "accuracy"),
            score="accuracy",
            **_BINARY,
        ),
        _task(
            "stsb",
            "STS-B",
            _PAIR,
            (),
            ("pearson", "spearman"),
            score="spearman",
            submit="float",
            int_file_labels=False,
        ),
        _task(
            "qqp",
            "QQP",
            ("question1", "question2"),
            ("not_duplicate", "duplicate"),
            ("f1", "accuracy"),
            score="accuracy",
            **_BINARY,
        ),
        _task(
            "mnli",
            "MNLI",
            ("premise", "hypothesis"),
            ("entailment", "neutral", "contradiction"),
            ("accuracy",),
            dev_splits=("validation_matched", "validation_mismatched"),
            test_splits=("test_matched", "test_mismatched", "test_ax"),
            submission=(
                ("test_matched", "MNLI-m.tsv"),
                ("test_mismatched", "MNLI-mm.tsv"),
                ("test_ax", "AX.tsv"),
            ),
            optional_splits=("test_ax",),
            **_NLI,
        ),
        _task("qnli", "QNLI", ("question", "sentence"), _ENT2, ("accuracy",), **_NLI),
        _task("rte", "RTE", _PAIR, _ENT2, ("accuracy",), **_NLI),
        # WNLI: hub order not_entailment=0, entailment=1; its files and the GLUE server use 0/1.
        _task(
            "wnli",
            "WNLI",
            _PAIR,
            ("not_entailment", "entailment"),
            ("accuracy",),
            score="accuracy",
            in_average=False,
            **_BINARY,
        ),
    )
}
SUBMISSION_FILES = tuple(name for t in TASKS.values() for _, name in t.submission)  # the server's 11 files


def get_task(task: str | GlueTask) -> GlueTask:
    """The registry entry of a task name (case-insensitive; "sst-2"/"sts-b" accepted): one of
    ``TASKS`` or of the SentEval probing tasks (``probing.PROBING_TASKS``)."""
    if isinstance(task, GlueTask):
        return task
    from .probing import PROBING_TASKS  # here, not at the top: probing.py imports this module

    key = str(task).lower().replace("-", "")
    if key not in TASKS and key not in PROBING_TASKS:
        raise UnknownTaskError(
            f"unknown GLUE task {task!r}; use one of: {', '.join(TASKS)} "
            f"(or a SentEval probing task: {', '.join(PROBING_TASKS)})"
        )
    return TASKS.get(key) or PROBING_TASKS[key]


# ============================================================================ loading


def glue_source_settings(source_cfg, task: GlueTask | None = None) -> dict:
    """The source config with defaults, validated (unknown key or source -> GlueError)."""
    s = with_defaults(source_cfg, GLUE_SOURCE_DEFAULTS, "GLUE source", GlueError)
    if s["source"] not in SOURCES:
        raise GlueError(f"unknown GLUE source {s['source']!r}; use one of: {', '.join(SOURCES)}")
    if s["source"] in ("local", "disk") and not s["path"]:
        local = "classic GLUE root folder (CoLA/, SST-2/, ...)"
        if task is not None and task.benchmark == "probing":
            local = "SentEval probing folder (SentEval's data/probing: sentence_length.txt, ...)"
        raise GlueFileError(
            f"GLUE source {s['source']!r} needs a path; set path to the "
            + (local if s["source"] == "local" else "save_to_disk folder")
        )
    if s["source"] == "synthetic" and not (isinstance(s["synthetic_size"], int) and s["synthetic_size"] > 0):
        raise GlueError(f"synthetic_size must be a positive integer, not {s['synthetic_size']!r}")
    return s


def load_glue_task(task: str | GlueTask, source_cfg=None) -> dict:
    """{split: datasets.Dataset} for every split of ``task`` (see the module docstring).

    Raises GlueError subclasses (one line) for an unknown task or source, a missing file, a
    file with the wrong columns and an unknown label."""
    t = get_task(task)
    s = glue_source_settings(source_cfg, t)
    if t.benchmark == "probing" and s["source"] != "disk":  # SentEval files, synthetic stand-ins
        from .probing import load_probing_task

        return load_probing_task(t, s)
    if s["source"] == "synthetic":
        rows = synthetic_task(t, int(s["synthetic_size"]), int(s["seed"]))
    elif s["source"] == "local":
        rows = _read_classic(t, Path(s["path"]).expanduser())
    elif s["source"] == "hub":
        return _load_hub(t, s["path"] or HUB_NAME)
    else:
        return _load_disk(t, Path(s["path"]).expanduser())
    return {split: _dataset(t, r) for split, r in rows.items()}


def glue_features(task: str | GlueTask):
    """The ``datasets.Features`` of a loaded split."""
    from datasets import Features, Value

    t = get_task(task)
    f = {name: Value("string") for name in t.text_fields}
    f["label"] = Value("float32" if t.is_regression else "int64")
    f["idx"] = Value("int32")
    return Features(f)


def _dataset(t: GlueTask, rows: dict[str, list]):
    import datasets

    return datasets.Dataset.from_dict(rows, features=glue_features(t))


def _load_hub(t: GlueTask, name: str) -> dict:
    import datasets

    try:
        dd = datasets.load_dataset(name, t.name)
    except Exception as e:  # offline, unknown name: the user can fix it
        raise GlueError(
            f"cannot load GLUE task {t.name!r} from hub dataset {name!r}: {type(e).__name__}: "
            f"{' '.join(str(e).split())[:160]}; go online or use source=local with the classic TSV files"
        ) from e
    splits = dict(dd)
    if "test_ax" in t.test_splits:
        try:
            splits["test_ax"] = datasets.load_dataset(name, "ax", split="test")
        except Exception as e:  # the diagnostic set is optional
            log.warning("no diagnostic (ax) split from %s: %s", name, e)
    return _checked_splits(t, splits, f"hub dataset {name!r}")


def _load_disk(t: GlueTask, path: Path) -> dict:
    import datasets

    folder = path / t.name if (path / t.name).is_dir() else path
    if not folder.is_dir():
        raise GlueFileError(f"no such folder: {folder}; set path to a DatasetDict.save_to_disk folder")
    try:
        dd = datasets.load_from_disk(str(folder))
    except Exception as e:
        raise GlueFileError(
            f"cannot read a saved dataset from {folder}: {' '.join(str(e).split())[:160]}; "
            "write it with DatasetDict.save_to_disk"
        ) from e
    if not isinstance(dd, datasets.DatasetDict):
        raise GlueFileError(
            f"{folder} holds one split, not a DatasetDict; save a DatasetDict with its splits"
        )
    return _checked_splits(t, dict(dd), str(folder))


def _checked_splits(t: GlueTask, splits: dict, where: str) -> dict:
    """Keep the task's splits and columns, with uniform label/idx types."""
    from datasets import Value

    missing = [s for s in t.splits if s not in splits and s not in t.optional_splits]
    if missing:
        raise GlueFileError(
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
            raise GlueFileError(
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


def _classic_specs(t: GlueTask) -> dict[str, _TsvSpec]:
    """{split: spec} of the classic layout (REFERENCE.md §4)."""
    test_pair = _TsvSpec("test.tsv", _PAIR, index="index")
    labelled_pair = _TsvSpec("{}.tsv", _PAIR, label="label")
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
            "train": _TsvSpec("train.tsv", _PAIR, label="score"),
            "validation": _TsvSpec("dev.tsv", _PAIR, label="score"),
            "test": test_pair,
        },
        "qqp": {
            "train": _TsvSpec("train.tsv", ("question1", "question2"), label="is_duplicate"),
            "validation": _TsvSpec("dev.tsv", ("question1", "question2"), label="is_duplicate"),
            "test": _TsvSpec("test.tsv", ("question1", "question2"), index="id"),
        },
        "mnli": {
            "train": _TsvSpec("train.tsv", _PAIR, label="gold_label"),
            "validation_matched": _TsvSpec("dev_matched.tsv", _PAIR, label="gold_label"),
            "validation_mismatched": _TsvSpec("dev_mismatched.tsv", _PAIR, label="gold_label"),
            "test_matched": _TsvSpec("test_matched.tsv", _PAIR, index="index"),
            "test_mismatched": _TsvSpec("test_mismatched.tsv", _PAIR, index="index"),
            "test_ax": _TsvSpec("../diagnostic/diagnostic.tsv", _PAIR, index="index"),
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


def _read_classic(t: GlueTask, root: Path) -> dict[str, dict[str, list]]:
    """{split: columns} of a task in the classic layout under ``root``."""
    if not root.is_dir():
        raise GlueFileError(
            f"no such GLUE folder: {root}; set path to the classic GLUE root (holding {t.folder}/ etc.)"
        )
    out = {}
    for split, spec in _classic_specs(t).items():
        path = (root / t.folder / spec.file).resolve()
        if not path.is_file():
            if split in t.optional_splits:
                log.info("no %s (optional %s split of %s)", path, split, t.name)
                continue
            raise GlueFileError(
                f"missing GLUE file {path}; put the classic {t.folder}/{Path(spec.file).name} under {root} "
                "(or use source=hub or synthetic)"
            )
        out[split] = _read_tsv(t, path, spec)
    return out


def _read_tsv(t: GlueTask, path: Path, spec: _TsvSpec) -> dict[str, list]:
    """Rows of one classic file. Quotes are literal (no CSV quoting): lines are split on tabs."""
    lines = path.read_bytes().decode("utf-8-sig", errors="replace").split("\n")
    rows = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(lines, 1) if line.strip()]
    if spec.header:
        if not rows:
            raise GlueFileError(f"{path} is empty; it needs a header line and rows")
        header = rows.pop(0)[1]
        wanted = [c for c in (*spec.fields, spec.label, spec.index) if c is not None]
        lacking = [c for c in wanted if c not in header]
        if lacking:
            raise GlueFileError(
                f"{path}: header lacks column(s) {', '.join(lacking)} (has {', '.join(header)}); "
                f"use the classic {t.folder} file"
            )
        width, pos = len(header), {c: header.index(c) for c in wanted}
        if spec.label == "gold_label":  # MNLI: the gold label is the last column
            pos["gold_label"] = width - 1
    else:
        width, pos = spec.width, {c: c for c in (*spec.fields, spec.label) if c is not None}
    columns: dict[str, list] = {f: [] for f in (*t.text_fields, "label", "idx")}
    for i, (n, row) in enumerate(rows):
        where = f"{path}:{n}"
        if len(row) != width:
            raise GlueFileError(
                f"{where}: {len(row)} tab-separated columns, expected {width}; "
                f"use the classic {t.folder} file (tabs inside text break rows)"
            )
        for name, col in zip(t.text_fields, spec.fields):
            columns[name].append(row[pos[col]])
        columns["label"].append(-1 if spec.label is None else t.parse_label(row[pos[spec.label]], where))
        if spec.index is None:
            columns["idx"].append(i)
        else:
            raw = row[pos[spec.index]].strip()
            if not raw.isdigit():
                raise GlueFileError(f"{where}: index {raw!r} is not a number; fix the file")
            columns["idx"].append(int(raw))
    return columns


# ============================================================================ synthetic tasks
#
# Sentences of the synthetic language (convexp/data/synthetic.py: same words, same agreement
# rules), with labels that are functions of the text a small model can learn:
#   cola  acceptable = grammatical; unacceptable = determiner/verb agreement broken, two
#         neighbouring words swapped, or a stray determiner inserted
#   sst2  the majority polarity of "sentiment" adjectives (two disjoint sets of 6); a negated
#         clause ("does not") flips the polarity of its adjectives
#   mrpc  equivalent = the same clauses with determiners changed / adjectives dropped;
#         not equivalent = one or two content words replaced
#   qqp   duplicate = the same question reworded; not = another question word or content word
#   stsb  5 x the fraction of content words kept, plus noise in [-0.3, 0.3], clipped to [0, 5]
#   mnli  entailment = a premise clause (simplified); contradiction = the same clause with its
#         negation flipped; neutral = the same subject doing something new. The matched splits
#         draw topics 0-7, the mismatched ones topics 8-11 (different content words).
#   rte   mnli's rules, two-way (not_entailment = contradiction or neutral)
#   qnli  entailment = the sentence holds the clause the question asks about
#   wnli  "the A <verb>s the B because it was ADJ." -> "the X was ADJ.": "it" is the subject for
#         one set of adjectives and the object for another; entailment iff X is that referent


_SING_DETS = ("a", "this", "that", "every", "one", "the")
_PLUR_DETS = ("these", "those", "many", "some", "two", "few", "the")
_CONJ = ("and", "while", "because", "but")
_WH = ("why", "how", "when", "where")


@dataclass(frozen=True)
class _NP:
    det: str
    adj: str | None
    noun: str
    plural: bool

    def words(self) -> list[str]:
        w = ([self.adj] if self.adj else []) + [self.noun + ("s" if self.plural else "")]
        det = "an" if self.det == "a" and w[0][0] in "aeiou" else self.det
        return [det, *w]


@dataclass(frozen=True)
class _Clause:
    subj: _NP
    verb: str
    obj: _NP
    negated: bool = False

    def verb_words(self, plural: bool | None = None) -> list[str]:
        plural = self.subj.plural if plural is None else plural
        if self.negated:
            return ["do" if plural else "does", "not", self.verb]
        return [self.verb + ("" if plural else "s")]

    def words(self) -> list[str]:
        return [*self.subj.words(), *self.verb_words(), *self.obj.words()]


def _sentence(words: list[str]) -> str:
    return " ".join(words).replace(" ,", ",").replace(" .", ".").replace(" ?", "?")


class _Words:
    """Picks words of the synthetic lexicon: 80% from one topic, 20% from the shared vocabulary."""

    def __init__(self, rng: random.Random, topics: Sequence[int]):
        from .synthetic import _lexicon  # the language of the synthetic corpus

        lex = _lexicon()
        self.rng, self.general = rng, lex.general
        self.topic = lex.topics[rng.choice(list(topics))]
        adjs = lex.general.adjectives  # 20 words, reserved for the rules below
        self.positive, self.negative = adjs[:6], adjs[6:12]
        self.agent_adjs, self.patient_adjs = adjs[12:16], adjs[16:20]

    def pick(self, part: str, avoid: Iterable[str] = ()) -> str:
        avoid = set(avoid)
        while True:
            if part == "adjectives":  # neutral adjectives: topic words only
                vocab = self.topic
            else:
                vocab = self.topic if self.rng.random() < 0.8 else self.general
            w = self.rng.choice(getattr(vocab, part))
            if w not in avoid:
                return w

    def np(self, plural: bool | None = None, adj_p: float = 0.3) -> _NP:
        plural = self.rng.random() < 0.5 if plural is None else plural
        det = self.rng.choice(_PLUR_DETS if plural else _SING_DETS)
        adj = self.pick("adjectives") if self.rng.random() < adj_p else None
        return _NP(det, adj, self.pick("nouns"), plural)

    def clause(self, negated: bool = False, subj: _NP | None = None) -> _Clause:
        return _Clause(subj or self.np(), self.pick("verbs"), self.np(), negated)

    def reword(self, c: _Clause, drop_adj: float = 0.5) -> _Clause:
        """Same content words: determiners changed (same number), adjectives maybe dropped."""

        def np(x: _NP) -> _NP:
            det = self.rng.choice(_PLUR_DETS if x.plural else _SING_DETS)
            return _NP(det, None if self.rng.random() < drop_adj else x.adj, x.noun, x.plural)

        return replace(c, subj=np(c.subj), obj=np(c.obj))

    def change_content(self, c: _Clause, n: int = 1) -> _Clause:
        """Replace ``n`` of the subject noun, verb and object noun by other words."""
        for slot in self.rng.sample(["subj", "verb", "obj"], n):
            if slot == "verb":
                c = replace(c, verb=self.pick("verbs", avoid=[c.verb]))
            else:
                x = getattr(c, slot)
                c = replace(c, **{slot: replace(x, noun=self.pick("nouns", avoid=[x.noun]))})
        return c


def _join_clauses(rng: random.Random, clauses: list[_Clause], end: str = ".") -> str:
    words = clauses[0].words()
    for c in clauses[1:]:
        words += [",", rng.choice(_CONJ), *c.words()]
    return _sentence([*words, end])


def _simplified(c: _Clause) -> _Clause:
    """The clause with its adjectives dropped and "the" as determiner (entailed by the clause)."""
    return replace(c, subj=replace(c.subj, det="the", adj=None), obj=replace(c.obj, det="the", adj=None))


def _cola(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], int]:
    clauses = [w.clause(negated=rng.random() < 0.15) for _ in range(1 if rng.random() < 0.7 else 2)]
    label = int(rng.random() < 0.5)
    if label:
        return (_join_clauses(rng, clauses),), label
    c = clauses[0]
    kind = rng.choice(("det", "verb", "order", "extra"))
    if kind == "det":  # a determiner of the wrong number
        slot = rng.choice(("subj", "obj"))
        x = getattr(c, slot)
        wrong = [d for d in (_SING_DETS if x.plural else _PLUR_DETS) if d != "the"]
        clauses[0] = replace(c, **{slot: replace(x, det=rng.choice(wrong))})
        return (_join_clauses(rng, clauses),), 0
    if kind == "verb":  # subject-verb agreement broken
        words = [*c.subj.words(), *c.verb_words(plural=not c.subj.plural), *c.obj.words()]
    elif kind == "order":  # two neighbouring words swapped
        words = c.words()
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    else:  # a stray determiner (visible without knowing the content words)
        words = c.words()
        words.insert(rng.randrange(1, len(words) + 1), rng.choice(_SING_DETS + _PLUR_DETS))
    for other in clauses[1:]:
        words += [",", rng.choice(_CONJ), *other.words()]
    return (_sentence([*words, "."]),), 0


def _sst2(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], int]:
    label = int(rng.random() < 0.5)
    clauses = [w.clause(negated=False) for _ in range(rng.choice((1, 1, 2)))]
    slots = [(i, s) for i in range(len(clauses)) for s in ("subj", "obj")]
    k = min(rng.choice((1, 2, 3)), len(slots))
    major = k if k < 3 else rng.choice((2, 3))
    polarity = [label] * major + [1 - label] * (k - major)
    negated = [rng.random() < 0.25 for _ in clauses]
    clauses = [replace(c, negated=n) for c, n in zip(clauses, negated)]
    for (i, slot), p in zip(rng.sample(slots, k), polarity):
        adj = rng.choice(w.positive if p != negated[i] else w.negative)  # "not" flips a clause's words
        clauses[i] = replace(clauses[i], **{slot: replace(getattr(clauses[i], slot), adj=adj)})
    return (_join_clauses(rng, clauses),), label


def _mrpc(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], int]:
    clauses = [w.clause(negated=rng.random() < 0.1) for _ in range(rng.choice((1, 2)))]
    label = int(rng.random() < 0.5)
    other = [w.reword(c) for c in clauses]
    if not label:
        i = rng.randrange(len(other))
        other[i] = w.change_content(other[i], rng.choice((1, 2)))
    return (_join_clauses(rng, clauses), _join_clauses(rng, other)), label


def _question(c: _Clause, wh: str | None) -> str:
    aux = "do" if c.subj.plural else "does"
    return _sentence([*([wh] if wh else []), aux, *c.subj.words(), c.verb, *c.obj.words(), "?"])


def _qqp(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], int]:
    c, wh = w.clause(), rng.choice((*_WH, None))
    label = int(rng.random() < 0.5)
    c2, wh2 = w.reword(c), wh
    if not label:
        if rng.random() < 0.4:
            wh2 = rng.choice([x for x in (*_WH, None) if x != wh])
        else:
            c2 = w.change_content(c2)
    return (_question(c, wh), _question(c2, wh2)), label


def _stsb(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], float]:
    c = w.clause(negated=rng.random() < 0.1)
    n_changed = rng.randint(0, 3)
    c2 = w.change_content(w.reword(c, drop_adj=0.3), n_changed) if n_changed else w.reword(c, drop_adj=0.3)
    score = 5.0 * (3 - n_changed) / 3 + rng.uniform(-0.3, 0.3)
    return (_join_clauses(rng, [c]), _join_clauses(rng, [c2])), round(min(5.0, max(0.0, score)), 2)


def _nli(rng: random.Random, w: _Words, two_clause_p: float) -> tuple[tuple[str, str], str]:
    """(premise, hypothesis), "entailment" | "neutral" | "contradiction"."""
    n = 2 if rng.random() < two_clause_p else 1
    premise = [w.clause(negated=rng.random() < 0.3) for _ in range(n)]
    target = rng.choice(premise)
    label = rng.choice(("entailment", "neutral", "contradiction"))
    if label == "entailment":
        h = _simplified(target)
    elif label == "contradiction":
        h = replace(_simplified(target), negated=not target.negated)
    else:
        h = _simplified(w.clause(negated=rng.random() < 0.3, subj=target.subj))
        h = replace(h, verb=w.pick("verbs", avoid=[c.verb for c in premise]))
    return (_join_clauses(rng, premise), _sentence([*h.words(), "."])), label


def _mnli(rng, w):
    (p, h), label = _nli(rng, w, two_clause_p=0.4)
    return (p, h), TASKS["mnli"].label_names.index(label)


def _rte(rng, w):
    (p, h), label = _nli(rng, w, two_clause_p=0.7)
    return (p, h), 0 if label == "entailment" else 1


def _qnli(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], int]:
    c = w.clause()
    asks_object = rng.random() < 0.5
    if asks_object:  # "what does the X verb?" needs subject noun + verb
        q = _sentence(["what", "do" if c.subj.plural else "does", *c.subj.words(), c.verb, "?"])
    else:  # "which Xs verb the Y?" needs verb + object noun
        q = _sentence(
            ["which", c.subj.noun + ("s" if c.subj.plural else ""), *c.verb_words(), *c.obj.words(), "?"]
        )
    label = int(rng.random() < 0.5)  # 0 = entailment
    answer = w.reword(c)
    if label:
        slot = rng.choice(("subj", "verb") if asks_object else ("verb", "obj"))
        if slot == "verb":
            answer = replace(answer, verb=w.pick("verbs", avoid=[c.verb]))
        else:
            x = getattr(answer, slot)
            answer = replace(answer, **{slot: replace(x, noun=w.pick("nouns", avoid=[x.noun]))})
    clauses = [answer] + ([w.clause()] if rng.random() < 0.5 else [])
    rng.shuffle(clauses)
    return (q, _join_clauses(rng, clauses)), label


def _wnli(rng: random.Random, w: _Words) -> tuple[tuple[str, ...], int]:
    a = w.pick("nouns")
    b = w.pick("nouns", avoid=[a])
    agent = rng.random() < 0.5
    adj = rng.choice(w.agent_adjs if agent else w.patient_adjs)
    s1 = _sentence(["the", a, w.pick("verbs") + "s", "the", b, "because", "it", "was", adj, "."])
    referent, other = (a, b) if agent else (b, a)
    label = int(rng.random() < 0.5)  # 1 = entailment
    x, adj2 = referent, adj
    if not label:
        kind = rng.random()
        if kind < 0.5:
            x = other
        elif kind < 0.75:
            x = w.pick("nouns", avoid=[a, b])
        else:
            adj2 = rng.choice([j for j in (*w.agent_adjs, *w.patient_adjs) if j != adj])
    return (s1, _sentence(["the", x, "was", adj2, "."])), label


_GENERATORS = {
    "cola": _cola,
    "sst2": _sst2,
    "mrpc": _mrpc,
    "stsb": _stsb,
    "qqp": _qqp,
    "mnli": _mnli,
    "qnli": _qnli,
    "rte": _rte,
    "wnli": _wnli,
}
_MATCHED_TOPICS, _MISMATCHED_TOPICS, _ALL_TOPICS = range(0, 8), range(8, 12), range(12)


def synthetic_split_sizes(task: str | GlueTask, size: int) -> dict[str, int]:
    """Rows per split: ``size`` for train, a quarter (at least 50) for every dev and test split."""
    small = max(50, size // 4)
    return {s: size if s == "train" else small for s in get_task(task).splits}


def synthetic_task(task: str | GlueTask, size: int, seed: int) -> dict[str, dict[str, list]]:
    """{split: columns} of a synthetic task; row i of a split depends only on (task, seed, split, i),
    so the result is deterministic and a larger ``size`` extends the smaller one."""
    t = get_task(task)
    generate = _GENERATORS[t.name]
    out = {}
    for split, n in synthetic_split_sizes(t, size).items():
        topics = _ALL_TOPICS
        if t.name == "mnli":
            topics = (
                _MISMATCHED_TOPICS
                if split in ("validation_mismatched", "test_mismatched")
                else _MATCHED_TOPICS
            )
        columns: dict[str, list] = {f: [] for f in (*t.text_fields, "label", "idx")}
        for i in range(n):
            rng = random.Random(f"convexp-glue:{t.name}:{seed}:{split}:{i}")
            texts, label = generate(rng, _Words(rng, topics))
            for name, text in zip(t.text_fields, texts):
                columns[name].append(text)
            columns["label"].append(label if split in ("train", *t.dev_splits) else -1)
            columns["idx"].append(i)
        out[split] = columns
    return out


# ============================================================================ tokenising


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


def _token_features(t: GlueTask):
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


def _tokenize_split(t: GlueTask, ds, tokenizer, max_len: int, batch_size: int = 2000):
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


def tokenize_task(
    task: str | GlueTask, splits: Mapping, tokenizer, max_len: int, cache_dir: Path | None = None
):
    """{split: Dataset} with input_ids, token_type_ids, attention_mask, label and idx.

    Rows are [CLS] a [SEP] (single sentences) or [CLS] a [SEP] b [SEP] with token types 0/1,
    truncated to ``max_len`` (pairs: longest first) and NOT padded: ``collate`` pads each batch
    to its longest row (or to a fixed length). ``tokenizer`` is a convexp ``Tokenizer``.

    With ``cache_dir``, the result is saved under ``cache_dir/glue-<task>-<hash>/<split>`` (hash
    of the task, the splits' content, the tokenizer's JSON and max_len) and a second call loads
    it from there without tokenising."""
    import datasets

    t = get_task(task)
    if max_len < (4 if t.is_pair else 3):
        raise GlueError(f"max_len {max_len} is too short for {t.name}; use e.g. 128")
    if cache_dir is None:
        return {name: _tokenize_split(t, ds, tokenizer, max_len)[0] for name, ds in splits.items()}
    digests = {name: _split_digest(ds) for name, ds in splits.items()}
    key = config_hash("glue-tokenized", FORMAT_VERSION, t.name, max_len, tokenizer.to_json(), digests)
    entry = Path(cache_dir) / f"glue-{t.name}-{key}"
    if not (entry / "info.json").is_file():
        with atomic_dir(entry) as tmp:
            info = {"task": t.name, "max_len": max_len, "splits": {}}
            for name, ds in splits.items():
                tokenized, truncated = _tokenize_split(t, ds, tokenizer, max_len)
                tokenized.save_to_disk(str(tmp / name))
                info["splits"][name] = {"rows": len(tokenized), "truncated": truncated}
                if truncated:
                    log.info(
                        "%s %s: %d of %d rows truncated to %d tokens",
                        t.name,
                        name,
                        truncated,
                        len(ds),
                        max_len,
                    )
            (tmp / "info.json").write_text(json.dumps(info, indent=1))
    else:
        log.info("tokenised %s loaded from cache %s", t.name, entry)
    return {name: datasets.load_from_disk(str(entry / name)) for name in splits}


def collate(rows: list[dict], pad_id: int = 0, pad_to: int | None = None) -> dict:
    """Pad tokenised rows into tensors: input_ids, token_type_ids, attention_mask (int64 [B, T],
    T = the longest row, or ``pad_to``), labels (int64, or float32 for STS-B) and idx [B]."""
    import torch

    length = pad_to or max(len(r["input_ids"]) for r in rows)
    out = {}
    for key, fill in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0)):
        batch = torch.full((len(rows), length), fill, dtype=torch.long)
        for i, r in enumerate(rows):
            seq = torch.as_tensor(r[key][:length], dtype=torch.long)
            batch[i, : len(seq)] = seq
        out[key] = batch
    labels = [r["label"] for r in rows]
    is_float = any(isinstance(x, float) for x in labels)
    out["labels"] = torch.tensor(labels, dtype=torch.float32 if is_float else torch.long)
    out["idx"] = torch.tensor([r["idx"] for r in rows], dtype=torch.long)
    return out


# ============================================================================ metrics and scores

CONVBERT_COLUMNS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")  # mnli = matched
CHANG_COLUMNS = ("cola", "mnli-m", "mnli-mm", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb")
_DEV_COLUMNS = {"validation_matched": "mnli-m", "validation_mismatched": "mnli-mm"}


def column_of(task: str, split: str) -> str:
    """A split's score column: ``mnli-m`` / ``mnli-mm`` for MNLI's dev splits, else the task."""
    return _DEV_COLUMNS.get(split, task)


def compute_metrics(task: str | GlueTask, predictions, labels) -> dict[str, float]:
    """The task's metrics in percent (x100), computed with torchmetrics' functional API.

    predictions: class ids [N], logits [N, C] (argmax taken) or, for STS-B, scores [N] / [N, 1].
    Keys: cola mcc; sst2/qnli/rte/wnli/mnli accuracy (MNLI: call once per dev split); mrpc/qqp
    f1 (positive class 1) and accuracy; stsb pearson and spearman. A correlation that is
    undefined (constant predictions) counts as 0, as sklearn does for MCC."""
    import numpy as np
    import torch
    from torchmetrics.functional import pearson_corrcoef, spearman_corrcoef
    from torchmetrics.functional.classification import (
        binary_f1_score,
        binary_matthews_corrcoef,
        multiclass_accuracy,
    )

    t = get_task(task)
    preds, target = torch.as_tensor(np.asarray(predictions)), torch.as_tensor(np.asarray(labels))
    if t.is_regression:
        preds, target = preds.double().reshape(-1), target.double().reshape(-1)
    elif preds.ndim == 2:
        preds = preds.argmax(-1)
    if len(preds) != len(target) or len(target) == 0:
        raise ValueError(f"{len(preds)} predictions for {len(target)} labels")
    if t.is_regression:
        with warnings.catch_warnings():  # constant predictions: NaN, reported as 0 below
            warnings.simplefilter("ignore", UserWarning)
            values = {
                "pearson": pearson_corrcoef(preds, target),
                "spearman": spearman_corrcoef(preds, target),
            }
    else:
        preds, target = preds.long(), target.long()
        if (target < 0).any():
            raise GlueError(
                f"{t.name} labels hold -1 (an unlabelled test split); compute metrics on a dev split"
            )
        compute = {
            "accuracy": lambda: multiclass_accuracy(
                preds, target, num_classes=max(t.num_labels, 2), average="micro"
            ),
            # MCC is undefined when either side is constant: 0, as sklearn and the GLUE scorer
            # give (torchmetrics returns a smoothed non-zero value there)
            "mcc": lambda: (
                binary_matthews_corrcoef(preds, target)
                if preds.unique().numel() > 1 and target.unique().numel() > 1
                else torch.tensor(0.0)
            ),
            "f1": lambda: binary_f1_score(preds, target),
        }
        values = {m: compute[m]() for m in t.metrics}
    out = {}
    for k, v in values.items():
        v = float(v)
        out[k] = 0.0 if math.isnan(v) else 100.0 * v
    return out


def collapsed(task: str | GlueTask, predictions) -> bool:
    """Did a fine-tuning run diverge (BERMO Table 3's "Diverges")? It collapsed when every
    prediction is the same class (logits [N, C] or class ids [N]) or, for STS-B, the same score,
    or when any output is not finite."""
    import numpy as np

    t = get_task(task)
    p = np.asarray(predictions, dtype=float)
    if not np.isfinite(p).all():
        return True
    if t.is_regression:
        return bool(np.ptp(p.reshape(-1)) < 1e-6)
    ids = p.argmax(-1) if p.ndim == 2 else p
    return len(np.unique(ids)) == 1


def task_score(task: str | GlueTask, metrics: Mapping[str, float]) -> float:
    """The GLUE-leaderboard score of one task: the mean of its metrics (MRPC and QQP: (F1 + acc)/2,
    STS-B: (Pearson + Spearman)/2, CoLA: MCC, others: accuracy). Used for Chang et al.'s averages."""
    t = get_task(task)
    return sum(metrics[m] for m in t.metrics) / len(t.metrics)


def convbert_score(task: str | GlueTask, metrics: Mapping[str, float]) -> float:
    """The score ConvBERT (and ELECTRA) report: Spearman for STS-B, MCC for CoLA, accuracy otherwise."""
    t = get_task(task)
    return metrics[t.convbert_metric]


def score_columns(results: Mapping[str, Mapping[str, Mapping[str, float]]], style: str = "convbert") -> dict:
    """{column: score} from {task: {dev split: metrics}}, scored as ``style`` does.

    convbert: ``convbert_score``, MNLI's matched split as column "mnli" (mismatched also given as
    "mnli-mm"); chang: ``task_score``, MNLI as "mnli-m" and "mnli-mm". WNLI stays a column (the
    averages ignore it)."""
    _check_style(style)
    score = convbert_score if style == "convbert" else task_score
    out = {}
    for task, by_split in results.items():
        t = get_task(task)
        for split, metrics in by_split.items():
            column = _DEV_COLUMNS.get(split, t.name)
            if style == "convbert" and column == "mnli-m":
                column = "mnli"
            out[column] = score(t, metrics)
    return out


def glue_average(per_task_scores: Mapping[str, float], style: str = "convbert") -> float:
    """The GLUE average of per-column scores (WNLI and other extra keys ignored).

    convbert: the mean of the 8 columns cola, sst2, mrpc, stsb, qqp, mnli (matched; "mnli-m" is
    accepted for it), qnli, rte. chang: the mean of the 9 columns cola, mnli-m, mnli-mm, mrpc,
    qnli, qqp, rte, sst2, stsb. The per-column scores must be those of the style (see
    ``score_columns``)."""
    _check_style(style)
    scores = dict(per_task_scores)
    if style == "convbert" and "mnli" not in scores and "mnli-m" in scores:
        scores["mnli"] = scores["mnli-m"]
    columns = CONVBERT_COLUMNS if style == "convbert" else CHANG_COLUMNS
    missing = [c for c in columns if c not in scores]
    if missing:
        raise GlueError(
            f"no score for {', '.join(missing)}: the {style} GLUE average needs {', '.join(columns)}; "
            "fine-tune those tasks first"
        )
    return sum(float(scores[c]) for c in columns) / len(columns)


def _check_style(style: str) -> None:
    if style not in ("convbert", "chang"):
        raise GlueError(f"unknown GLUE average style {style!r}; use convbert or chang")


# ============================================================================ submission


def write_submission(task: str | GlueTask, split_name: str, idx, predictions, out_dir) -> Path:
    """Write the GLUE server file of a test split (e.g. ``RTE.tsv``, ``MNLI-mm.tsv``, ``AX.tsv``)
    into ``out_dir``: a header ``index\\tprediction``, then one row per example sorted by index.

    predictions: class ids [N], logits [N, C] (argmax taken) or STS-B scores. Written as class
    ids (CoLA, SST-2, MRPC, QQP, WNLI), label names (MNLI, AX, QNLI, RTE) or scores clipped to
    [0, 5] with 3 decimals (STS-B)."""
    import numpy as np

    t = get_task(task)
    name = t.submission_file(split_name)
    idx, preds = np.asarray(idx).reshape(-1), np.asarray(predictions)
    if t.is_regression:
        preds = preds.reshape(-1).astype(float)
    elif preds.ndim == 2:
        preds = preds.argmax(-1)
    if len(idx) != len(preds):
        raise ValueError(f"{len(idx)} indices for {len(preds)} predictions")
    if len(set(idx.tolist())) != len(idx):
        raise ValueError(f"duplicate indices in the {t.name} {split_name} predictions")
    lines = ["index\tprediction"]
    for i in np.argsort(idx, kind="stable"):
        p = preds[i]
        if t.submission_labels == "float":
            value = f"{min(5.0, max(0.0, float(p))):.3f}"
        elif t.submission_labels == "name":
            value = t.label_names[int(p)]
        else:
            value = str(int(p))
        lines.append(f"{int(idx[i])}\t{value}")
    path = Path(out_dir) / name
    atomic_write(path, "\n".join(lines) + "\n")
    return path


def missing_submission_files(out_dir) -> list[str]:
    """The server files (of the 11) not yet in ``out_dir``."""
    return [n for n in SUBMISSION_FILES if not (Path(out_dir) / n).is_file()]


def zip_submission(out_dir, zip_path) -> Path:
    """Zip the server files found in ``out_dir`` (flat, as ``zip -j``) into ``zip_path``.

    The server wants all 11 files; missing ones are logged as a warning."""
    out_dir, zip_path = Path(out_dir), Path(zip_path)
    present = [n for n in SUBMISSION_FILES if (out_dir / n).is_file()]
    if not present:
        raise GlueFileError(
            f"no GLUE submission file in {out_dir}; write predictions with write_submission first"
        )
    missing = missing_submission_files(out_dir)
    if missing:
        log.warning("GLUE submission %s lacks %s", zip_path, ", ".join(missing))
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = zip_path.with_name(f".{zip_path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n in present:
            z.write(out_dir / n, arcname=n)
    tmp.replace(zip_path)
    return zip_path
