"""The task registry: every fine-tuning task convexp knows, what its rows hold, how it is scored.

A ``Task`` says which text fields a row has, its labels, splits, metrics and (GLUE) submission
files; everything downstream (loading, tokenising, scores, fine-tuning, run store, sweeps) reads
it. ``family`` groups the tasks:

  glue      the nine GLUE tasks (``GLUE_TASKS``; labels in the ``nyu-mll/glue`` integer order)
  probing   SentEval's ten probing tasks as BERMO fine-tunes them (``PROBING_TASKS``, its Table 1):
            single sentences, accuracy, labels scored on the test rows too, no server submission,
            never in a GLUE average
  custom    a user's own sentence(-pair) task from CSV / JSON-lines files (``custom.py``)

``register(task)`` adds a family (e.g. SQuAD's) to the registry that ``get_task`` reads.

Splits. Every task has ``train``, its dev splits (``validation``; MNLI: ``validation_matched``
and ``validation_mismatched``) and its test splits (``test``; MNLI: ``test_matched``,
``test_mismatched`` and the optional diagnostic ``test_ax``, predicted with the MNLI model).
Every loaded split has the same columns: the task's text fields (GLUE: named as in
``nyu-mll/glue``), ``label`` (int64 class id, float32 for regression, -1 for unlabelled test
rows) and ``idx`` (int32: the row number, or the ``index``/``id`` column of a classic GLUE test
file, which is what the GLUE server expects in submissions).

SentEval probing task names (BERMO's column, SentEval file in data/probing/, labels):

  sentlen   Sentlen     sentence_length.txt          6 length bins "0".."5"
  wc        WC          word_content.txt             1000 target words (read from the file)
  treedepth TreeDepth   tree_depth.txt               depth "5".."12"
  topconst  TopConst    top_constituents.txt         19 top-constituent sequences + OTHER
  bshift    Bshift      bigram_shift.txt             I (two neighbouring words inverted) / O
  tense     Tense       past_present.txt             PAST / PRES (main verb)
  subjnum   SubjNum     subj_number.txt              NN / NNS (main-clause subject)
  objnum    ObjNum      obj_number.txt               NN / NNS (main-clause direct object)
  somo      Somo        odd_man_out.txt              C (a noun or verb replaced) / O
  coordinv  CoordInv    coordination_inversion.txt   I (coordinated clauses inverted) / O

As in SentEval, probing class i is the i-th label in sorted (string) order; the label set is
SentEval's, fixed per task, except WC's, which is the sorted set of the training rows' labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...data.errors import TaskError, TaskLabelError, UnknownTaskError
from ...data.text_files import quoted
from .. import PROBING

# ============================================================================ the Task


@dataclass(frozen=True)
class Task:
    """One task: what its rows hold and how it is scored and submitted.

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
    benchmark        the task's family: "glue", "probing" (SentEval), "custom" (a user's files)
                     or a family added with ``register`` (e.g. "squad")
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
        raise TaskError(
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
                raise TaskLabelError(f"{where}: score {quoted(raw)} is not a number; fix the file") from None
        if raw in self.label_names:
            return self.label_names.index(raw)
        if self.int_file_labels and raw.isdigit() and int(raw) < self.num_labels:
            return int(raw)
        known = list(self.label_names) + (
            [str(i) for i in range(self.num_labels)] if self.int_file_labels else []
        )
        raise TaskLabelError(
            f"{where}: unknown {self.name} label {quoted(raw)} (known: {', '.join(known)}); fix the file"
        )


# ============================================================================ GLUE

PAIR = ("sentence1", "sentence2")  # the text fields of most GLUE pair tasks
_ENT2 = ("entailment", "not_entailment")


def _glue_task(name, folder, fields, labels, metrics, *, score, submit, int_file_labels, **kw) -> Task:
    dev, test = kw.pop("dev_splits", ("validation",)), kw.pop("test_splits", ("test",))
    return Task(
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

GLUE_TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        _glue_task(
            "cola", "CoLA", ("sentence",), ("unacceptable", "acceptable"), ("mcc",), score="mcc", **_BINARY
        ),
        _glue_task(
            "sst2",
            "SST-2",
            ("sentence",),
            ("negative", "positive"),
            ("accuracy",),
            score="accuracy",
            **_BINARY,
        ),
        _glue_task(
            "mrpc",
            "MRPC",
            PAIR,
            ("not_equivalent", "equivalent"),
            ("f1", "accuracy"),
            score="accuracy",
            **_BINARY,
        ),
        _glue_task(
            "stsb",
            "STS-B",
            PAIR,
            (),
            ("pearson", "spearman"),
            score="spearman",
            submit="float",
            int_file_labels=False,
        ),
        _glue_task(
            "qqp",
            "QQP",
            ("question1", "question2"),
            ("not_duplicate", "duplicate"),
            ("f1", "accuracy"),
            score="accuracy",
            **_BINARY,
        ),
        _glue_task(
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
        _glue_task("qnli", "QNLI", ("question", "sentence"), _ENT2, ("accuracy",), **_NLI),
        _glue_task("rte", "RTE", PAIR, _ENT2, ("accuracy",), **_NLI),
        # WNLI: hub order not_entailment=0, entailment=1; its files and the GLUE server use 0/1.
        _glue_task(
            "wnli",
            "WNLI",
            PAIR,
            ("not_entailment", "entailment"),
            ("accuracy",),
            score="accuracy",
            in_average=False,
            **_BINARY,
        ),
    )
}
# the GLUE server's 11 files
SUBMISSION_FILES = tuple(name for t in GLUE_TASKS.values() for _, name in t.submission)


# ============================================================================ SentEval probing

TOP_CONSTITUENTS = (
    "ADVP_NP_VP_.",
    "CC_ADVP_NP_VP_.",
    "CC_NP_VP_.",
    "IN_NP_VP_.",
    "NP_ADVP_VP_.",
    "NP_NP_VP_.",
    "NP_PP_.",
    "NP_VP_.",
    "OTHER",
    "PP_NP_VP_.",
    "RB_NP_VP_.",
    "SBAR_NP_VP_.",
    "SBAR_VP_.",
    "S_CC_S_.",
    "S_NP_VP_.",
    "S_VP_.",
    "VBD_NP_VP_.",
    "VP_.",
    "WHADVP_SQ_.",
    "WHNP_SQ_.",
)
WC_CLASSES = 1000

# name, SentEval file stem, BERMO's column, labels (sorted as SentEval sorts them; () = read)
_TABLE = (
    ("sentlen", "sentence_length", "Sentlen", tuple("012345")),
    ("wc", "word_content", "WC", ()),
    ("treedepth", "tree_depth", "TreeDepth", tuple(sorted(str(d) for d in range(5, 13)))),
    ("topconst", "top_constituents", "TopConst", TOP_CONSTITUENTS),
    ("bshift", "bigram_shift", "Bshift", ("I", "O")),
    ("tense", "past_present", "Tense", ("PAST", "PRES")),
    ("subjnum", "subj_number", "SubjNum", ("NN", "NNS")),
    ("objnum", "obj_number", "ObjNum", ("NN", "NNS")),
    ("somo", "odd_man_out", "Somo", ("C", "O")),
    ("coordinv", "coordination_inversion", "CoordInv", ("I", "O")),
)
PROBING_ORDER = PROBING  # BERMO Table 1's column order (convexp/tasks/__init__.py)
assert tuple(row[0] for row in _TABLE) == PROBING
PROBING_COLUMNS = {name: column for name, _, column, _ in _TABLE}  # BERMO Table 1's column names
GROUPS = {  # BERMO Table 1's groups
    "surface": ("sentlen", "wc"),
    "syntactic": ("treedepth", "topconst", "bshift"),
    "semantic": ("tense", "subjnum", "objnum", "somo", "coordinv"),
}

PROBING_TASKS: dict[str, Task] = {
    name: Task(
        name=name,
        folder=file,
        text_fields=("sentence",),
        num_labels=len(labels) or WC_CLASSES,
        label_names=labels,
        dev_splits=("validation",),
        test_splits=("test",),
        metrics=("accuracy",),
        convbert_metric="accuracy",
        submission=(),
        submission_labels="int",
        int_file_labels=False,
        in_average=False,
        benchmark="probing",
    )
    for name, file, _, labels in _TABLE
}


# ============================================================================ the registry

_REGISTRY: dict[str, Task] = {**GLUE_TASKS, **PROBING_TASKS}


def register(task: Task, replace: bool = False) -> Task:
    """Add ``task`` to the registry that ``get_task`` reads (a new family such as SQuAD, or a
    custom task built from its config). A different task under a known name is refused unless
    ``replace`` (a custom task's config changed)."""
    known = _REGISTRY.get(task.name)
    if known is not None and known != task and not replace:
        raise TaskError(f"a different task named {task.name!r} is already registered; choose another name")
    _REGISTRY[task.name] = task
    return task


def get_task(task: str | Task) -> Task:
    """The registry entry of a task name (case-insensitive; "sst-2"/"sts-b" accepted): a GLUE
    task, a SentEval probing task, or one added with ``register``."""
    if isinstance(task, Task):
        return task
    key = str(task).lower().replace("-", "")
    if key not in _REGISTRY:
        others = [n for n in _REGISTRY if n not in GLUE_TASKS and n not in PROBING_TASKS]
        raise UnknownTaskError(
            f"unknown task {task!r}; use a GLUE task ({', '.join(GLUE_TASKS)}), a SentEval probing "
            f"task ({', '.join(PROBING_TASKS)})" + (f" or {', '.join(others)}" if others else "")
        )
    return _REGISTRY[key]


def run_labels(run) -> list[str] | None:
    """The label names of a fine-tuning run's task, by class id (its ``config.yaml``'s task: a GLUE
    or SentEval task, or a custom task's ``task.labels``), or None: a pre-training run, a model
    directory, a regression, or a task whose names are not known here."""
    from pathlib import Path

    from omegaconf import OmegaConf

    config = Path(run).expanduser() / "config.yaml"
    if not config.is_file():
        return None
    task = OmegaConf.load(config).get("task")  # a fine-tuning run's: its name, or its node
    if task is None or isinstance(task, (int, float, bool)):
        return None
    if not isinstance(task, str) and task.get("labels"):
        return [str(x) for x in task.labels]
    try:
        names = get_task(str(task if isinstance(task, str) else task.get("name"))).label_names
    except TaskError:
        return None
    return list(names) or None
