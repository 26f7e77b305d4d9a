"""Pre-training objectives as plain torch functions and modules (no Lightning here).

* :func:`mask_tokens` — dynamic masking. BERT's (textbook chapter): choose each maskable token
  with probability 15% (optionally whole words), replace 80% of the chosen with [MASK], 10% with a
  random token, keep 10%. ELECTRA's (google-research/electra ``pretrain/pretrain_helpers.py``
  ``mask``): exactly round(0.15·n) positions per sequence, n = its non-padding tokens, at least 1
  and at most ``max_predictions`` (``configure_pretraining.py``: int((0.15 + 0.005)·128) = 19);
  85% of them [MASK], 15% kept, none random.
* :func:`prediction_slots` — the chosen positions as a fixed number of slots (ELECTRA's
  ``masked_lm_positions``), so the step's shapes do not depend on the draw.
* :class:`ElectraObjective` — generator (small MLM) + discriminator (replaced-token detection)
  with shared embeddings; loss = gen_weight · MLM + disc_weight · RTD.
* :class:`MLMObjective` — the encoder + tied MLM head (+ an NSP/SOP head when asked).

The objectives take a batch made by the data pipeline (``tasks/pretraining/batches.py``: ``masked``,
``mlm_positions``, ``mlm_labels``, and ``padded``, whether any row has padding) and read nothing
back to the host: every shape is fixed by the batch's, the metrics stay on the device, and a GPU
step can be queued whole (or captured as one CUDA graph) without waiting for the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import UserError
from ...models import MaskedLM, ModelConfig, ReplacedTokenDetector
from ...models.config import generator_config
from ...models.heads import IGNORE


@dataclass
class TokenInfo:
    """What masking needs to know about the vocabulary."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never masked, never drawn as random replacements
    continuation: torch.Tensor | None = None  # [V] bool: token continues a word (for whole-word masking)


def mask_tokens(
    input_ids: torch.Tensor,  # [B, L]
    info: TokenInfo,
    generator: torch.Generator,
    mask_prob: float = 0.15,
    replace_mask: float = 0.8,
    replace_random: float = 0.1,
    whole_word: bool = False,
    exact_count: bool = False,
    max_predictions: int | None = None,
    attention_mask: torch.Tensor | None = None,  # [B, L]; needed for exact_count
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (masked input ids [B, L], labels [B, L]: original id at chosen positions, else -100).

    ``exact_count=False`` (BERT): every maskable token is chosen independently with ``mask_prob``.
    ``exact_count=True`` (ELECTRA): each row gets k = clamp(round(mask_prob·n), 1, max_predictions)
    distinct maskable positions drawn uniformly, n = the row's non-padding tokens ([CLS]/[SEP]
    count, as ELECTRA's ``input_mask`` sum does). ELECTRA draws its positions with replacement, so
    its distinct count can fall slightly below k; here it is exactly k (fewer only when the row has
    fewer maskable tokens). Every draw comes from ``generator``: the same seed, the same masks.
    """
    device = input_ids.device
    special = torch.tensor(info.special_ids, device=device)
    maskable = ~torch.isin(input_ids, special)  # [B, L]
    u = torch.rand(input_ids.shape, generator=generator, device=device)
    if exact_count:
        if whole_word:
            raise UserError("objective.exact_count=true picks single tokens; set objective.whole_word=false")
        if attention_mask is None:
            raise ValueError("exact_count masking needs the attention mask (n = non-padding tokens)")
        n = attention_mask.sum(1).float()  # [B]
        k = torch.round(n * mask_prob).long().clamp(min=1)  # round half to even, as tf.round
        if max_predictions is not None:
            k = k.clamp(max=max_predictions)
        # rank of each maskable position in a random order; the k first are chosen
        order = torch.where(maskable, u, torch.full_like(u, 2.0)).argsort(dim=1)
        rank = order.argsort(dim=1)  # [B, L]
        chosen = maskable & (rank < k[:, None])
    else:
        chosen = None
    if chosen is None and whole_word and info.continuation is not None:
        # Word index of every token: a new word starts at every maskable non-continuation token.
        cont = info.continuation.to(device)[input_ids] & maskable
        word = torch.cumsum((~cont).long(), dim=1)  # [B, L]
        u = torch.gather(u, 1, (word - 1).clamp(max=input_ids.shape[1] - 1))  # one draw per word
    if chosen is None:
        chosen = maskable & (u < mask_prob)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    r = torch.rand(input_ids.shape, generator=generator, device=device)
    to_mask = chosen & (r < replace_mask)
    to_random = chosen & (r >= replace_mask) & (r < replace_mask + replace_random)
    allowed = torch.ones(info.vocab_size, dtype=torch.bool, device=device)
    allowed[special] = False
    pool = allowed.nonzero().squeeze(1)
    random_ids = pool[torch.randint(len(pool), input_ids.shape, generator=generator, device=device)]
    masked = torch.where(to_mask, torch.full_like(input_ids, info.mask_id), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    return masked, labels


def prediction_slots(
    labels: torch.Tensor, slots: int | None = None, multiple: int = 8
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chosen positions of ``labels`` [B, L] (-100 = not chosen) as a fixed number of slots:
    (positions [P] into the flattened [B·L] batch, their labels [P]), in row-major order (the
    order of ``labels[labels != -100]``), unused slots at position B·L with label -100.

    ``slots``: P (ELECTRA's exact count: B x ``max_predictions``, so every batch has the same
    shape); None: the batch's chosen positions rounded up to a multiple of ``multiple`` (on a GPU
    the stage rounds to 64: a few distinct shapes over a run for compiled steps; on a CPU to 8,
    where unused slots only cost time). More chosen positions than ``slots`` is an error."""
    flat = labels.reshape(-1)
    chosen = (flat != IGNORE).nonzero().squeeze(1)  # [M], ascending
    M = len(chosen)
    P = -(-max(M, 1) // multiple) * multiple if slots is None else slots
    if M > P:
        raise ValueError(f"the batch has {M} predicted tokens, more than its {P} prediction slots")
    positions = torch.full((P,), flat.numel(), dtype=torch.long)
    positions[:M] = chosen
    targets = torch.full((P,), IGNORE, dtype=flat.dtype)
    targets[:M] = flat[chosen]
    return positions, targets


def gumbel_sample(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """One token per row of logits [M, V] from softmax(logits / T): argmax of logits / T plus
    Gumbel noise, as ELECTRA's ``sample_from_softmax`` draws it (pretrain_helpers.py), from
    torch's default generator (seeded per step by the stage) — exact in distribution, and made of
    elementwise kernels that compile and replay in a CUDA graph."""
    u = torch.rand(logits.shape, device=logits.device)
    gumbel = -torch.log(-torch.log(u + 1e-9) + 1e-9)
    return (logits.float() / temperature + gumbel).argmax(-1)


def masked_mean(x: torch.Tensor, where: torch.Tensor | None) -> torch.Tensor:
    """Mean of x over the True entries of ``where`` (every entry when None), on the device."""
    x = x.float()
    if where is None:
        return x.mean()
    w = where.float()
    return (x * w).sum() / w.sum().clamp(min=1)


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]


class MLMObjective(nn.Module):
    """BERT masked-LM pre-training (with an optional sentence-pair head for NSP / SOP)."""

    def __init__(self, cfg: ModelConfig, pair_head: bool = False):
        super().__init__()
        self.model = MaskedLM(cfg)
        self.pair_head = nn.Linear(cfg.hidden_size, 2) if pair_head else None
        pooler = getattr(self.model.encoder, "pooler", None)
        if not pair_head and pooler is not None:
            # nothing reads the pooled output: its weights get no gradient (HF's BertForMaskedLM has
            # no pooler) and AdamW leaves them as they are; frozen, DDP does not wait for them
            pooler.requires_grad_(False)

    @property
    def encoder(self):
        return self.model.encoder

    def forward(self, batch: dict) -> ObjectiveOutput:
        am, padded = batch["attention_mask"], batch["padded"]
        enc = self.model.encoder(batch["masked"], am, batch.get("token_type_ids"), padded)
        labels = batch["mlm_labels"]  # [P]
        out = self.model.head(enc.features, labels, batch["mlm_positions"])
        metrics = {
            "mlm_loss": out.loss.detach(),
            "mlm_acc": masked_mean(out.logits.argmax(-1) == labels, labels != IGNORE),
        }
        loss = out.loss
        if self.pair_head is not None:
            cls = enc.pooled if enc.pooled is not None else enc.features[:, 0]
            pair_loss = F.cross_entropy(self.pair_head(cls).float(), batch["pair_label"])
            metrics["pair_loss"] = pair_loss.detach()
            loss = loss + pair_loss
        return ObjectiveOutput(loss, metrics)


class ElectraObjective(nn.Module):
    """Replaced-token detection (ELECTRA; ConvBERT's pre-training).

    The generator shares the discriminator's word / position / token-type embeddings and their
    LayerNorm (each keeps its own E->D projection).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        generator_fraction: float,
        gen_weight: float = 1.0,
        disc_weight: float = 50.0,
        temperature: float = 1.0,
    ):
        super().__init__()
        self.discriminator = ReplacedTokenDetector(cfg)
        self.generator = MaskedLM(generator_config(cfg, generator_fraction))
        d, g = self.discriminator.encoder.embeddings, self.generator.encoder.embeddings
        g.word, g.position, g.token_type, g.norm = d.word, d.position, d.token_type, d.norm
        self.generator.head.tie(d.word)  # the generator's MLM head stays tied to the shared table
        self.gen_weight, self.disc_weight, self.temperature = gen_weight, disc_weight, temperature

    @property
    def encoder(self):
        return self.discriminator.encoder

    def forward(self, batch: dict) -> ObjectiveOutput:
        """Generator MLM on the masked batch, its samples at the prediction slots, replaced-token
        detection on the result. Samples are drawn from torch's default generator."""
        am, padded = batch["attention_mask"], batch["padded"]
        tt, masked, ids = batch.get("token_type_ids"), batch["masked"], batch["input_ids"]
        positions, labels = batch["mlm_positions"], batch["mlm_labels"]  # [P]
        gen = self.generator(masked, am, tt, labels=labels, positions=positions, padded=padded)  # logits [P, V]
        with torch.no_grad():
            sampled = gumbel_sample(gen.logits.detach(), self.temperature)  # [P]
            # unused slots point past the end (position B·L): written to an element that is cut off
            flat = F.pad(masked.reshape(-1), (0, 1)).scatter(0, positions, torch.where(labels != IGNORE, sampled, 0))
            corrupted = flat[:-1].view_as(masked)
            replaced = (corrupted != ids).long()  # 1 = replaced (a sample equal to the original counts as original)
        disc = self.discriminator(corrupted, am, tt, labels=replaced, padded=padded)
        loss = self.gen_weight * gen.loss + self.disc_weight * disc.loss
        real = am.bool() if padded else None
        metrics = {
            "mlm_loss": gen.loss.detach(),
            "mlm_acc": masked_mean(gen.logits.argmax(-1) == labels, labels != IGNORE),
            "rtd_loss": disc.loss.detach(),
            "rtd_acc": masked_mean((disc.logits > 0) == replaced.bool(), real),
            "replaced_frac": masked_mean(replaced, real),
        }
        return ObjectiveOutput(loss, metrics)
