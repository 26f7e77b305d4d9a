"""The GLUE data layer: classic TSV files, synthetic tasks, tokenisation, metrics, averages,
submissions and errors. Offline: every file is written by the test itself."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import scipy.sparse as sparse
from scipy.stats import pearsonr, spearmanr
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from convexp.tasks.classification.encoding import collate, encode_example, tokenize_task, truncated_lengths
from convexp.data.errors import TaskError, TaskFileError, TaskLabelError, UnknownTaskError
from convexp.tasks.classification.loading import load_task, task_features
from convexp.tasks.classification.scores import compute_metrics, convbert_score, glue_average, score_columns, task_score
from convexp.tasks.classification.submissions import write_submission, zip_submission
from convexp.tasks.classification.registry import GLUE_TASKS, SUBMISSION_FILES
from convexp.data.tokenizer import build_tokenizer
from convexp.errors import UserError


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep the datasets library's own cache inside the test's tmp dir."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


# ---------------------------------------------------------------------------- classic layout

QUOTE = "the film 's \" twist is a letdown"  # a lone double quote: literal, not CSV quoting

MNLI_TRAIN_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER.replace("label1\t", "label1\tlabel2\tlabel3\tlabel4\tlabel5\t")
MNLI_TEST_HEADER = MNLI_TRAIN_HEADER.rsplit("\tlabel1", 1)[0]
STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def _mnli(i, s1, s2, gold=None, dev=False):
    lead = f"{i}\t{i}\t{i}e\tfiction\t( {s1} )\t( {s2} )\t(ROOT {s1})\t(ROOT {s2})\t{s1}\t{s2}"
    if gold is None:
        return lead
    return lead + ("\t" + "\t".join([gold] * 5) if dev else f"\t{gold}") + f"\t{gold}"


def _sts(i, s1, s2, score=None):
    row = f"{i}\tmain-news\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{s1}\t{s2}"
    return row if score is None else f"{row}\t{score}"


# task -> file -> lines; EXPECTED: task -> split -> (rows, labels, {field: first value})
CLASSIC = {
    "CoLA": {
        "train.tsv": [
            "gj04\t1\t\tOur friends won't buy this analysis.",
            "gj04\t0\t*\tThey drank the pub.",
            'gj04\t1\t\tHe said "hello.',
        ],
        "dev.tsv": [
            "bc01\t0\t*\tThe more we study verbs, the crazier they get the.",
            "bc01\t1\t\tBill left.",
        ],
        "test.tsv": ["index\tsentence", "0\tBill whistled past the house.", "1\tThe car honked."],
    },
    "SST-2": {
        "train.tsv": ["sentence\tlabel", f"{QUOTE} \t0", "a gorgeous film \t1", "dull \t0"],
        "dev.tsv": ["sentence\tlabel", "it 's a charming journey . \t1"],
        "test.tsv": ["index\tsentence", "0\tuneasy mishmash of styles", '1\t" quoted start'],
    },
    "MRPC": {
        "train.tsv": [
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
            "1\t702876\t702977\tAmrozi accused his brother.\tReferring to him, Amrozi accused his brother.",
            "0\t2108705\t2108831\tYucaipa owned Dominick 's.\tYucaipa bought Dominick 's in 1995.",
        ],
        "dev.tsv": ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", '1\t1\t2\tHe said "no.\tHe said no.'],
        "test.tsv": [
            "index\t#1 ID\t#2 ID\t#1 String\t#2 String",
            "0\t1089874\t1089925\tPCCW 's chief.\tThe chief.",
        ],
    },
    "STS-B": {
        "train.tsv": [STSB_HEADER, _sts(0, "A plane is taking off.", "An air plane is taking off.", "5.000")],
        "dev.tsv": [STSB_HEADER, _sts(0, "A man plays.", "A man sings.", "1.4"), _sts(1, "x", "y", "0.0")],
        "test.tsv": [STSB_HEADER.rsplit("\t", 1)[0], _sts(0, "A girl styles her hair.", "A girl brushes.")],
    },
    "QQP": {
        "train.tsv": [
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            '133273\t213221\t213222\tHow is the life of a "math student?\tWhich is the best book?\t0',
            "402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control?\t1",
        ],
        "dev.tsv": ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "1\t2\t3\tWhy?\tHow?\t0"],
        "test.tsv": ["id\tquestion1\tquestion2", "0\tWould the idea work?\tWill it work?"],
    },
    "MNLI": {
        "train.tsv": [
            MNLI_TRAIN_HEADER,
            _mnli(0, "Conceptually cream skimming has two dimensions.", "Product and geography.", "neutral"),
            _mnli(1, "you know during the season", "You lose the things.", "entailment"),
            _mnli(2, "One of our number will carry out.", "A member will do it.", "contradiction"),
        ],
        "dev_matched.tsv": [
            MNLI_DEV_HEADER,
            _mnli(0, "The new rights are nice.", "Everyone likes it.", "neutral", dev=True),
        ],
        "dev_mismatched.tsv": [
            MNLI_DEV_HEADER,
            _mnli(0, "Your contribution helped.", "It did not help.", "contradiction", dev=True),
            _mnli(1, 'He said "yes.', "He agreed.", "entailment", dev=True),
        ],
        "test_matched.tsv": [MNLI_TEST_HEADER, _mnli(0, "Hierbas is a drink.", "It is a drink.")],
        "test_mismatched.tsv": [MNLI_TEST_HEADER, _mnli(0, "What have you decided?", "Decided?")],
    },
    "QNLI": {
        "train.tsv": [
            "index\tquestion\tsentence\tlabel",
            "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it.\tnot_entailment",
            "1\tWhich missile batteries?\tThe missile batteries were deployed.\tentailment",
        ],
        "dev.tsv": ["index\tquestion\tsentence\tlabel", "0\tWhat came into force?\tThe law did.\tentailment"],
        "test.tsv": ["index\tquestion\tsentence", "0\tWhat organization?\tThe ANC did."],
    },
    "RTE": {
        "train.tsv": [
            "index\tsentence1\tsentence2\tlabel",
            "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons Found in Iraq.\tnot_entailment",
            "1\tA place of sorrow.\tPope is buried.\tentailment",
        ],
        "dev.tsv": [
            "index\tsentence1\tsentence2\tlabel",
            "0\tDana Reeve died.\tChristopher Reeve died.\tentailment",
        ],
        "test.tsv": ["index\tsentence1\tsentence2", "0\tMangla was built.\tMangla is a dam."],
    },
    "WNLI": {  # the real files use 0/1; label names are accepted too
        "train.tsv": [
            "index\tsentence1\tsentence2\tlabel",
            "0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1",
            "1\tJohn couldn't see the stage.\tJohn is so tall.\t0",
        ],
        "dev.tsv": [
            "index\tsentence1\tsentence2\tlabel",
            "0\tThe drain is clogged.\tThe hair is clogged.\tentailment",
        ],
        "test.tsv": [
            "index\tsentence1\tsentence2",
            "0\tMaude and Dora had seen the trains.\tThe trains had.",
        ],
    },
    "diagnostic": {
        "diagnostic.tsv": ["index\tsentence1\tsentence2", "0\tThe cat sat.\tThe cat did not sit."]
    },
}

EXPECTED = {
    "cola": {
        "train": ([1, 0, 1], {"sentence": "Our friends won't buy this analysis."}),
        "validation": ([0, 1], {}),
        "test": ([-1, -1], {"sentence": "Bill whistled past the house."}),
    },
    "sst2": {
        "train": ([0, 1, 0], {"sentence": QUOTE + " "}),
        "validation": ([1], {}),
        "test": ([-1, -1], {"sentence": "uneasy mishmash of styles"}),
    },
    "mrpc": {
        "train": ([1, 0], {"sentence1": "Amrozi accused his brother."}),
        "validation": ([1], {"sentence1": 'He said "no.'}),
        "test": ([-1], {"sentence2": "The chief."}),
    },
    "stsb": {
        "train": ([5.0], {"sentence2": "An air plane is taking off."}),
        "validation": ([1.4, 0.0], {}),
        "test": ([-1.0], {"sentence1": "A girl styles her hair."}),
    },
    "qqp": {
        "train": ([0, 1], {"question1": 'How is the life of a "math student?'}),
        "validation": ([0], {}),
        "test": ([-1], {"question2": "Will it work?"}),
    },
    "mnli": {
        "train": ([1, 0, 2], {"premise": "Conceptually cream skimming has two dimensions."}),
        "validation_matched": ([1], {}),
        "validation_mismatched": ([2, 0], {"hypothesis": "It did not help."}),
        "test_matched": ([-1], {"premise": "Hierbas is a drink."}),
        "test_mismatched": ([-1], {}),
        "test_ax": ([-1], {"hypothesis": "The cat did not sit."}),
    },
    "qnli": {
        "train": ([1, 0], {"question": "When did the third Digimon series begin?"}),
        "validation": ([0], {}),
        "test": ([-1], {"sentence": "The ANC did."}),
    },
    "rte": {
        "train": ([1, 0], {}),
        "validation": ([0], {}),
        "test": ([-1], {"sentence2": "Mangla is a dam."}),
    },
    "wnli": {"train": ([1, 0], {}), "validation": ([1], {}), "test": ([-1], {})},
}


def write_classic(root, files=CLASSIC):
    for folder, contents in files.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, lines in contents.items():
            (root / folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def glue_root(tmp_path):
    return write_classic(tmp_path / "glue")


@pytest.mark.parametrize("task", list(GLUE_TASKS))
def test_classic_layout_loads_every_task(glue_root, task):
    splits = load_task(task, {"source": "local", "path": str(glue_root)})
    t = GLUE_TASKS[task]
    assert list(splits) == list(EXPECTED[task])
    for split, (labels, first) in EXPECTED[task].items():
        ds = splits[split]
        assert ds.column_names == [*t.text_fields, "label", "idx"]
        assert ds["label"] == pytest.approx(labels)
        assert ds["idx"] == list(range(len(labels)))
        for field, value in first.items():
            assert ds[0][field] == value
    assert splits["train"].features["label"].dtype == ("float32" if t.is_regression else "int64")


def test_mnli_without_diagnostic_file_has_no_ax_split(tmp_path):
    root = write_classic(tmp_path / "glue", {k: v for k, v in CLASSIC.items() if k != "diagnostic"})
    splits = load_task("mnli", {"source": "local", "path": str(root)})
    assert "test_ax" not in splits and "test_mismatched" in splits


def test_disk_source_round_trip(tmp_path):
    import datasets

    splits = load_task("rte", {"source": "synthetic", "synthetic_size": 60})
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "saved" / "rte"))
    again = load_task("rte", {"source": "disk", "path": str(tmp_path / "saved")})
    assert {k: v[:] for k, v in again.items()} == {k: v[:] for k, v in splits.items()}


@pytest.mark.parametrize("task", ["mrpc", "stsb"])
def test_both_orders_holds_every_training_pair_twice_and_leaves_dev_as_it_is(glue_root, task):
    """ELECTRA's double_unordered (classification_tasks.py, MRPC and STS _create_examples): under
    protocol=convbert the training split holds each pair as (a, b) and as (b, a) with its label;
    dev and test are the file's rows (ELECTRA doubles split == "train" only)."""
    from omegaconf import OmegaConf

    from convexp.config.compose import compose_stage
    from convexp.tasks.classification.loading import prepare_task

    source = OmegaConf.create({"source": "local", "path": str(glue_root)})
    cfg = compose_stage("finetune", ["init=x", f"task={task}", "protocol=convbert"])
    assert cfg.both_orders  # on in ConvBERT's (ELECTRA's) recipe, for the unordered tasks
    _, once = prepare_task(cfg.task, source, both_orders=False)
    _, twice = prepare_task(cfg.task, source, both_orders=cfg.both_orders)
    a, b = GLUE_TASKS[task].text_fields
    rows = lambda ds: sorted((r[a], r[b], r["label"], r["idx"]) for r in ds)  # noqa: E731
    assert rows(twice["train"]) == sorted(rows(once["train"]) + [(y, x, l, i) for x, y, l, i in rows(once["train"])])
    assert twice["train"].features == once["train"].features
    for split in once:
        if split != "train":
            assert twice[split][:] == once[split][:]
    for protocol in ("chang", "bermo"):  # each pair once, as given
        assert not compose_stage("finetune", ["init=x", f"task={task}", f"protocol={protocol}"]).both_orders
    assert not compose_stage("finetune", ["init=x", "task=rte", "protocol=convbert"]).both_orders  # ordered


def test_both_orders_on_single_sentences_is_one_line():
    from omegaconf import OmegaConf

    from convexp.tasks.classification.loading import prepare_task

    with pytest.raises(TaskError, match="sst2 has single sentences.*both_orders=false"):
        prepare_task(OmegaConf.create({"name": "sst2"}), {"source": "synthetic", "synthetic_size": 60}, True)


# ---------------------------------------------------------------------------- errors


def one_line_error(exc_info, *parts):
    msg = str(exc_info.value)
    assert isinstance(exc_info.value, UserError) and "\n" not in msg
    for p in parts:
        assert p in msg, msg


def test_unknown_task():
    with pytest.raises(UnknownTaskError) as e:
        load_task("squad", {"source": "synthetic"})
    one_line_error(e, "squad", "cola")


def test_missing_file(glue_root):
    (glue_root / "RTE" / "dev.tsv").unlink()
    with pytest.raises(TaskFileError) as e:
        load_task("rte", {"source": "local", "path": str(glue_root)})
    one_line_error(e, "RTE/dev.tsv")


def test_missing_root(tmp_path):
    with pytest.raises(TaskFileError) as e:
        load_task("cola", {"source": "local", "path": str(tmp_path / "nowhere")})
    one_line_error(e, "nowhere")


def test_wrong_columns(glue_root):
    (glue_root / "STS-B" / "train.tsv").write_text("sentence1\tsentence2\tlabel\na\tb\t1.0\n")
    with pytest.raises(TaskFileError) as e:
        load_task("stsb", {"source": "local", "path": str(glue_root)})
    one_line_error(e, "STS-B/train.tsv", "score")


def test_headerless_row_with_wrong_width(glue_root):
    (glue_root / "CoLA" / "dev.tsv").write_text("bc01\t1\t\tfine\nbc01\t1\tonly three\n")
    with pytest.raises(TaskFileError) as e:
        load_task("cola", {"source": "local", "path": str(glue_root)})
    one_line_error(e, "CoLA/dev.tsv:2")


def test_unknown_label_string(glue_root):
    path = glue_root / "RTE" / "train.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tneutral\n")
    with pytest.raises(TaskLabelError) as e:
        load_task("rte", {"source": "local", "path": str(glue_root)})
    one_line_error(e, "RTE/train.tsv:2", "neutral", "not_entailment")


def test_bad_source_config():
    with pytest.raises(UserError):
        load_task("cola", {"source": "ftp"})
    with pytest.raises(UserError):
        load_task("cola", {"source": "synthetic", "sizes": 3})
    with pytest.raises(UserError):
        load_task("cola", {"source": "local"})


# ---------------------------------------------------------------------------- metrics and averages


@pytest.mark.parametrize("task", list(GLUE_TASKS))
def test_metrics_match_sklearn_and_scipy(task):
    t, rng = GLUE_TASKS[task], np.random.default_rng(len(task))
    n = 300
    if t.is_regression:
        labels = np.round(rng.uniform(0, 5, n), 1)  # ties, as in STS-B
        preds = labels + rng.normal(0, 1.5, n)
        expected = {"pearson": pearsonr(preds, labels)[0], "spearman": spearmanr(preds, labels)[0]}
    else:
        labels = rng.integers(0, t.num_labels, n)
        logits = rng.normal(size=(n, t.num_labels)) + 0.8 * np.eye(t.num_labels)[labels]
        preds = logits.argmax(-1)
        expected = {
            "accuracy": accuracy_score(labels, preds),
            "mcc": matthews_corrcoef(labels, preds),
            "f1": f1_score(labels, preds) if t.num_labels == 2 else None,
        }
        got_from_logits = compute_metrics(task, logits, labels)
        assert got_from_logits == compute_metrics(task, preds, labels)
    got = compute_metrics(task, preds, labels)
    assert set(got) == set(t.metrics)
    for k, v in got.items():
        assert v == pytest.approx(100 * expected[k], abs=1e-4)


def test_degenerate_predictions_score_zero():
    labels = np.array([0, 1, 0, 1])
    assert compute_metrics("cola", np.ones(4, int), labels)["mcc"] == 0.0
    m = compute_metrics("stsb", np.full(4, 2.5), np.array([1.0, 2.0, 3.0, 4.0]))
    assert m == {"pearson": 0.0, "spearman": 0.0}


def test_task_scores():
    m = {"f1": 90.0, "accuracy": 86.0}
    assert task_score("mrpc", m) == 88.0 and convbert_score("mrpc", m) == 86.0
    assert task_score("qqp", m) == 88.0 and convbert_score("qqp", m) == 86.0
    s = {"pearson": 80.0, "spearman": 79.0}
    assert task_score("stsb", s) == 79.5 and convbert_score("stsb", s) == 79.0
    assert task_score("cola", {"mcc": 40.0}) == convbert_score("cola", {"mcc": 40.0}) == 40.0


def test_chang_average_reproduces_table_1():
    # Chang et al. Table 1, BERT-small, composite: GLUE 75.2 (mean of the 9 columns).
    row = {"cola": 40.4, "mnli-m": 78.2, "mnli-mm": 77.4, "mrpc": 85.0, "qnli": 83.3}
    row |= {"qqp": 77.7, "rte": 64.7, "sst2": 87.8, "stsb": 82.1, "wnli": 0.0}
    assert glue_average(row, style="chang") == pytest.approx(676.6 / 9)
    assert round(glue_average(row, style="chang"), 1) == 75.2


def test_convbert_average_uses_eight_tasks_and_matched_mnli():
    row = {"cola": 60.0, "sst2": 90.0, "mrpc": 88.0, "stsb": 87.0, "qqp": 89.0, "mnli": 82.0, "qnli": 88.0}
    row |= {"rte": 68.0, "mnli-mm": 10.0, "wnli": 0.0}
    assert glue_average(row, style="convbert") == pytest.approx(652.0 / 8)
    matched_key = {**row, "mnli-m": row.pop("mnli")}
    assert glue_average(matched_key, style="convbert") == pytest.approx(652.0 / 8)
    with pytest.raises(UserError) as e:
        glue_average({"cola": 1.0}, style="chang")
    one_line_error(e, "mnli-m")
    with pytest.raises(UserError):
        glue_average(row, style="bert")


def test_score_columns():
    results = {
        "mnli": {"validation_matched": {"accuracy": 80.0}, "validation_mismatched": {"accuracy": 79.0}},
        "mrpc": {"validation": {"f1": 90.0, "accuracy": 86.0}},
        "wnli": {"validation": {"accuracy": 56.0}},
    }
    assert score_columns(results, "chang") == {"mnli-m": 80.0, "mnli-mm": 79.0, "mrpc": 88.0, "wnli": 56.0}
    assert score_columns(results, "convbert") == {"mnli": 80.0, "mnli-mm": 79.0, "mrpc": 86.0, "wnli": 56.0}


# ---------------------------------------------------------------------------- submissions


def test_submission_files_and_zip(tmp_path):
    out = tmp_path / "submission"
    written = {}
    for t in GLUE_TASKS.values():
        for split, name in t.submission:
            idx = np.array([2, 0, 1])  # unsorted on purpose
            if t.is_regression:
                preds = np.array([5.7, -0.2, 2.345])
            else:
                preds = np.eye(t.num_labels)[np.array([1, 0, t.num_labels - 1])]  # logits -> argmax
            path = write_submission(t.name, split, idx, preds, out)
            assert path.name == name
            written[name] = path.read_text().splitlines()
    assert sorted(written) == sorted(SUBMISSION_FILES) and len(SUBMISSION_FILES) == 11
    for name, lines in written.items():
        assert lines[0] == "index\tprediction" and [x.split("\t")[0] for x in lines[1:]] == ["0", "1", "2"]
    assert written["STS-B.tsv"][1:] == ["0\t0.000", "1\t2.345", "2\t5.000"]
    assert written["CoLA.tsv"][1:] == ["0\t0", "1\t1", "2\t1"]
    assert written["WNLI.tsv"][1:] == ["0\t0", "1\t1", "2\t1"]
    assert written["RTE.tsv"][1:] == ["0\tentailment", "1\tnot_entailment", "2\tnot_entailment"]
    assert written["MNLI-mm.tsv"][1:] == ["0\tentailment", "1\tcontradiction", "2\tneutral"]
    assert written["AX.tsv"][1:] == written["MNLI-m.tsv"][1:]
    z = zip_submission(out, tmp_path / "glue.zip")
    with zipfile.ZipFile(z) as f:
        assert sorted(f.namelist()) == sorted(SUBMISSION_FILES)
        assert f.read("RTE.tsv").decode().splitlines() == written["RTE.tsv"]
    with pytest.raises(UserError):
        write_submission("rte", "validation", [0], [0], out)
    with pytest.raises(UserError):
        zip_submission(tmp_path / "empty", tmp_path / "x.zip")


def test_submission_messages_say_what_to_do(tmp_path, caplog):
    """A zip of every task but WNLI says what to add (a warning); a run of some tasks, how to get
    the rest (an INFO line: nothing is wrong)."""
    import logging

    out = tmp_path / "sub"
    for t in GLUE_TASKS.values():
        for split, name in t.submission:
            if name != "WNLI.tsv":
                write_submission(t.name, split, [0], [0.0] if t.is_regression else [0], out)
    with caplog.at_level(logging.INFO, logger="convexp.tasks.classification.submissions"):
        zip_submission(out, tmp_path / "all.zip")
        [wnli] = caplog.records
        assert wnli.levelno == logging.WARNING and "WNLI.tsv" in wnli.getMessage()
        assert "majority class" in wnli.getMessage() and str(out) in wnli.getMessage()
        caplog.clear()
        only = tmp_path / "rte"
        write_submission("rte", "test", [0], [0], only)
        zip_submission(only, tmp_path / "rte.zip")
        [partial] = caplog.records
        assert partial.levelno == logging.INFO and "task=all" in partial.getMessage()


# ---------------------------------------------------------------------------- synthetic tasks

SYNTH = {"source": "synthetic", "synthetic_size": 1600, "seed": 3}


def test_synthetic_is_deterministic_with_all_splits():
    for task, t in GLUE_TASKS.items():
        a = load_task(task, {"source": "synthetic", "synthetic_size": 80, "seed": 1})
        b = load_task(task, {"source": "synthetic", "synthetic_size": 80, "seed": 1})
        c = load_task(task, {"source": "synthetic", "synthetic_size": 80, "seed": 2})
        assert list(a) == list(t.splits)
        assert {k: v[:] for k, v in a.items()} == {k: v[:] for k, v in b.items()}
        assert a["train"][:] != c["train"][:]
        assert len(a["train"]) == 80 and all(len(a[s]) == 50 for s in t.splits if s != "train")
        for s in t.test_splits:
            assert set(a[s]["label"]) == {-1}
        labels = a["train"]["label"]
        if t.is_regression:
            assert min(labels) >= 0 and max(labels) <= 5 and len(set(labels)) > 10
        else:
            assert set(labels) == set(range(t.num_labels))
        assert all(ds.features == task_features(task) for ds in a.values())


FUNCTION_WORDS = set("a an the this that every one these those many some two few do does not".split())
FUNCTION_WORDS |= set("and while because but".split())


def _words(text):
    return text.replace(".", " .").replace(",", " ,").replace("?", " ?").split()


def _stems(text):
    return [w[:-1] if w.endswith("s") else w for w in _words(text)]


def _shapes(text):
    """Content words reduced to their number marking: what grammaticality depends on."""
    return [
        w if w in FUNCTION_WORDS or w in ".," else ("S" if w.endswith("s") else "W") for w in _words(text)
    ]


def _features(vec, t, rows, fit=False):
    """Bag of words (single sentences) or bags of both sentences + shared words + overlap ratios."""
    if not t.is_pair:
        texts = rows[t.text_fields[0]]
        return vec.fit_transform(texts) if fit else vec.transform(texts)
    a, b = rows[t.text_fields[0]], rows[t.text_fields[1]]
    if fit:
        vec.fit(a + b)
    A, B = vec.transform(a), vec.transform(b)
    both = A.multiply(B)
    na, nb, nboth = A.sum(1), B.sum(1), both.sum(1)
    ratios = np.hstack([nboth / na, nboth / nb, (nb - nboth) / nb, (na - nboth) / na])
    return sparse.hstack([A, B, both, sparse.csr_matrix(5 * ratios)]).tocsr()


@pytest.mark.parametrize("task", list(GLUE_TASKS))
def test_synthetic_tasks_are_learnable(task):
    """A bag-of-words model (word shapes for CoLA; word overlap for pairs) beats chance on dev."""
    t = GLUE_TASKS[task]
    splits = load_task(task, SYNTH)
    analyzer = _shapes if task == "cola" else _stems
    ngrams = (1, 3) if task == "cola" else (1, 1 if t.is_pair else 2)
    vec = CountVectorizer(
        tokenizer=analyzer, token_pattern=None, lowercase=False, ngram_range=ngrams, binary=True
    )
    train = splits["train"][:]
    model = Ridge() if t.is_regression else LogisticRegression(max_iter=3000)
    model.fit(_features(vec, t, train, fit=True), np.array(train["label"]))
    for split in t.dev_splits:
        dev = splits[split][:]
        y, p = np.array(dev["label"]), model.predict(_features(vec, t, dev))
        if t.is_regression:
            assert pearsonr(p, y)[0] > 0.5
        else:
            majority = np.bincount(y).max() / len(y)
            assert accuracy_score(y, p) > majority + 0.1, (split, accuracy_score(y, p), majority)


# ---------------------------------------------------------------------------- tokenising


def test_truncation_is_longest_first():
    assert truncated_lengths(3, 4, 10) == (3, 4)
    assert truncated_lengths(100, 5, 50) == (45, 5)
    assert truncated_lengths(5, 100, 50) == (5, 45)
    assert truncated_lengths(10, 10, 15) == (8, 7)

    def reference(la, lb, budget):  # one token at a time from the longer (the second on ties)
        while la + lb > budget:
            if la > lb:
                la -= 1
            else:
                lb -= 1
        return la, lb

    for la in range(0, 30, 3):
        for lb in range(0, 30, 2):
            for budget in (1, 7, 16, 25):
                assert truncated_lengths(la, lb, budget) == reference(la, lb, budget)
    ids, types = encode_example([10, 11, 12], [20, 21], 6, cls_id=2, sep_id=3)
    assert ids == [2, 10, 11, 3, 20, 3] and types == [0, 0, 0, 0, 1, 1]
    assert encode_example([10, 11, 12], None, 4, 2, 3) == ([2, 10, 11, 3], [0, 0, 0, 0])


@pytest.fixture(scope="module")
def tokenizer():
    texts = [
        r
        for task in ("mnli", "sst2")
        for r in load_task(task, SYNTH)["train"][:][GLUE_TASKS[task].text_fields[0]]
    ]
    return build_tokenizer({"kind": "wordpiece", "vocab_size": 600}, lambda: iter([texts]))


def test_tokenize_task_pairs_and_cache(tokenizer, tmp_path, monkeypatch):
    import convexp.tasks.classification.encoding as encoding

    splits = load_task("rte", {"source": "synthetic", "synthetic_size": 60})
    out = tokenize_task("rte", splits, tokenizer, max_len=24, cache_dir=tmp_path / "cache")
    assert list(out) == list(splits)
    row, src = out["validation"][0], splits["validation"][0]
    a = tokenizer.encode_batch([src["sentence1"]])[0]
    b = tokenizer.encode_batch([src["sentence2"]])[0]
    la, lb = truncated_lengths(len(a), len(b), 21)
    assert row["input_ids"] == [tokenizer.cls_id, *a[:la], tokenizer.sep_id, *b[:lb], tokenizer.sep_id]
    assert row["token_type_ids"] == [0] * (la + 2) + [1] * (lb + 1)
    assert row["attention_mask"] == [1] * len(row["input_ids"])
    assert (row["label"], row["idx"]) == (src["label"], src["idx"])
    assert max(len(x) for x in out["train"]["input_ids"]) <= 24
    assert out["test"]["label"] == [-1] * len(splits["test"])

    monkeypatch.setattr(encoding, "_tokenize_split", lambda *a, **k: pytest.fail("cache not used"))
    again = tokenize_task("rte", splits, tokenizer, max_len=24, cache_dir=tmp_path / "cache")
    assert again["train"][:] == out["train"][:]
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".lock-")]) == 1  # one entry


def test_tokenize_single_sentence_regression_and_collate(tokenizer):
    stsb = tokenize_task(
        "stsb", load_task("stsb", {"source": "synthetic", "synthetic_size": 50}), tokenizer, 32
    )
    batch = collate([stsb["train"][i] for i in range(4)], pad_id=tokenizer.pad_id)
    assert batch["labels"].dtype.is_floating_point and batch["input_ids"].shape[0] == 4
    cola = tokenize_task(
        "cola", load_task("cola", {"source": "synthetic", "synthetic_size": 50}), tokenizer, 16
    )
    rows = [cola["train"][i] for i in range(5)]
    assert all(set(r["token_type_ids"]) == {0} and r["input_ids"][0] == tokenizer.cls_id for r in rows)
    batch = collate(rows, pad_id=tokenizer.pad_id)
    longest = max(len(r["input_ids"]) for r in rows)
    assert batch["input_ids"].shape == (5, longest) and batch["labels"].dtype.is_floating_point is False
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        assert batch["input_ids"][i, :n].tolist() == r["input_ids"]
        assert batch["input_ids"][i, n:].eq(tokenizer.pad_id).all() and batch["attention_mask"][i].sum() == n
    assert collate(rows, pad_id=0, pad_to=16)["input_ids"].shape == (5, 16)


def test_collapsed_runs_are_detected():
    """BERMO's "Diverges": every prediction the same class (or score), or non-finite outputs."""
    import numpy as np

    from convexp.tasks.classification.scores import collapsed

    assert collapsed("sst2", np.array([[0.1, 2.0], [0.3, 1.0], [-1.0, 0.5]]))  # always class 1
    assert not collapsed("sst2", np.array([[0.1, 2.0], [3.0, 1.0]]))
    assert collapsed("mnli", np.array([2, 2, 2, 2]))
    assert not collapsed("mnli", np.array([2, 0, 2, 1]))
    assert collapsed("stsb", np.array([2.5, 2.5, 2.5]))
    assert not collapsed("stsb", np.array([2.5, 1.0, 4.0]))
    assert collapsed("sst2", np.array([[np.nan, 1.0], [0.0, 1.0]]))
