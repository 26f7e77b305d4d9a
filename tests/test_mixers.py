"""Token mixers checked against slow, obviously-correct references.

Every reference below is written with explicit Python loops over batch rows, heads, query
positions i and key positions j (and convolution taps), reads the module's own parameters, and
computes in float64. The modules run in float32; agreement is required to atol 1e-5.

Covered:
* SelfAttention: standard multi-head attention and every Chang et al. 2021 option (fixed /
  dynamic / key-based lightweight convolutions, no-q·k variants, depthwise convolution on the
  values, convolutional Q/K/V in every subset), with and without padding;
* MixedAttention (ConvBERT): sdconv / dynamic / conventional / none, several head ratios,
  hf_padding on and off, with and without padding;
* GroupedLinear and ScalarMix against hand computations;
* the full Encoder for every variant: padding invariance (and the documented HF padding leak);
* gradients reach every trainable parameter through every task head;
* the convolution branches use memory linear in L (no tensor of size ~L² is ever allocated).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import convexp.models.attention as attention_mod
import convexp.models.encoder as encoder_mod
from convexp.models import MaskedLM, ModelConfig, ReplacedTokenDetector, SequenceClassifier
from convexp.models.attention import MixedAttention, SelfAttention, attention_scores
from convexp.models.conv import SeparableConv1d, lightweight_conv
from convexp.models.encoder import Encoder
from convexp.models.ffn import GroupedLinear
from convexp.models.scalar_mix import ScalarMix

ATOL = 1e-5
D, N_HEADS, K_SIZE, L_MAX = 32, 4, 5, 12  # kernel 5 (k = 2) < L: offsets beyond ±k are clipped
LENGTHS = (12, 8, 3)  # per batch row; the last two rows are right-padded
PAD_ID = 1  # deliberately not 0

# ---------------------------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------------------------

CHANG_VARIANTS = {
    "standard": {},
    "fixed": dict(fixed_conv=True),
    "dynamic": dict(dynamic_conv=True),
    "composite": dict(fixed_conv=True, dynamic_conv=True),
    "key": dict(key_conv=True),
    "composite_key": dict(fixed_conv=True, dynamic_conv=True, key_conv=True),
    "noqk_fixed": dict(content_attention=False, fixed_conv=True),
    "noqk_dynamic": dict(content_attention=False, dynamic_conv=True),
    "noqk_key": dict(content_attention=False, key_conv=True),
    "noqk_all": dict(content_attention=False, fixed_conv=True, dynamic_conv=True, key_conv=True),
    "depthwise": dict(depthwise_conv=True),
    "composite_depthwise": dict(fixed_conv=True, dynamic_conv=True, depthwise_conv=True),
    **{f"conv_{s}": dict(conv_qkv=s) for s in ("q", "k", "v", "qk", "qv", "kv", "qkv")},
    "composite_conv_qk": dict(fixed_conv=True, dynamic_conv=True, conv_qkv="qk"),
    "everything": dict(
        fixed_conv=True, dynamic_conv=True, key_conv=True, depthwise_conv=True, conv_qkv="qkv"
    ),
}

# (num_heads, head_ratio): n = N // γ = 2, 2, 1 (γ > N is refused by ModelConfig.validate)
HEAD_SETTINGS = {"N4g2": (4, 2), "N8g4": (8, 4), "N4g4": (4, 4)}
CONVBERT_VARIANTS = {
    f"{ct}_{hs}{'_hf' if hf else ''}": dict(
        mixer="mixed",
        conv_type=ct,
        num_heads=HEAD_SETTINGS[hs][0],
        head_ratio=HEAD_SETTINGS[hs][1],
        hf_padding=hf,
    )
    for ct in ("sdconv", "dynamic", "conventional", "none")
    for hs in HEAD_SETTINGS
    for hf in (False, True)
}

ENCODER_EXTRA = {
    "standard_nopos": dict(absolute_positions=False),
    "composite_nopos": dict(absolute_positions=False, fixed_conv=True, dynamic_conv=True),
    "everything_nopos": dict(absolute_positions=False, **CHANG_VARIANTS["everything"]),
    "scalar_mix": dict(scalar_mix=True),
    "scalar_mix_composite": dict(scalar_mix=True, fixed_conv=True, dynamic_conv=True, conv_qkv="qk"),
    "scalar_mix_sdconv": dict(scalar_mix=True, mixer="mixed", conv_type="sdconv"),
    "ffn_groups2": dict(ffn_groups=2),
    "ffn_groups2_sdconv": dict(ffn_groups=2, mixer="mixed", conv_type="sdconv"),
    "emb16_sdconv_gl_mix": dict(
        embedding_size=16, ffn_groups=2, scalar_mix=True, mixer="mixed", conv_type="sdconv"
    ),
    "pooler": dict(pooler=True),
}

ENCODER_VARIANTS = {
    **{f"chang_{k}": v for k, v in CHANG_VARIANTS.items()},
    **{f"convbert_{k}": v for k, v in CONVBERT_VARIANTS.items()},
    **ENCODER_EXTRA,
}


pytestmark = pytest.mark.usefixtures("single_thread")


def make_cfg(**kw) -> ModelConfig:
    base = dict(
        vocab_size=50,
        hidden_size=D,
        num_heads=N_HEADS,
        intermediate_size=64,
        num_layers=2,
        max_position_embeddings=32,
        kernel_size=K_SIZE,
        pad_token_id=PAD_ID,
    )
    base.update(kw)
    return ModelConfig(**base)


def randomize_(module: nn.Module, std: float = 0.2) -> None:
    """Replace every parameter by N(0, std) so zero-initialised ones (β, biases) are exercised."""
    torch.manual_seed(1234)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)


def padding_keep(B: int = 3, L: int = L_MAX) -> torch.Tensor:
    keep = torch.zeros(B, L, dtype=torch.bool)
    for b, n in enumerate(LENGTHS[:B]):
        keep[b, :n] = True
    return keep


# ---------------------------------------------------------------------------------------------
# Slow references (float64, explicit loops)
# ---------------------------------------------------------------------------------------------


def P(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double()


def linear_at(lin: nn.Linear, v: torch.Tensor) -> torch.Tensor:
    return P(lin.weight) @ v + (P(lin.bias) if lin.bias is not None else 0.0)


def depthwise_at(weight: torch.Tensor, bias, x: torch.Tensor, b: int, i: int) -> torch.Tensor:
    """Σ_t w[:, t] · x[b, i + t - K//2] (+ bias), positions outside [0, L) are zero. weight [C, K]."""
    C, K = weight.shape
    L = x.shape[1]
    acc = torch.zeros(C, dtype=torch.float64) if bias is None else P(bias).clone()
    for t in range(K):
        j = i + t - K // 2
        if 0 <= j < L:
            acc = acc + P(weight[:, t]) * x[b, j]
    return acc


def zeroed(x: torch.Tensor, keep) -> torch.Tensor:
    x = x.clone()
    if keep is not None:
        for b in range(x.shape[0]):
            for i in range(x.shape[1]):
                if not keep[b, i]:
                    x[b, i] = 0.0
    return x


def softmax_list(scores: list[float]) -> list[float]:
    m = max(s for s in scores if s != -math.inf)
    e = [0.0 if s == -math.inf else math.exp(s - m) for s in scores]
    z = sum(e)
    return [v / z for v in e]


def ref_self_attention_heads(q, k, v, keep, H, d, score_extra=None, content=True):
    """q, k, v: [B, L, H·d] float64 (q, k unused when content=False). Returns [B, L, H·d];
    loops over b, h, i, j."""
    B, L, _ = v.shape
    out = torch.zeros(B, L, H * d, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            for i in range(L):
                scores = []
                for j in range(L):
                    s = 0.0
                    if content:
                        s += float(torch.dot(q[b, i, sl], k[b, j, sl])) / math.sqrt(d)
                    if score_extra is not None:
                        s += score_extra(b, h, i, j)
                    if keep is not None and not keep[b, j]:
                        s = -math.inf
                    scores.append(s)
                probs = softmax_list(scores)
                acc = torch.zeros(d, dtype=torch.float64)
                for j in range(L):
                    acc = acc + probs[j] * v[b, j, sl]
                out[b, i, sl] = acc
    return out


def ref_projection(proj, x, x0, b, i):
    """Chang et al. projection: [conv half (depthwise+bias → pointwise, no activation: the
    "convolution_depth_mixed_no_act" form their README uses) ; linear half]."""
    lin = linear_at(proj.linear, x[b, i])
    if proj.conv is None:
        return lin
    assert proj.conv.depthwise_bias is not None
    h = depthwise_at(proj.conv.depthwise, proj.conv.depthwise_bias, x0, b, i)
    return torch.cat([linear_at(proj.conv.pointwise, h), lin])


def ref_self_attention(m: SelfAttention, cfg: ModelConfig, x: torch.Tensor, keep) -> torch.Tensor:
    B, L, _ = x.shape
    H, d, k = cfg.num_heads, cfg.head_dim, cfg.kernel_size // 2
    x0 = zeroed(x, keep)  # padding tokens zeroed before every convolution

    def project(proj):
        return torch.stack(
            [torch.stack([ref_projection(proj, x, x0, b, i) for i in range(L)]) for b in range(B)]
        )

    # without the q·k term, W^Q is only needed by the dynamic conv and W^K by the key-based one
    need_q = cfg.content_attention or cfg.dynamic_conv
    need_k = cfg.content_attention or cfg.key_conv
    q = project(m.q) if need_q else None
    kk = project(m.k_proj) if need_k else None
    v = project(m.v)

    def clamp(r):
        return max(-k, min(k, r))

    def extra(b, h, i, j):
        s = 0.0
        sl = slice(h * d, (h + 1) * d)
        r = clamp(j - i)
        if cfg.fixed_conv:
            s += float(P(m.fixed[h, r + k]))
        if cfg.dynamic_conv:
            s += float(torch.dot(q[b, i, sl], P(m.dynamic[:, r + k]))) / math.sqrt(d)
        if cfg.key_conv:
            s += float(torch.dot(kk[b, j, sl], P(m.key_dynamic[:, clamp(i - j) + k]))) / math.sqrt(d)
        return s

    y = ref_self_attention_heads(q, kk, v, keep, H, d, extra, cfg.content_attention)
    if cfg.depthwise_conv:
        v0 = zeroed(v, keep)
        w = m.depthwise.weight[:, 0, :]  # [H·d, K]
        for b in range(B):
            for i in range(L):
                y[b, i] = y[b, i] + depthwise_at(w, m.depthwise.bias, v0, b, i)
    return torch.stack([torch.stack([linear_at(m.out, y[b, i]) for i in range(L)]) for b in range(B)])


def ref_mixed_attention(m: MixedAttention, cfg: ModelConfig, x: torch.Tensor, keep) -> torch.Tensor:
    B, L, _ = x.shape
    n = max(1, cfg.num_heads // cfg.head_ratio)
    A = m.query.weight.shape[0]
    d = A // n
    K = cfg.kernel_size

    def per_pos(fn):
        return torch.stack([torch.stack([fn(b, i) for i in range(L)]) for b in range(B)])

    q = per_pos(lambda b, i: linear_at(m.query, x[b, i]))
    kk = per_pos(lambda b, i: linear_at(m.key, x[b, i]))
    v = per_pos(lambda b, i: linear_at(m.value, x[b, i]))
    y = ref_self_attention_heads(q, kk, v, keep, n, d)  # padding always masked in self-attention
    if cfg.conv_type == "none":
        return per_pos(lambda b, i: linear_at(m.out, y[b, i]))

    conv_keep = None if cfg.hf_padding else keep  # HF: padding leaks into the convolution branch
    xc = zeroed(x, conv_keep)
    if cfg.conv_type == "conventional":
        sep = m.conv
        assert sep.depthwise_bias is None
        conv = per_pos(lambda b, i: linear_at(sep.pointwise, depthwise_at(sep.depthwise, None, xc, b, i)))
    else:
        if cfg.conv_type == "sdconv":
            sep = m.key_conv
            assert sep.depthwise_bias is None
            ks = per_pos(lambda b, i: linear_at(sep.pointwise, depthwise_at(sep.depthwise, None, xc, b, i)))
            logits = per_pos(lambda b, i: linear_at(m.conv_kernel, ks[b, i] * q[b, i]))
        else:  # dynamic: kernel from the current token only
            logits = per_pos(lambda b, i: linear_at(m.conv_kernel, x[b, i]))
        vc = zeroed(per_pos(lambda b, i: linear_at(m.conv_value, x[b, i])), conv_keep)
        conv = torch.zeros(B, L, A, dtype=torch.float64)
        for b in range(B):
            for i in range(L):
                for h in range(n):
                    w = softmax_list([float(logits[b, i, h * K + t]) for t in range(K)])
                    acc = torch.zeros(d, dtype=torch.float64)
                    for t in range(K):
                        j = i + t - K // 2
                        if 0 <= j < L:
                            acc = acc + w[t] * vc[b, j, h * d : (h + 1) * d]
                    conv[b, i, h * d : (h + 1) * d] = acc
    return per_pos(lambda b, i: linear_at(m.out, torch.cat([y[b, i], conv[b, i]])))


def assert_close_at_real(out: torch.Tensor, ref: torch.Tensor, keep) -> None:
    out = out.double()
    B, L = out.shape[:2]
    for b in range(B):
        for i in range(L):
            if keep is None or keep[b, i]:
                torch.testing.assert_close(
                    out[b, i], ref[b, i], atol=ATOL, rtol=0, msg=lambda s: f"b={b} i={i}: {s}"
                )


# ---------------------------------------------------------------------------------------------
# Mixer-level tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "padded"])
@pytest.mark.parametrize("name", list(CHANG_VARIANTS))
def test_self_attention_matches_reference(name, masked):
    torch.manual_seed(0)
    cfg = make_cfg(**CHANG_VARIANTS[name])
    m = SelfAttention(cfg).eval()
    randomize_(m)
    x = torch.randn(3, L_MAX, D, dtype=torch.float64)
    keep = padding_keep() if masked else None
    with torch.no_grad():
        out = m(x.float(), keep)
    assert out.shape == (3, L_MAX, D)
    assert_close_at_real(out, ref_self_attention(m, cfg, x, keep), keep)


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "padded"])
@pytest.mark.parametrize("name", list(CONVBERT_VARIANTS))
def test_mixed_attention_matches_reference(name, masked):
    torch.manual_seed(0)
    cfg = make_cfg(**CONVBERT_VARIANTS[name])
    m = MixedAttention(cfg).eval()
    n = max(1, cfg.num_heads // cfg.head_ratio)
    assert m.heads == n == cfg.attn_heads
    A = m.query.weight.shape[0]
    assert A % n == 0
    assert m.out.in_features == (A if cfg.conv_type == "none" else 2 * A) and m.out.out_features == D
    randomize_(m)
    x = torch.randn(3, L_MAX, D, dtype=torch.float64)
    keep = padding_keep() if masked else None
    with torch.no_grad():
        out = m(x.float(), keep)
    assert_close_at_real(out, ref_mixed_attention(m, cfg, x, keep), keep)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_grouped_linear_matches_loop_and_block_diagonal_linear(groups):
    torch.manual_seed(0)
    fin, fout = 16, 24
    gl = GroupedLinear(fin, fout, groups)
    with torch.no_grad():
        gl.weight.normal_()
        gl.bias.normal_()
    x = torch.randn(2, 5, fin)
    out = gl(x)
    # explicit loop over groups
    ig, og = fin // groups, fout // groups
    ref = torch.zeros(2, 5, fout, dtype=torch.float64)
    for b in range(2):
        for t in range(5):
            for g in range(groups):
                xs = x[b, t, g * ig : (g + 1) * ig].double()
                ref[b, t, g * og : (g + 1) * og] = xs @ P(gl.weight[g]) + P(gl.bias[g * og : (g + 1) * og])
    torch.testing.assert_close(out.double(), ref, atol=ATOL, rtol=0)
    # nn.Linear with the block-diagonal weight
    lin = nn.Linear(fin, fout)
    with torch.no_grad():
        lin.weight.zero_()
        for g in range(groups):
            lin.weight[g * og : (g + 1) * og, g * ig : (g + 1) * ig] = gl.weight[g].T
        lin.bias.copy_(gl.bias)
    torch.testing.assert_close(out, lin(x), atol=ATOL, rtol=0)


def test_scalar_mix_matches_hand_computation():
    torch.manual_seed(0)
    layers = 4
    mix = ScalarMix(layers, dropout=0.5, norm="layers").eval()
    with torch.no_grad():
        mix.alpha.copy_(torch.tensor([0.3, -1.0, 2.0, 0.1]))
        mix.gamma.fill_(1.7)
    hs = [torch.randn(2, 3, 5) * (l + 1) + l for l in range(layers)]
    out = mix(hs)
    w = [math.exp(a) for a in mix.alpha.tolist()]
    w = [v / sum(w) for v in w]
    ref = torch.zeros(2, 3, 5, dtype=torch.float64)
    for b in range(2):
        for t in range(3):
            for c in range(5):
                vals = [float(h[b, t, c]) for h in hs]
                mean = sum(vals) / layers
                var = sum((v - mean) ** 2 for v in vals) / layers
                normed = [(v - mean) / math.sqrt(var + mix.eps) for v in vals]
                ref[b, t, c] = 1.7 * sum(wl * nl for wl, nl in zip(w, normed))
    torch.testing.assert_close(out.double(), ref, atol=ATOL, rtol=0)
    assert sum(p.numel() for p in mix.parameters()) == layers + 1  # L+1 weights and γ


# ---------------------------------------------------------------------------------------------
# Encoder: padding invariance
# ---------------------------------------------------------------------------------------------


def padded_batch(cfg: ModelConfig):
    """Row 0 full length, row 1 padded with random non-pad ids, row 2 padded with the pad id."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(2, cfg.vocab_size, (3, L_MAX), generator=g)  # real tokens never the pad id
    keep = padding_keep()
    ids[2][~keep[2]] = cfg.pad_token_id
    types = torch.randint(0, 2, (3, L_MAX), generator=g)
    return ids, keep.long(), types


@pytest.mark.parametrize("name", list(ENCODER_VARIANTS))
def test_encoder_padding_invariance(name):
    torch.manual_seed(0)
    cfg = make_cfg(**ENCODER_VARIANTS[name])
    enc = Encoder(cfg).eval()
    with torch.no_grad():  # stronger than init so any leak is far above the tolerance
        for p in enc.parameters():
            p.add_(torch.randn_like(p) * 0.15)
    ids, mask, types = padded_batch(cfg)
    assert ids[1, LENGTHS[1] :].ne(cfg.pad_token_id).all() and ids[2, LENGTHS[2] :].eq(cfg.pad_token_id).all()
    with torch.no_grad():
        padded = enc(ids, mask, types)
        diffs = []
        for b, n in enumerate(LENGTHS):
            alone = enc(ids[b : b + 1, :n], None, types[b : b + 1, :n])
            assert len(alone.hidden_states) == len(padded.hidden_states) == cfg.num_layers + 1
            pairs = list(zip(padded.hidden_states, alone.hidden_states)) + [(padded.features, alone.features)]
            diffs.append(max(float((p[b, :n] - a[0]).abs().max()) for p, a in pairs))
            if cfg.pooler:
                diffs[-1] = max(diffs[-1], float((padded.pooled[b] - alone.pooled[0]).abs().max()))
    if cfg.hf_padding and cfg.mixer == "mixed" and cfg.conv_type != "none":
        # documented HF quirk: padding leaks into the convolution branch
        assert diffs[0] < ATOL  # row 0 has no padding
        assert diffs[1] > 1e-3 and diffs[2] > 1e-3, diffs
    else:
        assert max(diffs) < ATOL, diffs


@pytest.mark.parametrize("name", list(ENCODER_VARIANTS))
def test_first_only_is_the_full_stack_at_position_0(name):
    """A [CLS] head's shortcut (``first_only``: the last block computes position 0 alone) gives the
    full stack's [CLS] vector, pooled output and parameter gradients, padded rows included."""
    torch.manual_seed(0)
    cfg = make_cfg(**ENCODER_VARIANTS[name])
    enc = Encoder(cfg).eval()
    randomize_(enc, std=0.15)
    ids, mask, types = padded_batch(cfg)
    outs, grads = [], []
    for first_only in (False, True):
        enc.zero_grad()
        out = enc(ids, mask, types, first_only=first_only)
        cls = out.pooled if cfg.pooler else out.features[:, 0]  # [B, D]
        (cls * torch.linspace(-1, 1, cls.shape[-1])).sum().backward()
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None})
    full, first = outs
    assert first.features.shape == (3, 1, D) and first.hidden_states[-1].shape == (3, 1, D)
    torch.testing.assert_close(first.features[:, 0], full.features[:, 0], atol=ATOL, rtol=0)
    torch.testing.assert_close(first.hidden_states[-1][:, 0], full.hidden_states[-1][:, 0], atol=ATOL, rtol=0)
    for a, b in zip(first.hidden_states[:-1], full.hidden_states[:-1]):
        assert a.shape == b.shape == (3, L_MAX, D)
    if cfg.pooler:
        torch.testing.assert_close(first.pooled, full.pooled, atol=ATOL, rtol=0)
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], atol=1e-4, rtol=1e-4, msg=n)


@pytest.mark.parametrize("name", list(ENCODER_VARIANTS))
def test_skipping_padding_is_the_padded_stack(name, monkeypatch):
    """On a CPU a [CLS] head's blocks run their residuals, norms and FFN on the real tokens alone
    (``real_rows``): in training, same seed, the same [CLS] vector and parameter gradients as the
    padded stack (the dropout masks drawn for the whole batch, so every later mask is the same too),
    and zero at padding positions. ``hf_padding`` (padding read by ConvBERT's convolutions) keeps
    the padded stack."""
    torch.manual_seed(0)
    cfg = make_cfg(**ENCODER_VARIANTS[name], hidden_dropout=0.1)
    enc = Encoder(cfg).train()
    randomize_(enc, std=0.15)
    ids, mask, types = padded_batch(cfg)
    real = encoder_mod.real_rows
    assert (real(mask.bool(), cfg, ids) is None) == bool(cfg.hf_padding)
    outs, grads, after = [], [], []
    for skip in (False, True):
        monkeypatch.setattr(encoder_mod, "real_rows", real if skip else lambda *a: None)
        enc.zero_grad()
        torch.manual_seed(1)
        out = enc(ids, mask, types, first_only=True)
        after.append(torch.rand(3))  # the generator left where the padded stack left it
        cls = out.pooled if cfg.pooler else out.features[:, 0]  # [B, D]
        (cls * torch.linspace(-1, 1, cls.shape[-1])).sum().backward()
        outs.append(cls.detach())
        grads.append({n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None})
    torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(after[1], after[0], atol=0, rtol=0)
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], atol=1e-4, rtol=1e-4, msg=n)
    if not cfg.hf_padding:
        assert float(out.hidden_states[1].detach()[~mask.bool()].abs().max()) == 0.0


# ---------------------------------------------------------------------------------------------
# Gradients reach every parameter
# ---------------------------------------------------------------------------------------------


def model_kinds(cfg: ModelConfig):
    kinds = ["cls3", "reg1"]  # the pooler only exists for classification
    if not cfg.pooler:
        kinds = ["mlm", "rtd"] + kinds
    return kinds


GRAD_CASES = [(name, kind) for name, kw in ENCODER_VARIANTS.items() for kind in model_kinds(make_cfg(**kw))]


@pytest.mark.parametrize("name,kind", GRAD_CASES, ids=[f"{n}-{k}" for n, k in GRAD_CASES])
def test_gradient_reaches_every_parameter(name, kind):
    torch.manual_seed(0)
    cfg = make_cfg(**ENCODER_VARIANTS[name])
    ids, mask, types = padded_batch(cfg)
    if kind == "mlm":
        model = MaskedLM(cfg)
        predict = mask.bool() & (torch.rand(ids.shape) < 0.5)
        predict[0, 0] = predict[1, 1] = predict[2, 0] = True
        labels = torch.where(predict, ids, torch.full_like(ids, -100))
    elif kind == "rtd":
        model = ReplacedTokenDetector(cfg)
        labels = (torch.rand(ids.shape) < 0.3).long()
    elif kind == "cls3":
        model = SequenceClassifier(cfg, 3)
        labels = torch.tensor([0, 2, 1])
    else:
        model = SequenceClassifier(cfg, 1)
        labels = torch.tensor([0.5, -1.0, 2.0])
    model.train()
    out = model(ids, mask, types, labels=labels)
    assert out.loss is not None and torch.isfinite(out.loss)
    out.loss.backward()

    problems = []
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        g = p.grad
        if g is None:
            problems.append(f"{pname}: no gradient")
            continue
        if not torch.isfinite(g).all():
            problems.append(f"{pname}: non-finite gradient")
            continue
        if pname.endswith("embeddings.word.weight"):
            # The pad row gets no gradient through the lookup (padding_idx), only through the
            # tied MLM decoder; every real token of the batch must get one.
            used = ids[mask.bool()].unique()
            missing = [int(t) for t in used if not g[t].ne(0).any()]
            if missing:
                problems.append(f"{pname}: rows of input tokens {missing} have zero gradient")
            if kind != "mlm" and g[cfg.pad_token_id].ne(0).any():
                problems.append(f"{pname}: pad row has a gradient without the tied decoder")
            continue
        if not g.ne(0).any():
            problems.append(f"{pname}: all-zero gradient")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Memory linear in L for the convolution branches
# ---------------------------------------------------------------------------------------------


class LargestBuffer(TorchDispatchMode):
    """Records the largest storage (in bytes) produced by any ATen op run under the mode."""

    def __init__(self):
        super().__init__()
        self.max_bytes = 0
        self.op = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                nbytes = t.untyped_storage().nbytes()
                if nbytes > self.max_bytes:
                    self.max_bytes, self.op = nbytes, str(func)
        return out


def largest_buffer(fn, *args) -> tuple[int, str]:
    with torch.no_grad(), LargestBuffer() as mode:
        fn(*args)
    return mode.max_bytes, mode.op


def lightweight_conv_quadratic(v: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """A correct but O(L²)-memory lightweight conv (banded [L, L] matrices); the check must reject it."""
    B, L, H, d = v.shape
    K = kernel.shape[-1]
    i = torch.arange(L)
    off = i[None, :] - i[:, None] + K // 2  # [L(i), L(j)] tap index
    valid = (off >= 0) & (off < K)
    band = (
        kernel.permute(0, 2, 1, 3).gather(-1, off.clamp(0, K - 1).expand(B, H, L, L)) * valid
    )  # [B, H, L, L]
    return (band @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)


def _lightweight_inputs(L: int, H: int = 2, d: int = 4, K: int = 9):
    torch.manual_seed(0)
    return torch.randn(1, L, H, d), torch.softmax(torch.randn(1, L, H, K), -1)


def test_linear_memory_checker_rejects_quadratic_implementation():
    v, kern = _lightweight_inputs(64)
    torch.testing.assert_close(
        lightweight_conv_quadratic(v, kern), lightweight_conv(v, kern), atol=ATOL, rtol=0
    )
    small, _ = largest_buffer(lightweight_conv_quadratic, *_lightweight_inputs(512))
    big, _ = largest_buffer(lightweight_conv_quadratic, *_lightweight_inputs(2048))
    assert big >= 12 * small  # quadratic growth is detected (linear would be 4x)
    assert big >= 2048 * 2048 * 2 * 4  # an [H, L, L] float tensor was seen


def test_lightweight_conv_memory_linear_in_L():
    H, d = 2, 4
    sizes = {}
    for L in (4096, 16384):
        v, kern = _lightweight_inputs(L, H, d)
        sizes[L], op = largest_buffer(lightweight_conv, v, kern)
        input_bytes = max(v.numel(), kern.numel()) * 4
        # every buffer is at most a few input-sized copies; L² floats would be 1 GiB at L=16384
        assert sizes[L] <= 4 * input_bytes, (L, sizes[L], op)
    assert sizes[16384] <= 4.5 * sizes[4096]


def test_separable_conv_memory_linear_in_L():
    torch.manual_seed(0)
    conv = SeparableConv1d(16, 8, 9)
    sizes = {}
    for L in (4096, 16384):
        x = torch.randn(1, L, 16)
        sizes[L], op = largest_buffer(conv, x)
        assert sizes[L] <= 4 * x.numel() * 4, (L, sizes[L], op)
    assert sizes[16384] <= 4.5 * sizes[4096]


@pytest.mark.parametrize("conv_type", ["sdconv", "dynamic", "conventional"])
def test_mixed_attention_conv_branch_memory_linear_in_L(conv_type, monkeypatch):
    """The whole conv branch of MixedAttention (with padding), with the self-attention heads
    replaced by a stub so that only the convolution path is measured."""
    monkeypatch.setattr(attention_mod, "attend", lambda q, k, v, *a, **kw: torch.zeros_like(q))
    torch.manual_seed(0)
    cfg = make_cfg(hidden_size=16, num_heads=4, kernel_size=9, mixer="mixed", conv_type=conv_type)
    m = MixedAttention(cfg).eval()
    sizes = {}
    for L in (4096, 16384):
        x = torch.randn(1, L, 16)
        keep = torch.ones(1, L, dtype=torch.bool)
        keep[0, L - 100 :] = False
        sizes[L], op = largest_buffer(m, x, keep)
        # the widest linear tensor is the [L, n·K] kernel logits; L² floats would be 1 GiB
        assert sizes[L] <= 8 * x.numel() * 4, (L, sizes[L], op)
    assert sizes[16384] <= 4.5 * sizes[4096]


def test_scores_keep_an_fp32_bias_unrounded_under_mixed_precision():
    """attention_scores adds the padding's -inf and a bias of q's dtype inside the product; an fp32
    bias (Chang et al.'s fixed β under bf16 autocast) is added in fp32, as before, not rounded to bf16."""
    torch.manual_seed(0)
    q, k = (torch.randn(2, 3, 5, 4).to(torch.bfloat16) for _ in range(2))
    bias = torch.randn(1, 3, 5, 5) * 1e-3 + 1.0  # differs from 1.0 below bf16's resolution
    keep = torch.ones(2, 5, dtype=torch.bool)
    keep[1, 3:] = False
    got = attention_scores(q, k, keep, bias)
    ref = ((q @ k.transpose(-1, -2)) / 2).float() + bias
    ok = keep[:, None, None, :].expand_as(got)
    torch.testing.assert_close(got[ok], ref[ok], atol=1e-6, rtol=0)
    assert torch.isneginf(got[~ok]).all()
    same = attention_scores(q.float(), k.float(), keep, bias)  # one dtype: through baddbmm
    ref32 = q.float() @ k.float().transpose(-1, -2) / 2 + bias
    torch.testing.assert_close(same[ok], ref32[ok], atol=1e-5, rtol=0)
