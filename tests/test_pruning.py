"""convexp.pruning: binarizers, schedule, masks on every mixer, accounting, folding, structured
removal and distillation — all against hand-computed values or exact output equality."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from convexp.models import SequenceClassifier
from convexp.models.ffn import GroupedLinear
from convexp.pruning import (
    SigmoidThresholdBinarizer,
    TopKBinarizer,
    cubic_threshold,
    distillation_loss,
    expected_l0,
    fold_masks,
    hard_concrete_mask,
    magnitude_mask,
    masks,
    measure_speedup,
    prunable_layers,
    prune,
    regularization,
    remaining_weights,
    remove_dead_structures,
    score_parameters,
    set_threshold,
    soft_target_loss,
)
from convexp.pruning.masked import weight_mask
from convexp.pruning.structured import layers_parameters

from helpers import VARIANTS, batch, kill_ffn_units, kill_heads, logits, make_cfg, make_model


pytestmark = pytest.mark.usefixtures("single_thread")


# ---------------------------------------------------------------------------------------------
# Binarizers
# ---------------------------------------------------------------------------------------------


def test_topk_forward_ties_and_straight_through_gradient():
    scores = torch.tensor([[0.3, -1.0, 2.0], [0.5, 0.5, 0.1]], requires_grad=True)
    # keep 1/3 of 6 -> 2 entries: 2.0 and the first of the tied 0.5s (lower flat index wins)
    m = TopKBinarizer.apply(scores, 1 / 3)
    assert m.tolist() == [[0, 0, 1], [1, 0, 0]]
    assert TopKBinarizer.apply(scores, 0.5).tolist() == [[0, 0, 1], [1, 1, 0]]  # 3 of 6
    # W' = M ⊙ W, L = Σ G ⊙ W'  ->  dL/dM = G ⊙ W passes to S unchanged (also where M = 0)
    W = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    G = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]])
    (G * (m * W)).sum().backward()
    assert scores.grad.tolist() == [[0.5, -2.0, 6.0], [4.0, 0.0, -18.0]]


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.29, 0.5, 0.7, 1.0])
def test_topk_keeps_exact_fraction_even_with_ties(keep):
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 3, (17, 23), generator=g).float()  # heavy ties
    m = TopKBinarizer.apply(scores, keep)
    assert int(m.sum()) == math.floor(keep * scores.numel() + 1e-6)
    assert torch.equal(m, TopKBinarizer.apply(scores, keep))  # deterministic
    if 0 < keep < 1:  # every kept score >= every pruned score
        assert scores[m.bool()].min() >= scores[~m.bool()].max()


def test_magnitude_mask_and_gradient():
    W = torch.tensor([[0.1, -3.0], [2.0, -0.5]], requires_grad=True)
    m = magnitude_mask(W, 0.5)
    assert m.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    G = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    (G * (m * W)).sum().backward()
    assert W.grad.tolist() == [[0.0, 2.0], [3.0, 0.0]]  # dL/dW = G ⊙ M, nothing through M


def test_sigmoid_threshold_forward_gradient_and_min_keep():
    S = torch.tensor([-2.0, 0.0, 1.0, 3.0], requires_grad=True)  # σ = 0.119, 0.5, 0.731, 0.953
    m = SigmoidThresholdBinarizer.apply(S, 0.6)
    assert m.tolist() == [0.0, 0.0, 1.0, 1.0]
    W = torch.tensor([1.0, -2.0, 3.0, 4.0])
    G = torch.tensor([2.0, 1.0, -1.0, 0.5])
    (G * (m * W)).sum().backward()
    assert S.grad.tolist() == [2.0, -2.0, -3.0, 2.0]  # straight through: G ⊙ W
    # nothing passes τ = 0.99: at least int(0.005·400) + 1 = 3 entries are kept (the top 3 scores)
    S2 = torch.arange(400.0) / 100 - 2
    m2 = SigmoidThresholdBinarizer.apply(S2, 0.99)
    assert m2.sum() == 3 and m2[-3:].sum() == 3


def test_hard_concrete_train_vs_eval_and_expected_l0():
    torch.manual_seed(0)
    S = torch.zeros(4000)
    z1, z2 = hard_concrete_mask(S, training=True), hard_concrete_mask(S, training=True)
    assert not torch.equal(z1, z2)  # stochastic
    assert z1.min() == 0 and z1.max() == 1
    # S = 0: z = 0 iff u < P ≈ 0.168 (σ(logit(u)/β) ≤ 1/12), z = 1 iff u > 1 − P
    p = 1 / (1 + math.exp(-(2 / 3) * math.log(1 / 11)))
    assert abs((z1 == 0).float().mean() - p) < 0.03 and abs((z1 == 1).float().mean() - p) < 0.03
    assert ((z1 > 0) & (z1 < 1)).any()
    # eval: deterministic, clamp(1.2·σ(S) − 0.1, 0, 1)
    S = torch.tensor([-3.0, 0.0, 2.197, math.log(11), 5.0], requires_grad=True)
    m = hard_concrete_mask(S, training=False)
    assert torch.equal(m, hard_concrete_mask(S, training=False))
    expected = [0.0, 0.5, 1.2 * 0.9 - 0.1, 1.0, 1.0]
    assert m.tolist() == pytest.approx(expected, abs=1e-4)
    m[1].backward()  # dM/dS = 1.2·σ'(0) = 0.3 inside the clamp range
    assert S.grad.tolist() == pytest.approx([0.0, 0.3, 0.0, 0.0, 0.0])
    # expected L0 at S = 0: σ(β·log(r/−l)) = 1 / (1 + 11^(−2/3))
    assert expected_l0(torch.zeros(5)).item() == pytest.approx(1 / (1 + 11 ** (-2 / 3)))


# ---------------------------------------------------------------------------------------------
# Schedule
# ---------------------------------------------------------------------------------------------


def test_cubic_schedule_hand_values():
    kw = dict(total_steps=100, warmup_steps=10, initial_threshold=1.0, final_threshold=0.1)
    kw.update(initial_warmup=1, final_warmup=2)  # plateau to step 10, ramp to 80, final after
    assert cubic_threshold(0, **kw) == (1.0, 10.0)
    assert cubic_threshold(10, **kw) == (1.0, 10.0)
    t, mult = cubic_threshold(11, **kw)
    assert t == pytest.approx(0.1 + 0.9 * (69 / 70) ** 3)
    t, mult = cubic_threshold(45, **kw)  # progress 35/70 = 0.5 -> 0.1 + 0.9/8
    assert (t, mult) == (pytest.approx(0.2125), pytest.approx(2.125))
    assert cubic_threshold(80, **kw)[0] == pytest.approx(0.1)  # ramp reaches t_f exactly
    assert cubic_threshold(81, **kw) == (0.1, 1.0)
    # soft movement (BERMO Table 10): τ 0 -> 0.1 and λ multiplier 0 -> 1
    soft = dict(kw, initial_threshold=0.0)
    assert cubic_threshold(5, **soft) == (0.0, 0.0)
    assert cubic_threshold(45, **soft)[1] == pytest.approx(1 - 0.125)
    # l0: t_i = t_f = 1 -> constant; t_f = 0 does not divide by zero
    assert cubic_threshold(45, **dict(kw, initial_threshold=1.0, final_threshold=1.0)) == (1.0, 1.0)
    assert cubic_threshold(45, **dict(kw, final_threshold=0.0))[1] == 1.0


# ---------------------------------------------------------------------------------------------
# Masks on whole models
# ---------------------------------------------------------------------------------------------


def test_prune_selects_the_reference_matrices():
    names = [n for n, _ in prunable_layers(make_model("chang_composite_conv_qkv"))]
    layer0 = [n.removeprefix("encoder.layers.0.") for n in names if n.startswith("encoder.layers.0.")]
    assert layer0 == [
        "mixer.q.conv.pointwise",
        "mixer.q.linear",
        "mixer.k_proj.conv.pointwise",
        "mixer.k_proj.linear",
        "mixer.v.conv.pointwise",
        "mixer.v.linear",
        "mixer.out",
        "ffn.fc1",
        "ffn.fc2",
    ]
    sd = [n for n, _ in prunable_layers(make_model("convbert_sdconv")) if n.startswith("encoder.layers.1.")]
    assert [n.removeprefix("encoder.layers.1.") for n in sd] == [
        "mixer.query",
        "mixer.key",
        "mixer.value",
        "mixer.key_conv.pointwise",
        "mixer.conv_kernel",
        "mixer.conv_value",
        "mixer.out",
        "ffn.fc1",
        "ffn.fc2",
    ]
    assert all(".layers." in n for n in names)  # never embeddings, pooler, scalar mix or the head


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("method", ["topk", "magnitude", "sigmoid_threshold", "l0"])
def test_prune_with_all_ones_mask_keeps_outputs(name, method):
    model = make_model(name)
    ids, mask = batch()
    before = logits(model, ids, mask)
    ms = prune(model, method, mask_scale=10.0 if method == "l0" else 0.0)  # l0 eval mask = 1 for S ≥ log 11
    assert len(ms) == len(prunable_layers(model)) and len(score_parameters(model)) == (
        0 if method == "magnitude" else len(ms)
    )
    assert torch.equal(logits(model, ids, mask), before)


def test_scores_receive_straight_through_gradients_in_a_model():
    model = make_model("convbert_sdconv").train()
    prune(model, "topk")
    set_threshold(model, 0.5)
    ids, mask = batch()
    model(ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    for _, layer in prunable_layers(model):
        wm = weight_mask(layer)
        g_w = layer.parametrizations.weight.original.grad  # = dL/dW' ⊙ M
        assert wm.scores.grad is not None and wm.scores.grad.abs().sum() > 0
        # dS = dL/dW' ⊙ W; where M = 1, dL/dW' = dL/dW, so dS = g_W ⊙ W there
        m = wm.mask(layer.parametrizations.weight.original).bool()
        assert torch.allclose(wm.scores.grad[m], (g_w * layer.parametrizations.weight.original)[m])


def test_topk_keeps_exact_fraction_per_matrix_in_model():
    model = make_model("convbert_sdconv")
    prune(model, "topk")
    with torch.no_grad():
        for s in score_parameters(model):
            s.normal_()
    set_threshold(model, 0.3)
    for _, layer in prunable_layers(model):
        wm = weight_mask(layer)
        w = layer.parametrizations.weight.original
        assert int(wm.mask(w).sum()) == int(0.3 * w.numel() + 1e-6)
        assert int(torch.count_nonzero(layer.weight)) == int(0.3 * w.numel() + 1e-6)


def test_regularization_values():
    model = make_model("self_attention")
    prune(model, "sigmoid_threshold")
    assert regularization(model).item() == pytest.approx(0.5)  # mean σ(0)
    with torch.no_grad():
        score_parameters(model)[0].fill_(100.0)  # one matrix at σ = 1: mean over matrices of means
    n = len(masks(model))
    assert regularization(model, "l1").item() == pytest.approx((1 + 0.5 * (n - 1)) / n)
    model = make_model("self_attention")
    prune(model, "l0", mask_scale=0.0)
    assert regularization(model).item() == pytest.approx(1 / (1 + 11 ** (-2 / 3)))
    model = make_model("self_attention")
    prune(model, "topk")
    assert regularization(model).item() == 0.0


def test_remaining_weights_hand_count():
    # one layer, D 4, 2 heads, I 8, no conv: q, k, v, out 4·(16 + 4) = 80; fc1 8·4 + 8 = 40;
    # fc2 4·8 + 4 = 36; two LayerNorms 16 -> 172 parameters in encoder.layers, 128 of them masked
    cfg = make_cfg(hidden_size=4, num_heads=2, intermediate_size=8, num_layers=1)
    model = SequenceClassifier(cfg, 2)
    assert layers_parameters(model) == 172
    prune(model, "topk")
    assert remaining_weights(model) == 1.0
    set_threshold(model, 0.25)  # kept: 4 · int(0.25·16) + 2 · int(0.25·32) = 16 + 16 = 32
    assert remaining_weights(model) == pytest.approx((32 + 44) / 172)
    emb = sum(p.numel() for p in model.encoder.embeddings.parameters())  # scope "encoder" adds them
    assert remaining_weights(model, scope="encoder") == pytest.approx((32 + 44 + emb) / (172 + emb))
    fold_masks(model)
    assert remaining_weights(model) == pytest.approx((32 + 44) / 172)  # folding keeps the count


@pytest.mark.parametrize("name", ["chang_composite_conv_qkv", "convbert_sdconv", "chang_depthwise_conv_qk"])
@pytest.mark.parametrize("method", ["topk", "magnitude", "sigmoid_threshold", "l0"])
def test_fold_masks_matches_masked_model(name, method):
    ref_keys = set(make_model(name).state_dict())
    model = make_model(name)
    prune(model, method, mask_scale=0.0)
    torch.manual_seed(3)
    with torch.no_grad():
        for s in score_parameters(model):
            s.normal_(-2.0 if method == "l0" else 0.0, 2.0)
    set_threshold(model, {"topk": 0.3, "magnitude": 0.3, "sigmoid_threshold": 0.6, "l0": 1.0}[method])
    ids, mask = batch()
    masked_out = logits(model, ids, mask)
    r = remaining_weights(model)
    assert r < 0.8
    fold_masks(model)
    assert not masks(model) and set(model.state_dict()) == ref_keys
    assert all(type(layer) in (nn.Linear, GroupedLinear) for _, layer in prunable_layers(model))
    torch.testing.assert_close(logits(model, ids, mask), masked_out, atol=1e-6, rtol=1e-5)
    assert remaining_weights(model) == pytest.approx(r)


def test_threshold_survives_state_dict_round_trip():
    model = make_model("self_attention")
    prune(model, "topk")
    with torch.no_grad():
        for s in score_parameters(model):
            s.normal_()
    set_threshold(model, 0.2)
    other = make_model("self_attention", seed=1)
    prune(other, "topk")
    other.load_state_dict(model.state_dict())
    ids, mask = batch()
    assert torch.equal(logits(other, ids, mask), logits(model, ids, mask))


# ---------------------------------------------------------------------------------------------
# Structured removal
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VARIANTS))
def test_structured_removal_keeps_outputs(name):
    model = make_model(name)
    kill_ffn_units(model)
    kill_heads(model)
    ids, mask = batch()
    before = logits(model, ids, mask)
    n_before = layers_parameters(model)
    s = remove_dead_structures(model)
    torch.testing.assert_close(logits(model, ids, mask), before, atol=1e-5, rtol=1e-4)
    grouped = VARIANTS[name].get("ffn_groups", 1) > 1
    assert s.ffn_before == [64, 64] and s.ffn_after == ([58, 64] if grouped else [61, 64])
    H = s.heads_before[0]
    if name in ("convbert_sdconv", "convbert_dynamic"):
        assert s.heads_after == s.heads_before and s.notes  # documented limitation
    else:
        assert s.heads_after == [H - 2, 1]  # at least one head is kept
    assert s.params_after == layers_parameters(model) < n_before == s.params_before
    # the pruned model still trains (shapes consistent in train mode and backward)
    model.train()
    model(ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()


def test_prune_fold_then_remove_rows_and_measure_speedup():
    """Scores that prune whole FFN rows -> fold -> structured step -> same outputs, fewer params."""
    dense = make_model("self_attention")
    model = make_model("self_attention")
    prune(model, "topk")
    with torch.no_grad():
        for name, layer in prunable_layers(model):
            if name.endswith("ffn.fc1"):
                weight_mask(layer).scores[:16] = -1.0  # the first 16 units (rows of fc1) rank lowest
    set_threshold(model, 0.75)  # keep 48 of 64 rows
    ids, mask = batch()
    masked_out = logits(model, ids, mask)
    fold_masks(model)
    s = remove_dead_structures(model)
    assert s.ffn_after[0] < 64
    torch.testing.assert_close(logits(model, ids, mask), masked_out, atol=1e-5, rtol=1e-4)
    res = measure_speedup(dense, model, batch=2, seq_len=16, repeats=2, warmup=1)
    assert res["dense_ms"] > 0 and res["pruned_ms"] > 0 and res["pruned_params"] < res["dense_params"]


# ---------------------------------------------------------------------------------------------
# Distillation
# ---------------------------------------------------------------------------------------------


def test_distillation_loss_hand_computed():
    s, t, T = [1.0, 2.0, 3.0], [3.0, 2.0, 1.0], 2.0

    def softmax(x):
        e = [math.exp(v / T) for v in x]
        return [v / sum(e) for v in e]

    ps, pt = softmax(s), softmax(t)
    kl = sum(a * (math.log(a) - math.log(b)) for a, b in zip(pt, ps))  # KL(p_T ‖ p_S)
    # second row identical -> KL 0; batchmean over 2 rows; T² = 4
    student = torch.tensor([s, [0.0, 1.0, 0.0]])
    teacher = torch.tensor([t, [0.0, 1.0, 0.0]])
    soft = kl * 4 / 2
    assert float(soft_target_loss(student, teacher, T)) == pytest.approx(soft, rel=1e-6)
    task = torch.tensor(0.7)
    assert float(distillation_loss(student, teacher, task)) == pytest.approx(0.5 * 0.7 + 0.5 * soft, rel=1e-6)
    assert float(distillation_loss(student, teacher, task, 0.1, 0.9)) == pytest.approx(
        0.1 * 0.7 + 0.9 * soft, rel=1e-6
    )
    # regression logits [B]: MSE to the teacher, no temperature
    reg = soft_target_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]), T)
    assert float(reg) == pytest.approx((1 + 4) / 2)
