"""The tasks, one folder each: its data, its Lightning stage, its evaluation.

  pretraining/      MLM or ELECTRA pre-training (``convexp pretrain``)
  classification/   GLUE, SentEval probing and custom sentence(-pair) tasks (``convexp finetune glue|probing``)
  squad/            extractive question answering, SQuAD v1.1 / v2.0 (``convexp finetune squad``)

What every stage shares is in ``convexp/train/``, the data every task shares in ``convexp/data/``.

This module is the one table of which fine-tuning task is of which kind: every other module asks
it (:func:`kind`, :func:`is_squad`) instead of testing names. It imports nothing, so a config
check can ask it before torch is imported. Adding a GLUE-like task: its entry in
``classification/registry.py`` (files, labels, metrics) and its ``conf/task/<name>.yaml``.
"""

from __future__ import annotations

# GLUE's eight tasks that the papers report, in ConvBERT's column order (WNLI, the ninth, is in
# classification/registry.py for its files and submissions, and no table reports it)
GLUE = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
# SentEval's ten probing tasks, in BERMO Table 1's column order
PROBING = ("sentlen", "wc", "treedepth", "topconst", "bshift", "tense", "subjnum", "objnum", "somo", "coordinv")
# SQuAD: task name (conf/task/<name>.yaml) -> dataset version
SQUAD = {"squad1": "v1.1", "squad2": "v2.0"}


def is_squad(task: str) -> bool:
    """Whether ``task`` is extractive question answering (``convexp finetune squad``)."""
    return task in SQUAD


def kind(task: str) -> str:
    """``squad``, ``probing`` or ``glue`` (every other fine-tuning task: GLUE's, custom ones):
    which ``convexp finetune`` command runs it."""
    if task in SQUAD:
        return "squad"
    return "probing" if task in PROBING else "glue"
