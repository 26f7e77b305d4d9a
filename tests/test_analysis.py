"""convexp.report.analysis: attention maps, diagonal concentration C, learned kernels, analyze_model.

The attention maps are checked two ways: against softmax(QKᵀ/√d) recomputed by hand from the
weights (plain self-attention), and, for every mixer variant, by rebuilding the mixer's output
from them (out(Σ_j α_ij v_j) [+ depthwise term] must equal what the model computed).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import analysis_model_dir as save

from convexp.models import ModelConfig
from convexp.models.attention import MixedAttention, merge_heads, split_heads, zero_padding
from convexp.models.conv import depthwise_conv
from convexp.models.encoder import Encoder
from convexp.report import analysis

V, L = 64, 10


def tiny(**kw) -> ModelConfig:
    base = dict(
        vocab_size=V,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        kernel_size=5,
        max_position_embeddings=32,
        initializer_range=0.5,  # far from uniform attention
    )
    return ModelConfig(**{**base, **kw})


def encoder_for(cfg: ModelConfig) -> Encoder:
    torch.manual_seed(0)
    enc = Encoder(cfg).eval()
    with torch.no_grad():
        for layer in enc.layers:
            if getattr(layer.mixer, "fixed", None) is not None:
                layer.mixer.fixed.normal_()  # β starts at 0: give it values to find again
    return enc


def random_ids(B: int, n: int = L) -> torch.Tensor:
    return torch.randint(5, V, (B, n), generator=torch.Generator().manual_seed(1))


# ---------------------------------------------------------------------------------------------
# Attention maps
# ---------------------------------------------------------------------------------------------


def test_plain_attention_equals_hand_softmax(tmp_path):
    model_dir, enc = save(tmp_path, "bert", tiny())
    ids = random_ids(3)
    maps = analysis.average_attention(analysis.load_encoder(model_dir), ids.tolist())  # [layers, H, L, L]
    assert maps.shape == (2, 4, L, L)

    hidden = enc(ids).hidden_states  # the input of layer l is hidden[l]
    for l, layer in enumerate(enc.layers):
        x, q_lin, k_lin = hidden[l].double(), layer.mixer.q.linear, layer.mixer.k_proj.linear
        q = (x @ q_lin.weight.double().T + q_lin.bias.double()).view(3, L, 4, 8)  # [B, L, H, d]
        k = (x @ k_lin.weight.double().T + k_lin.bias.double()).view(3, L, 4, 8)
        probs = torch.softmax(torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(8), dim=-1)
        torch.testing.assert_close(maps[l].double(), probs.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, L), atol=1e-5, rtol=0)
    assert maps.std() > 0.01  # not trivially uniform


VARIANTS = {
    "standard": {},
    "fixed": dict(fixed_conv=True),
    "dynamic": dict(dynamic_conv=True),
    "composite": dict(fixed_conv=True, dynamic_conv=True),
    "key": dict(key_conv=True),
    "noqk_all": dict(content_attention=False, fixed_conv=True, dynamic_conv=True, key_conv=True),
    "composite_depthwise": dict(fixed_conv=True, dynamic_conv=True, depthwise_conv=True),
    "composite_conv_qkv": dict(fixed_conv=True, dynamic_conv=True, conv_qkv="qkv"),
    "mixed_none": dict(mixer="mixed", conv_type="none"),
    "mixed_sdconv": dict(mixer="mixed"),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_maps_rebuild_the_mixer_output(variant):
    """out(merge(α v)) (+ the depthwise term) is the mixer's output at every real token: the maps
    are what the softmax produced, relative terms included. Padded keys get 0, real rows sum to 1."""
    enc = encoder_for(tiny(**VARIANTS[variant]))
    ids, mask = random_ids(2), torch.ones(2, L, dtype=torch.long)
    mask[1, 6:] = 0  # second row padded
    seen = []
    hooks = [ly.mixer.register_forward_hook(lambda m, a, out: seen.append((m, *a[:2], out))) for ly in enc.layers]
    maps = analysis.attention_maps(enc, ids, mask)  # [layers, B, H, L, L]
    for h in hooks:
        h.remove()
    H = 2 if variant.startswith("mixed") else 4
    assert maps.shape == (2, 2, H, L, L)
    keep = mask.bool()
    for l, (m, x, k, out) in enumerate(seen):
        probs = maps[l]
        assert torch.equal(probs, m.attention_probs(x, k))
        assert (probs[1, :, :, 6:] == 0).all() and (probs[1, :, 6:, :] == 0).all()
        torch.testing.assert_close(
            probs.sum(-1)[keep[:, None].expand(-1, H, -1)], torch.ones(2 * H * L - H * 4)
        )
        if variant == "mixed_sdconv":
            continue  # the output mixes in the convolution heads
        if isinstance(m, MixedAttention):
            v_flat = m.value(x)
        else:
            v_flat = m.v(x, zero_padding(x, k))
        y = merge_heads(probs @ split_heads(v_flat, H))  # [B, L, H·d]
        if getattr(m, "depthwise", None) is not None:
            y = y + depthwise_conv(zero_padding(v_flat, k), m.depthwise.weight[:, 0], m.depthwise.bias)
        torch.testing.assert_close(m.out(y)[keep], out[keep], atol=1e-5, rtol=1e-5)


def test_examples_are_cut_to_the_shortest():
    enc = encoder_for(tiny())
    ids = random_ids(2, 12).tolist()
    maps = analysis.average_attention(enc, [ids[0], ids[1][:8]])
    full = analysis.attention_maps(enc, torch.tensor([ids[0][:8], ids[1][:8]]))
    torch.testing.assert_close(maps, full.mean(1))


# ---------------------------------------------------------------------------------------------
# Diagonal concentration C
# ---------------------------------------------------------------------------------------------


def test_concentration_on_hand_built_maps():
    n = 12
    band = sum(1 for i in range(n) for j in range(n) if abs(i - j) <= 4)
    uniform = torch.full((n, n), 1.0 / n)
    assert analysis.diagonal_concentration(uniform).item() == pytest.approx(band / (n * n - band))
    assert analysis.uniform_concentration(n) == pytest.approx(band / (n * n - band))
    assert math.isinf(analysis.diagonal_concentration(torch.eye(n)).item())  # all mass on the diagonal
    assert analysis.diagonal_concentration(torch.ones(6, 6)).item() == pytest.approx(34 / 2)
    # one row sending half its mass 5 positions away
    M = torch.eye(n)
    M[0, 0], M[0, 5] = 0.5, 0.5
    assert analysis.diagonal_concentration(M).item() == pytest.approx((n - 0.5) / 0.5)
    # batched: [2, n, n] -> [2]; width is a parameter
    both = analysis.diagonal_concentration(torch.stack([uniform, M]), width=0)
    assert both.shape == (2,) and both[0].item() == pytest.approx(n / (n * n - n))
    with pytest.raises(ValueError):
        analysis.diagonal_concentration(torch.ones(5, 5))


def test_concentration_of_fixed_kernel_models():
    """Without q·k, α_ij = softmax_j(β_{h, clamp(j-i)}): β = 0 gives the uniform C exactly; a peak at
    offset +1 makes every row attend most to the next token and raises C."""
    enc = encoder_for(tiny(content_attention=False, fixed_conv=True))
    ids = random_ids(2, 16).tolist()
    with torch.no_grad():
        for layer in enc.layers:
            layer.mixer.fixed.zero_()
    flat = analysis.average_attention(enc, ids)
    torch.testing.assert_close(
        analysis.diagonal_concentration(flat), torch.full((2, 4), analysis.uniform_concentration(16)).double()
    )
    with torch.no_grad():
        for layer in enc.layers:
            layer.mixer.fixed[:, 2 + 1] = 6.0  # kernel 5: column k + 1 = offset j - i = +1
    peaked = analysis.average_attention(enc, ids)
    assert (peaked[:, :, :-1].argmax(-1) == torch.arange(1, 16)).all()
    assert (analysis.diagonal_concentration(peaked) > 10 * analysis.uniform_concentration(16)).all()


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


def test_kernel_extraction(tmp_path):
    model_dir, enc = save(tmp_path, "fd", tiny(fixed_conv=True, depthwise_conv=True, num_layers=3))
    loaded = analysis.load_encoder(model_dir)
    fixed, depthwise = analysis.fixed_kernels(loaded), analysis.depthwise_kernels(loaded)
    assert fixed.shape == (3, 4, 5) and depthwise.shape == (3, 32, 5)
    for l, layer in enumerate(enc.layers):
        assert torch.equal(fixed[l], layer.mixer.fixed)
        assert torch.equal(depthwise[l], layer.mixer.depthwise.weight[:, 0, :])
    plain = encoder_for(tiny())
    assert analysis.fixed_kernels(plain) is None and analysis.depthwise_kernels(plain) is None
    only_fixed = encoder_for(tiny(fixed_conv=True))
    assert analysis.depthwise_kernels(only_fixed) is None


def test_depthwise_column_is_the_offset():
    """Column t of a depthwise kernel weights the token at j - i = t - k (as β_{j-i} does)."""
    w = torch.randn(3, 5)
    for j in range(7):
        v = torch.zeros(1, 7, 3)
        v[0, j] = 1.0  # an impulse at key position j
        y = depthwise_conv(v, w)[0]  # [L, C]
        for i in range(7):
            expect = w[:, j - i + 2] if abs(j - i) <= 2 else torch.zeros(3)
            torch.testing.assert_close(y[i], expect)


def test_previous_next_order():
    w = torch.zeros(4, 5)  # offsets -2..2: column 1 = previous token, column 3 = next token
    w[0, 3] = 1.0  # next
    w[1, 1] = 2.0  # strongly previous
    w[3, 1] = 0.5  # previous
    assert analysis.previous_next_order(w).tolist() == [1, 3, 2, 0]
    assert analysis.previous_next_order(torch.ones(3, 1)).tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# analyze_model
# ---------------------------------------------------------------------------------------------

MODELS = {
    "bert": ({}, False),
    "chang": (dict(fixed_conv=True, dynamic_conv=True, depthwise_conv=True, absolute_positions=False), True),
    "convbert": (dict(mixer="mixed", num_heads=4, head_ratio=2), False),
}


@pytest.mark.parametrize("name", MODELS)
def test_analyze_model_writes_figures(tmp_path, name):
    kw, has_kernels = MODELS[name]
    model_dir, _ = save(tmp_path, name, tiny(**kw))
    out = tmp_path / "report"
    result = analysis.analyze_model(model_dir, out, name)
    json.dumps(result, allow_nan=False)
    files = [out / f"attention_{name}.png"] + ([out / f"kernels_{name}.png"] if has_kernels else [])
    assert result["files"] == [str(f) for f in files]
    assert sorted(out.iterdir()) == sorted(files)
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    H = 2 if name == "convbert" else 4
    seq_len = 64 if name == "chang" else 32  # capped by max_position_embeddings unless positions are relative
    assert result["examples_source"] == "random" and result["seq_len"] == seq_len
    assert result["layers"] == 2 and result["attention_heads"] == H
    assert len(result["C_per_layer"]) == 2 and all(len(r) == H for r in result["C_per_head"])
    assert result["C"] > 0 and result["C_uniform"] == pytest.approx(analysis.uniform_concentration(seq_len))
    if has_kernels:
        assert result["kernels"] == {"fixed": {"shape": [2, 4, 5]}, "depthwise": {"shape": [2, 32, 5]}}
    else:
        assert result["kernels"] == {}


def test_analyze_model_with_tokenizer_and_given_examples(tmp_path):
    from convexp.data.synthetic import synthetic_corpus
    from convexp.data.tokenizer import build_tokenizer

    texts = synthetic_corpus(20, seed=3)
    tok = build_tokenizer({"kind": "wordpiece", "vocab_size": 300}, lambda: iter([texts]))
    tok_dir = tok.save(tmp_path / "tok")
    cfg = tiny(vocab_size=tok.vocab_size, max_position_embeddings=128)
    model_dir, _ = save(tmp_path, "m", cfg, extra_files=sorted(tok_dir.iterdir()))

    examples, source = analysis.default_examples(model_dir, cfg)
    assert source == "synthetic" and len(examples) == analysis.NUM_EXAMPLES
    assert all(len(e) == analysis.SEQ_LEN and e[0] == tok.cls_id and e[-1] == tok.sep_id for e in examples)
    assert examples == analysis.default_examples(model_dir, cfg)[0]  # deterministic
    assert analysis.analyze_model(model_dir, tmp_path / "a", "m")["examples_source"] == "synthetic"

    given = random_ids(2, 12).tolist()
    result = analysis.analyze_model(model_dir, tmp_path / "b", "m", examples=[given[0], given[1][:9]])
    assert result["examples_source"] == "given" and result["examples"] == 2 and result["seq_len"] == 9
