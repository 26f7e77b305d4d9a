"""What a pre-training run costs, from its composed config alone (no torch): its training FLOPs,
for a sweep's bill and hours (sweep/compute.py, sweep/rates.py) and for the refusal of a paper-scale
run that would train on the CPU (command.py)."""

from __future__ import annotations

from omegaconf import DictConfig

from ...models.config import generator_config
from ...models.stats import flops_per_token


def pretrain_flops(cfg: DictConfig, model_cfg, generator: bool = True) -> float:
    """Training FLOPs of a pre-training run: per-token FLOPs x steps x batch x length; with
    ``generator``, an ELECTRA generator's too (the compute spent). The report's flops column counts
    as ConvBERT's Table 3 does instead (``convexp.report.flops``). Every example is computed at its
    full length seq_len: sentence pairs are padded to seq_len (as Chang et al.'s dataset pads them),
    so their padding costs compute although it holds no token (``pretrain_tokens`` counts the real
    ones)."""
    per_token = flops_per_token(model_cfg, cfg.seq_len)
    if generator and cfg.objective.name == "electra":
        gen = generator_config(model_cfg, cfg.objective.generator_fraction)
        per_token += flops_per_token(gen, cfg.seq_len)
    return per_token * cfg.trainer.max_steps * cfg.trainer.batch_size * cfg.seq_len
