"""SentEval's ten probing tasks (Conneau et al. 2018) as BERMO fine-tunes them (its Table 1).

BERMO fine-tunes the whole model on each probing task like a single-sentence GLUE task, so the
tasks are ``GlueTask`` entries (``benchmark="probing"``, metric accuracy, no server submission,
never in a GLUE average) that ``glue.get_task`` knows; ``glue.load_glue_task`` hands their
loading to this module. Everything downstream (tokenising, metrics, fine-tuning, run store,
sweeps) is GLUE's.

Sections:

  registry   ``PROBING_TASKS``: short names = BERMO's columns -> SentEval file stems and labels
  files      ``read_senteval``: one SentEval file -> {split: columns}
  loading    ``load_probing_task(task, source settings)``: source local | synthetic
  synthetic  ``synthetic_probing_task``: probing-shaped tasks from the synthetic language

Task names (BERMO's column: SentEval file in data/probing/):

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

File format (SentEval's): one line per example, tab-separated, ``split<TAB>label<TAB>sentence``
(the split is tr, va or te; the sentence is the last field, fields in between are ignored).
Splits map to train / validation / test (100k / 10k / 10k; the test rows have labels too). As
in SentEval, class i is the i-th label in sorted (string) order; the label set is SentEval's,
fixed per task, except WC's, which is the sorted set of the training rows' labels (at most 1000).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from . import glue
from .glue import _CONJ, _NP, _PLUR_DETS, _SING_DETS, _WH, GlueError, GlueFileError, GlueLabelError, GlueTask
from .glue import _Clause, _sentence, _Words
from .synthetic import NUM_TOPICS, _lexicon

# ============================================================================ registry

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
SPLITS = {"tr": "train", "va": "validation", "te": "test"}

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
PROBING_ORDER = tuple(row[0] for row in _TABLE)  # BERMO Table 1's column order
COLUMNS = {name: column for name, _, column, _ in _TABLE}
GROUPS = {  # BERMO Table 1's groups
    "surface": ("sentlen", "wc"),
    "syntactic": ("treedepth", "topconst", "bshift"),
    "semantic": ("tense", "subjnum", "objnum", "somo", "coordinv"),
}

PROBING_TASKS: dict[str, GlueTask] = {
    name: GlueTask(
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


# ============================================================================ files


def senteval_file(t: GlueTask, root: Path) -> Path:
    """The task's file in a SentEval ``data/probing`` folder (one-line error when missing)."""
    if not root.is_dir():
        raise GlueFileError(
            f"no such SentEval probing folder: {root}; set path to SentEval's data/probing folder "
            f"(holding {t.folder}.txt etc.)"
        )
    path = root / f"{t.folder}.txt"
    if not path.is_file():
        raise GlueFileError(
            f"missing SentEval probing file {path}; put SentEval's {t.folder}.txt (data/probing) "
            f"under {root}, or use source=synthetic"
        )
    return path


def read_senteval(t: GlueTask, path: Path) -> dict[str, dict[str, list]]:
    """{split: {"sentence", "label", "idx"}} of one SentEval probing file (module docstring).

    Raises GlueFileError / GlueLabelError naming the file and line for a malformed line, a
    split without rows or a label the task does not know."""
    rows: dict[str, list] = {split: [] for split in SPLITS.values()}  # (line number, label, sentence)
    for n, line in enumerate(path.read_bytes().decode("utf-8", errors="replace").split("\n"), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        where = f"{path}:{n}"
        if len(fields) < 3:
            raise GlueFileError(
                f"{where}: {len(fields)} tab-separated field(s), expected split<TAB>label<TAB>sentence; "
                "fix the line"
            )
        split = SPLITS.get(fields[0].strip())
        if split is None:
            raise GlueFileError(f"{where}: split {fields[0]!r} is not tr, va or te; fix the line")
        label, sentence = fields[1].strip(), fields[-1].strip()
        if not label or not sentence:
            raise GlueFileError(f"{where}: empty label or sentence; fix the line")
        rows[split].append((n, label, sentence))
    empty = [tok for tok, split in SPLITS.items() if not rows[split]]
    if empty:
        raise GlueFileError(
            f"{path} has no {'/'.join(empty)} rows; a SentEval probing file holds tr, va and te rows"
        )
    names = t.label_names or tuple(sorted({label for _, label, _ in rows["train"]}))
    if len(names) > t.num_labels:
        raise GlueLabelError(
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
                raise GlueLabelError(
                    f"{path}:{n}: unknown {t.name} label {label!r} (known: {known}); "
                    f"fix the file (is it SentEval's {t.folder}.txt?)"
                )
            columns["sentence"].append(sentence)
            columns["label"].append(index[label])
            columns["idx"].append(i)
        out[split] = columns
    return out


# ============================================================================ loading


def load_probing_task(t: GlueTask, s: dict) -> dict:
    """{split: datasets.Dataset} of a probing task from validated GLUE source settings ``s``
    (``glue.glue_source_settings``): a SentEval file under ``path`` or the synthetic stand-in.
    (``disk`` is GLUE's own loader; there is no hub source.)"""
    if s["source"] == "synthetic":
        rows = synthetic_probing_task(t, int(s["synthetic_size"]), int(s["seed"]))
    elif s["source"] == "local":
        rows = read_senteval(t, senteval_file(t, Path(s["path"]).expanduser()))
    else:
        raise GlueError(
            f"SentEval probing task {t.name} has no {s['source']} source; use source=local with SentEval's "
            "data/probing folder as path, or source=synthetic"
        )
    return {split: glue._dataset(t, columns) for split, columns in rows.items()}


# ============================================================================ synthetic tasks
#
# Sentences of the synthetic language (convexp/data/synthetic.py, as the synthetic GLUE tasks),
# balanced over the classes, each label a property of the sentence a small model can learn:
#   sentlen   SentEval's bins of the number of tokens (full stop included)
#   wc        1000 of the language's words are targets; the sentence holds exactly one of them,
#             once, all its other content words come from the ~220 others
#   treedepth 5 + the nesting depth (0-7) of bracketed asides "( xs [ y ( ... ) ] )"; flat
#             prepositional phrases pad the sentence so that length says little about depth
#   topconst  the sentence is built from its class's top-level constituents (NP, VP, PP, SBAR,
#             WHADVP SQ, ...); OTHER: sequences outside the 19
#   bshift    I: two neighbouring words (not the first, not punctuation) swapped
#   tense     the main (first) verb is past (stem + "ed") or present; a second clause has a
#             random tense; each verb occurs in one split only
#   subjnum   the number of the first clause's subject (agreement marks it); nouns split by split
#   objnum    the number of the first clause's object; nouns split by split
#   somo      all content words come from one topic; C: one noun or verb replaced by a word of
#             another topic (replacements split by split)
#   coordinv  "a N" is introduced in one clause and referred to as "the N" in the other; I: the
#             two coordinated clauses in the wrong order (the reference first)

_LENGTH_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))
_PREPOSITIONS = ("in", "on", "near", "under", "with", "behind", "beside")
_BRACKETS = (("(", ")"), ("[", "]"))
_SPLIT_BUCKETS = {"train": range(8), "validation": (8,), "test": (9,)}  # of crc32(word) % 10


def _in_split(word: str, split: str) -> bool:
    return zlib.crc32(word.encode()) % 10 in _SPLIT_BUCKETS[split]


@lru_cache(maxsize=None)
def _words_of(part: str, split: str | None = None) -> tuple[str, ...]:
    """Every stem of a part of speech in the language (those of one split's bucket)."""
    lex = _lexicon()
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


def _np(rng: random.Random, noun: str, plural: bool, adj: str | None = None) -> _NP:
    return _NP(rng.choice(_PLUR_DETS if plural else _SING_DETS), adj, noun, plural)


def _sentlen(rng, w, split):
    label = rng.randrange(len(_LENGTH_BINS))
    lo, hi = _LENGTH_BINS[label]
    while True:
        words = w.clause().words()
        while len(words) + 1 < lo:
            if rng.random() < 0.5:
                words += [rng.choice(_PREPOSITIONS), *w.np().words()]
            else:
                words += [rng.choice(_CONJ), *w.clause().words()]
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
    words = _Clause(subj, verb, obj, negated=part == "verbs" and not subj.plural).words()
    if rng.random() < 0.3:
        other = _Clause(np("other"), rng.choice(fillers["verbs"]), np("other")).words()
        first, second = (words, other) if rng.random() < 0.5 else (other, words)
        words = [*first, rng.choice(_CONJ), *second]
    return [*words, "."], label


def _treedepth(rng, w, split):
    depth = rng.randrange(5, 13)
    nested = []
    for level in reversed(range(depth - 5)):  # "( nouns [ nouns ( ... ) ] )"
        open_, close = _BRACKETS[level % 2]
        nested = [open_, w.pick("nouns") + rng.choice(("", "s")), *nested, close]
    # flat phrases (3 words each, as a nesting level): length says little about depth
    pads = [
        [rng.choice(_PREPOSITIONS), *w.np(adj_p=0).words()]
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
            words += [rng.choice(_PREPOSITIONS), *w.np().words()]
        elif sym == "VBD":  # "did the x <verb> ..."
            words, aux = words + ["did"], True
        elif sym == "WHNP":
            words += rng.choice((["what"], ["which", w.pick("nouns") + "s"]))
        else:
            words.append(
                rng.choice({"ADVP": _ADVERBS, "RB": _RB, "IN": _IN, "CC": _CONJ, "WHADVP": _WH}[sym])
            )
    return [*words, "."]


def _topconst(rng, w, split):
    label = rng.choice(TOP_CONSTITUENTS)
    return _constituents(rng, w, rng.choice(_OTHER) if label == "OTHER" else label), label


def _bshift(rng, w, split):
    label = rng.choice("IO")
    words = w.clause(negated=rng.random() < 0.2).words()
    if rng.random() < 0.4:
        words += [rng.choice(_CONJ), *w.clause().words()]
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
        words += [rng.choice(_CONJ), *clause(rng.random() < 0.5)]
    return [*words, "."], label


def _number(slot: str):
    def generate(rng, w, split):
        label = rng.choice(("NN", "NNS"))
        target = _np(rng, rng.choice(_words_of("nouns", split)), label == "NNS")
        c = replace(w.clause(negated=rng.random() < 0.2), **{slot: target})
        words = c.words()
        if rng.random() < 0.4:
            words += [rng.choice(_CONJ), *w.clause().words()]
        return [*words, "."], label

    return generate


def _somo(rng, w, split):
    lex = _lexicon()
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

    clauses = [_Clause(np(), rng.choice(vocab.verbs), np()) for _ in range(2)]
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
    return [*clauses[0].words(), rng.choice(_CONJ), *clauses[1].words(), "."], label


def _coordinv(rng, w, split):
    label = rng.choice("IO")
    noun = w.pick("nouns")

    def clause(np: _NP) -> _Clause:  # np as the subject or as the object
        return w.clause(subj=np) if rng.random() < 0.5 else replace(w.clause(), obj=np)

    first = clause(_NP(rng.choice(("a", "one")), None, noun, False))
    second = clause(_NP("the", None, noun, False))
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


def synthetic_probing_task(task: str | GlueTask, size: int, seed: int) -> dict[str, dict[str, list]]:
    """{split: columns} of a synthetic probing task: ``size`` training rows, a quarter (at least
    50) per dev and test split, test rows labelled as SentEval's. Row i of a split depends only on
    (task, seed, split, i): deterministic, and a larger ``size`` extends a smaller one."""
    t = glue.get_task(task)
    index = {name: i for i, name in enumerate(t.label_names or wc_label_names())}
    out = {}
    for split, n in glue.synthetic_split_sizes(t, size).items():
        columns: dict[str, list] = {"sentence": [], "label": [], "idx": []}
        for i in range(n):
            rng = random.Random(f"convexp-probing:{t.name}:{seed}:{split}:{i}")
            words, label = _GENERATORS[t.name](rng, _Words(rng, range(NUM_TOPICS)), split)
            columns["sentence"].append(_sentence(words))
            columns["label"].append(index[label])
            columns["idx"].append(i)
        out[split] = columns
    return out
