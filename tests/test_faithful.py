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
