"""Training compute and model size: the --dry-run estimate of a sweep's work (FLOPs, tokens) and
the parameter column of its report."""

from __future__ import annotations

from omegaconf import DictConfig

from ..models.stats import flops_per_token

# Mean non-padding tokens of a sentence-pair example (``data.examples=sentence_pairs``: [CLS] A
# [SEP] B [SEP], cut at seq_len) by corpus, for estimates made before the data exist; a run
# records the value it measured in metrics.json (data.mean_example_tokens).
SENTENCE_PAIR_TOKENS = {
    # measured: scale=smoke's corpus (20,000 docs), its WordPiece of 2,000 tokens, seq_len 64: 36.9
    "synthetic": 36.9,
    # Chang et al.'s own corpus (conf/data/bookcorpus_wikitext103.yaml), derived (not measured): §4's
    # 31M sentence pairs from BookCorpus (~800M words, Devlin et al. 2019) + WikiText-103 (103M
    # tokens, Merity et al. 2017) = ~29 words a pair, x ~1.3 pieces a word (an assumption, typical
    # of 30k English vocabularies) + 3 specials = ~41; the run's measured value is the one to trust.
    "bookcorpus_wikitext103": 41.0,
    # WikiText-103 alone: the same estimate (its sentences are likely longer than BookCorpus's)
    "wikitext103": 41.0,
}


def example_tokens(cfg: DictConfig) -> float:
    """Non-padding tokens of one pre-training example: seq_len for packed blocks and for ELECTRA's
    examples (an upper bound: a document's last example and the 5% with a shorter target are
    shorter); for sentence pairs the corpus's mean (``SENTENCE_PAIR_TOKENS``; an unlisted corpus
    takes wikitext103's), never more than seq_len."""
    if cfg.data.get("examples", "packed") != "sentence_pairs":
        return float(cfg.seq_len)
    mean = SENTENCE_PAIR_TOKENS.get(cfg.choices.data, SENTENCE_PAIR_TOKENS["wikitext103"])
    return min(float(cfg.seq_len), mean)


def pretrain_tokens(cfg: DictConfig) -> float:
    """Real (non-padding) tokens a pre-training run reads: steps x batch x tokens per example."""
    return example_tokens(cfg) * cfg.trainer.max_steps * cfg.trainer.batch_size


def finetune_flops(cfg: DictConfig, model_cfg, task: str) -> float:
    """An upper bound for one seed of one task, from its kind (tasks/kind.py): every training row
    (``train_examples``) one sequence of ``sequence_length`` tokens, summed over the runs of every
    setting (all of ConvBERT's grid when it is on); 0 when the model or the row count is unknown."""
    from ..tasks import config_kind, task_kind
    from ..tasks.finetune_runs import hyperparameters

    kind = task_kind(config_kind(cfg))
    n = kind.train_examples(cfg, task)
    if model_cfg is None or not n:
        return 0.0
    length = kind.sequence_length(cfg)
    per_token = flops_per_token(model_cfg, length)
    return sum(per_token * n * hp["epochs"] * length for hp in hyperparameters(cfg, model_cfg.hidden_size))


def parameters(model_cfg) -> int:
    """The model's parameter count (the report's params column)."""
    from ..models.stats import model_stats

    return model_stats(model_cfg)[0]
