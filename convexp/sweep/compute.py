"""Training compute and model size: the --dry-run estimate of a sweep's work (FLOPs, tokens) and
the parameter column of its report."""

from __future__ import annotations

from omegaconf import DictConfig

from ..models.stats import flops_per_token

# GLUE training-set sizes, for the compute estimate of fine-tuning on the real data (SentEval's
# probing tasks: 100k each)
GLUE_TRAIN = {
    "cola": 8551,
    "sst2": 67349,
    "mrpc": 3668,
    "stsb": 5749,
    "qqp": 363846,
    "mnli": 392702,
    "qnli": 104743,
    "rte": 2490,
    "wnli": 635,
}
SQUAD_TRAIN = {"squad1": 87599, "squad2": 130319}  # training questions of train-v1.1 / train-v2.0


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
    """An upper bound for one seed of one task: every example padded to the task's max_len, summed
    over the runs of every setting (all of ConvBERT's grid when it is on; 0 when the model is unknown)."""
    if model_cfg is None:
        return 0.0
    n = cfg.glue.synthetic_size if cfg.glue.source == "synthetic" else GLUE_TRAIN.get(task, 100_000)
    per_token = flops_per_token(model_cfg, cfg.task.max_len)
    from ..tasks.finetune_runs import hyperparameters

    total = 0.0
    for hp in hyperparameters(cfg, model_cfg.hidden_size):
        total += per_token * n * hp["epochs"] * cfg.task.max_len
    return total


def squad_flops(cfg: DictConfig, model_cfg, task: str) -> float:
    """SQuAD's upper bound: every training question one window of the protocol's max_len (longer
    contexts make more windows; 0 when the model is unknown)."""
    if model_cfg is None:
        return 0.0
    from ..tasks.squad.runs import qa_settings, squad_runs

    n = cfg.squad.synthetic_size if cfg.squad.source == "synthetic" else SQUAD_TRAIN.get(task, 100_000)
    max_len = qa_settings(cfg)["max_len"]
    per_token = flops_per_token(model_cfg, max_len)
    runs = squad_runs(cfg, "", model_cfg.hidden_size, [])  # only their hyper-parameters: unnamed
    return sum(per_token * n * p.hp["epochs"] * max_len for p in runs)


def parameters(model_cfg) -> int:
    """The model's parameter count (the report's params column)."""
    from ..models.stats import model_stats

    return model_stats(model_cfg)[0]
