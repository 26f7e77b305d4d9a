"""Evaluate a fine-tuned classifier: dev metrics, predictions, the GLUE server's files, the model.

A fine-tuning run's results (``RUN/``): metrics.json (dev metrics, labelled test metrics, the
task score in both papers' styles, collapse detection), predictions/<split>.tsv, submission/ (the
GLUE server's file names and labels) and, where ``keep_weights`` keeps them (train/weights.py),
model/ (the encoder and head, with the tokenizer: a complete ``init=`` on its own). A fine-pruned model is evaluated and saved at the final threshold
with its masks folded into the weights (W ⊙ M).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from ...atomic import atomic_write
from .encoding import collate
from ...data.length_batches import eval_tokens, row_lengths, sorted_batches
from .scores import collapsed, compute_metrics, convbert_score, task_score
from .submissions import write_submission
from .registry import Task
from ...models import SequenceClassifier
from ...models.io import save_model_dir
from ...store.runs import RunDiverged, non_finite
from ...train.common import log_result
from ...train.finetune import Trained


class Padded:
    """collate: pad to the batch's longest row; keep the stream position for seeding and whether
    any row is padded (host values)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        out = collate(rows, self.pad_id)
        if "position" in rows[0]:  # a training batch: host values, so that the step reads nothing back
            out["position"] = torch.tensor([int(r["position"]) for r in rows])
            out["first_position"] = int(out["position"][0])  # the step's seed
            out["padded"] = len({len(r["input_ids"]) for r in rows}) > 1  # whether the mask masks anything
        return out


INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # the classifier's, in its order


def eval_loader(rows, pad_id: int, device: str) -> DataLoader:
    """Evaluation batches of length-sorted rows, longest first, each as many rows as fit
    ``EVAL_TOKENS`` of ``device``'s type once padded (little padding)."""
    batches = sorted_batches(row_lengths(rows), eval_tokens(device))
    return DataLoader(rows, batch_sampler=batches, collate_fn=Padded(pad_id))


def by_idx(logits: torch.Tensor, labels: torch.Tensor, idx: torch.Tensor):
    """(logits, labels, idx) put back in the split's index order (batches come length-sorted)."""
    order = torch.argsort(idx, stable=True)
    return logits[order], labels[order], idx[order]


def predict(model: SequenceClassifier, rows, pad_id: int):
    """(logits [N, C] float32, labels [N], idx [N]) of a split, in idx order, on the host; the
    rows go through the model on its device."""
    model.eval()
    device = next(model.parameters()).device
    logits, labels, idx = [], [], []
    with torch.inference_mode():
        for b in eval_loader(rows, pad_id, device.type):
            out = model(*(b[k].to(device, non_blocking=True) for k in INPUTS))
            logits.append(out.logits.float().cpu())
            labels.append(b["labels"])
            idx.append(b["idx"])
    return by_idx(torch.cat(logits), torch.cat(labels), torch.cat(idx))


def _save_predictions(path: Path, task: Task, idx, logits, labels) -> None:
    pred = logits.squeeze(-1) if task.is_regression else logits.argmax(-1)
    lines = ["idx\tlabel\tprediction"] + [
        f"{int(i)}\t{float(y):.9g}\t{float(p):.9g}" for i, y, p in zip(idx, labels, pred)
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def evaluate_and_save(trained: Trained, task: Task, splits: dict, known: dict | None = None) -> None:
    """Evaluate the trained model on every dev (and test) split of ``splits``; write the run's
    results (see the module docstring) and mark it finished. ``known``: {split: (logits, labels,
    idx)} already predicted by this model (the final validation), not predicted again."""
    run, model, pad, hp, pruning, tokenizer = (
        trained.run, trained.model, trained.pad, trained.hp, trained.pruning, trained.tokenizer
    )  # fmt: skip
    seconds = trained.seconds
    eval_device = str(next(model.parameters()).device)
    remaining = trained.fold_pruning()
    dev, test = {}, {}
    diverged = False
    for split in task.dev_splits:
        logits, labels, idx = (known or {}).get(split) or predict(model, splits[split], pad)
        dev[split] = compute_metrics(task, logits, labels)
        diverged = diverged or collapsed(task, logits)
        _save_predictions(run.dir / "predictions" / f"{split}.tsv", task, idx, logits, labels)
    if non_finite(dev):  # a non-finite score is a diverged run, not a result; nothing is exported
        path, value = non_finite(dev)[0]
        raise RunDiverged(
            f"training diverged: dev {path}={value}; lower the learning rate", result=dict(non_finite(dev))
        )
    for split in task.test_splits:
        if split in splits:
            logits, labels, idx = predict(model, splits[split], pad)
            _save_predictions(run.dir / "predictions" / f"{split}.tsv", task, idx, logits, labels)
            if task.submission:
                write_submission(task, split, idx, logits, run.dir / "submission")
            if len(labels) and (labels >= 0).all():  # labelled test rows (SentEval's): scored too
                test[split] = compute_metrics(task, logits, labels)
    absent = [s for s in task.test_splits if s not in splits and s not in task.optional_splits]
    if absent:  # e.g. a GLUE folder with train and dev files only
        print(f"{task.name}: no {'/'.join(absent)} data; test predictions and submission skipped")
    if trained.keep_weights and not run.model_dir.exists():  # with the tokenizer: a self-contained init=
        files = sorted(tokenizer.save(run.dir / "tokenizer").iterdir()) if tokenizer is not None else []
        save_model_dir(model.cpu().float(), model.encoder.cfg, run.model_dir, extra_files=files)
    score = task_score(task, dev[task.dev_splits[0]])
    metrics = {
        "task": task.name,
        "dev": dev,
        "diverged": diverged,  # every dev prediction the same: the run collapsed
        **({"test": test} if test else {}),
        "score": score,
        "convbert_score": convbert_score(task, dev[task.dev_splits[0]]),
        "hp": hp,
        "wall_time_s": seconds,
        **trained.speed(),  # examples_per_s (training rows per second of training steps), timing
        "eval_device": eval_device,  # where the splits the final validation did not cover were predicted
        **({"remaining_weights": remaining, "pruning": pruning.method} if pruning is not None else {}),
    }
    log_result(metrics, run)
    run.finish(metrics)
