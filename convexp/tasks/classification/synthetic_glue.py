"""Synthetic GLUE tasks: GLUE-shaped data generated from the synthetic language (no download).

Sentences of the synthetic language (``grammar.py``: the words and agreement rules of the
pre-training corpus), with labels that are functions of the text a small model can learn:
  cola  acceptable = grammatical; unacceptable = determiner/verb agreement broken, two
        neighbouring words swapped, or a stray determiner inserted
  sst2  the majority polarity of "sentiment" adjectives (two disjoint sets of 6); a negated
        clause ("does not") flips the polarity of its adjectives
  mrpc  equivalent = the same clauses with determiners changed / adjectives dropped;
        not equivalent = one or two content words replaced
  qqp   duplicate = the same question reworded; not = another question word or content word
  stsb  5 x the fraction of content words kept, plus noise in [-0.3, 0.3], clipped to [0, 5]
  mnli  entailment = a premise clause (simplified); contradiction = the same clause with its
        negation flipped; neutral = the same subject doing something new. The matched splits
        draw topics 0-7, the mismatched ones topics 8-11 (different content words).
  rte   mnli's rules, two-way (not_entailment = contradiction or neutral)
  qnli  entailment = the sentence holds the clause the question asks about
  wnli  "the A <verb>s the B because it was ADJ." -> "the X was ADJ.": "it" is the subject for
        one set of adjectives and the object for another; entailment iff X is that referent

Row i of a split depends only on (task, seed, split, i): deterministic, and a larger size
extends a smaller one. Test rows are unlabelled (-1), as GLUE's.
"""

from __future__ import annotations

import random
from dataclasses import replace

from ...data.grammar import (
    TASK_CONJUNCTIONS,
    TASK_PLURAL_DETS,
    TASK_SINGULAR_DETS,
    WH_WORDS,
    Clause,
    Words,
    sentence,
)
from .registry import GLUE_TASKS, Task, get_task


def _join_clauses(rng: random.Random, clauses: list[Clause], end: str = ".") -> str:
    words = clauses[0].words()
    for c in clauses[1:]:
        words += [",", rng.choice(TASK_CONJUNCTIONS), *c.words()]
    return sentence([*words, end])


def _simplified(c: Clause) -> Clause:
    """The clause with its adjectives dropped and "the" as determiner (entailed by the clause)."""
    return replace(c, subj=replace(c.subj, det="the", adj=None), obj=replace(c.obj, det="the", adj=None))


def _cola(rng: random.Random, w: Words) -> tuple[tuple[str, ...], int]:
    clauses = [w.clause(negated=rng.random() < 0.15) for _ in range(1 if rng.random() < 0.7 else 2)]
    label = int(rng.random() < 0.5)
    if label:
        return (_join_clauses(rng, clauses),), label
    c = clauses[0]
    kind = rng.choice(("det", "verb", "order", "extra"))
    if kind == "det":  # a determiner of the wrong number
        slot = rng.choice(("subj", "obj"))
        x = getattr(c, slot)
        wrong = [d for d in (TASK_SINGULAR_DETS if x.plural else TASK_PLURAL_DETS) if d != "the"]
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
        words.insert(rng.randrange(1, len(words) + 1), rng.choice(TASK_SINGULAR_DETS + TASK_PLURAL_DETS))
    for other in clauses[1:]:
        words += [",", rng.choice(TASK_CONJUNCTIONS), *other.words()]
    return (sentence([*words, "."]),), 0


def _sst2(rng: random.Random, w: Words) -> tuple[tuple[str, ...], int]:
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


def _mrpc(rng: random.Random, w: Words) -> tuple[tuple[str, ...], int]:
    clauses = [w.clause(negated=rng.random() < 0.1) for _ in range(rng.choice((1, 2)))]
    label = int(rng.random() < 0.5)
    other = [w.reword(c) for c in clauses]
    if not label:
        i = rng.randrange(len(other))
        other[i] = w.change_content(other[i], rng.choice((1, 2)))
    return (_join_clauses(rng, clauses), _join_clauses(rng, other)), label


def _question(c: Clause, wh: str | None) -> str:
    aux = "do" if c.subj.plural else "does"
    return sentence([*([wh] if wh else []), aux, *c.subj.words(), c.verb, *c.obj.words(), "?"])


def _qqp(rng: random.Random, w: Words) -> tuple[tuple[str, ...], int]:
    c, wh = w.clause(), rng.choice((*WH_WORDS, None))
    label = int(rng.random() < 0.5)
    c2, wh2 = w.reword(c), wh
    if not label:
        if rng.random() < 0.4:
            wh2 = rng.choice([x for x in (*WH_WORDS, None) if x != wh])
        else:
            c2 = w.change_content(c2)
    return (_question(c, wh), _question(c2, wh2)), label


def _stsb(rng: random.Random, w: Words) -> tuple[tuple[str, ...], float]:
    c = w.clause(negated=rng.random() < 0.1)
    n_changed = rng.randint(0, 3)
    c2 = w.change_content(w.reword(c, drop_adj=0.3), n_changed) if n_changed else w.reword(c, drop_adj=0.3)
    score = 5.0 * (3 - n_changed) / 3 + rng.uniform(-0.3, 0.3)
    return (_join_clauses(rng, [c]), _join_clauses(rng, [c2])), round(min(5.0, max(0.0, score)), 2)


def _nli(rng: random.Random, w: Words, two_clause_p: float) -> tuple[tuple[str, str], str]:
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
    return (_join_clauses(rng, premise), sentence([*h.words(), "."])), label


def _mnli(rng, w):
    (p, h), label = _nli(rng, w, two_clause_p=0.4)
    return (p, h), GLUE_TASKS["mnli"].label_names.index(label)


def _rte(rng, w):
    (p, h), label = _nli(rng, w, two_clause_p=0.7)
    return (p, h), 0 if label == "entailment" else 1


def _qnli(rng: random.Random, w: Words) -> tuple[tuple[str, ...], int]:
    c = w.clause()
    asks_object = rng.random() < 0.5
    if asks_object:  # "what does the X verb?" needs subject noun + verb
        q = sentence(["what", "do" if c.subj.plural else "does", *c.subj.words(), c.verb, "?"])
    else:  # "which Xs verb the Y?" needs verb + object noun
        q = sentence(
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


def _wnli(rng: random.Random, w: Words) -> tuple[tuple[str, ...], int]:
    a = w.pick("nouns")
    b = w.pick("nouns", avoid=[a])
    agent = rng.random() < 0.5
    adj = rng.choice(w.agent_adjs if agent else w.patient_adjs)
    s1 = sentence(["the", a, w.pick("verbs") + "s", "the", b, "because", "it", "was", adj, "."])
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
    return (s1, sentence(["the", x, "was", adj2, "."])), label


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


def synthetic_split_sizes(task: str | Task, size: int) -> dict[str, int]:
    """Rows per split: ``size`` for train, a quarter (at least 50) for every dev and test split."""
    small = max(50, size // 4)
    return {s: size if s == "train" else small for s in get_task(task).splits}


def synthetic_task(task: str | Task, size: int, seed: int) -> dict[str, dict[str, list]]:
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
            texts, label = generate(rng, Words(rng, topics))
            for name, text in zip(t.text_fields, texts):
                columns[name].append(text)
            columns["label"].append(label if split in ("train", *t.dev_splits) else -1)
            columns["idx"].append(i)
        out[split] = columns
    return out
