"""Training compute and model size: the --dry-run estimate of a sweep's work, and the FLOPs and
parameter columns of its report."""

from __future__ import annotations

from omegaconf import DictConfig

from ..config import to_model_config

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


def pretrain_flops(cfg: DictConfig, model_cfg, generator: bool = True) -> float:
    """Training FLOPs of a pre-training run: per-token FLOPs x steps x batch x length; with
    ``generator``, an ELECTRA generator's too (the compute spent). ConvBERT's Table 3 counts the
    discriminator only (ConvBERT-small: 1.3e18 for 1M updates; ours 1.33e18 that way, 1.8e18 with
    the generator), so reports use generator=False."""
    from ..stages.objectives import generator_config

    per_token = _flops_per_token(model_cfg, cfg.seq_len)
    if generator and cfg.objective.name == "electra":
        gen = generator_config(model_cfg, cfg.objective.generator_fraction)
        per_token += _flops_per_token(gen, cfg.seq_len)
    return per_token * cfg.trainer.max_steps * cfg.trainer.batch_size * cfg.seq_len


def finetune_flops(cfg: DictConfig, model_cfg, task: str) -> float:
    """An upper bound for one seed of one task: every example padded to the task's max_len, summed
    over the runs of every setting (all of ConvBERT's grid when it is on; 0 when the model is unknown)."""
    if model_cfg is None:
        return 0.0
    n = cfg.glue.synthetic_size if cfg.glue.source == "synthetic" else GLUE_TRAIN.get(task, 100_000)
    per_token = _flops_per_token(model_cfg, cfg.task.max_len)
    from ..stages.rundirs import hyperparameters

    total = 0.0
    for hp in hyperparameters(cfg, model_cfg.hidden_size):
        total += per_token * n * hp["epochs"] * cfg.task.max_len
    return total


def squad_flops(cfg: DictConfig, model_cfg, task: str) -> float:
    """SQuAD's upper bound: every training question one window of the protocol's max_len (longer
    contexts make more windows; 0 when the model is unknown)."""
    if model_cfg is None:
        return 0.0
    from ..stages.squad_runs import qa_settings, squad_runs

    n = cfg.squad.synthetic_size if cfg.squad.source == "synthetic" else SQUAD_TRAIN.get(task, 100_000)
    max_len = qa_settings(cfg)["max_len"]
    per_token = _flops_per_token(model_cfg, max_len)
    return sum(per_token * n * p.hp["epochs"] * max_len for p in squad_runs(cfg, "", model_cfg.hidden_size))


_FLOPS: dict = {}


def _flops_per_token(model_cfg, seq_len: int) -> float:
    from ..models.stats import model_stats

    key = (repr(model_cfg), seq_len)
    if key not in _FLOPS:
        _FLOPS[key] = model_stats(model_cfg, seq_len)[1]
    return _FLOPS[key]


def model_flops(cfg: DictConfig) -> float:
    """A pre-training run's FLOPs as the papers report them (the model itself; see pretrain_flops)."""
    return pretrain_flops(cfg, to_model_config(cfg.model), generator=False)


def parameters(model_cfg) -> int:
    """The model's parameter count (the report's params column)."""
    from ..models.stats import model_stats

    return model_stats(model_cfg)[0]
