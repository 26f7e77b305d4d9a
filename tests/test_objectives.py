"""Pre-training objectives: BERT masking statistics and ELECTRA's generator/discriminator wiring."""

from __future__ import annotations

import pytest
import torch

from convexp.models import ModelConfig
from convexp.models.heads import IGNORE
from convexp.models.config import generator_config
from convexp.tasks.pretraining.objectives import (
    ElectraObjective,
    TokenInfo,
    mask_tokens,
    prediction_slots,
)

PAD, UNK, CLS, SEP, MASK = range(5)
INFO = TokenInfo(vocab_size=1000, mask_id=MASK, special_ids=(PAD, UNK, CLS, SEP, MASK))


def batch(B=256, L=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 1000, (B, L), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[:, 1] = torch.randint(5, 500, (B,), generator=g)  # a sequence starts with a whole word
    cut = L * 3 // 4
    ids[: B // 2, cut:] = PAD  # half the rows padded
    ids[: B // 2, cut - 1] = SEP
    return ids


def test_mask_statistics_15_percent_and_80_10_10():
    ids = batch()
    masked, labels = mask_tokens(ids, INFO, torch.Generator().manual_seed(1))
    maskable = ids >= 5
    chosen = labels != IGNORE
    assert not (chosen & ~maskable).any(), "special or padding tokens were chosen"
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen]), "unchosen tokens must be untouched"
    frac = chosen.sum() / maskable.sum()
    assert abs(frac - 0.15) < 0.005
    n = chosen.sum()
    as_mask = (masked[chosen] == MASK).sum() / n
    kept = (masked[chosen] == ids[chosen]).sum() / n
    random = 1 - as_mask - kept
    assert abs(as_mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.01 and abs(random - 0.1) < 0.01
    replaced = chosen & (masked != MASK) & (masked != ids)
    assert (masked[replaced] >= 5).all(), "random replacements must not be special tokens"


def test_electra_masking_exact_count_and_85_15_0():
    """google-research/electra pretrain_helpers.mask: k = clamp(round(0.15 n), 1, 19), n = non-padding
    tokens; 85% [MASK], 15% kept, no random token."""
    ids = batch(B=512)
    am = (ids != PAD).long()
    masked, labels = mask_tokens(
        ids, INFO, torch.Generator().manual_seed(1), 0.15, 0.85, 0.0,
        exact_count=True, max_predictions=19, attention_mask=am,
    )
    chosen = labels != IGNORE
    assert not (chosen & (ids < 5)).any(), "special or padding tokens were chosen"
    # full rows: n = 128 -> round(19.2) = 19 (= the cap); padded rows: n = 96 -> round(14.4) = 14
    assert (chosen[256:].sum(1) == 19).all() and (chosen[:256].sum(1) == 14).all()
    n = chosen.sum()
    as_mask = (masked[chosen] == MASK).sum() / n
    kept = (masked[chosen] == ids[chosen]).sum() / n
    assert abs(as_mask - 0.85) < 0.01 and abs(kept - 0.15) < 0.01 and as_mask + kept == 1
    assert torch.equal(masked[~chosen], ids[~chosen])
    # the cap binds, and a short row still gets one position
    short = torch.tensor([[CLS, 7, 8, SEP, PAD, PAD]])
    _, lab = mask_tokens(
        short, INFO, torch.Generator().manual_seed(0), exact_count=True, max_predictions=19,
        attention_mask=(short != PAD).long(),
    )
    assert (lab != IGNORE).sum() == 1  # round(0.6) = 1
    _, lab = mask_tokens(
        ids, INFO, torch.Generator().manual_seed(0), mask_prob=0.5, exact_count=True,
        max_predictions=19, attention_mask=am,
    )
    assert ((lab != IGNORE).sum(1) == 19).all()


def test_electra_masking_is_determined_by_the_generator_seed():
    ids = batch(B=8)
    am = (ids != PAD).long()
    kw = dict(exact_count=True, max_predictions=19, attention_mask=am)
    a = mask_tokens(ids, INFO, torch.Generator().manual_seed(7), **kw)
    b = mask_tokens(ids, INFO, torch.Generator().manual_seed(7), **kw)
    c = mask_tokens(ids, INFO, torch.Generator().manual_seed(8), **kw)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_masking_is_determined_by_the_generator_seed():
    ids = batch(B=8)
    a = mask_tokens(ids, INFO, torch.Generator().manual_seed(7))
    b = mask_tokens(ids, INFO, torch.Generator().manual_seed(7))
    c = mask_tokens(ids, INFO, torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_whole_word_masking_masks_every_piece_of_a_word():
    continuation = torch.zeros(1000, dtype=torch.bool)
    continuation[500:] = True  # ids >= 500 are "##pieces"
    info = TokenInfo(1000, MASK, INFO.special_ids, continuation)
    ids = batch(B=64)
    _, labels = mask_tokens(ids, info, torch.Generator().manual_seed(3), mask_prob=0.3, whole_word=True)
    chosen = labels != IGNORE
    cont = continuation[ids] & (ids >= 5)
    # a continuation piece is chosen exactly when the token before it (same word) is chosen
    prev_chosen = torch.zeros_like(chosen)
    prev_chosen[:, 1:] = chosen[:, :-1]
    assert torch.equal(chosen[cont], prev_chosen[cont])
    assert chosen.any() and (chosen & cont).any()


def small_cfg(**kw) -> ModelConfig:
    return ModelConfig(
        vocab_size=1000,
        hidden_size=64,
        embedding_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        **kw,
    )


def test_generator_is_a_quarter_of_the_discriminator():
    g = generator_config(small_cfg(mixer="mixed", kernel_size=9), 0.25)
    assert (g.hidden_size, g.num_heads, g.intermediate_size, g.emb_size, g.num_layers) == (16, 1, 32, 32, 2)
    assert g.mixer == "mixed"


@pytest.mark.parametrize("mixer", ["attention", "mixed"])
def test_electra_discriminator_labels_are_exactly_the_replaced_positions(mixer):
    torch.manual_seed(0)
    obj = ElectraObjective(small_cfg(mixer=mixer, kernel_size=9 if mixer == "mixed" else 17), 0.25)
    d, g = obj.discriminator.encoder.embeddings, obj.generator.encoder.embeddings
    assert d.word is g.word and d.position is g.position and d.norm is g.norm
    assert obj.generator.head.decoder is d.word
    ids = batch(B=16, L=64)
    am = (ids != PAD).long()
    masked, labels = mask_tokens(ids, INFO, torch.Generator().manual_seed(0))
    positions, slot_labels = prediction_slots(labels)
    seen = {}
    orig_forward = obj.discriminator.forward

    def spy(inp, attention_mask=None, token_type_ids=None, labels=None, padded=None):
        seen["corrupted"], seen["labels"] = inp, labels
        return orig_forward(inp, attention_mask, token_type_ids, labels, padded)

    obj.discriminator.forward = spy
    torch.manual_seed(0)
    out = obj({"input_ids": ids, "attention_mask": am, "padded": True, "masked": masked,
               "mlm_positions": positions, "mlm_labels": slot_labels})  # fmt: skip
    corrupted, disc_labels = seen["corrupted"], seen["labels"]
    chosen = labels != IGNORE
    assert torch.equal(corrupted[~chosen], ids[~chosen]), "only chosen positions are corrupted"
    assert torch.equal(disc_labels.bool(), corrupted != ids)
    assert (corrupted[chosen] != MASK).any(), "masked positions carry generator samples, not [MASK]"
    out.loss.backward()
    assert obj.generator.encoder.layers[0].ffn.fc1.weight.grad is not None  # the generator learns (MLM)
    assert d.word.weight.grad is not None
    assert torch.isfinite(out.loss)


def test_prediction_slots_hold_every_chosen_position_in_order_and_pad_past_the_end():
    ids = batch(B=64, L=32)
    _, labels = mask_tokens(ids, INFO, torch.Generator().manual_seed(2), mask_prob=0.3)
    positions, slot_labels = prediction_slots(labels, multiple=64)
    chosen = labels.reshape(-1) != IGNORE
    M = int(chosen.sum())
    assert len(positions) % 64 == 0 and M <= len(positions) < M + 64
    assert len(prediction_slots(labels)[0]) < M + 8  # the default: multiples of 8
    assert torch.equal(positions[:M], chosen.nonzero().squeeze(1))  # row-major, as labels[labels != -100]
    assert torch.equal(slot_labels[:M], labels[labels != IGNORE])
    assert (positions[M:] == 64 * 32).all() and (slot_labels[M:] == IGNORE).all()
    fixed, _ = prediction_slots(labels, slots=M + 3)
    assert fixed.shape == (M + 3,)
    with pytest.raises(ValueError, match="prediction slots"):
        prediction_slots(labels, slots=M - 1)


def test_mlm_head_on_prediction_slots_equals_the_head_on_the_labelled_tokens():
    """The fixed-shape slots give the labelled-token selection's logits and loss; unused slots
    change nothing."""
    from convexp.models import MaskedLM

    torch.manual_seed(0)
    model = MaskedLM(small_cfg(mixer="attention", kernel_size=17)).eval()
    ids = batch(B=8, L=64)
    _, labels = mask_tokens(ids, INFO, torch.Generator().manual_seed(4))
    positions, slot_labels = prediction_slots(labels, slots=int((labels != IGNORE).sum()) + 5)
    by_labels = model(ids, labels=labels)
    by_slots = model(ids, labels=slot_labels, positions=positions)
    used = slot_labels != IGNORE
    torch.testing.assert_close(by_slots.logits[used], by_labels.logits)
    torch.testing.assert_close(by_slots.loss, by_labels.loss)
    torch.testing.assert_close(by_labels.loss, torch.nn.functional.cross_entropy(by_labels.logits, labels[labels != IGNORE]))


def test_gumbel_samples_follow_the_softmax():
    from convexp.tasks.pretraining.objectives import gumbel_sample

    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]]).expand(200_000, 4)
    counts = torch.bincount(gumbel_sample(logits, temperature=2.0), minlength=4).float() / 200_000
    torch.testing.assert_close(counts, torch.softmax(logits[0] / 2.0, -1), atol=4e-3, rtol=0)
