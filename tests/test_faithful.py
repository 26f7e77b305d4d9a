"""What the authors' code does where the papers are silent: layer-wise LR decay, classifier heads,
layer-mixing normalisation, FLOPs convention."""

from __future__ import annotations

import pytest
import torch

from convexp.models import ModelConfig, SequenceClassifier
from convexp.stages.common import layerwise_groups


def tiny(**kw) -> ModelConfig:
    base = dict(
        vocab_size=100,
        hidden_size=32,
        embedding_size=16,
        num_layers=4,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return ModelConfig(**(base | kw))


def test_layerwise_lr_of_every_parameter_group_for_four_layers():
    """google-research/electra model/optimization.py _get_layer_lrs: lr·decay^(L+2−depth), depth 0
    for embeddings, i+1 for layer i, L+2 for the task head."""
    model = SequenceClassifier(tiny(), num_labels=3)
    lr, d = 1e-4, 0.8
    groups = layerwise_groups(model, lr, d)
    lr_of = {name: g["lr"] for g in groups for name, _ in g["params"]}
    assert set(lr_of) == {n for n, _ in model.named_parameters()}
    expected = {"embeddings": lr * d**6, 0: lr * d**5, 1: lr * d**4, 2: lr * d**3, 3: lr * d**2, "head": lr}
    for name, got in lr_of.items():
        if name.startswith("encoder.embeddings."):  # word/position/type tables, LayerNorm, E->D
            want = expected["embeddings"]
        elif name.startswith("encoder.layers."):
            want = expected[int(name.split(".")[2])]
        else:
            want = expected["head"]
        assert got == pytest.approx(want), name
    assert any(n.startswith("encoder.embeddings.project") for n in lr_of)
    assert len(groups) == 6
    assert layerwise_groups(model, lr, None) is None


@pytest.mark.parametrize(
    "preset, kind",
    [
        ("electra_small", "cls"),  # ELECTRA's classification task: [CLS] -> dropout -> linear
        ("convbert_small", "cls"),
        ("convbert_medium_small", "cls"),
        ("convbert_base", "cls"),
        ("bert_small", "pooler"),  # BERT: pooler -> dropout -> linear
        ("bert_base", "pooler"),
        ("chang_small", "pooler"),  # Chang et al.: HF BertForSequenceClassification
        ("chang_small_composite", "pooler"),
    ],
)
def test_classification_head_per_model_family(preset, kind):
    from convexp.config import model_config

    cfg = model_config(preset)
    assert cfg.classifier_head == kind
    torch.manual_seed(0)
    model = SequenceClassifier(
        tiny(classifier=cfg.classifier, pooler=cfg.pooler, num_layers=1), num_labels=2
    ).eval()
    head = model.head
    assert hasattr(head, "dense") is False and head.out.in_features == 32
    ids = torch.randint(5, 100, (3, 7))
    enc = model.encoder(ids)
    source = enc.pooled if kind == "pooler" else enc.features[:, 0]
    assert torch.allclose(model(ids).logits, head.out(source))  # eval: dropout is the identity


def test_hf_style_head_is_dense_act_dropout_linear():
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(classifier="hf", num_layers=1), num_labels=2).eval()
    ids = torch.randint(5, 100, (3, 7))
    cls = model.encoder(ids).features[:, 0]
    expected = model.head.out(torch.nn.functional.gelu(model.head.dense(cls)))
    assert torch.allclose(model(ids).logits, expected, atol=1e-6)
    with pytest.raises(ValueError, match="classifier=pooler needs pooler=true"):
        SequenceClassifier(tiny(classifier="pooler"), num_labels=2)
