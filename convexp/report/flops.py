"""The report's ``flops`` column: a variant's pre-training FLOPs counted as ConvBERT's Table 3
counts them, so that our number stands beside the printed one on the same scale.

Convention: google-research/electra ``flops_computation.py`` (ConvBERT's code is built on
ELECTRA's), implemented by :func:`convexp.models.stats.pretraining_flops` (its docstring holds
the details and the check against Table 3): every position of every sequence of every step
(steps × batch × seq_len), training = 2 × forward, the embedding lookup as a one-hot product,
elementwise work included, the MLM softmax on 15.625% of the positions, and for ELECTRA the
generator as well as the discriminator. That reproduces Table 3's ConvBERT-small (1.3e18) and
medium-small (1.5e18) rows; its base row (1.4e19) is the discriminator alone (with the generator:
1.9e19), so our base rows read higher than the printed value.
"""

from __future__ import annotations

from omegaconf import DictConfig

NOTE = (
    "Train FLOPs: ELECTRA's flops_computation.py accounting of each variant's pre-training config "
    "(steps × batch × seq_len positions, training = 2 × forward, ELECTRA's generator included), "
    "as ConvBERT Table 3 counts them; Table 3's base row counts the discriminator only."
)


def table3_flops(cfg: DictConfig, model_cfg) -> float:
    """Pre-training FLOPs of a composed pre-training config (see the module docstring)."""
    from ..models.stats import pretraining_flops
    from ..models.config import generator_config

    objective = cfg.objective.name
    generator = None
    if objective == "electra":
        fraction = cfg.objective.generator_fraction
        generator = generator_config(model_cfg, fraction)
    return pretraining_flops(
        model_cfg,
        cfg.trainer.batch_size,
        cfg.trainer.max_steps,
        cfg.seq_len,
        objective=objective,
        generator=generator,
    )
