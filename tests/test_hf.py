"""Hugging Face interop: import and export BERT / ELECTRA / ConvBERT checkpoints.

Small random models (hidden 64, 4 heads, 2 layers, vocab 100), fp32, eval mode. Every parameter
is perturbed away from its HF init (biases, LayerNorms) so that a wrong mapping cannot hide.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from convexp.models import Encoder, MaskedLM, ModelConfig, SequenceClassifier  # noqa: E402
from convexp.models.hf import (  # noqa: E402
    CheckpointMismatchError,
    CheckpointNotFoundError,
    UnsupportedCheckpointError,
    load_pretrained,
)
from convexp.models.hf_export import export_hf  # noqa: E402
from convexp.models.hf_keys import ExportError  # noqa: E402

ATOL = 1e-5
V, D, H, LAYERS, I = 100, 64, 4, 2, 128
SIZES = dict(
    vocab_size=V,
    hidden_size=D,
    num_attention_heads=H,
    num_hidden_layers=LAYERS,
    intermediate_size=I,
    max_position_embeddings=64,
)


def perturb(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def make_hf(cls_name: str, cfg_name: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_name)(**SIZES, **kw)
    return perturb(getattr(transformers, cls_name)(cfg), seed)


def save(model, path):
    model.save_pretrained(path)
    return path


def inputs(seed: int = 1, B: int = 2, L: int = 12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, V, (B, L), generator=g)
    tt = torch.randint(0, 2, (B, L), generator=g)
    return ids, tt


def padded_batch(pad_id: int, L: int = 12, short: int = 7):
    """Row 0 full length, row 1 `short` real tokens then padding."""
    ids, tt = inputs(B=2, L=L)
    mask = torch.ones(2, L, dtype=torch.long)
    mask[1, short:] = 0
    ids[1, short:] = pad_id
    tt[1, short:] = 0
    return ids, tt, mask


def close(a, b, atol=ATOL):
    return torch.allclose(a, b, atol=atol, rtol=0), (a - b).abs().max().item()


def assert_close(a, b, atol=ATOL):
    ok, err = close(a, b, atol)
    assert ok, f"max abs diff {err:.3g} > {atol}"


def check_hidden_states(hf_model, ours, ids, tt, mask=None):
    with torch.no_grad():
        ref = hf_model(input_ids=ids, token_type_ids=tt, attention_mask=mask, output_hidden_states=True)
        out = ours(ids, mask, tt)
    assert len(ref.hidden_states) == len(out.hidden_states) == LAYERS + 1
    for r, o in zip(ref.hidden_states, out.hidden_states):
        assert_close(o, r)
    assert_close(out.last_hidden_state, ref.last_hidden_state)
    return ref, out


# ----------------------------------------------------------------------------------------------
# ConvBERT
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("groups", [1, 2])
def test_convbert_base_model_matches(tmp_path, groups):
    hf = make_hf(
        "ConvBertModel",
        "ConvBertConfig",
        embedding_size=48,
        head_ratio=2,
        num_groups=groups,
        conv_kernel_size=5,
    )
    model, cfg = load_pretrained(save(hf, tmp_path / "cb"))
    assert isinstance(model, Encoder) and not model.training
    assert (cfg.mixer, cfg.conv_type, cfg.ffn_groups) == ("mixed", "sdconv", groups)
    assert (cfg.kernel_size, cfg.emb_size) == (5, 48)
    assert cfg.head_dim == (D // (H // 2)) // 2 and cfg.pad_token_id == hf.config.pad_token_id
    check_hidden_states(hf, model, *inputs())


def test_convbert_head_size_formula_for_head_ratio_4(tmp_path):
    # n = 8 // 4 = 2 heads of size (64 // 2) // 2 = 16 (not D / N = 8)
    torch.manual_seed(0)
    cfg_hf = transformers.ConvBertConfig(
        **{**SIZES, "num_attention_heads": 8}, embedding_size=D, head_ratio=4
    )
    hf = perturb(transformers.ConvBertModel(cfg_hf))
    model, cfg = load_pretrained(save(hf, tmp_path / "cb"))
    assert (cfg.attn_heads, cfg.head_dim) == (2, 16)
    check_hidden_states(hf, model, *inputs())


def test_convbert_padding(tmp_path):
    hf = make_hf("ConvBertModel", "ConvBertConfig", embedding_size=48, num_groups=2)
    path = save(hf, tmp_path / "cb")
    ids, tt, mask = padded_batch(hf.config.pad_token_id)

    # hf_padding=True reproduces HF exactly, padding leak included, at every position
    leaky, cfg = load_pretrained(path, hf_padding=True)
    assert cfg.hf_padding
    ref, _ = check_hidden_states(hf, leaky, ids, tt, mask)

    # default: the real tokens of the padded row equal those of the unpadded sequence
    masked, _ = load_pretrained(path)
    with torch.no_grad():
        padded = masked(ids, mask, tt).last_hidden_state[1, :7]
        alone = masked(ids[1:, :7], None, tt[1:, :7]).last_hidden_state[0]
        hf_alone = hf(input_ids=ids[1:, :7], token_type_ids=tt[1:, :7]).last_hidden_state[0]
    assert_close(padded, alone)
    assert_close(padded, hf_alone)
    # ... whereas HF's padded output differs there (the convolution branch sees the padding)
    assert not close(ref.last_hidden_state[1, :7], hf_alone, 1e-3)[0]


def test_convbert_mlm_logits(tmp_path):
    hf = make_hf("ConvBertForMaskedLM", "ConvBertConfig", embedding_size=48, num_groups=2)
    model, cfg = load_pretrained(save(hf, tmp_path / "cb"), task="mlm")
    assert isinstance(model, MaskedLM)
    ids, tt = inputs()
    with torch.no_grad():
        assert_close(model(ids, None, tt).logits, hf(input_ids=ids, token_type_ids=tt).logits)
    # the same checkpoint loads as a bare encoder (the head is ignored) ...
    enc, _ = load_pretrained(tmp_path / "cb")
    assert isinstance(enc, Encoder)
    # ... but a base model has no MLM head to load
    save(hf.convbert, tmp_path / "base")
    with pytest.raises(CheckpointMismatchError, match="generator_lm_head.bias"):
        load_pretrained(tmp_path / "base", task="mlm")


# ----------------------------------------------------------------------------------------------
# BERT and ELECTRA
# ----------------------------------------------------------------------------------------------


def test_bert_model_with_pooler(tmp_path):
    hf = make_hf("BertModel", "BertConfig")
    model, cfg = load_pretrained(save(hf, tmp_path / "bert"))
    assert cfg.pooler and cfg.mixer == "attention" and cfg.embedding_size is None
    ref, out = check_hidden_states(hf, model, *inputs())
    assert_close(out.pooled, ref.pooler_output)

    ids, tt, mask = padded_batch(hf.config.pad_token_id)
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=mask).last_hidden_state
        out = model(ids, mask, tt).last_hidden_state
        alone = model(ids[1:, :7], None, tt[1:, :7]).last_hidden_state[0]
    assert_close(out[0], ref[0])
    assert_close(out[1, :7], ref[1, :7])
    assert_close(out[1, :7], alone)


def test_electra_model_factorised_embeddings(tmp_path):
    hf = make_hf("ElectraModel", "ElectraConfig", embedding_size=32)
    model, cfg = load_pretrained(save(hf, tmp_path / "electra"))
    assert cfg.emb_size == 32 and not cfg.pooler and model.embeddings.project is not None
    check_hidden_states(hf, model, *inputs())
    # no classifier in the checkpoint: a new head on the imported encoder
    clf, _ = load_pretrained(tmp_path / "electra", task="classification", num_labels=4)
    assert isinstance(clf, SequenceClassifier) and clf.head.out.out_features == 4
    check_hidden_states(hf, clf.encoder, *inputs())


def test_bert_mlm_logits(tmp_path):
    hf = make_hf("BertForMaskedLM", "BertConfig")
    model, _ = load_pretrained(save(hf, tmp_path / "bert"), task="mlm")
    ids, tt = inputs()
    with torch.no_grad():
        assert_close(model(ids, None, tt).logits, hf(input_ids=ids, token_type_ids=tt).logits)


def test_electra_rtd_logits(tmp_path):
    hf = make_hf("ElectraForPreTraining", "ElectraConfig", embedding_size=32)
    model, _ = load_pretrained(save(hf, tmp_path / "electra"), task="rtd")
    ids, tt = inputs()
    with torch.no_grad():
        assert_close(model(ids, None, tt).logits, hf(input_ids=ids, token_type_ids=tt).logits)


def test_bert_classifier_and_pytorch_model_bin(tmp_path):
    hf = make_hf("BertForSequenceClassification", "BertConfig", num_labels=3)
    d = tmp_path / "bin"
    if "safe_serialization" in inspect.signature(hf.save_pretrained).parameters:
        hf.save_pretrained(d, safe_serialization=False)
    else:  # transformers 5 always writes safetensors
        hf.config.save_pretrained(d)
        torch.save(hf.state_dict(), d / "pytorch_model.bin")
    assert (d / "pytorch_model.bin").is_file() and not (d / "model.safetensors").exists()
    model, cfg = load_pretrained(d, task="classification")
    assert isinstance(model, SequenceClassifier) and model.head.num_labels == 3
    ids, tt = inputs()
    with torch.no_grad():
        assert_close(model(ids, None, tt).logits, hf(input_ids=ids, token_type_ids=tt).logits)


@pytest.mark.parametrize("kind", ["Electra", "ConvBert"])
def test_hf_sequence_classifier_imports_with_the_hf_head(tmp_path, kind):
    """An imported *ForSequenceClassification keeps its dense -> act -> dropout -> out_proj head;
    the same encoder without classifier weights gets ELECTRA's [CLS] -> dropout -> linear."""
    hf = make_hf(f"{kind}ForSequenceClassification", f"{kind}Config", num_labels=3, embedding_size=32)
    model, cfg = load_pretrained(save(hf, tmp_path / "clf"), task="classification")
    assert cfg.classifier_head == "hf" and model.head.num_labels == 3
    ids, tt = inputs()
    with torch.no_grad():
        assert_close(model(ids, None, tt).logits, hf.eval()(input_ids=ids, token_type_ids=tt).logits)
    bare = make_hf(f"{kind}Model", f"{kind}Config", embedding_size=32)
    fresh, cfg = load_pretrained(save(bare, tmp_path / "bare"), task="classification", num_labels=2)
    assert cfg.classifier_head == "cls" and not hasattr(fresh.head, "dense")


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------


def convbert_cfg(**kw) -> ModelConfig:
    base = dict(
        name="tiny-convbert",
        vocab_size=V,
        hidden_size=D,
        embedding_size=48,
        num_layers=LAYERS,
        num_heads=H,
        intermediate_size=I,
        ffn_groups=2,
        mixer="mixed",
        conv_type="sdconv",
        head_ratio=2,
        kernel_size=9,
        max_position_embeddings=64,
        hf_padding=True,
    )
    return ModelConfig(**{**base, **kw})


def test_export_encoder_roundtrip(tmp_path):
    torch.manual_seed(0)
    cfg = convbert_cfg()
    enc = perturb(Encoder(cfg))
    out = export_hf(enc, cfg, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == "convbert"
    hf = transformers.ConvBertModel.from_pretrained(out).eval()
    check_hidden_states(hf, enc, *inputs())
    ids, tt, mask = padded_batch(cfg.pad_token_id)  # cfg.hf_padding=True: padded batches match too
    check_hidden_states(hf, enc, ids, tt, mask)
    # and back into convexp
    again, cfg2 = load_pretrained(out, hf_padding=True)
    with torch.no_grad():
        assert torch.equal(again(*inputs()[:1]).last_hidden_state, enc(*inputs()[:1]).last_hidden_state)
    # never overwrite
    with pytest.raises(ExportError, match="not empty"):
        export_hf(enc, cfg, out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left behind


def test_export_mlm_and_classifier(tmp_path):
    torch.manual_seed(0)
    cfg = convbert_cfg(ffn_groups=1, embedding_size=None)
    mlm = perturb(MaskedLM(cfg))
    hf = transformers.ConvBertForMaskedLM.from_pretrained(export_hf(mlm, None, tmp_path / "mlm")).eval()
    ids, tt = inputs()
    with torch.no_grad():
        assert_close(mlm(ids, None, tt).logits, hf(input_ids=ids, token_type_ids=tt).logits)

    with pytest.raises(ExportError, match="classifier=cls"):  # ELECTRA's head has no HF form
        export_hf(SequenceClassifier(cfg, 3), cfg, tmp_path / "cls")
    cfg = convbert_cfg(ffn_groups=1, embedding_size=None, classifier="hf")
    clf = perturb(SequenceClassifier(cfg, 3))
    hf = transformers.ConvBertForSequenceClassification.from_pretrained(
        export_hf(clf, cfg, tmp_path / "clf", labels=["entailment", "neutral", "contradiction"])
    )
    with torch.no_grad():
        assert_close(clf(ids, None, tt).logits, hf.eval()(input_ids=ids, token_type_ids=tt).logits)
    assert hf.config.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert hf.config.label2id["contradiction"] == 2
    with pytest.raises(ExportError, match="3 distinct names"):
        export_hf(clf, cfg, tmp_path / "clf2", labels=["yes", "no"])


def test_export_rejects_what_no_transformers_class_holds(tmp_path):
    chang = ModelConfig(
        vocab_size=V,
        hidden_size=D,
        num_layers=1,
        num_heads=H,
        intermediate_size=I,
        absolute_positions=False,
        fixed_conv=True,
        dynamic_conv=True,
    )
    with pytest.raises(ExportError, match="as a Hugging Face electra: fixed_conv, dynamic_conv"):
        export_hf(Encoder(chang), chang, tmp_path / "chang")
    for bad, why in [
        (dict(conv_type="dynamic"), "conv_type"),
        (dict(scalar_mix=True), "scalar_mix"),
        (dict(pooler=True), "pooler"),
        (dict(head_size=8), "head size"),
        (
            dict(layer_sizes=[{"heads": convbert_cfg(num_layers=1).attn_heads, "intermediate": 16}]),
            "layer_sizes",
        ),
    ]:
        cfg = convbert_cfg(num_layers=1, **bad)
        with pytest.raises(ExportError, match=why):
            export_hf(Encoder(cfg), cfg, tmp_path / "bad")
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["no-such-dir-here", "nobody-xyz/not-a-model-xyz", "/definitely/not/a/dir"])
def test_missing_checkpoint_one_line_error(tmp_path, monkeypatch, name):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointNotFoundError) as e:
        load_pretrained(name)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg
    assert repr(name) in msg and "config.json" in msg


def test_directory_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointNotFoundError, match="no config.json"):
        load_pretrained(tmp_path / "empty")


def test_unsupported_model_type(tmp_path):
    hf = make_hf("BertModel", "BertConfig")
    d = save(hf, tmp_path / "rob")
    c = json.loads((d / "config.json").read_text())
    c["model_type"] = "roberta"
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(UnsupportedCheckpointError, match="model_type 'roberta'"):
        load_pretrained(d)
    with pytest.raises(UnsupportedCheckpointError, match="rtd"):
        load_pretrained(save(make_hf("ConvBertModel", "ConvBertConfig"), tmp_path / "cb"), task="rtd")


def test_strict_key_checks(tmp_path):
    from safetensors.torch import load_file, save_file

    d = save(make_hf("BertModel", "BertConfig"), tmp_path / "bert")
    sd = load_file(str(d / "model.safetensors"))
    sd["encoder.layer.0.attention.self.extra.weight"] = torch.zeros(2)
    del sd["encoder.layer.1.output.dense.bias"]
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointMismatchError) as e:
        load_pretrained(d)
    assert "encoder.layer.1.output.dense.bias" in str(e.value)
    assert "encoder.layer.0.attention.self.extra.weight" in str(e.value)


@pytest.mark.parametrize("lowercase", [True, False])
def test_tokenizer_config_lets_auto_tokenizer_load_an_export(tmp_path, lowercase):
    import json

    from convexp.data.tokenizer import Tokenizer
    from helpers import write_vocab

    words = ["the", "cat", "sat", "##s", "The", "Cat"]
    tok = Tokenizer.load(write_vocab(tmp_path / "vocab.txt", words), lowercase=lowercase)
    out = tok.save(tmp_path / "hf")
    (out / "tokenizer_config.json").write_text(json.dumps(tok.hf_config(128)))
    hf = transformers.AutoTokenizer.from_pretrained(out)
    assert hf.model_max_length == 128
    assert (hf.cls_token, hf.mask_token, hf.pad_token) == ("[CLS]", "[MASK]", "[PAD]")
    text = "The cats sat"
    ours = [tok.cls_id, *tok.encode_batch([text])[0], tok.sep_id]
    assert hf(text)["input_ids"] == ours
    assert (hf.tokenize("The")[0] == "the") == lowercase == tok.hf_config(128)["do_lower_case"]


def attention_cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=V, hidden_size=D, num_layers=LAYERS, num_heads=H, intermediate_size=I, mixer="attention",
                max_position_embeddings=64)  # fmt: skip
    return ModelConfig(**{**base, **kw})


@pytest.mark.parametrize(
    "cfg_kw, head, cls_name",
    [
        (dict(pooler=True), None, "BertModel"),
        (dict(pooler=True), "mlm", "BertForMaskedLM"),
        (dict(pooler=True, classifier="pooler"), "classification", "BertForSequenceClassification"),
        (dict(embedding_size=32), None, "ElectraModel"),
        (dict(embedding_size=32), "mlm", "ElectraForMaskedLM"),
        (dict(embedding_size=32), "rtd", "ElectraForPreTraining"),
        (dict(embedding_size=32, classifier="hf"), "classification", "ElectraForSequenceClassification"),
        (dict(type_vocab_size=1, hidden_act="gelu_new"), None, "ElectraModel"),
    ],
)
def test_bert_and_electra_export_to_their_transformers_class_and_back(tmp_path, cfg_kw, head, cls_name):
    """Every attention preset shape a transformers class holds: exported, loaded by that class, the
    same outputs to 1e-5 (padded batches too: BERT and ELECTRA mask padding as convexp does), and
    imported back to the same tensors."""
    from convexp.models import ReplacedTokenDetector

    torch.manual_seed(0)
    cfg = attention_cfg(**cfg_kw)
    make = {None: Encoder, "mlm": MaskedLM, "rtd": ReplacedTokenDetector}
    model = perturb(SequenceClassifier(cfg, 3) if head == "classification" else make[head](cfg))
    labels = ["entailment", "neutral", "contradiction"] if head == "classification" else None
    out = export_hf(model, None, tmp_path / "out", labels)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [cls_name]
    theirs = getattr(transformers, cls_name).from_pretrained(out).eval()
    for ids, tt, mask in [(*inputs(), None), padded_batch(cfg.pad_token_id)]:
        tt = tt if cfg.type_vocab_size > 1 else torch.zeros_like(tt)
        with torch.no_grad():
            got = theirs(input_ids=ids, token_type_ids=tt, attention_mask=mask)
            ours = model(ids, mask, tt)
        keep = (mask if mask is not None else torch.ones_like(ids)).bool()  # every real token's outputs
        a, b = (ours.last_hidden_state, got.last_hidden_state) if head is None else (ours.logits, got.logits)
        per_token = a.shape[:2] == ids.shape
        assert_close(a[keep] if per_token else a, b[keep] if per_token else b)
    if labels:
        assert theirs.config.id2label == dict(enumerate(labels))
    task = {None: "base", "mlm": "mlm", "rtd": "rtd", "classification": "classification"}[head]
    again, _ = load_pretrained(out, task=task)
    back = again.state_dict()
    for k, v in model.state_dict().items():  # the same tensors back (a pre-training's pooler is not exported)
        if k in back and back[k].shape == v.shape:
            assert torch.equal(v, back[k]), k


def test_export_refuses_heads_transformers_does_not_have(tmp_path):
    from convexp.models import ReplacedTokenDetector

    with pytest.raises(ExportError, match="has no replaced-token-detection head"):
        export_hf(ReplacedTokenDetector(convbert_cfg()), None, tmp_path / "a")
    with pytest.raises(ExportError, match="classifier=cls"):  # ELECTRA's own head: [CLS] -> linear
        export_hf(SequenceClassifier(attention_cfg(), 2), None, tmp_path / "b")
    with pytest.raises(ExportError, match="BertForSequenceClassification classifies the pooled"):
        export_hf(SequenceClassifier(attention_cfg(pooler=True, classifier="hf"), 2), None, tmp_path / "c")
    with pytest.raises(ExportError, match="BERT has no embedding projection"):
        export_hf(Encoder(attention_cfg(pooler=True, embedding_size=32)), None, tmp_path / "d")
    assert not any(tmp_path.iterdir())
