"""The synthetic language: its lexicon, word lists and phrase builder (one definition, used by all).

Used by the synthetic pre-training corpus (``synthetic.py``), the synthetic GLUE tasks
(``synthetic_glue.py``) and the synthetic SentEval probing tasks (``synthetic_probing.py``), so
that a model pre-trained on the corpus meets the same words and agreement rules in every task.

  lexicon        ``lexicon()``: about 2,600 words generated from syllables with a fixed seed (the
                 same language for every corpus or task seed): ``NUM_TOPICS`` topic vocabularies
                 (50 nouns, 25 verbs, 20 adjectives each), a general one shared by every topic
                 (40 / 20 / 20) and 150 names
  word lists     determiners of each number, prepositions, conjunctions, brackets, wh-words
  phrases        ``NP`` (determiner, adjective, noun, number), ``Clause`` (subject, verb, object,
                 negation; the verb agrees with the subject), ``Words`` (picks a topic's words),
                 ``sentence`` (words -> text)

Nothing here may change what it generates: every synthetic example (and so the tokenised caches
and the data digests of tests/data/synthetic_digests.json) depends on it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

# ============================================================================ lexicon

_LEXICON_SEED = 20240611  # fixes the language; corpus and task seeds only change the examples
NUM_TOPICS = 12

_ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "t",
    "v",
    "z",
    "br",
    "tr",
    "kl",
    "gr",
    "pl",
    "sh",
    "th",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou", "ee"]
_CODAS = ["", "", "", "n", "r", "l", "m", "k"]

# ============================================================================ word lists

SINGULAR_DETS = ("a", "this", "that", "every", "one")  # "a" becomes "an" before a vowel
PLURAL_DETS = ("these", "those", "many", "some", "two", "few")
PREPOSITIONS = ("in", "on", "near", "under", "with", "behind", "beside")
CONJUNCTIONS = ("because", "while", "but", "and", "although")  # the corpus's
BRACKETS = (("(", ")"), ("[", "]"))
# the tasks' determiners also take "the"; their clause conjunctions leave out "although"
TASK_SINGULAR_DETS = (*SINGULAR_DETS, "the")
TASK_PLURAL_DETS = (*PLURAL_DETS, "the")
TASK_CONJUNCTIONS = ("and", "while", "because", "but")
WH_WORDS = ("why", "how", "when", "where")


@dataclass(frozen=True)
class Vocabulary:
    nouns: tuple[str, ...]  # singular stems; plural = stem + "s"
    verbs: tuple[str, ...]  # base forms; third person singular = stem + "s"
    adjectives: tuple[str, ...]


@dataclass(frozen=True)
class Lexicon:
    topics: tuple[Vocabulary, ...]
    general: Vocabulary  # shared by every topic
    names: tuple[str, ...]


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _new_words(rng: random.Random, count: int, syllables: tuple[int, int], taken: set[str], suffixes=("",)):
    """``count`` new pronounceable words; a word and its "-s" form are both kept out of ``taken``."""
    words = []
    while len(words) < count:
        stem = "".join(_syllable(rng) for _ in range(rng.randint(*syllables)))
        w = stem + rng.choice(suffixes)
        if stem.endswith("s") or w in taken or w + "s" in taken:
            continue
        taken.update((w, w + "s"))
        words.append(w)
    return tuple(words)


@lru_cache(maxsize=1)
def lexicon() -> Lexicon:
    """The language's words (deterministic: the same on every call and machine)."""
    rng = random.Random(_LEXICON_SEED)
    taken = set(SINGULAR_DETS + PLURAL_DETS + PREPOSITIONS + CONJUNCTIONS + ("the", "an", "he", "she"))

    def vocabulary(n_nouns, n_verbs, n_adjs):
        return Vocabulary(
            nouns=_new_words(rng, n_nouns, (2, 3), taken),
            verbs=_new_words(rng, n_verbs, (1, 2), taken),
            adjectives=_new_words(rng, n_adjs, (1, 2), taken, suffixes=("ous", "ic", "al")),
        )

    topics = tuple(vocabulary(50, 25, 20) for _ in range(NUM_TOPICS))
    general = vocabulary(40, 20, 20)
    names = tuple(w.capitalize() for w in _new_words(rng, 150, (2, 2), taken))
    return Lexicon(topics, general, names)


# ============================================================================ phrases (the tasks')


@dataclass(frozen=True)
class NP:
    """A noun phrase: determiner (adjective) noun; the noun takes "-s" when plural."""

    det: str
    adj: str | None
    noun: str
    plural: bool

    def words(self) -> list[str]:
        w = ([self.adj] if self.adj else []) + [self.noun + ("s" if self.plural else "")]
        det = "an" if self.det == "a" and w[0][0] in "aeiou" else self.det
        return [det, *w]


@dataclass(frozen=True)
class Clause:
    """subject verb object; the verb agrees with the subject ("does not <verb>" when negated)."""

    subj: NP
    verb: str
    obj: NP
    negated: bool = False

    def verb_words(self, plural: bool | None = None) -> list[str]:
        plural = self.subj.plural if plural is None else plural
        if self.negated:
            return ["do" if plural else "does", "not", self.verb]
        return [self.verb + ("" if plural else "s")]

    def words(self) -> list[str]:
        return [*self.subj.words(), *self.verb_words(), *self.obj.words()]


def sentence(words: list[str]) -> str:
    """Words joined by spaces, without a space before , . ?"""
    return " ".join(words).replace(" ,", ",").replace(" .", ".").replace(" ?", "?")


class Words:
    """Picks words of the lexicon: 80% from one topic, 20% from the shared vocabulary.

    The general vocabulary's 20 adjectives are reserved for the tasks' rules: ``positive`` and
    ``negative`` (6 each, SST-2's sentiment), ``agent_adjs`` and ``patient_adjs`` (4 each, WNLI)."""

    def __init__(self, rng: random.Random, topics: Sequence[int]):
        lex = lexicon()
        self.rng, self.general = rng, lex.general
        self.topic = lex.topics[rng.choice(list(topics))]
        adjs = lex.general.adjectives
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

    def np(self, plural: bool | None = None, adj_p: float = 0.3) -> NP:
        plural = self.rng.random() < 0.5 if plural is None else plural
        det = self.rng.choice(TASK_PLURAL_DETS if plural else TASK_SINGULAR_DETS)
        adj = self.pick("adjectives") if self.rng.random() < adj_p else None
        return NP(det, adj, self.pick("nouns"), plural)

    def clause(self, negated: bool = False, subj: NP | None = None) -> Clause:
        return Clause(subj or self.np(), self.pick("verbs"), self.np(), negated)

    def reword(self, c: Clause, drop_adj: float = 0.5) -> Clause:
        """Same content words: determiners changed (same number), adjectives maybe dropped."""

        def np(x: NP) -> NP:
            det = self.rng.choice(TASK_PLURAL_DETS if x.plural else TASK_SINGULAR_DETS)
            return NP(det, None if self.rng.random() < drop_adj else x.adj, x.noun, x.plural)

        return replace(c, subj=np(c.subj), obj=np(c.obj))

    def change_content(self, c: Clause, n: int = 1) -> Clause:
        """Replace ``n`` of the subject noun, verb and object noun by other words."""
        for slot in self.rng.sample(["subj", "verb", "obj"], n):
            if slot == "verb":
                c = replace(c, verb=self.pick("verbs", avoid=[c.verb]))
            else:
                x = getattr(c, slot)
                c = replace(c, **{slot: replace(x, noun=self.pick("nouns", avoid=[x.noun]))})
        return c
