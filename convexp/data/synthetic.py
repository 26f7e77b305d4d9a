"""A built-in synthetic English-like corpus, so that pre-training runs with no download.

The language (its words and word lists: ``grammar.py``) is small (about 2,600 distinct words,
generated from syllables with a fixed seed, so it is the same language for every corpus seed)
but the documents written here have structure at two ranges:

Local structure (a bigram model can learn it):
  * determiners agree in number with their noun ("a"/"an"/"this"/"every" + singular,
    "these"/"many"/"two" + plural, "the" with both), and "a" becomes "an" before a vowel;
  * verbs agree with their subject ("the blorin zutas ..." vs "the blorins zuta ...");
  * noun phrases are determiner (adjective) noun, sentences follow a few fixed templates;
  * each part of speech has its own shape (adjectives end in -ous/-ic/-al; plurals and
    third-person verbs end in -s; names are capitalised).

Long-range structure (needs context beyond the neighbouring words):
  * a document has a topic; 80% of its nouns, verbs and adjectives come from the topic's own
    vocabulary, so the first half of a document predicts the words of the second half;
  * the first sentence introduces a protagonist ("there was a quiet blorin called Tesa.") who
    is referred back to throughout the document by name, as "the blorin", or by a pronoun
    whose gender follows the name (names ending in -a or -i take "she", the others "he");
  * sentences may contain asides in brackets, nested up to two levels, "( ... [ ... ] ... )":
    a closing bracket must match the most recent open one, however long the aside.

``synthetic_corpus(n, seed)`` is deterministic, and a prefix of a longer corpus equals the
shorter corpus (document i depends only on (seed, i)).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence

from .grammar import BRACKETS, CONJUNCTIONS, PLURAL_DETS, PREPOSITIONS, SINGULAR_DETS, lexicon


def _pronoun(name: str) -> str:
    return "she" if name[-1] in "ai" else "he"


class _DocumentWriter:
    """Writes one document: a topic, a protagonist, then sentences from a few templates."""

    def __init__(self, rng: random.Random):
        lex = lexicon()
        self.rng = rng
        self.topic = rng.choice(lex.topics)
        self.general = lex.general
        self.name = rng.choice(lex.names)
        self.kind = rng.choice(self.topic.nouns)  # what the protagonist is: "the <kind>"

    def _pick(self, part: str) -> str:
        vocab = self.topic if self.rng.random() < 0.8 else self.general
        return self.rng.choice(getattr(vocab, part))

    def noun_phrase(self, plural: bool, depth: int = 0) -> list[str]:
        rng = self.rng
        det = rng.choice(PLURAL_DETS if plural else SINGULAR_DETS) if rng.random() < 0.6 else "the"
        words = [self._pick("adjectives")] if rng.random() < 0.4 else []
        words.append(self._pick("nouns") + ("s" if plural else ""))
        if det == "a" and words[0][0] in "aeiou":
            det = "an"
        phrase = [det, *words]
        if depth == 0 and rng.random() < 0.2:
            phrase += [rng.choice(PREPOSITIONS), *self.noun_phrase(rng.random() < 0.5, depth + 1)]
        return phrase

    def subject(self) -> tuple[list[str], bool]:
        """A subject and whether it is plural; often the protagonist."""
        r = self.rng.random()
        if r < 0.2:
            return [self.name], False
        if r < 0.35:
            return [_pronoun(self.name)], False
        if r < 0.45:
            return ["the", self.kind], False
        plural = self.rng.random() < 0.5
        return self.noun_phrase(plural), plural

    def clause(self, depth: int = 0) -> list[str]:
        subject, plural = self.subject()
        verb = self._pick("verbs") + ("" if plural else "s")
        words = [*subject, verb, *self.noun_phrase(self.rng.random() < 0.5)]
        if depth < 2 and self.rng.random() < 0.25:  # a bracketed aside, possibly nested
            open_, close = self.rng.choice(BRACKETS)
            words += [open_, *self.clause(depth + 1), close]
        return words

    def sentence(self) -> list[str]:
        words = self.clause()
        if self.rng.random() < 0.3:
            words += [",", self.rng.choice(CONJUNCTIONS), *self.clause()]
        return [*words, "."]

    def document(self) -> str:
        adj = self._pick("adjectives")
        words = ["there", "was", "an" if adj[0] in "aeiou" else "a", adj, self.kind, "called", self.name, "."]
        for _ in range(self.rng.randint(3, 8)):
            words += self.sentence()
        return _detokenize(words)


def _detokenize(words: list[str]) -> str:
    """Join words with spaces, without a space before . , ) ] or after ( [."""
    text = " ".join(words)
    for p in (".", ",", ")", "]"):
        text = text.replace(" " + p, p)
    for p in ("(", "["):
        text = text.replace(p + " ", p)
    return text


def synthetic_corpus(num_docs: int, seed: int) -> list[str]:
    """``num_docs`` documents of 4-9 sentences (about 60-200 words each); deterministic in seed."""
    return [
        _DocumentWriter(random.Random(f"convexp-synthetic:{seed}:{i}")).document() for i in range(num_docs)
    ]


def vocabulary_words() -> set[str]:
    """Every word form of the language (lower case), e.g. to check a tokenizer covers it."""
    lex = lexicon()
    words = set(SINGULAR_DETS + PLURAL_DETS + PREPOSITIONS + CONJUNCTIONS)
    words |= {"the", "an", "he", "she", "there", "was", "called"}
    for v in (*lex.topics, lex.general):
        words |= {f for n in v.nouns + v.verbs for f in (n, n + "s")} | set(v.adjectives)
    return words | {n.lower() for n in lex.names}


def entropy_from_counts(counts: Iterable[int]) -> float:
    """Entropy (nats) of the distribution proportional to ``counts``; 0 for an empty one."""
    counts = [c for c in counts if c > 0]
    total = sum(counts)
    return -sum(c / total * math.log(c / total) for c in counts) if total else 0.0


def unigram_entropy(token_id_lists: Iterable[Sequence[int]], ignore_ids: Iterable[int] = ()) -> float:
    """Unigram entropy (nats per token) of a tokenised corpus, ignoring ``ignore_ids`` (e.g. specials).

    This is the cross-entropy of the best context-free predictor: an MLM whose loss does not fall
    below it has learned nothing but token frequencies.
    """
    counts: Counter[int] = Counter()
    for ids in token_id_lists:
        counts.update(ids)
    for i in ignore_ids:
        counts.pop(i, None)
    return entropy_from_counts(counts.values())
