"""``convexp bench data``'s corpus: OpenWebText-like JSON lines made offline, and a WordPiece
vocabulary of BERT-uncased's size trained on them.

A document is ~20 paragraphs (one to three sentences each, separated by a blank line, as
OpenWebText's text), ~3 KB; its words are drawn from a Zipf distribution (exponent 1.1) over
English function words followed by ~60,000 syllable-made words, capitalised at a sentence's start,
with commas, numbers and full stops: what matters to a tokenizer's speed (word lengths, the long
tail of rare words split into several WordPieces) is there; the meaning is not. The same
``seed`` gives the same corpus byte for byte.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

FUNCTION_WORDS = (
    "the of and to a in is that for it was on with as he be at by this had not are but from or have "
    "an they which one you were her all she there would their we him been has when who will more no "
    "if out so said what up its about into than them can only other new some could time these two may "
    "then do first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life being under"
).split()
SYLLABLES = [o + v + c for o in ("", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "st", "t", "tr", "w")
             for v in ("a", "e", "i", "o", "u", "ea", "ou", "io") for c in ("", "n", "r", "s", "t", "l", "nd", "ck")]  # fmt: skip
WORD_TYPES = 60_000
ZIPF = 1.1
DOC_PARAGRAPHS = 20
VOCAB_SIZE = 30_522  # BERT-uncased's


def _lexicon(rng: random.Random) -> list[str]:
    words = dict.fromkeys(FUNCTION_WORDS)
    while len(words) < WORD_TYPES:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))] = None
    return list(words)


def documents(size_bytes: int, seed: int = 0):
    """OpenWebText-like documents (str) until they hold ``size_bytes`` bytes of text."""
    rng = random.Random(seed)
    words = _lexicon(rng)
    weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF
    cum = np.cumsum(weights / weights.sum())
    gen = np.random.default_rng(seed)
    written = 0
    while written < size_bytes:
        paragraphs = []
        for _ in range(max(1, int(gen.normal(DOC_PARAGRAPHS, 4)))):
            sentences = []
            for _ in range(int(gen.integers(1, 4))):
                picks = np.searchsorted(cum, gen.random(int(gen.integers(6, 30))))
                toks = [words[i] for i in picks]
                toks[0] = toks[0].capitalize()
                if len(toks) > 8 and gen.random() < 0.5:
                    toks[len(toks) // 2] += ","
                if gen.random() < 0.1:
                    toks.insert(int(gen.integers(0, len(toks))), str(int(gen.integers(1, 3000))))
                sentences.append(" ".join(toks) + ".")
            paragraphs.append(" ".join(sentences))
        text = "\n\n".join(paragraphs)
        written += len(text.encode())
        yield text


def write_corpus(path: Path, size_bytes: int, seed: int = 0) -> int:
    """Write the corpus as JSON lines ({"text": ...}) to ``path``; returns the number of documents."""
    n = 0
    with open(path, "w") as f:
        for text in documents(size_bytes, seed):
            f.write(json.dumps({"text": text}) + "\n")
            n += 1
    return n


def train_vocab(corpus: Path, out_dir: Path) -> Path:
    """A WordPiece vocabulary of ``VOCAB_SIZE`` tokens (lower-cased, BERT's specials) trained on
    the corpus with convexp's tokenizer trainer; returns its vocab.txt."""
    from ..data.tokenizer import build_tokenizer

    def batches():
        batch = []
        with open(corpus) as f:
            for line in f:
                batch.append(json.loads(line)["text"])
                if len(batch) == 1000:
                    yield batch
                    batch = []
        if batch:
            yield batch

    tok = build_tokenizer({"kind": "wordpiece", "vocab_size": VOCAB_SIZE, "lowercase": True}, batches)
    vocab = sorted(tok.backend.get_vocab().items(), key=lambda kv: kv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "vocab.txt"
    path.write_text("".join(f"{token}\n" for token, _ in vocab))
    return path
