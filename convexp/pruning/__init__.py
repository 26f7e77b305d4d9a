"""Weight pruning for convexp encoders: magnitude, movement (top-k), soft movement, L0 (Sanh et al.
2020, as used by BERMO), the cubic sparsity schedule, distillation, and a structured clean-up step.

Method names (the reference's spellings are accepted too): ``"magnitude"``, ``"topk"`` (``"topK"``,
``"movement"``), ``"sigmoid_threshold"`` (``"sigmoied_threshold"``, ``"soft_movement"``), ``"l0"``.

API
---
Masks (:mod:`.masked`; W' = M ⊙ W as a ``torch.nn.utils.parametrize`` parametrization):

* ``prune(model, method, mask_scale=0.0, mask_init="constant", threshold=None, min_keep=0.005)
  -> list[WeightMask]`` — in place; masks every nn.Linear / GroupedLinear weight inside each layer's
  mixer and FFN (Q, K, V, attention output, FFN in/out, and the linear projections of the
  convolution branches); the depthwise kernels, embeddings, LayerNorms, biases, scalar mix, pooler
  and heads stay dense. Outputs are unchanged until the threshold moves.
* ``set_threshold(model, t)`` — kept fraction (topk, magnitude) / τ (sigmoid_threshold) / unused (l0).
* ``regularization(model, method=None) -> Tensor`` — mean σ(S) (soft movement), expected L0 (l0),
  else 0; add ``final_lambda · multiplier · regularization(model)`` to the loss.
* ``score_parameters(model) -> list[Parameter]`` — the scores S, for their own optimizer group.
* ``remaining_weights(model, scope="layers") -> float`` — Sanh et al.'s count over encoder.layers.
* ``fold_masks(model) -> model`` — back to an ordinary convexp model with W ⊙ M (eval-mode mask).
* ``masks(model)``, ``prunable_layers(model)``, ``WeightMask`` — inspection / logging.

Schedule (:mod:`.schedule`): ``cubic_threshold(step, total_steps, warmup_steps, initial_threshold,
final_threshold, initial_warmup=1, final_warmup=2) -> (threshold, lambda_multiplier)``;
``prune_warmup(warmup_steps, steps_per_epoch, total_steps, initial_warmup, final_warmup)`` — the
warm-up a run uses (as configured, one epoch when null, shortened when it leaves no ramp).

Distillation (:mod:`.distill`): ``distillation_loss(student_logits, teacher_logits, task_loss,
alpha_ce=0.5, alpha_distil=0.5, temperature=2.0)``; ``soft_target_loss(...)``.

Structured (:mod:`.structured`): ``remove_dead_structures(model, heads=True, ffn=True) ->
StructuredSummary`` (after ``fold_masks``; exact in eval mode), ``prune_ffn``, ``prune_heads``,
``layer_sizes``, ``measure_speedup(dense_model, pruned_model, batch=32, seq_len=128) -> dict``.

Integration recipe (what the Sanh et al. script does; BERMO hyper-parameters in notes/tables.md §4.9)
---------------------------------------------------------------------------------------------------
::

    model = SequenceClassifier(cfg, num_labels); load the fine-tuning start weights
    prune(model, "topk", mask_scale=0.0)                     # after loading, before the optimizer
    scores = score_parameters(model)
    ids = {id(p) for p in scores}
    optimizer = AdamW([
        {"params": scores, "lr": 1e-2, "weight_decay": 0.0},  # mask_scores_learning_rate
        {"params": [p for p in model.parameters() if id(p) not in ids], "lr": lr, ...},
    ])
    # every optimizer step (step = global step from 0, before the update):
    t, mult = cubic_threshold(step, total_steps, warmup_steps, initial_threshold, final_threshold,
                              initial_warmup, final_warmup)
    set_threshold(model, t)
    loss = out.loss                                           # or distillation_loss(out.logits,
                                                              #   teacher_logits, out.loss, 0.1, 0.9)
    if regularization_kind:                                   # "l1" (soft movement) or "l0"
        loss = loss + final_lambda * mult * regularization(model, regularization_kind)
    # evaluation: the reference evaluates with threshold = final_threshold (even mid-training):
    set_threshold(model, final_threshold); model.eval(); ...
    log remaining_weights(model)
    # export: fold_masks(model) -> ordinary state dict; optional remove_dead_structures(model)

Notes: the per-step top-k sort costs one sort per masked matrix per forward (as in the reference);
wrap eval loops in ``torch.nn.utils.parametrize.cached()`` to compute each mask once per batch.
Parametrized modules cannot be pickled whole (``torch.save(model)``); state dicts work and restore
the threshold (a persistent buffer).
"""

from importlib import import_module

from .methods import METHODS, canonical_method

# The rest is imported on first use (PEP 562 ``__getattr__``): reading the method names (the config
# check does) does not import torch.
_MODULE_OF = {
    "SigmoidThresholdBinarizer": "binarizers",
    "TopKBinarizer": "binarizers",
    "expected_l0": "binarizers",
    "hard_concrete_mask": "binarizers",
    "magnitude_mask": "binarizers",
    "distillation_loss": "distill",
    "soft_target_loss": "distill",
    "WeightMask": "masked",
    "fold_masks": "masked",
    "masks": "masked",
    "prunable_layers": "masked",
    "prune": "masked",
    "regularization": "masked",
    "remaining_weights": "masked",
    "score_parameters": "masked",
    "set_threshold": "masked",
    "cubic_threshold": "schedule",
    "default_warmup": "schedule",
    "prune_warmup": "schedule",
    "StructuredSummary": "structured",
    "layer_sizes": "structured",
    "measure_speedup": "structured",
    "prune_ffn": "structured",
    "prune_heads": "structured",
    "remove_dead_structures": "structured",
}

__all__ = [
    "METHODS",
    "SigmoidThresholdBinarizer",
    "StructuredSummary",
    "TopKBinarizer",
    "WeightMask",
    "canonical_method",
    "cubic_threshold",
    "default_warmup",
    "distillation_loss",
    "expected_l0",
    "fold_masks",
    "hard_concrete_mask",
    "layer_sizes",
    "magnitude_mask",
    "masks",
    "measure_speedup",
    "prunable_layers",
    "prune",
    "prune_ffn",
    "prune_heads",
    "prune_warmup",
    "regularization",
    "remaining_weights",
    "remove_dead_structures",
    "score_parameters",
    "set_threshold",
    "soft_target_loss",
]


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
