"""tokenizer=bert_uncased: BERT's uncased WordPiece vocabulary (30,522 tokens), from a local
vocab.txt or downloaded from the hub, with BERT's basic tokenization."""

import pytest
from helpers import write_vocab

from convexp.config.compose import compose_stage
from convexp.data.errors import TokenizerError
from convexp.data.tokenizer import build_tokenizer
from convexp.errors import UserError

BERT_SIZE = 30522
WORDS = ["hello", ",", "world", "!", "cafe", "run", "##ning", "the", "."]


def bert_sized_vocab(path):
    """A vocab.txt with BERT's 30,522 entries: the specials, a few real pieces, fillers."""
    filler = [f"w{i}" for i in range(BERT_SIZE - 5 - len(WORDS))]
    return write_vocab(path, [*WORDS, *filler])


def tokenizer_cfg(*overrides):
    return compose_stage("pretrain", ["tokenizer=bert_uncased", *overrides]).tokenizer


def no_training():
    pytest.fail("a pretrained vocabulary must not be trained")


def test_local_vocab_txt_with_bert_basic_tokenization(tmp_path):
    vocab = bert_sized_vocab(tmp_path / "vocab.txt")
    tok = build_tokenizer(tokenizer_cfg(f"tokenizer.path={vocab}"), no_training)
    assert tok.vocab_size == BERT_SIZE and tok.kind == "wordpiece"
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    # lowercase, accents stripped, punctuation split off, "##" continuation, unknown word -> [UNK]
    ids = tok.encode_batch(["Hello, WORLD! Café Running zebra"])[0]
    words = {w: 5 + i for i, w in enumerate(WORDS)}
    assert ids == [words[w] for w in ["hello", ",", "world", "!", "cafe", "run", "##ning"]] + [tok.unk_id]
    # a folder holding the vocab.txt works too
    assert build_tokenizer(tokenizer_cfg(f"tokenizer.path={tmp_path}"), no_training).vocab_size == BERT_SIZE


def test_hub_vocab_is_downloaded_only_when_needed(tmp_path, monkeypatch):
    import huggingface_hub

    vocab = bert_sized_vocab(tmp_path / "vocab.txt")
    calls = []

    def download(repo_id, filename, **kw):
        calls.append((repo_id, filename))
        return str(vocab)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    cfg = tokenizer_cfg()
    assert cfg.path == "bert-base-uncased" and cfg.vocab_size == BERT_SIZE and cfg.lowercase
    tok = build_tokenizer(cfg, no_training)
    assert calls == [("bert-base-uncased", "vocab.txt")] and tok.vocab_size == BERT_SIZE
    assert tok.encode_batch(["the world"]) == [[5 + WORDS.index("the"), 5 + WORDS.index("world")]]
    # a local file is not looked up on the hub
    build_tokenizer(tokenizer_cfg(f"tokenizer.path={vocab}"), no_training)
    assert len(calls) == 1


def test_bad_vocabulary_is_one_line(tmp_path):
    def one_line(excinfo, *words):
        msg = str(excinfo.value)
        assert isinstance(excinfo.value, UserError) and "\n" not in msg
        assert all(w in msg for w in words), msg

    with pytest.raises(TokenizerError) as e:  # a missing local file
        build_tokenizer(tokenizer_cfg(f"tokenizer.path={tmp_path}/nowhere/vocab.txt"), no_training)
    one_line(e, "nowhere", "tokenizer.path")
    with pytest.raises(TokenizerError) as e:  # the hub while offline (conftest: HF_HUB_OFFLINE=1), not cached
        build_tokenizer(tokenizer_cfg("tokenizer.path=no-such-org/no-such-model"), no_training)
    one_line(e, "no-such-org/no-such-model", "tokenizer.path")
    small = write_vocab(tmp_path / "small.txt", WORDS)
    with pytest.raises(TokenizerError) as e:  # not BERT's vocabulary
        build_tokenizer(tokenizer_cfg(f"tokenizer.path={small}"), no_training)
    one_line(e, "14 tokens", "30522", "tokenizer.vocab_size")
    tok = build_tokenizer(tokenizer_cfg(f"tokenizer.path={small}", "tokenizer.vocab_size=null"), no_training)
    assert tok.vocab_size == 14


def test_sweeps_use_bert_vocabulary_above_smoke(tmp_path, monkeypatch):
    """ConvBERT/ELECTRA/BERT sweeps pre-train with BERT's vocabulary at scale=small|paper; smoke
    trains its small tokenizer; Chang et al.'s sweeps keep their SentencePiece Unigram."""
    from helpers import write_sweep

    from omegaconf import OmegaConf

    from convexp.sweep.nodes import pretrain_node
    from convexp.sweep.spec import SweepError, load_sweep

    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path))
    def first_pretrain(sweep, scale):
        v = next(iter(sweep.variants.values()))
        return pretrain_node(sweep, v, OmegaConf.create({"scale": scale}), [])[:2]

    for name in ("convbert-kernel-size", "objective"):
        sweep = load_sweep(name)
        assert sweep.tokenizer == "bert_uncased"
        for scale, kind in (("paper", "pretrained"), ("small", "pretrained"), ("smoke", "wordpiece")):
            node, cfg = first_pretrain(sweep, scale)
            assert cfg.tokenizer.kind == kind, (name, scale)
            assert ("tokenizer=bert_uncased" in node.overrides) == (scale != "smoke")
    chang = load_sweep("conv-injection")
    assert chang.tokenizer is None
    _, cfg = first_pretrain(chang, "paper")
    assert (cfg.tokenizer.kind, cfg.tokenizer.vocab_size) == ("unigram", 30004)

    bad = write_sweep(tmp_path / "bad.yaml", {"a": {"pretrain": ["model=bert_small"]}}, tokenizer="nope")
    with pytest.raises(SweepError) as e:
        load_sweep(str(bad))
    assert "tokenizer 'nope'" in str(e.value) and "bert_uncased" in str(e.value)
