"""Chang et al.'s pre-training examples (data.examples=sentence_pairs): one sentence pair per
example, cut only when longer than seq_len, padded, never two documents' text in one example."""

import pytest
import torch
from helpers import example_rows, write_vocab

from convexp.data.errors import DataError
from convexp.tasks.pretraining.packing import SpecialIds, sentence_pairs
from convexp.tasks.pretraining.pretraining import prepare_pretraining_data
from convexp.tasks.pretraining.sentences import split_sentences

SPECIALS = SpecialIds(cls_id=2, sep_id=3, pad_id=0)
CLS, SEP, PAD = 2, 3, 0


def test_split_sentences():
    text = "Mr. Smith saw J. Edgar Hoover! Did he? \"Yes.\" The war , e.g. this , ended .\nA line ends one"
    assert split_sentences(text) == [
        "Mr. Smith saw J. Edgar Hoover!",
        "Did he?",
        '"Yes."',
        "The war , e.g. this , ended .",
        "A line ends one",
    ]
    assert split_sentences("  \n\n ") == []


def test_one_pair_per_row_cut_only_when_longer():
    doc_a = [[10, 11], [12], [13, 14, 15]]  # three sentences: a pair, then the odd one alone
    doc_b = [[20] * 6, [], [21] * 6]  # an empty sentence is skipped; the pair is longer than 10
    rows = list(sentence_pairs([doc_a, doc_b], seq_len=10, specials=SPECIALS))
    assert [r["input_ids"] for r in rows] == [
        [CLS, 10, 11, SEP, 12, SEP, PAD, PAD, PAD, PAD],
        [CLS, 13, 14, 15, SEP, PAD, PAD, PAD, PAD, PAD],
        [CLS, *[20] * 6, SEP, 21, 21],  # 15 tokens cut to the first 10 (the last [SEP] goes, as theirs)
    ]
    assert [r["attention_mask"] for r in rows] == [[1] * 6 + [0] * 4, [1] * 5 + [0] * 5, [1] * 10]
    assert all(r["token_type_ids"] == [0] * 10 for r in rows)  # Chang et al.'s collator passes none
    # exactly seq_len long: not cut
    [row] = sentence_pairs([[[5, 6, 7], [8, 9, 10, 11]]], seq_len=10, specials=SPECIALS)
    assert row["input_ids"] == [CLS, 5, 6, 7, SEP, 8, 9, 10, 11, SEP] and sum(row["attention_mask"]) == 10


def corpus_files(tmp_path, n_docs=12):
    """Documents whose words name their document and sentence ("d3s1w0"), with a vocab.txt."""
    docs, words = [], []
    for d in range(n_docs):
        sentences = []
        for s in range(3 + d % 4):  # odd and even sentence counts
            w = [f"d{d}s{s}w{i}" for i in range(2 + (d + s) % 5)]
            words += w
            sentences.append(" ".join(w) + ".")
        docs.append(" ".join(sentences))
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "docs.txt").write_text("\n\n".join(docs) + "\n")
    vocab = write_vocab(tmp_path / "vocab.txt", [*words, "."])
    data = {"source": "files", "path": str(tmp_path / "corpus"), "val_docs": 2, "examples": "sentence_pairs"}
    return data, {"kind": "pretrained", "path": str(vocab)}


def check_pair_rows(rows, tok, seq_len) -> list[int]:
    """Every row one pair of consecutive sentences of one document, padded (cut only when
    longer than seq_len); returns the rows' lengths."""
    lengths = []
    for row in rows:
        ids, mask = row["input_ids"], row["attention_mask"]
        n = sum(mask)
        lengths.append(n)
        assert len(ids) == seq_len and mask == [1] * n + [0] * (seq_len - n)
        assert ids[n:] == [tok.pad_id] * (seq_len - n)
        assert ids[0] == tok.cls_id and ids.count(tok.cls_id) == 1 and ids.count(tok.sep_id) <= 2
        words = [w for w in tok.decode(ids).split() if w != "."]
        doc_ids = {w.split("s")[0] for w in words}
        assert len(doc_ids) == 1, words  # never two documents' text in one example
        sentences = sorted({int(w.split("s")[1].split("w")[0]) for w in words})
        assert sentences[0] % 2 == 0 and sentences in ([sentences[0]], [sentences[0], sentences[0] + 1])
        if n < seq_len:  # not cut: both sentences whole, ending in [SEP]
            assert ids[n - 1] == tok.sep_id
    return lengths


def test_prepared_examples_pair_consecutive_sentences_of_one_document(tmp_path):
    data_cfg, tok_cfg = corpus_files(tmp_path)
    data = prepare_pretraining_data(data_cfg, tok_cfg, seq_len=16, cache_dir=tmp_path / "cache", seed=0)
    assert data.stats["examples"] == "sentence_pairs" and data.stats["num_train_docs"] == 10
    lengths = check_pair_rows(example_rows(data.train), data.tokenizer, 16)
    assert min(lengths) < 16 and max(lengths) == 16  # some pairs are cut, most are not
    assert data.stats["mean_example_tokens"] == pytest.approx(sum(lengths) / len(lengths))
    assert len(lengths) == sum((3 + d % 4 + 1) // 2 for d in range(10))  # ceil(sentences / 2) per doc

    # the stage reads the rows as fixed-length tensors, as it reads packed blocks
    from convexp.tasks.pretraining.batches import numpy_rows, stack_rows
    from convexp.tasks.pretraining.chunks import COMPACT_COLUMNS

    batch = stack_rows(numpy_rows(data.train, COMPACT_COLUMNS), [0, 1, 2, 3], COMPACT_COLUMNS)
    assert batch["input_ids"].shape == (4, 16) and batch["token_type_ids"].eq(0).all()

    # a streaming corpus gives the same kind of rows, lazily
    from convexp.tasks.pretraining.streaming import prepare_streaming

    streamed = prepare_streaming({**data_cfg, "streaming": True}, tok_cfg, 16, tmp_path / "cache", 0)
    assert check_pair_rows(streamed.train, streamed.tokenizer, 16)


def test_example_format_errors_are_one_line(tmp_path):
    data_cfg, tok_cfg = corpus_files(tmp_path)
    for bad, words in (
        ({"pair_format": "nsp"}, ["sentence_pairs", "objective.pair_format=pairs"]),
        ({"data_cfg": {**data_cfg, "examples": "blocks"}}, ["data.examples", "sentence_pairs"]),
    ):
        args = dict(data_cfg=data_cfg, tokenizer_cfg=tok_cfg, seq_len=16, cache_dir=tmp_path, seed=0)
        with pytest.raises(DataError) as e:
            prepare_pretraining_data(**{**args, **bad})
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words)


def test_chang_sweeps_use_sentence_pairs_at_every_scale(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from convexp.sweep.compute import pretrain_tokens
    from convexp.tasks.pretraining.cost import pretrain_flops
    from convexp.sweep.nodes import pretrain_node
    from convexp.sweep.spec import load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path))

    def first_pretrain(name, scale):
        sweep = load_sweep(name)
        v = next(iter(sweep.variants.values()))
        _, cfg, model_cfg = pretrain_node(sweep, v, OmegaConf.create({"scale": scale}), [])
        return cfg, model_cfg

    for scale in ("smoke", "paper"):
        for name in ("conv-injection", "relative-positions"):
            cfg, model_cfg = first_pretrain(name, scale)
            assert cfg.data.examples == "sentence_pairs", (name, scale)
        packed, packed_model = first_pretrain("convbert-kernel-size", scale)
        assert packed.data.examples == "electra"  # ConvBERT's recipe: ELECTRA's examples
        steps_batch = cfg.trainer.max_steps * cfg.trainer.batch_size
        # ELECTRA's examples are counted at seq_len tokens (as packed blocks); Chang et al.'s pairs
        # fewer (the corpus's mean)
        packed_steps_batch = packed.trainer.max_steps * packed.trainer.batch_size
        assert pretrain_tokens(packed) == packed_steps_batch * packed.seq_len
        assert 0.2 * cfg.seq_len * steps_batch < pretrain_tokens(cfg) < 0.7 * cfg.seq_len * steps_batch
        # ... but padded to seq_len, as Chang et al.'s dataset pads them: the compute is the same
        as_packed = OmegaConf.merge(cfg, {"data": {"examples": "packed"}})
        assert pretrain_flops(cfg, model_cfg) == pretrain_flops(as_packed, model_cfg)


def test_changs_corpus_is_bookcorpus_and_wikitext103_composed_through_datasets(tmp_path):
    """Chang et al. §4 / appendix A.1: BookCorpus + WikiText-103. conf/data/bookcorpus_wikitext103.yaml
    names the two hub datasets (data.parts); the same code path is run here on local stand-ins
    (load_dataset reads a folder as it reads a hub repository): BookCorpus's one sentence per row
    grouped into documents of rows_per_doc rows, then WikiText's rows, blank ones dropped."""
    import json

    from omegaconf import OmegaConf

    from convexp.config.compose import compose_stage
    from convexp.data.corpus import load_corpus
    from convexp.sweep.cards import corpus

    cfg = compose_stage("pretrain", ["model=chang_small", "data=bookcorpus_wikitext103"])
    assert [(p.path, p.name) for p in cfg.data.parts] == [
        ("bookcorpus/bookcorpus", None), ("Salesforce/wikitext", "wikitext-103-raw-v1")
    ]
    assert corpus(cfg.data) == "bookcorpus/bookcorpus + Salesforce/wikitext (wikitext-103-raw-v1)"

    book, wiki = tmp_path / "book", tmp_path / "wiki"
    book.mkdir(), wiki.mkdir()
    sentences = [f"b{i} says hello ." for i in range(10)]
    (book / "train.jsonl").write_text("".join(json.dumps({"text": s}) + "\n" for s in sentences))
    paragraphs = [" = w0 = ", "", "w1 is a paragraph . it has two sentences .", " "]
    (wiki / "train.jsonl").write_text("".join(json.dumps({"line": p}) + "\n" for p in paragraphs))
    parts = [
        {**dict(cfg.data.parts[0]), "path": str(book), "rows_per_doc": 4},
        {**dict(cfg.data.parts[1]), "path": str(wiki), "name": None, "text_field": "line"},
    ]
    data = {**OmegaConf.to_container(cfg.data), "parts": parts, "val_docs": 1}
    docs = load_corpus(data)["text"]
    assert docs == ["\n".join(sentences[0:4]), "\n".join(sentences[4:8]), "\n".join(sentences[8:10]),
                    " = w0 = ", "w1 is a paragraph . it has two sentences ."]
    # Chang et al.'s examples from it: consecutive BookCorpus sentences paired
    tok = {"kind": "pretrained", "path": str(write_vocab(tmp_path / "vocab.txt", [
        *[f"b{i}" for i in range(10)], "says", "hello", "=", "w0", "w1", "is", "a", "paragraph", "it", "has",
        "two", "sentences", "."]))}
    prepared = prepare_pretraining_data({**data, "examples": "sentence_pairs"}, tok, 16, tmp_path / "cache", 0)
    first = prepared.tokenizer.decode(prepared.train[0]["input_ids"]).replace(".", " ").split()
    assert first == ["b0", "says", "hello", "b1", "says", "hello"]
    for bad, words in (
        ({"parts": []}, ["data.parts", "non-empty"]),
        ({"parts": [{"name": "x"}]}, ["data.parts[0]", "path"]),
        ({"parts": [{"path": "x", "rows_per_doc": 0}]}, ["rows_per_doc=0"]),
        ({"val_split": "validation"}, ["data.val_split", "data.val_docs"]),
    ):
        with pytest.raises(DataError) as e:
            load_corpus({**data, **bad})
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
