"""convexp.store.checkpoint.open_checkpoint: every kind of reference, and one set of one-line errors."""

from __future__ import annotations

import json

import pytest
import torch

from convexp.store.checkpoint import CheckpointError, CheckpointNotCached, open_checkpoint
from convexp.errors import UserError
from convexp.models import Encoder, MaskedLM, ModelConfig, SequenceClassifier
from convexp.models.io import save_model_dir
from helpers import fake_hub_cache

V = 40


def tiny() -> ModelConfig:
    return ModelConfig(vocab_size=V, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32)


def write_vocab(path):
    words = [f"w{i}" for i in range(V - 5)]
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    return path


def convexp_run(tmp_path, name="pretrain-abc123", model=None, tokenizer=True):
    """A run directory as the stages write it: status.json, model/ (weights, config, tokenizer)."""
    torch.manual_seed(0)
    model = model or MaskedLM(tiny())
    run = tmp_path / name
    run.mkdir()
    (run / "status.json").write_text('{"status": "finished"}')
    files = [write_vocab(tmp_path / "vocab.txt")] if tokenizer else []
    save_model_dir(model, model.encoder.cfg, run / "model", extra_files=files)
    return run, model


def hf_bert(d):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=V,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    BertModel(cfg).save_pretrained(d)
    write_vocab(d / "vocab.txt")
    return d


def assert_one_line(e: pytest.ExceptionInfo, *words: str) -> None:
    text = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in text, text
    for w in words:
        assert w in text, text


# ---------------------------------------------------------------------------------------------
# The kinds of reference
# ---------------------------------------------------------------------------------------------


def test_convexp_run_directory(tmp_path):
    run, model = convexp_run(tmp_path)
    ckpt = open_checkpoint(run)
    assert (ckpt.kind, ckpt.slug, ckpt.path) == ("run", run.name, run / "model")
    assert ckpt.source == str(run.resolve())  # what a sweep passes on as init=
    assert ckpt.model_cfg == model.encoder.cfg and ckpt.tokenizer_path == run / "model" / "vocab.txt"
    want = model.encoder.state_dict()
    assert ckpt.encoder_state.keys() == want.keys()
    assert all(torch.equal(ckpt.encoder_state[k], want[k]) for k in want)
    assert any(k.startswith("head.") for k in ckpt.state)  # the whole saved model, head included
    # the model directory itself, given directly, is named after its run as well
    inner = open_checkpoint(run / "model")
    assert (inner.kind, inner.slug, inner.source) == ("model_dir", run.name, str((run / "model").resolve()))


def test_model_directory_and_its_full_model(tmp_path):
    torch.manual_seed(0)
    clf = SequenceClassifier(tiny(), 3)
    save_model_dir(clf, clf.encoder.cfg, tmp_path / "exported")
    ckpt = open_checkpoint(tmp_path / "exported")
    assert (ckpt.kind, ckpt.slug, ckpt.tokenizer_path) == ("model_dir", "exported", None)
    ids = torch.randint(5, V, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ckpt.model()(ids).logits, clf.eval()(ids).logits)
        torch.testing.assert_close(ckpt.classifier(3, "mnli")(ids).logits, clf(ids).logits)


def test_weights_false_reads_the_config_only(tmp_path):
    run, model = convexp_run(tmp_path)
    ckpt = open_checkpoint(run, weights=False)
    assert ckpt.state is None and ckpt.model_cfg == model.encoder.cfg
    # a Hugging Face directory with only its config.json: enough to name and size it
    d = tmp_path / "only-config"
    d.mkdir()
    hf = {"model_type": "bert", "vocab_size": 99, "hidden_size": 64, "num_hidden_layers": 2}
    (d / "config.json").write_text(json.dumps({**hf, "num_attention_heads": 2, "intermediate_size": 128}))
    ckpt = open_checkpoint(d, weights=False)
    assert (ckpt.kind, ckpt.slug, ckpt.model_cfg.hidden_size) == ("hf_dir", "only-config", 64)
    assert ckpt.source == str(d.resolve())


def test_hugging_face_directory(tmp_path):
    from convexp.models.hf import load_pretrained

    d = hf_bert(tmp_path / "my-bert")
    ckpt = open_checkpoint(d)
    assert (ckpt.kind, ckpt.slug, ckpt.path, ckpt.tokenizer_path) == ("hf_dir", "my-bert", d, d / "vocab.txt")
    assert ckpt.model_cfg.name == "hf:my-bert" and ckpt.model_cfg.pooler  # BERT's pooler is in the weights
    encoder, cfg = load_pretrained(d)
    assert cfg == ckpt.model_cfg
    assert all(torch.equal(ckpt.encoder_state[k], v) for k, v in encoder.state_dict().items())
    fresh = Encoder(ckpt.model_cfg)
    fresh.load_state_dict(ckpt.encoder_state, strict=True)
    teacher = ckpt.classifier(2, "rte")  # no classifier weights in a BertModel: a new head
    assert isinstance(teacher, SequenceClassifier) and teacher.head.out.weight.shape[0] == 2
    with pytest.raises(CheckpointError) as e:
        ckpt.model()
    assert_one_line(e, "init=", "Hugging Face checkpoint")


def test_hub_name_from_the_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    snap = fake_hub_cache(cache, "someorg/tiny-bert", hf_bert(tmp_path / "src"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ckpt = open_checkpoint("someorg/tiny-bert")
    assert (ckpt.kind, ckpt.slug, ckpt.source, ckpt.path) == ("hub", "tiny-bert", "someorg/tiny-bert", snap)
    assert ckpt.model_cfg.name == "hf:tiny-bert"  # named after the reference, not the commit
    assert ckpt.tokenizer_path == snap / "vocab.txt" and "embeddings.word.weight" in ckpt.encoder_state
    assert open_checkpoint("someorg/tiny-bert", weights=False).model_cfg.hidden_size == 16


def test_hub_name_not_cached_while_offline(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for ref in ("someorg/not-here", "bert-base-uncased"):  # legacy names have no organisation
        with pytest.raises(CheckpointNotCached) as e:
            open_checkpoint(ref)
        assert_one_line(e, f"init={ref}", "not in the Hugging Face cache", "offline")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(CheckpointNotCached) as e:  # configs only: the cache is asked, never the hub
        open_checkpoint("someorg/not-here", label="distill.teacher", weights=False)
    assert_one_line(e, "distill.teacher=someorg/not-here", "not in the Hugging Face cache")


# ---------------------------------------------------------------------------------------------
# The errors: one line, naming the reference and the fix
# ---------------------------------------------------------------------------------------------


def test_missing_path(tmp_path):
    for ref in ("/no/such/run", str(tmp_path / "nope"), "./relative/nope", "a/b/c"):
        with pytest.raises(CheckpointError) as e:
            open_checkpoint(ref)
        assert_one_line(e, f"init={ref} does not exist", "give a convexp run directory")


def test_a_file_is_not_a_checkpoint(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(tmp_path / "model.safetensors")
    assert_one_line(e, "is a file", "directory")


def test_no_weights(tmp_path):
    run, _ = convexp_run(tmp_path)
    (run / "model" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(run)
    assert_one_line(e, f"init={run}", "has no model", "let it finish")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(run / "model")
    assert_one_line(e, "has no weights", "model.safetensors")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "status.json").write_text('{"status": "running"}')
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(unfinished)
    assert_one_line(e, "has no model")
    hf = tmp_path / "hf-no-weights"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(hf)
    assert_one_line(e, "has no weights", "pytorch_model.bin")


def test_corrupt_safetensors(tmp_path):
    run, _ = convexp_run(tmp_path)
    (run / "model" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(run)
    assert_one_line(e, "damaged", "re-create")
    lazy = open_checkpoint(run, weights=False)  # found without reading the weights...
    with pytest.raises(CheckpointError) as e:  # ...and refused when they are read
        lazy.model()
    assert_one_line(e, "damaged")
    d = hf_bert(tmp_path / "hf")
    (d / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(d)
    assert_one_line(e, "damaged")


def test_unreadable_safetensors_is_one_line(tmp_path, monkeypatch):
    """A weights file this user may not read (root reads everything: safetensors is made to say so):
    one line naming it, before the stage's imports (peek) and when the weights are read."""
    import safetensors

    from convexp.store.peek import peek_checkpoint

    run, _ = convexp_run(tmp_path)

    def denied(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(safetensors, "safe_open", denied)
    with pytest.raises(CheckpointError) as e:
        peek_checkpoint(str(run), "init")
    assert_one_line(e, "model.safetensors cannot be read (Permission denied)", "permissions")
    monkeypatch.setattr("convexp.models.io.load_file", denied)
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(run, weights=False).model()
    assert_one_line(e, "cannot be read (Permission denied)")


def test_corrupt_model_config(tmp_path):
    run, _ = convexp_run(tmp_path)
    (run / "model" / "model_config.json").write_text("{not json")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(run)
    assert_one_line(e, "cannot read", "model_config.json")


def test_unknown_layout(tmp_path):
    d = tmp_path / "something"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(d, label="")
    assert_one_line(e, "is not a convexp run or model directory", "no config.json")
    assert str(e.value).startswith(str(d))  # a bare reference (label="") is named as given


def test_unsupported_hugging_face_architecture(tmp_path):
    d = hf_bert(tmp_path / "roberta")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "roberta"}))
    for weights in (True, False):
        with pytest.raises(CheckpointError) as e:
            open_checkpoint(d, weights=weights)
        assert_one_line(e, f"init={d}", "roberta")


def test_classifier_of_another_task_is_refused(tmp_path):
    torch.manual_seed(0)
    run, _ = convexp_run(tmp_path, "finetune-sst2", model=SequenceClassifier(tiny(), 2), tokenizer=False)
    ckpt = open_checkpoint(run, label="distill.teacher", weights=False)
    assert ckpt.classifier(2, "sst2").head.out.weight.shape == (2, 16)
    with pytest.raises(CheckpointError) as e:
        ckpt.classifier(3, "mnli")
    assert_one_line(e, f"distill.teacher={run} is not a mnli classifier", "same task")
    mlm, _ = convexp_run(tmp_path, "pretrain-x")
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(mlm).classifier(2)
    assert_one_line(e, "is not a 2-label classifier")
