"""Knowledge distillation from a fine-tuned teacher (Hinton et al. 2015; Sanh et al.'s fine-pruning).

    loss = α_ce · L_task + α_distil · L_soft

classification (logits [B, C], C > 1):
    L_soft = T² · KL(p_T ‖ p_S),  p_T = softmax(teacher/T), p_S = softmax(student/T),
    summed over classes and averaged over the batch ("batchmean").
regression (STS-B; logits [B] or [B, 1]):
    L_soft = MSE(student, teacher)  (no temperature).

Checked against ``masked_run_glue.py``: ``kl_div(log_softmax(student/T), softmax(teacher/T),
reduction="batchmean") * T**2`` and ``alpha_distil * loss_logits + alpha_ce * loss``; defaults
α_ce = α_distil = 0.5, T = 2 (BERMO Table 11 uses 0.1 / 0.9). The code (and this module) takes the
teacher distribution as the target,
i.e. KL(p_T ‖ p_S) = Σ p_T (log p_T − log p_S). For regression the reference applies the same softmax
to a single logit, which is identically 1, so its distillation term is always 0; matching the
teacher's prediction by MSE is the choice made here (the usual one for regression distillation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def is_regression(logits: torch.Tensor) -> bool:
    return logits.dim() == 1 or logits.shape[-1] == 1


def soft_target_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 2.0
) -> torch.Tensor:
    """T²·KL(softmax(teacher/T) ‖ softmax(student/T)), batch mean; MSE for regression logits."""
    s, t = student_logits.float(), teacher_logits.detach().float()
    if is_regression(s):
        return F.mse_loss(s.reshape(-1), t.reshape(-1))
    log_p_s = F.log_softmax(s / temperature, dim=-1)  # [B, C]
    p_t = F.softmax(t / temperature, dim=-1)  # [B, C]
    return F.kl_div(log_p_s, p_t, reduction="batchmean") * temperature**2


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    task_loss: torch.Tensor,
    alpha_ce: float = 0.5,
    alpha_distil: float = 0.5,
    temperature: float = 2.0,
) -> torch.Tensor:
    """α_ce · task_loss + α_distil · soft_target_loss (task_loss: the head's CE, or MSE for regression)."""
    return alpha_ce * task_loss + alpha_distil * soft_target_loss(student_logits, teacher_logits, temperature)
