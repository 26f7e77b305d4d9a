"""Loading a task's data: {split: datasets.Dataset} from the task's source.

  prepare_task(task_cfg, source_cfg, both_orders)
                                      (Task, {split: Dataset}) of a composed fine-tuning config:
                                      a registered task or ``task=custom`` (``custom.py``), cut
                                      to ``task.max_train_samples`` / ``task.max_eval_samples``,
                                      the training pairs in both orders when asked
  check_task(task_cfg, source_cfg, both_orders)
                                      the task's settings and its files, before anything is read
  in_both_orders(task, ds)            a pair split with every row twice: (a, b), then (b, a)
  task_data(task_cfg)                 the task keys that change a run's data (its run id)
  source_settings(source_cfg, task)   the ``glue:`` config node with defaults, validated
  load_task(task, source_cfg)         every split of a registered task (GLUE or SentEval probing)
  task_features(task), to_dataset     the columns every loaded split has (``registry.py``)

Source config keys (the fine-tuning config's ``glue:`` node; missing keys take
``SOURCE_DEFAULTS``):

  source          synthetic | hub | local | disk
  path            hub: dataset name (null: "nyu-mll/glue"); local: the classic GLUE root folder
                  (``glue_files.py``) or, for a probing task, SentEval's data/probing folder
                  (``senteval.py``); disk: a ``DatasetDict.save_to_disk`` folder, either the
                  task's own or one holding one such folder per task name
  revision        hub: the dataset repository's branch, tag or commit (null: its default branch;
                  ``data/hub.py``); set, part of the run id
  seed            synthetic tasks: the data seed
  synthetic_size  synthetic tasks: training rows per task (dev and test: a quarter, at least 50)
"""

from __future__ import annotations

from pathlib import Path

from . import custom
from ...config.groups import GLUE_SOURCES
from ...data.corpus import with_defaults
from ...data.errors import TaskError, TaskFileError
from ..finetune_runs import sample_limits
from .encoding import check_length
from .glue_files import check_headers, load_disk, load_hub, read_classic
from .senteval import read_senteval, senteval_file
from .synthetic_glue import synthetic_task
from .synthetic_probing import synthetic_probing_task
from .registry import Task, get_task, register

HUB_NAME = "nyu-mll/glue"
SOURCES = GLUE_SOURCES  # glue.source's choices, declared with its schema (config/groups.py)
SOURCE_DEFAULTS: dict = {
    "source": "synthetic",
    "path": None,
    "revision": None,
    "seed": 0,
    "synthetic_size": 2000,
}


def task_data(task_cfg) -> dict:
    """The task keys that change what a run trains or is scored on, without the null ones (so
    that adding such a key to conf/task/ leaves existing run ids as they were): the sample limits
    (typed when composing: convexp/config/schema.py) and a custom task's files (absolute paths) and fields."""
    out = sample_limits(task_cfg)
    if task_cfg.get("name") == custom.NAME:
        custom.custom_task(task_cfg)  # checked before anything runs
        out.update({k: task_cfg.get(k) for k in custom.KEYS if task_cfg.get(k) is not None})
        for key in custom.FILE_KEYS.values():
            if key in out:
                out[key] = str(Path(out[key]).expanduser().resolve())
        out["text_fields"] = list(out["text_fields"])
    return out


def prepare_task(task_cfg, source_cfg, both_orders: bool = False) -> tuple[Task, dict]:
    """(Task, {split: datasets.Dataset}) of a composed fine-tuning config's ``task`` and ``glue``
    nodes. ``task=custom`` reads the user's files (and registers the task, with its label
    names, for ``get_task``); ``task.max_train_samples`` keeps the first N training rows and
    ``task.max_eval_samples`` the first N rows of each dev split (test splits are kept whole:
    a submission needs every row). ``both_orders`` (the recipe's, ELECTRA's ``double_unordered``)
    then doubles the training split with every pair swapped; dev and test stay as they are."""
    limits = task_data(task_cfg)
    if task_cfg.name == custom.NAME:
        t, rows = custom.load_custom(task_cfg)
        register(t, replace=True)
        splits = {split: to_dataset(t, r) for split, r in rows.items()}
    else:
        t = get_task(task_cfg.name)
        splits = load_task(t, source_cfg)
    empty = [split for split in ("train", *t.dev_splits) if split in splits and len(splits[split]) == 0]
    if empty:  # e.g. a TSV with a header and no rows
        where = (source_cfg.get("path") or source_cfg.get("source")) if source_cfg is not None else "its source"
        raise TaskFileError(
            f"{t.name}: the {', '.join(empty)} split of {where} has no rows (a header only?); "
            "give files with examples"
        )
    for split, ds in splits.items():
        n = limits.get("max_train_samples" if split == "train" else "max_eval_samples")
        if n is not None and split in ("train", *t.dev_splits) and n < len(ds):
            splits[split] = ds.select(range(n))
    if both_orders:
        splits["train"] = in_both_orders(t, splits["train"])
    return t, splits


def check_both_orders(t: Task, both_orders: bool) -> None:
    """``both_orders=true`` needs sentence pairs."""
    if both_orders and not t.is_pair:
        raise TaskError(
            f"both_orders=true: {t.name} has single sentences, nothing to swap; give both_orders=false"
        )


def in_both_orders(t: Task, ds):
    """The rows of a sentence-pair split, then the same rows with the two sentences swapped
    (ELECTRA's ``double_unordered``: classification_tasks.py, MRPC and STS ``_create_examples``).
    The swapped rows keep their label and ``idx``."""
    import datasets

    check_both_orders(t, True)
    a, b = t.text_fields
    swapped = ds.rename_columns({a: b, b: a}).select_columns(list(ds.column_names))
    return datasets.concatenate_datasets([ds, swapped])


def source_settings(source_cfg, task: Task | None = None) -> dict:
    """The source config with defaults, validated (unknown key or source -> TaskError)."""
    s = with_defaults(source_cfg, SOURCE_DEFAULTS, "GLUE source", TaskError)
    if s["source"] not in SOURCES:
        raise TaskError(f"unknown GLUE source {s['source']!r}; use one of: {', '.join(SOURCES)}")
    if task is not None and task.benchmark == "probing" and s["source"] == "hub":
        raise TaskError(
            f"SentEval probing task {task.name} has no hub source; use source=local with SentEval's "
            "data/probing folder as path, or source=synthetic"
        )
    if s["source"] in ("local", "disk") and not s["path"]:
        local = "classic GLUE root folder (CoLA/, SST-2/, ...)"
        if task is not None and task.benchmark == "probing":
            local = "SentEval probing folder (SentEval's data/probing: sentence_length.txt, ...)"
        raise TaskFileError(
            f"GLUE source {s['source']!r} needs a path; set path to the "
            + (local if s["source"] == "local" else "save_to_disk folder")
        )
    return s


def check_task(task_cfg, source_cfg, both_orders: bool = False) -> None:
    """A task's settings and its data on disk, checked before anything is read, hashed or cached:
    ``task.max_len`` holds its [CLS]/[SEP] tokens, ``both_orders`` has pairs to swap, the source's
    settings, and its folder and files (classic GLUE, SentEval, a saved dataset, a custom task's
    files) are there. One-line TaskError otherwise; no datasets import."""
    if task_cfg.get("name") == custom.NAME:
        t = custom.check_files(task_cfg)
    else:
        t = get_task(task_cfg.name)
        _check_source(t, source_cfg)
    check_length(t, task_cfg.max_len)
    check_both_orders(t, both_orders)


def _check_source(t: Task, source_cfg) -> None:
    s = source_settings(source_cfg, t)
    root = Path(str(s["path"])).expanduser() if s["path"] else None
    if s["source"] == "local" and t.benchmark == "probing":
        senteval_file(t, root)
    elif s["source"] == "local":
        check_headers(t, root)
    elif s["source"] == "disk":
        folder = root / t.name if (root / t.name).is_dir() else root
        if not folder.is_dir():
            raise TaskFileError(f"no such folder: {folder}; set path to a DatasetDict.save_to_disk folder")


def load_task(task: str | Task, source_cfg=None) -> dict:
    """{split: datasets.Dataset} for every split of a GLUE or SentEval probing task.

    Raises TaskError subclasses (one line) for an unknown task or source, a missing file, a
    file with the wrong columns and an unknown label. A classic GLUE folder without test files
    gives no test splits."""
    t = get_task(task)
    s = source_settings(source_cfg, t)
    if s["source"] == "synthetic":
        make = synthetic_probing_task if t.benchmark == "probing" else synthetic_task
        rows = make(t, int(s["synthetic_size"]), int(s["seed"]))
    elif s["source"] == "local" and t.benchmark == "probing":
        rows = read_senteval(t, senteval_file(t, Path(s["path"]).expanduser()))
    elif s["source"] == "local":
        rows = read_classic(t, Path(s["path"]).expanduser())
    elif s["source"] == "hub":
        return load_hub(t, s["path"] or HUB_NAME, s["revision"])
    else:
        return load_disk(t, Path(s["path"]).expanduser())
    return {split: to_dataset(t, r) for split, r in rows.items()}


def task_features(task: str | Task):
    """The ``datasets.Features`` of a loaded split."""
    from datasets import Features, Value

    t = get_task(task)
    f = {name: Value("string") for name in t.text_fields}
    f["label"] = Value("float32" if t.is_regression else "int64")
    f["idx"] = Value("int32")
    return Features(f)


def to_dataset(t: Task, rows: dict[str, list]):
    """A split's columns as a ``datasets.Dataset`` with the task's features."""
    import datasets

    return datasets.Dataset.from_dict(rows, features=task_features(t))
