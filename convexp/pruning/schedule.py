"""Cubic sparsity schedule (Zhu & Gupta 2017), in the form of Sanh et al.'s ``schedule_threshold``.

With W = ``warmup_steps`` (the *learning-rate* warm-up of the fine-tuning run; the pruning phases are
counted in units of it), T = ``total_steps``, t_i / t_f = initial / final threshold and
w_i / w_f = ``initial_warmup`` / ``final_warmup``:

    step ≤ w_i·W                 ->  t = t_i
    step > T − w_f·W             ->  t = t_f
    otherwise                    ->  p = (step − w_i·W) / (T − (w_i + w_f)·W)
                                     t = t_f + (t_i − t_f)·(1 − p)³

and the regularisation weight follows the threshold: λ = λ_final · t / t_f (the multiplier t / t_f
is what :func:`cubic_threshold` returns; multiply it by ``final_lambda``).

Checked against ``masked_run_glue.py`` of the HF movement-pruning project: same branch order
(``<=`` for the initial plateau, ``>`` for the final one), ``step`` = the global optimizer step
counted from 0, and ``regu_lambda = final_lambda * threshold / final_threshold``. The reference
divides by zero when t_f = 0; here the multiplier is then 1 (λ = λ_final throughout).

Meaning of the threshold per method: ``topk`` / ``magnitude``: fraction of entries kept (1 -> 0.1
for "10 % remaining"); ``sigmoid_threshold``: τ in σ(S) > τ (BERMO Table 10: 0 -> 0.1, λ ramping
0 -> λ_final); ``l0``: unused by the mask (t_i = t_f = 1, so λ = λ_final constant).
"""

from __future__ import annotations


def cubic_threshold(
    step: int,
    total_steps: int,
    warmup_steps: int,
    initial_threshold: float,
    final_threshold: float,
    initial_warmup: float = 1,
    final_warmup: float = 2,
) -> tuple[float, float]:
    """Returns (threshold, λ multiplier) at optimizer step ``step`` (defaults as the reference)."""
    start = initial_warmup * warmup_steps  # last step of the initial plateau
    end = total_steps - final_warmup * warmup_steps  # last step of the cubic ramp
    if step <= start:
        t = initial_threshold
    elif step > end:
        t = final_threshold
    else:
        progress = (step - start) / (end - start)
        t = final_threshold + (initial_threshold - final_threshold) * (1 - progress) ** 3
    multiplier = t / final_threshold if final_threshold != 0 else 1.0
    return float(t), float(multiplier)


def default_warmup(steps_per_epoch: int, total_steps: int, initial_warmup: float, final_warmup: float) -> int:
    """``warmup_steps`` when none is given: one epoch (BERMO's 2100 / 12000 / 11000 steps for SST-2 /
    MNLI / QQP are one epoch at batch 32), shortened to T / (w_i + w_f + 1) when the run is too short
    for both plateaus and a ramp (e.g. two epochs with warm-ups 1 and 1: the reference would then
    jump from t_i to t_f in one step)."""
    if (initial_warmup + final_warmup) * steps_per_epoch < total_steps:
        return steps_per_epoch
    return max(1, int(total_steps / (initial_warmup + final_warmup + 1)))


def prune_warmup(
    warmup_steps: int | None,
    steps_per_epoch: int,
    total_steps: int,
    initial_warmup: float,
    final_warmup: float,
) -> int:
    """The warm-up a fine-pruning run uses: ``warmup_steps`` as configured (BERMO's printed 2,100 /
    12,000 / 11,000 / 5,400 for SST-2 / MNLI / QQP / SQuAD, conf/pruning/movement.yaml), or one
    epoch when null (:func:`default_warmup`). A configured warm-up that leaves no steps for the cubic
    ramp ((w_i + w_f)·W ≥ T: the printed values on scale=smoke's synthetic tasks) would keep the
    initial threshold to the end; it is shortened as :func:`default_warmup` does, with a message."""
    if not warmup_steps:
        return default_warmup(steps_per_epoch, total_steps, initial_warmup, final_warmup)
    if (initial_warmup + final_warmup) * warmup_steps < total_steps:
        return int(warmup_steps)
    short = max(1, int(total_steps / (initial_warmup + final_warmup + 1)))
    print(
        f"pruning.warmup_steps={warmup_steps} leaves no steps for the sparsity ramp of this "
        f"{total_steps}-step run: using {short} (T / (initial_warmup + final_warmup + 1))"
    )
    return short
