"""Splitting documents into the units pre-training examples are made of (see ``packing.py``):
sentences for Chang et al.'s sentence pairs (``split_sentences``), lines for ELECTRA's examples
(``split_lines``).

Chang et al. pre-train on a text file with one sentence per line (mlpc-ucsd/BERT_Convolutions
``LineByLineTextDataset``); our corpora hold documents, so each document is split into
sentences here:

- a line break always ends a sentence (a corpus already split one sentence per line, as
  theirs, is taken as it is);
- within a line, a sentence ends at ``.``, ``!`` or ``?`` (possibly followed by closing quotes or
  brackets) followed by white space, except after a single letter ("J. Smith") or a common
  abbreviation (``ABBREVIATIONS``: "Mr.", "e.g.", "St.", ...). WikiText's detached punctuation
  ("the war . The army") splits the same way.

Known limitation: a rule, not a trained segmenter: an abbreviation not in the list ends a
sentence early, and a sentence that ends without punctuation runs on into the next one.
"""

from __future__ import annotations

import re

ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al no vol fig approx jan feb mar apr jun jul "
    "aug sep sept oct nov dec inc ltd co corp gen col capt lt sgt rev gov sen rep u.s u.k".split()
)
_END = re.compile(r"""[.!?]+['"”’)\]]*(?=\s)""")  # sentence-final punctuation before a space


def split_sentences(text: str) -> list[str]:
    """The non-blank sentences of ``text``, in order, stripped (see the module docstring)."""
    out: list[str] = []
    for line in text.splitlines():
        start = 0
        for m in _END.finditer(line):
            if line[m.start()] == "." and _abbreviation(line[start : m.start()]):
                continue
            out.append(line[start : m.end()])
            start = m.end()
        out.append(line[start:])
    return [s.strip() for s in out if s.strip()]


def split_lines(text: str) -> list[str]:
    """The non-blank lines of ``text``, stripped: the units ELECTRA's ``build_pretraining_dataset.py``
    reads (``line.strip()``; blank lines skipped within a document, as its OpenWebText build does)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _abbreviation(before: str) -> bool:
    """Does the word before a full stop make it an abbreviation rather than a sentence end?"""
    words = before.split()
    if not words:
        return False
    word = words[-1].lstrip("(\"'“‘[").lower()
    return (len(word) == 1 and word.isalpha()) or word in ABBREVIATIONS
