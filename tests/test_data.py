"""The pre-training data layer: synthetic corpus, corpora from files, tokenizers, packing, cache, errors.

Offline and fast: every corpus is generated or written by the test itself.
"""

import json
import math
import random
import re

import pytest

from convexp.data.corpus import load_corpus
from convexp.data.errors import (
    DataPathError,
    EmptyCorpusError,
    HubDatasetError,
    MissingFieldError,
    TokenizerError,
    UnknownSourceError,
)
from convexp.tasks.pretraining.packing import SpecialIds, pack_blocks
from convexp.tasks.pretraining.pretraining import prepare_pretraining_data
from convexp.data.synthetic import synthetic_corpus, unigram_entropy, vocabulary_words
from convexp.data.tokenizer import SPECIAL_TOKENS, Tokenizer, build_tokenizer
from convexp.errors import UserError
from helpers import example_rows

SYNTH = {"source": "synthetic", "num_docs": 300, "seed": 0, "val_docs": 20}
WORDPIECE = {"kind": "wordpiece", "vocab_size": 1000}


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep the datasets library's own cache (local file builders) inside the test's tmp dir."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


# ---------------------------------------------------------------------------- synthetic corpus

FUNCTION_WORDS = {
    "a",
    "an",
    "the",
    "this",
    "that",
    "every",
    "one",
    "these",
    "those",
    "many",
    "some",
    "two",
    "few",
    "in",
    "on",
    "near",
    "under",
    "with",
    "behind",
    "beside",
    "because",
    "while",
    "but",
    "and",
    "although",
    "he",
    "she",
    "there",
    "was",
    "called",
}


def words(doc: str) -> list[str]:
    return re.findall(r"[A-Za-z]+", doc)


def test_synthetic_corpus_is_deterministic_and_small_vocabulary():
    a = synthetic_corpus(40, seed=3)
    assert a == synthetic_corpus(40, seed=3)
    assert a != synthetic_corpus(40, seed=4)
    assert synthetic_corpus(10, seed=3) == a[:10]  # document i depends only on (seed, i)
    assert all(doc.count(".") >= 4 for doc in a)  # several sentences
    assert len(vocabulary_words()) <= 5000
    assert {w.lower() for d in a for w in words(d)} <= vocabulary_words()


def _half_overlap(docs: list[list[str]], shift: int) -> float:
    """Mean Jaccard overlap of the first half of doc i with the second half of doc i+shift."""
    total = 0.0
    for i, d in enumerate(docs):
        e = docs[(i + shift) % len(docs)]
        first, second = set(d[: len(d) // 2]), set(e[len(e) // 2 :])
        total += len(first & second) / len(first | second)
    return total / len(docs)


def test_synthetic_corpus_has_long_range_structure():
    docs = synthetic_corpus(300, seed=0)
    content = [[w for w in words(d) if w.lower() not in FUNCTION_WORDS] for d in docs]
    # A topic selects the vocabulary of the whole document: its halves share words ...
    within, across = _half_overlap(content, 0), _half_overlap(content, 1)
    assert within > 3 * across
    # ... which words shuffled across documents (same lengths, same unigram counts) do not.
    pool = [w for d in content for w in d]
    random.Random(0).shuffle(pool)
    shuffled, k = [], 0
    for d in content:
        shuffled.append(pool[k : k + len(d)])
        k += len(d)
    assert _half_overlap(shuffled, 0) < 1.3 * _half_overlap(shuffled, 1)

    for doc in docs:
        # The protagonist introduced in the first sentence comes back, with a matching pronoun.
        name = re.match(r"there was an? \w+ \w+ called (\w+)\.", doc).group(1)
        names = {w for w in words(doc) if w[0].isupper()}
        assert names == {name}
        pronouns = {w for w in words(doc) if w in ("he", "she")}
        assert pronouns <= {"she" if name[-1] in "ai" else "he"}
        # Brackets close in the order they were opened, across the aside.
        stack = []
        for c in doc:
            if c in "([":
                stack.append(c)
            elif c in ")]":
                assert stack and stack.pop() == {")": "(", "]": "["}[c]
        assert not stack


def test_unigram_entropy():
    assert unigram_entropy([[1, 2], [3, 4]]) == pytest.approx(math.log(4))
    assert unigram_entropy([[0, 0, 5, 5, 7]], ignore_ids={0}) == pytest.approx(
        -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    )
    assert unigram_entropy([]) == 0.0


# ---------------------------------------------------------------------------- corpora from files


def test_text_file_corpus_and_trained_wordpiece(tmp_path):
    docs = synthetic_corpus(200, seed=1)
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(docs[:100]) + "\n\n   \n\n" + "\n\n".join(docs[100:]) + "\n")
    corpus = load_corpus({"source": "files", "path": str(path)})
    assert corpus.column_names == ["text"] and len(corpus) == 200
    assert [t.strip() for t in corpus["text"]] == docs
    by_line = load_corpus({"source": "files", "path": str(path), "line_by_line": True})
    assert len(by_line) == 200  # blank lines dropped

    tok = build_tokenizer(WORDPIECE, lambda: iter(corpus["text"]))
    assert tok.kind == "wordpiece" and tok.vocab_size <= 1000
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.special_ids == {0, 1, 2, 3, 4}
    ids = tok.encode_batch(docs[:5])
    assert all(tok.special_ids.isdisjoint(x) for x in ids)  # no special tokens added
    for doc, x in zip(docs[:5], ids):  # round trip, up to spacing around punctuation and case
        assert "".join(tok.decode(x).split()) == "".join(doc.lower().split())
    cont = tok.continuation_mask()  # for whole-word masking
    assert cont.shape == (tok.vocab_size,) and not cont[sorted(tok.special_ids)].any()
    vocab = tok.backend.get_vocab()
    assert all(bool(cont[i]) == t.startswith("##") for t, i in vocab.items() if i not in tok.special_ids)
    # Training is reproducible, and save/load (directory, tokenizer.json, vocab.txt) keeps the ids.
    assert build_tokenizer(WORDPIECE, lambda: iter(corpus["text"])).to_json() == tok.to_json()
    tok.save(tmp_path / "tok")
    assert {p.name for p in (tmp_path / "tok").iterdir()} == {"tokenizer.json", "vocab.txt"}
    for where in ("tok", "tok/tokenizer.json", "tok/vocab.txt"):
        again = Tokenizer.load(tmp_path / where)
        assert (
            again.encode_batch(docs[:5]) == ids and again.pad_id == 0 and again.vocab_size == tok.vocab_size
        )


def test_unigram_tokenizer():
    texts = synthetic_corpus(300, seed=2)
    tok = build_tokenizer({"kind": "unigram", "vocab_size": 800}, lambda: iter(texts))
    assert tok.kind == "unigram" and tok.vocab_size <= 800
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert (
        build_tokenizer({"kind": "unigram", "vocab_size": 800}, lambda: iter(texts)).to_json()
        == tok.to_json()
    )
    ids = tok.encode_batch(texts[:3])
    assert all(tok.unk_id not in x for x in ids)
    assert "".join(tok.decode(ids[0]).split()) == "".join(texts[0].lower().split())
    cont = tok.continuation_mask()
    assert not cont[tok.backend.token_to_id("▁the")] and not cont[sorted(tok.special_ids)].any()
    assert cont.any()


def test_folder_of_jsonl_files(tmp_path):
    docs = synthetic_corpus(30, seed=0)
    folder = tmp_path / "json"
    (folder / "sub").mkdir(parents=True)
    for name, part in (("a.jsonl", docs[:10]), ("sub/b.jsonl", docs[10:30])):
        rows = [{"id": i, "body": d} for i, d in enumerate(part)] + [{"id": -1, "body": "  "}]
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / ".hidden.jsonl").write_text('{"body": "ignored"}\n')
    corpus = load_corpus({"source": "files", "path": str(folder), "text_field": "body"})
    assert corpus.column_names == ["text"]
    assert corpus["text"] == docs  # sorted files, blank record dropped, hidden file skipped
    assert (
        len(load_corpus({"source": "files", "path": str(folder), "text_field": "body", "max_docs": 7})) == 7
    )


def test_parquet_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = synthetic_corpus(25, seed=5)
    pq.write_table(pa.table({"text": docs, "n": list(range(25))}), tmp_path / "c.parquet")
    corpus = load_corpus({"source": "files", "path": str(tmp_path / "c.parquet")})
    assert corpus.column_names == ["text"] and corpus["text"] == docs


def test_pretrained_tokenizer_from_vocab_txt(tmp_path):
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(5)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += ["the", "dog", "run", "##s", ".", "a", "cat"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = build_tokenizer(
        {"kind": "pretrained", "path": str(tmp_path)}, lambda: pytest.fail("must not train")
    )
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 6, 7, 8, 9)
    assert tok.vocab_size == len(vocab)
    assert tok.encode_batch(["The dog runs. A zebra"]) == [[10, 11, 12, 13, 14, 15, 6]]
    data = prepare_pretraining_data(
        {**SYNTH, "num_docs": 40, "val_docs": 5},
        {"kind": "pretrained", "path": str(tmp_path / "vocab.txt")},
        seq_len=16,
        cache_dir=tmp_path / "cache",
        seed=0,
    )
    assert data.stats["vocab_size"] == len(vocab) and data.train[0]["input_ids"][0] == 7


# ---------------------------------------------------------------------------- packing


def check_row(row, seq_len, pair_format, tok):
    ids, types, mask = row["input_ids"], row["token_type_ids"], row["attention_mask"]
    assert len(ids) == len(types) == len(mask) == seq_len
    n = sum(mask)
    assert mask == [1] * n + [0] * (seq_len - n)
    assert ids[n:] == [tok.pad_id] * (seq_len - n) and types[n:] == [0] * (seq_len - n)
    assert ids[0] == tok.cls_id and ids[n - 1] == tok.sep_id
    seps = [i for i in range(n) if ids[i] == tok.sep_id]
    assert ids.count(tok.cls_id) == 1 and tok.pad_id not in ids[:n]
    if pair_format == "single":
        assert seps == [n - 1] and types == [0] * seq_len
    else:
        first = seps[0]
        assert seps == [first, n - 1] and 1 < first < n - 2  # A and B both non-empty
        assert types[: first + 1] == [0] * (first + 1) and types[first + 1 : n] == [1] * (n - first - 1)
    assert ("pair_label" in row) == (pair_format in ("nsp", "sop"))


@pytest.mark.parametrize("pair_format", ["pairs", "nsp", "sop", "single"])
def test_packed_rows(tmp_path, pair_format):
    seq_len = 24
    data = prepare_pretraining_data(
        SYNTH, WORDPIECE, seq_len, tmp_path / "cache", seed=1, pair_format=pair_format
    )
    tok, train = data.tokenizer, example_rows(data.train)
    for row in [*train, *example_rows(data.val)]:
        check_row(row, seq_len, pair_format, tok)
    # short blocks only at the end of a chunk (one here): the stream's remainder (nsp: with the
    # true Bs that random ones replaced, so a few)
    short = [i for i, r in enumerate(train) if sum(r["attention_mask"]) < seq_len]
    assert short == list(range(len(train) - len(short), len(train))) and len(short) <= 3
    if pair_format in ("nsp", "sop"):
        assert 0.4 < sum(data.train["pair_label"]) / len(train) < 0.6
    assert data.stats["num_train_blocks"] == len(train) and data.stats["vocab_size"] == tok.vocab_size
    assert 0 < data.stats["unigram_entropy"] < math.log(tok.vocab_size)
    assert str(data.train.features["input_ids"].feature.dtype) == "uint16"  # 2 bytes a token on disk


@pytest.mark.parametrize("pair_format", ["pairs", "nsp", "sop", "single"])
def test_packing_keeps_the_token_stream(pair_format):
    """Blocks put back together (un-swapped, random B dropped) are exactly the documents' tokens."""
    rng = random.Random(0)
    docs = [[rng.randrange(10, 60) for _ in range(rng.randint(1, 40))] for _ in range(200)]
    sp = SpecialIds(cls_id=2, sep_id=3, pad_id=0)
    rows = list(pack_blocks(docs, 16, pair_format, sp, random.Random(1), pool_size=50))
    full = [t for d in docs for t in d]
    stream, not_next = [], 0
    for r in rows:
        n = sum(r["attention_mask"])
        body = r["input_ids"][1 : n - 1]
        if pair_format == "single":
            stream += body
            continue
        k = body.index(3)
        a, b = body[:k], body[k + 1 :]
        label = r.get("pair_label", 0)
        if pair_format == "sop" and label:
            a, b = b, a
        if pair_format == "nsp" and label:  # B came from elsewhere; the true B starts the next block
            start = len(stream) + len(a)
            not_next += b != full[start : start + len(b)]
            stream += a
        else:
            stream += a + b
    assert stream == full[: len(stream)] and len(full) - len(stream) <= 1  # a last lone token may be dropped
    if pair_format == "nsp":
        assert not_next > 0.4 * len(rows)  # random Bs are not the true continuation
    again = list(pack_blocks(docs, 16, pair_format, sp, random.Random(1), pool_size=50))
    assert again == rows  # deterministic for a seed


# ---------------------------------------------------------------------------- cache and streaming


def test_cache(tmp_path, monkeypatch, caplog):
    from convexp.tasks.pretraining import pretraining

    cache = tmp_path / "cache"
    first = prepare_pretraining_data(SYNTH, WORDPIECE, 32, cache, seed=0, pair_format="sop")
    assert first.stats["cached"] is False
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp")]  # atomic writes leave nothing behind

    def fail(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(pretraining, "load_corpus", fail)  # no corpus read, no tokenizer training
    monkeypatch.setattr(pretraining, "build_tokenizer", fail)
    with caplog.at_level("INFO", logger="convexp.tasks.pretraining.pretraining"):
        second = prepare_pretraining_data(SYNTH, WORDPIECE, 32, cache, seed=0, pair_format="sop")
    assert second.stats["cached"] is True and "from cache" in caplog.text
    assert (
        second.train["input_ids"] == first.train["input_ids"]
        and second.val["pair_label"] == first.val["pair_label"]
    )
    assert second.tokenizer.to_json() == first.tokenizer.to_json()
    monkeypatch.undo()

    # A new seq_len is a new entry (the tokenizer is reused from its own cache entry).
    monkeypatch.setattr(pretraining, "build_tokenizer", fail)
    other = prepare_pretraining_data(SYNTH, WORDPIECE, 48, cache, seed=0, pair_format="sop")
    assert other.stats["cached"] is False and len(other.train[0]["input_ids"]) == 48
    monkeypatch.undo()

    # Same inputs without the cache: the same rows (packing is deterministic); another seed differs.
    fresh = prepare_pretraining_data(
        {**SYNTH, "cache": False}, WORDPIECE, 32, cache, seed=0, pair_format="sop"
    )
    assert (
        fresh.train["input_ids"] == first.train["input_ids"]
        and fresh.train["pair_label"] == first.train["pair_label"]
    )
    reseeded = prepare_pretraining_data(SYNTH, WORDPIECE, 32, cache, seed=1, pair_format="sop")
    assert reseeded.train["input_ids"] != first.train["input_ids"]
    assert reseeded.val["input_ids"] == first.val["input_ids"]  # validation does not depend on the seed


def test_streaming(tmp_path):
    from convexp.tasks.pretraining.streaming import prepare_streaming

    data = prepare_streaming(
        {**SYNTH, "streaming": True}, WORDPIECE, 32, tmp_path / "cache", seed=0, pair_format="nsp"
    )
    assert data.stats["streaming"] is True and data.stats["unigram_entropy"] > 0
    assert len(data.val) > 0 and data.stats["num_val_docs"] == 20
    rows = list(data.train)
    assert rows == list(data.train)  # re-iterating gives the same stream
    for row in rows:
        check_row(row, 32, "nsp", data.tokenizer)
    # readers, their shares and positions: tests/test_streaming.py


# ---------------------------------------------------------------------------- user errors


def one_line_user_error(excinfo, *words):
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, UserError) and "\n" not in msg
    for w in words:
        assert w in msg
    return msg


def test_errors(tmp_path):
    with pytest.raises(DataPathError) as e:
        load_corpus({"source": "files", "path": str(tmp_path / "nowhere")})
    one_line_user_error(e, "nowhere", "data.path")

    (tmp_path / "blank.txt").write_text("  \n\n \t \n\n")
    with pytest.raises(EmptyCorpusError) as e:
        load_corpus({"source": "files", "path": str(tmp_path / "blank.txt")})
    one_line_user_error(e, "blank.txt")

    (tmp_path / "docs.jsonl").write_text('{"body": "a document"}\n')
    with pytest.raises(MissingFieldError) as e:
        load_corpus({"source": "files", "path": str(tmp_path / "docs.jsonl")})
    one_line_user_error(e, "'text'", "body", "data.text_field")

    with pytest.raises(UnknownSourceError) as e:
        load_corpus({"source": "ftp"})
    one_line_user_error(e, "'ftp'", "synthetic")

    (tmp_path / "empty_folder").mkdir()
    (tmp_path / "empty_folder" / "notes.md").write_text("x")
    with pytest.raises(DataPathError) as e:
        load_corpus({"source": "files", "path": str(tmp_path / "empty_folder")})
    one_line_user_error(e, "empty_folder")

    with pytest.raises(HubDatasetError) as e:  # conftest sets HF_DATASETS_OFFLINE=1
        load_corpus({"source": "hub", "path": "Salesforce/wikitext", "name": "wikitext-103-raw-v1"})
    one_line_user_error(e, "Salesforce/wikitext")

    with pytest.raises(TokenizerError) as e:
        build_tokenizer({"kind": "pretrained", "path": str(tmp_path / "missing")}, lambda: iter(()))
    one_line_user_error(e, "tokenizer.path")

    with pytest.raises(UserError) as e:
        prepare_pretraining_data(SYNTH, WORDPIECE, 4, tmp_path / "cache", seed=0, pair_format="pairs")
    one_line_user_error(e, "seq_len")


def test_presets_are_valid():
    from omegaconf import OmegaConf

    from convexp.config.compose import CONF_DIR
    from convexp.data.corpus import DATA_DEFAULTS
    from convexp.data.tokenizer import TOKENIZER_DEFAULTS

    # every key shown; ``parts`` only where a corpus is composed of several hub datasets (absent
    # elsewhere, so that those presets' run ids stay as they were)
    for name in ("synthetic", "wikitext103", "openwebtext", "files"):
        assert set(OmegaConf.load(CONF_DIR / "data" / f"{name}.yaml")) == set(DATA_DEFAULTS) - {"parts"}
    assert set(OmegaConf.load(CONF_DIR / "data" / "bookcorpus_wikitext103.yaml")) == set(DATA_DEFAULTS)
    for name in ("wordpiece", "unigram", "pretrained"):
        assert set(OmegaConf.load(CONF_DIR / "tokenizer" / f"{name}.yaml")) == set(TOKENIZER_DEFAULTS)
    assert SPECIAL_TOKENS[0] == "[PAD]"
