"""Synthetic SentEval probing tasks: probing-shaped data from the synthetic language (no download).

Sentences of the synthetic language (``grammar.py``, as the synthetic GLUE tasks),
balanced over the classes, each label a property of the sentence a small model can learn:
  sentlen   SentEval's bins of the number of tokens (full stop included)
  wc        1000 of the language's words are targets; the sentence holds exactly one of them,
            once, all its other content words come from the ~220 others
  treedepth 5 + the nesting depth (0-7) of bracketed asides "( xs [ y ( ... ) ] )"; flat
            prepositional phrases pad the sentence so that length says little about depth
  topconst  the sentence is built from its class's top-level constituents (NP, VP, PP, SBAR,
            WHADVP SQ, ...); OTHER: sequences outside the 19
  bshift    I: two neighbouring words (not the first, not punctuation) swapped
  tense     the main (first) verb is past (stem + "ed") or present; a second clause has a
            random tense; each verb occurs in one split only
  subjnum   the number of the first clause's subject (agreement marks it); nouns split by split
  objnum    the number of the first clause's object; nouns split by split
  somo      all content words come from one topic; C: one noun or verb replaced by a word of
            another topic (replacements split by split)
  coordinv  "a N" is introduced in one clause and referred to as "the N" in the other; I: the
            two coordinated clauses in the wrong order (the reference first)

Row i of a split depends only on (task, seed, split, i); test rows are labelled, as SentEval's.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace
from functools import lru_cache

from ...data.grammar import (
    BRACKETS,
    NP,
    NUM_TOPICS,
    PREPOSITIONS,
    TASK_CONJUNCTIONS,
    TASK_PLURAL_DETS,
    TASK_SINGULAR_DETS,
    WH_WORDS,
    Clause,
    Words,
    lexicon,
    sentence,
)
from .synthetic_glue import synthetic_split_sizes
from .registry import TOP_CONSTITUENTS, WC_CLASSES, Task, get_task

_LENGTH_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))
_SPLIT_BUCKETS = {"train": range(8), "validation": (8,), "test": (9,)}  # of crc32(word) % 10


def _in_split(word: str, split: str) -> bool:
    return zlib.crc32(word.encode()) % 10 in _SPLIT_BUCKETS[split]


@lru_cache(maxsize=None)
def _words_of(part: str, split: str | None = None) -> tuple[str, ...]:
    """Every stem of a part of speech in the language (those of one split's bucket)."""
    lex = lexicon()
    words = [x for v in (*lex.topics, lex.general) for x in getattr(v, part)]
    return tuple(x for x in words if split is None or _in_split(x, split))


@lru_cache(maxsize=1)
def _wc_words() -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """({target: part of speech} for the 1000 targets, {part: the other stems})."""
    parts = ("nouns", "verbs", "adjectives")
    stems = [(x, part) for part in parts for x in _words_of(part)]
    targets = dict(random.Random("convexp-probing:wc").sample(stems, WC_CLASSES))
    return targets, {part: tuple(x for x, p in stems if p == part and x not in targets) for part in parts}


def wc_label_names() -> tuple[str, ...]:
    """The synthetic WC task's 1000 target words, sorted (class i = word i)."""
    return tuple(sorted(_wc_words()[0]))


def _np(rng: random.Random, noun: str, plural: bool, adj: str | None = None) -> NP:
    return NP(rng.choice(TASK_PLURAL_DETS if plural else TASK_SINGULAR_DETS), adj, noun, plural)


def _sentlen(rng, w, split):
    label = rng.randrange(len(_LENGTH_BINS))
    lo, hi = _LENGTH_BINS[label]
    while True:
        words = w.clause().words()
        while len(words) + 1 < lo:
            if rng.random() < 0.5:
                words += [rng.choice(PREPOSITIONS), *w.np().words()]
            else:
                words += [rng.choice(TASK_CONJUNCTIONS), *w.clause().words()]
        if len(words) + 1 <= hi:
            return [*words, "."], str(label)


def _wc(rng, w, split):
    targets, fillers = _wc_words()
    label = rng.choice(wc_label_names())
    part = targets[label]
    noun_slot = rng.choice(("subj", "obj")) if part == "nouns" else None
    adj_slot = rng.choice(("subj", "obj")) if part == "adjectives" else None

    def np(slot):
        plural = slot != noun_slot and rng.random() < 0.5
        noun = label if slot == noun_slot else rng.choice(fillers["nouns"])
        adj = rng.choice(fillers["adjectives"]) if rng.random() < 0.3 else None
        return _np(rng, noun, plural, label if slot == adj_slot else adj)

    subj, obj = np("subj"), np("obj")
    verb = label if part == "verbs" else rng.choice(fillers["verbs"])
    # a target verb in its base form: after a plural subject, or negated ("does not <verb>")
    words = Clause(subj, verb, obj, negated=part == "verbs" and not subj.plural).words()
    if rng.random() < 0.3:
        other = Clause(np("other"), rng.choice(fillers["verbs"]), np("other")).words()
        first, second = (words, other) if rng.random() < 0.5 else (other, words)
        words = [*first, rng.choice(TASK_CONJUNCTIONS), *second]
    return [*words, "."], label


def _treedepth(rng, w, split):
    depth = rng.randrange(5, 13)
    nested = []
    for level in reversed(range(depth - 5)):  # "( nouns [ nouns ( ... ) ] )"
        open_, close = BRACKETS[level % 2]
        nested = [open_, w.pick("nouns") + rng.choice(("", "s")), *nested, close]
    # flat phrases (3 words each, as a nesting level): length says little about depth
    pads = [
        [rng.choice(PREPOSITIONS), *w.np(adj_p=0).words()]
        for _ in range(max(0, 12 - depth - rng.randint(0, 3)))
    ]
    chunks = [nested, *pads] if nested else pads
    rng.shuffle(chunks)
    return [*w.clause().words(), *(x for c in chunks for x in c), "."], str(depth)


_ADVERBS = ("often", "still", "once", "soon")
_RB = ("then", "now")
_IN = ("so", "yet")
_SUBORDINATORS = ("while", "because")
_OTHER = ("NP_.", "PP_NP_.", "ADVP_VP_.", "NP_CC_NP_.", "SBAR_.")


def _constituents(rng, w, sequence: str) -> list[str]:
    """Words whose top-level constituents are ``sequence`` (e.g. "PP_NP_VP_.")."""
    words, base, aux = [], True, False  # base: a VP's verb takes its base form (no or plural subject)
    for sym in sequence.split("_")[:-1]:
        if sym == "NP":
            np = w.np()
            words, base = words + np.words(), aux or np.plural
        elif sym == "VP":
            words += [w.pick("verbs") + ("" if base else "s"), *w.np().words()]
        elif sym in ("S", "SBAR"):
            words += ([rng.choice(_SUBORDINATORS)] if sym == "SBAR" else []) + w.clause().words()
        elif sym == "SQ":  # "does the x <verb> the y"
            c = w.clause()
            words += ["do" if c.subj.plural else "does", *c.subj.words(), c.verb, *c.obj.words()]
        elif sym == "PP":
            words += [rng.choice(PREPOSITIONS), *w.np().words()]
        elif sym == "VBD":  # "did the x <verb> ..."
            words, aux = words + ["did"], True
        elif sym == "WHNP":
            words += rng.choice((["what"], ["which", w.pick("nouns") + "s"]))
        else:
            words.append(
                rng.choice(
                    {"ADVP": _ADVERBS, "RB": _RB, "IN": _IN, "CC": TASK_CONJUNCTIONS, "WHADVP": WH_WORDS}[sym]
                )
            )
    return [*words, "."]


def _topconst(rng, w, split):
    label = rng.choice(TOP_CONSTITUENTS)
    return _constituents(rng, w, rng.choice(_OTHER) if label == "OTHER" else label), label


def _bshift(rng, w, split):
    label = rng.choice("IO")
    words = w.clause(negated=rng.random() < 0.2).words()
    if rng.random() < 0.4:
        words += [rng.choice(TASK_CONJUNCTIONS), *w.clause().words()]
    if label == "I":
        i = rng.choice([i for i in range(1, len(words) - 1) if words[i] != words[i + 1]])
        words[i], words[i + 1] = words[i + 1], words[i]
    return [*words, "."], label


def _tense(rng, w, split):
    label = rng.choice(("PAST", "PRES"))

    def clause(past: bool) -> list[str]:
        c = replace(w.clause(), verb=rng.choice(_words_of("verbs", split)))
        return [*c.subj.words(), c.verb + "ed", *c.obj.words()] if past else c.words()

    words = clause(label == "PAST")
    if rng.random() < 0.5:  # a second clause of either tense
        words += [rng.choice(TASK_CONJUNCTIONS), *clause(rng.random() < 0.5)]
    return [*words, "."], label


def _number(slot: str):
    def generate(rng, w, split):
        label = rng.choice(("NN", "NNS"))
        target = _np(rng, rng.choice(_words_of("nouns", split)), label == "NNS")
        c = replace(w.clause(negated=rng.random() < 0.2), **{slot: target})
        words = c.words()
        if rng.random() < 0.4:
            words += [rng.choice(TASK_CONJUNCTIONS), *w.clause().words()]
        return [*words, "."], label

    return generate


def _somo(rng, w, split):
    lex = lexicon()
    label = rng.choice(("C", "O"))
    topic = rng.randrange(NUM_TOPICS)
    vocab = lex.topics[topic]

    def np():
        return _np(
            rng,
            rng.choice(vocab.nouns),
            rng.random() < 0.5,
            rng.choice(vocab.adjectives) if rng.random() < 0.3 else None,
        )

    clauses = [Clause(np(), rng.choice(vocab.verbs), np()) for _ in range(2)]
    if label == "C":
        i, part = rng.randrange(2), rng.choice(("subj", "verb", "obj"))
        others = [
            x
            for t, v in enumerate(lex.topics)
            if t != topic
            for x in (v.verbs if part == "verb" else v.nouns)
        ]
        new = rng.choice([x for x in others if _in_split(x, split)])
        c = clauses[i]
        clauses[i] = (
            replace(c, verb=new)
            if part == "verb"
            else replace(c, **{part: replace(getattr(c, part), noun=new)})
        )
    return [*clauses[0].words(), rng.choice(TASK_CONJUNCTIONS), *clauses[1].words(), "."], label


def _coordinv(rng, w, split):
    label = rng.choice("IO")
    noun = w.pick("nouns")

    def clause(np: NP) -> Clause:  # np as the subject or as the object
        return w.clause(subj=np) if rng.random() < 0.5 else replace(w.clause(), obj=np)

    first = clause(NP(rng.choice(("a", "one")), None, noun, False))
    second = clause(NP("the", None, noun, False))
    a, b = (second, first) if label == "I" else (first, second)
    return [*a.words(), ",", rng.choice(("and", "but")), *b.words(), "."], label


_GENERATORS = {
    "sentlen": _sentlen,
    "wc": _wc,
    "treedepth": _treedepth,
    "topconst": _topconst,
    "bshift": _bshift,
    "tense": _tense,
    "subjnum": _number("subj"),
    "objnum": _number("obj"),
    "somo": _somo,
    "coordinv": _coordinv,
}


def synthetic_probing_task(task: str | Task, size: int, seed: int) -> dict[str, dict[str, list]]:
    """{split: columns} of a synthetic probing task: ``size`` training rows, a quarter (at least
    50) per dev and test split, test rows labelled as SentEval's. Row i of a split depends only on
    (task, seed, split, i): deterministic, and a larger ``size`` extends a smaller one."""
    t = get_task(task)
    index = {name: i for i, name in enumerate(t.label_names or wc_label_names())}
    out = {}
    for split, n in synthetic_split_sizes(t, size).items():
        columns: dict[str, list] = {"sentence": [], "label": [], "idx": []}
        for i in range(n):
            rng = random.Random(f"convexp-probing:{t.name}:{seed}:{split}:{i}")
            words, label = _GENERATORS[t.name](rng, Words(rng, range(NUM_TOPICS)), split)
            columns["sentence"].append(sentence(words))
            columns["label"].append(index[label])
            columns["idx"].append(i)
        out[split] = columns
    return out
