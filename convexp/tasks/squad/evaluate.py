"""Evaluate a fine-tuned question answerer on SQuAD dev: decode every window, official metrics.

A SQuAD run's results (``RUN/``): metrics.json (``dev.validation``: EM / F1 as the official
scripts compute them; v2.0 also HasAns_* / NoAns_* and best_exact / best_f1 with their no-answer
thresholds), predictions.json (question id → answer text; v2.0: the best non-null answer, as
ELECTRA's ``squad_preds.json``), null_odds.json (v2.0: id → no-answer score, the official v2.0
script's ``--na-prob-file``: with ``--na-prob-thresh 0`` it reproduces metrics.json's exact, f1,
best_exact and best_f1 from these two files) and,
where ``keep_weights`` keeps them (train/weights.py), model/ (encoder and span head, with the tokenizer). A fine-pruned model is evaluated and saved at
the final threshold with its masks folded into the weights (W ⊙ M).
"""

from __future__ import annotations

import time

import torch

from ...data.length_batches import eval_tokens, row_lengths, sorted_batches
from .decode import decode_independent, decode_joint
from .features import collate_squad
from .metrics import evaluate_spans
from ...models.io import save_model_dir
from ...models.qa import QuestionAnswerer
from ...store.runs import Run, RunDiverged, non_finite
from ...train.common import log_result
from ...train.finetune import Trained


INPUTS = ("input_ids", "attention_mask", "token_type_ids", "context_mask")  # the answerer's, in its order


def predict_spans(
    model: QuestionAnswerer, records, features, qa: dict, pad_id: int, max_tokens: int | None = None
):
    """{id: SpanPrediction} for ``records`` from the model's outputs over all their windows,
    decoded with the head's decoder (BERT: independent start/end; ELECTRA: the joint beam).

    The windows go through the model on its device, in batches of similar lengths, longest first,
    each as many windows as fit ``max_tokens`` padded tokens (default: ``EVAL_TOKENS`` of the
    device's type); the outputs are decoded on the host."""
    model.eval()
    joint = qa["head"] == "electra"
    device = next(model.parameters()).device
    budget = eval_tokens(device.type) if max_tokens is None else max_tokens
    outs: dict[str, list] = {}
    with torch.no_grad():
        for idx in sorted_batches(row_lengths(features), budget):
            b = collate_squad([features[i] for i in idx], pad_id)
            out = model(*(b[k].to(device, non_blocking=True) for k in INPUTS))
            if joint:
                keys = ["start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index"]
                keys += ["null_logit"] if out.null_logit is not None else []
            else:
                keys = ["start_logits", "end_logits"]
            for k in keys:
                per_feature = outs.setdefault(k, [None] * len(features))
                for i, row in zip(idx, getattr(out, k).float().cpu().unbind(0)):  # decoded on the host
                    per_feature[i] = row
    v2 = qa["version"] == "v2.0"
    common = {"n_best": qa["n_best"], "max_answer_len": qa["max_answer_len"]}
    if joint:
        return decode_joint(
            records,
            features,
            outs["start_top_log_probs"],
            outs["start_top_index"],
            outs["end_top_log_probs"],
            outs["end_top_index"],
            outs.get("null_logit") if v2 else None,
            **common,
        )
    return decode_independent(records, features, outs["start_logits"], outs["end_logits"], version_2=v2, **common)


def write_predictions(run: Run, predictions: dict, version: str) -> None:
    """predictions.json and, for v2.0, null_odds.json: the files the official script scores (v2.0:
    each question's best non-null answer, "no answer" being the null score's call)."""
    v2 = version == "v2.0"
    run.write_json("predictions.json", {q: p.best_span if v2 else p.text for q, p in predictions.items()})
    if v2:
        run.write_json("null_odds.json", {q: p.null_diff for q, p in predictions.items()})


def evaluate_squad(
    trained: Trained, qa: dict, dev_records: list[dict], dev_features: list[dict], task: str = "squad1"
) -> dict:
    """Evaluate the trained model on the dev questions; write the run's results (see the
    module docstring), mark it finished and return metrics.json's content."""
    run, model, pad, hp, pruning, tokenizer = (
        trained.run, trained.model, trained.pad, trained.hp, trained.pruning, trained.tokenizer
    )  # fmt: skip
    seconds = trained.seconds
    remaining = trained.fold_pruning()
    started = time.time()
    eval_device = str(next(model.parameters()).device)
    predictions = predict_spans(model, dev_records, dev_features, qa, pad)
    scores = evaluate_spans(dev_records, predictions, qa["version"])
    eval_seconds = time.time() - started
    write_predictions(run, predictions, qa["version"])
    if trained.keep_weights and not run.model_dir.exists():  # with the tokenizer: a self-contained init=
        files = sorted(tokenizer.save(run.dir / "tokenizer").iterdir()) if tokenizer is not None else []
        save_model_dir(model.cpu().float(), model.encoder.cfg, run.model_dir, extra_files=files)
    # the task score: F1 (BERMO Table 2); v2.0: F1 at the no-answer threshold chosen on dev
    score = scores["best_f1"] if "best_f1" in scores else scores["f1"]
    metrics = {
        "task": task,
        "dev": {"validation": scores},
        "diverged": not any(p.text for p in predictions.values()),  # nothing but "no answer"
        "score": score,
        "convbert_score": score,
        "hp": hp,
        "qa": qa,
        "wall_time_s": seconds,
        **trained.speed(),  # examples_per_s (training windows per second of training steps), timing
        "eval_time_s": eval_seconds,  # dev: every window through the model, decoding, metrics
        "eval_questions": len(dev_records),
        "eval_windows": len(dev_features),
        "eval_device": eval_device,
        **({"remaining_weights": remaining, "pruning": pruning.method} if pruning is not None else {}),
    }
    if non_finite(scores):  # a non-finite score is a diverged run, not a result
        path, value = non_finite(scores)[0]
        raise RunDiverged(f"training diverged: dev {path}={value}; lower the learning rate")
    log_result(metrics, run)
    run.finish(metrics)
    return metrics
