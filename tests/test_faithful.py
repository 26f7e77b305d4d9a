"""What the authors' code does where the papers are silent: layer-wise LR decay, classifier heads,
layer-mixing normalisation, FLOPs convention."""

from __future__ import annotations

import pytest
import torch

from convexp.models import ModelConfig, SequenceClassifier
from convexp.train.common import layerwise_groups


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
        ("bert_small", "cls"),  # trained with ELECTRA's code: no pooler (model/modeling.py)
        ("bert_base", "pooler"),  # BERT: pooler -> dropout -> linear
        ("chang_small", "pooler"),  # Chang et al.: HF BertForSequenceClassification
        ("chang_small_composite", "pooler"),
    ],
)
def test_classification_head_per_model_family(preset, kind):
    from convexp.config.compose import model_config

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


def _mix(norm: str, alpha: list[float], gamma: float = 1.5):
    from convexp.models.scalar_mix import ScalarMix

    mix = ScalarMix(len(alpha), dropout=0.3, norm=norm).eval()
    with torch.no_grad():
        mix.alpha.copy_(torch.tensor(alpha))
        mix.gamma.fill_(gamma)
    return mix


def test_scalar_mix_normalisations_compute_what_they_say():
    torch.manual_seed(0)
    hs = [torch.randn(2, 3, 8, dtype=torch.float64) * (j + 1) + 3 * j for j in range(4)]
    alpha = [0.2, -0.5, 1.0, 0.0]
    w = torch.softmax(torch.tensor(alpha, dtype=torch.float64), 0)

    # none: γ Σ w_j h_j
    ref = 1.5 * sum(w[j] * hs[j] for j in range(4))
    torch.testing.assert_close(_mix("none", alpha).double()(hs), ref)

    # per_layer: each layer LayerNorm-ed over D (no affine) before mixing
    ln = [torch.nn.functional.layer_norm(h, (8,), eps=1e-6) for h in hs]
    ref = 1.5 * sum(w[j] * ln[j] for j in range(4))
    torch.testing.assert_close(_mix("per_layer", alpha).double()(hs), ref)
    uniform = _mix("per_layer", [0.0] * 4, gamma=1.0).double()(hs)
    torch.testing.assert_close(uniform, sum(ln) / 4)  # uniform weights: the mean of normalised layers
    assert uniform.abs().mean() > 0.1

    # layers: every (token, channel) normalised across the 4 layers; uniform weights give exactly 0
    st = torch.stack(hs)
    normed = (st - st.mean(0)) / torch.sqrt(st.var(0, unbiased=False) + 1e-6)
    torch.testing.assert_close(_mix("layers", alpha).double()(hs), 1.5 * torch.einsum("l,lbtd->btd", w, normed))
    torch.testing.assert_close(_mix("layers", [0.0] * 4).double()(hs), torch.zeros(2, 3, 8, dtype=torch.float64))

    with pytest.raises(ValueError, match="scalar_mix_norm"):
        _mix("elementwise", alpha)


def test_encoder_builds_the_configured_scalar_mix():
    from convexp.models import Encoder

    enc = Encoder(tiny(scalar_mix=True, scalar_mix_norm="layers", num_layers=2))
    assert enc.scalar_mix.norm == "layers" and enc.scalar_mix.alpha.numel() == 3
    assert Encoder(tiny(scalar_mix=True, num_layers=2)).scalar_mix.norm == "per_layer"


def test_pretraining_flops_reproduce_convbert_table3():
    """ConvBERT Table 3 (seeds/000: 1.3e18 small, 1.5e18 medium-small, 1.4e19 base; length 128,
    1M updates, batch 128 / 256) under ELECTRA's flops_computation.py convention."""
    from convexp.config.compose import model_configs
    from convexp.models.stats import pretraining_flops
    from convexp.models.config import generator_config

    names = ["convbert_small", "convbert_medium_small", "convbert_base", "electra_small", "electra_base"]
    cfgs = model_configs([*names, "bert_small"])

    def full(name, batch, frac, steps=1e6, s=128):
        c = cfgs[name]
        return pretraining_flops(c, batch, steps, s, generator=generator_config(c, frac))

    assert full("convbert_small", 128, 0.25) == pytest.approx(1.3e18, rel=0.1)
    assert full("convbert_medium_small", 128, 0.25) == pytest.approx(1.5e18, rel=0.1)
    # the base row matches the discriminator alone; with its generator the run costs 1.89e19
    assert pretraining_flops(cfgs["convbert_base"], 256, 1e6) == pytest.approx(1.4e19, rel=0.1)
    assert full("convbert_base", 256, 1 / 3) == pytest.approx(1.89e19, rel=0.01)
    # ELECTRA's script values: electra_small 1.29e18, electra_base 6.42e19 (length 512, 766k steps),
    # bert_small 1.42e18 (MLM, 1.45M steps)
    assert full("electra_small", 128, 0.25) == pytest.approx(1.29e18, rel=0.01)
    assert full("electra_base", 256, 1 / 3, steps=766_000, s=512) == pytest.approx(6.42e19, rel=0.01)
    assert pretraining_flops(cfgs["bert_small"], 128, 1.45e6, objective="mlm") == pytest.approx(1.42e18, rel=0.01)


def test_initialisation_as_the_reference_code():
    """TF ELECTRA/ConvBERT: truncated N(0, 0.02) (|w| <= 0.04), depthwise kernels N(0, 1/K),
    Glorot-uniform for embeddings_project, the RTD output and ELECTRA's classifier.
    PyTorch/HF (Chang et al.): plain N(0, 0.02)."""
    from convexp.models import ReplacedTokenDetector

    torch.manual_seed(0)
    D, E, K = 256, 128, 9
    cfg = tiny(hidden_size=D, embedding_size=E, num_heads=4, intermediate_size=512, num_layers=2,
               mixer="mixed", kernel_size=K, weight_init="truncated", vocab_size=2000, max_position_embeddings=128)
    rtd = ReplacedTokenDetector(cfg)
    q = rtd.encoder.layers[0].mixer.query.weight
    assert q.abs().max() <= 0.04 and 0.015 < q.std() < 0.02  # truncated at 2σ: std 0.88σ
    dw = rtd.encoder.layers[0].mixer.key_conv.depthwise
    assert abs(dw.std().item() - 0.88 / K) < 0.01 and dw.abs().max() <= 2 / K
    proj = rtd.encoder.embeddings.project.weight  # [D, E]
    bound = (6 / (D + E)) ** 0.5
    assert proj.abs().max() <= bound and proj.std() > 0.8 * bound / 3**0.5
    assert rtd.head.prediction.weight.abs().max() > 0.04  # Glorot over (D, 1), not 0.02
    clf = SequenceClassifier(cfg, 2)
    assert clf.head.out.weight.std() > 0.05  # Glorot over (D, 2)
    plain = SequenceClassifier(tiny(hidden_size=D, intermediate_size=512, vocab_size=2000), 2)
    w = plain.encoder.layers[0].mixer.query.weight if hasattr(plain.encoder.layers[0].mixer, "query") else None
    fc = plain.encoder.layers[0].ffn.fc1.weight
    assert fc.abs().max() > 0.05 and abs(fc.std().item() - 0.02) < 0.002  # untruncated N(0, 0.02)
    assert w is None or abs(w.std().item() - 0.02) < 0.003
