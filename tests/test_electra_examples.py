"""ELECTRA's pre-training examples (data.examples=electra; google-research/electra
build_pretraining_dataset.py ExampleBuilder): an example ends at a document's end, A/B split at
line boundaries, 10% of the examples one segment, 5% a random shorter target length; the recipe of
the ConvBERT / ELECTRA / BERT-Small rows."""

import random

import pytest
from helpers import example_rows, write_vocab

from convexp.config.compose import compose_stage
from convexp.data.errors import DataError
from convexp.tasks.pretraining.packing import SpecialIds, electra_examples
from convexp.tasks.pretraining.pretraining import prepare_pretraining_data

SPECIALS = SpecialIds(cls_id=2, sep_id=3, pad_id=0)
CLS, SEP, PAD = 2, 3, 0


def segments(row) -> tuple[list[int], list[int]]:
    """(A, B) of a row: [CLS] A [SEP] (B [SEP])."""
    n = sum(row["attention_mask"])
    ids, types = row["input_ids"][:n], row["token_type_ids"][:n]
    assert ids[0] == CLS and ids[-1] == SEP and row["input_ids"][n:] == [PAD] * (len(row["input_ids"]) - n)
    first_sep = ids.index(SEP)
    a, b = ids[1:first_sep], ids[first_sep + 1 : -1]
    assert types == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
    assert (b == []) == (first_sep == n - 1)
    return a, b


def test_examples_stay_in_their_document_and_split_at_line_boundaries():
    """Every token is unique and names its (document, line, position): no example holds two
    documents; a line lies in A or in B, whole (only the segment that was cut to fit ends in part
    of a line); a segment's lines start at their first token."""
    rng = random.Random(0)
    where, docs, next_id = {}, [], 10
    for d in range(300):
        doc = []
        for line_no in range(rng.randint(1, 30)):
            line = list(range(next_id, next_id + rng.randint(1, 40)))
            next_id += len(line)
            where.update({t: (d, line_no, i, len(line)) for i, t in enumerate(line)})
            doc.append(line)
        docs.append(doc)
    seq_len = 64
    rows = list(electra_examples(docs, seq_len, SPECIALS, random.Random(1)))
    assert len(rows) > 500
    seen_docs = []
    for row in rows:
        a, b = segments(row)
        assert len({where[t][0] for t in a + b}) == 1  # one document
        seen_docs.append(where[a[0]][0])
        lines_a, lines_b = {where[t][:2] for t in a}, {where[t][:2] for t in b}
        assert not lines_a & lines_b  # a line is never split between A and B
        for seg, capped in ((a, len(a) == seq_len - 2), (b, len(a) + len(b) == seq_len - 3)):
            runs = [[t for t in seg if where[t][:2] == line] for line in dict.fromkeys(where[t][:2] for t in seg)]
            for k, run in enumerate(runs):
                assert where[run[0]][2] == 0  # lines enter whole...
                if not (capped and k == len(runs) - 1):
                    assert len(run) == where[run[0]][3]  # ...and stay whole unless cut to fit
    assert seen_docs == sorted(seen_docs) and set(seen_docs) == set(range(300))  # in order, none skipped
    # the same seed, the same examples
    assert rows == list(electra_examples(docs, seq_len, SPECIALS, random.Random(1)))


def test_single_segment_and_short_target_rates():
    """One long document of one-token lines: every example holds exactly its target of tokens, so
    a one-segment row is the 10% draw, and a row shorter than seq_len a shorter target (5%, of
    which targets 5..124 of 5..128 give a row shorter than 128)."""
    seq_len, n = 128, 8_000
    doc = [[10 + i % 1000] for i in range(n * seq_len)]
    rows = list(electra_examples([doc], seq_len, SPECIALS, random.Random(7)))[:-1]  # the document's end aside
    single = [not segments(r)[1] for r in rows]
    lengths = [sum(r["attention_mask"]) for r in rows]
    assert len(rows) > n
    assert sum(single) / len(rows) == pytest.approx(0.10, abs=0.012)
    assert sum(x < seq_len for x in lengths) / len(rows) == pytest.approx(0.05 * 120 / 124, abs=0.008)
    assert min(lengths) <= 12 and min(lengths) >= 5 + 2  # targets reach down to 5 tokens
    full_pairs = [segments(r) for r, x, s in zip(rows, lengths, single) if x == seq_len and not s]
    # a full pair: A takes lines while under (128 - 3) // 2 = 62 tokens (61), then the next one half
    # the time (62); targets 125, 126 (of the shorter ones) give 61 // 60 tokens, 60 or 61
    sizes = [len(a) for a, _ in full_pairs]
    assert set(sizes) <= {60, 61, 62} and sizes.count(62) / sizes.count(61) == pytest.approx(1.0, abs=0.08)


def corpus_files(tmp_path, n_docs=30):
    """Documents of one sentence per line (words name document, line and position), a vocab.txt."""
    docs, words = [], []
    for d in range(n_docs):
        lines = []
        for s in range(4 + d % 5):
            w = [f"d{d}l{s}w{i}" for i in range(3 + (d + s) % 7)]
            words += w
            lines.append(" ".join(w))
        docs.append("\n".join(lines))
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "docs.txt").write_text("\n\n".join(docs) + "\n")
    vocab = write_vocab(tmp_path / "vocab.txt", words)
    data = {"source": "files", "path": str(tmp_path / "corpus"), "val_docs": 3, "examples": "electra"}
    return data, {"kind": "pretrained", "path": str(vocab)}


def test_prepared_examples_from_files(tmp_path):
    data_cfg, tok_cfg = corpus_files(tmp_path)
    data = prepare_pretraining_data(data_cfg, tok_cfg, seq_len=24, cache_dir=tmp_path / "cache", seed=0)
    assert data.stats["examples"] == "electra" and data.stats["num_train_docs"] == 27
    tok = data.tokenizer
    for row in example_rows(data.train):
        n = sum(row["attention_mask"])
        words = tok.decode(row["input_ids"][:n]).split()
        assert len({w.split("l")[0] for w in words}) == 1  # one document
        types = row["token_type_ids"][:n]
        if 1 in types:  # B starts at a line's first word
            b_start = types.index(1)
            assert tok.decode([row["input_ids"][b_start]]).endswith("w0")
    with pytest.raises(DataError, match="data.examples=electra has no nsp label"):
        prepare_pretraining_data(data_cfg, tok_cfg, 24, tmp_path / "cache", 0, pair_format="nsp")


# ELECTRA's data builder is the recipe of every row trained with ELECTRA's code (ConvBERT's too):
# conf/recipe/electra_small.yaml and the recipes on it; BERT-base (Google's BERT code) and Chang
# et al. (their sweeps: sentence_pairs) build theirs otherwise.
@pytest.mark.parametrize(
    "model,examples",
    [("electra_small", "electra"), ("bert_small", "electra"), ("convbert_small", "electra"),
     ("convbert_medium_small", "electra"), ("convbert_base", "electra"), ("electra_base", "electra"),
     ("bert_base", "packed"), ("chang_small", "sentence_pairs")],  # Chang et al.'s pairs (recipe.paper)
)
def test_the_electra_recipes_build_electras_examples(model, examples):
    cfg = compose_stage("pretrain", [f"model={model}"])
    assert cfg.data.examples == examples
    assert compose_stage("pretrain", [f"model={model}", "data.examples=packed"]).data.examples == "packed"
