"""`convexp hf export` and `convexp hf push` (issue 64): a run out to transformers with its tokenizer
and labels, checked against convexp, and up to the Hub (a folder stands in for it here)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers")

from convexp.cli import app  # noqa: E402
from convexp.models import ModelConfig, SequenceClassifier  # noqa: E402
from convexp.models.heads import MaskedLM, ReplacedTokenDetector  # noqa: E402
from convexp.models.io import save_model_dir  # noqa: E402

V = 60


def _tokenizer(d):
    """A WordPiece tokenizer of V tokens (the run's tokenizer files)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(V - 5)]])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    return [d / "tokenizer.json"]


def _run(tmp_path, model, task: str | None = None):
    """A run directory as a stage leaves it: model/ with the tokenizer, config.yaml, status.json."""
    run = tmp_path / "run"
    files = _tokenizer(tmp_path / "tok")
    save_model_dir(model.eval(), model.encoder.cfg if hasattr(model, "encoder") else model.cfg, run / "model",
                   extra_files=files)  # fmt: skip
    (run / "config.yaml").write_text(f"task: {task}\n" if task else "stage: pretrain\n")
    (run / "status.json").write_text('{"status": "finished"}')
    return run


def _cfg(**kw):
    base = dict(vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                max_position_embeddings=64, mixer="attention")  # fmt: skip
    return ModelConfig(**{**base, **kw})


@pytest.mark.parametrize(
    "make, task, cls_name, labels",
    [
        (lambda: SequenceClassifier(_cfg(pooler=True, classifier="pooler"), 2), "rte", "BertForSequenceClassification",
         {"0": "entailment", "1": "not_entailment"}),
        (lambda: SequenceClassifier(_cfg(mixer="mixed", hidden_size=64, classifier="hf"), 3), "mnli",
         "ConvBertForSequenceClassification", {"0": "entailment", "1": "neutral", "2": "contradiction"}),
        (lambda: ReplacedTokenDetector(_cfg(embedding_size=16)), None, "ElectraForPreTraining", None),
        (lambda: MaskedLM(_cfg(pooler=True)), None, "BertForMaskedLM", None),
        (lambda: ReplacedTokenDetector(_cfg(mixer="mixed", hidden_size=64)), None, "ConvBertModel", None),
    ],
)
def test_a_run_exports_to_its_transformers_class_with_tokenizer_and_labels(tmp_path, make, task, cls_name, labels):
    torch.manual_seed(0)
    run = _run(tmp_path, make(), task)
    res = CliRunner().invoke(app, ["hf", "export", str(run)])
    assert res.exit_code == 0, res.output
    out = run / "transformers"
    assert f"wrote {out}: {cls_name} (max |Δ| " in res.output and "against transformers" in res.output
    record = json.loads((out / "convexp_export.json").read_text())
    assert record["class"] == cls_name and record["max_abs_diff"] <= 1e-5 and record["labels"] == labels
    model = getattr(transformers, cls_name).from_pretrained(out)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids("w1") == 6 and tok.mask_token == "[MASK]" and tok.pad_token_id == 0
    if labels:
        assert model.config.id2label == {int(k): v for k, v in labels.items()}
    again = CliRunner().invoke(app, ["hf", "export", str(run)])  # never overwritten
    assert again.exit_code == 2 and "exists; refusing to overwrite it" in again.output


def test_what_transformers_cannot_hold_is_refused_in_one_line(tmp_path):
    run = _run(tmp_path, SequenceClassifier(_cfg(), 2), "rte")  # ELECTRA's own classifier: [CLS] -> linear
    res = CliRunner().invoke(app, ["hf", "export", str(run)])
    assert res.exit_code == 2 and "classifier=cls" in res.output and "--part encoder" in res.output
    assert not (run / "transformers").exists()
    res = CliRunner().invoke(app, ["hf", "export", str(run), "--part", "encoder"])  # its encoder is an ELECTRA
    assert res.exit_code == 0 and "ElectraModel" in res.output, res.output
    chang = _run(tmp_path / "c", MaskedLM(_cfg(absolute_positions=False, fixed_conv=True)))
    res = CliRunner().invoke(app, ["hf", "export", str(chang)])
    assert res.exit_code == 2 and "absolute_positions=False" in res.output and "fixed_conv" in res.output
    res = CliRunner().invoke(app, ["hf", "export", str(run), "--part", "generator"])
    assert res.exit_code == 2 and "not an ELECTRA pre-training run" in res.output


def test_push_uploads_the_export_and_it_loads_from_there(tmp_path, monkeypatch):
    """The Hub: a folder stand-in for HfApi (create_repo, upload_folder), then loaded from it."""
    import shutil

    import huggingface_hub

    hub = tmp_path / "hub"

    class FolderHub:
        def create_repo(self, repo_id, private=False, exist_ok=False, repo_type="model"):
            (hub / repo_id).mkdir(parents=True, exist_ok=exist_ok)
            return f"file://{hub / repo_id}"

        def upload_folder(self, folder_path, repo_id, repo_type="model", commit_message=""):
            shutil.copytree(folder_path, hub / repo_id, dirs_exist_ok=True)

    monkeypatch.setattr(huggingface_hub, "HfApi", FolderHub)
    torch.manual_seed(0)
    run = _run(tmp_path, SequenceClassifier(_cfg(embedding_size=16, classifier="hf"), 2), "sst2")
    assert CliRunner().invoke(app, ["hf", "export", str(run)]).exit_code == 0
    res = CliRunner().invoke(app, ["hf", "push", str(run / "transformers"), "me/sst2-electra"])
    assert res.exit_code == 0 and f"pushed {run / 'transformers'} to file://{hub / 'me/sst2-electra'}" in res.output
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hub / "me/sst2-electra")
    assert type(model).__name__ == "ElectraForSequenceClassification" and model.config.id2label[1] == "positive"
    for args, line in [
        ([str(tmp_path), "me/x"], "holds no config.json or model_config.json"),
        ([str(run / "transformers"), "sst2"], "name the repository as OWNER/NAME"),
    ]:
        res = CliRunner().invoke(app, ["hf", "push", *args])
        assert res.exit_code == 2 and line in res.output, res.output
