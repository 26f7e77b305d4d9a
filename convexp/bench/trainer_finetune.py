"""The strongest baseline of ``convexp bench finetune``: SST-2 fine-tuning through the ``transformers``
Trainer with the speed flags a researcher would set (no convexp import; run as a script in its
own process).

    python trainer_finetune.py MODEL_DIR GLUE_DIR EPOCHS BATCH MAX_LEN LR SEED DEVICE GROUPING

The same job as plain_finetune.py (AdamW, eps 1e-6, no weight decay, linear schedule with 10%
warm-up, clipping at 1, batches padded to their longest row, dev accuracy at the end), with the
Trainer's ``optim="adamw_torch_fused"`` and, for GROUPING ``grouped`` (``random``: random batches),
``train_sampling_strategy="group_by_length"`` (length-grouped batches, as convexp's); on ``cuda`` bf16
autocast (``bf16=True``). Nothing is logged, saved or evaluated during training. Prints one JSON
line (with the wall-clock times of the first step's start and the last step's end)."""

import csv
import json
import math
import sys
import tempfile
import time

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


def read_tsv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"] for r in rows], [int(r["label"]) for r in rows]


model_dir, glue, epochs, bs, max_len, lr, seed, device, grouping = sys.argv[1:10]
epochs, bs, max_len, lr, seed = int(epochs), int(bs), int(max_len), float(lr), int(seed)
cuda = device == "cuda"
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)


def encode(path):
    texts, labels = read_tsv(path)
    enc = tok(texts, truncation=True, max_length=max_len)
    return [{**{k: enc[k][i] for k in enc}, "labels": labels[i]} for i in range(len(texts))]


train, dev = encode(f"{glue}/SST-2/train.tsv"), encode(f"{glue}/SST-2/dev.tsv")
steps = epochs * math.ceil(len(train) / bs)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(
        output_dir=out,
        num_train_epochs=epochs,
        per_device_train_batch_size=bs,
        per_device_eval_batch_size=64,
        learning_rate=lr,
        weight_decay=0.0,
        adam_epsilon=1e-6,
        max_grad_norm=1.0,
        lr_scheduler_type="linear",
        warmup_steps=int(0.1 * steps),
        train_sampling_strategy="group_by_length" if grouping == "grouped" else "random",
        optim="adamw_torch_fused",
        bf16=cuda,
        use_cpu=not cuda,
        seed=seed,
        data_seed=seed,
        dataloader_num_workers=0,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    steps_at: list[float] = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps_at[:1] = steps_at[:1] or [time.time()]

        def on_step_end(self, args, state, control, **kwargs):
            steps_at[1:] = [time.time()]

    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tok),
                      callbacks=[StepTimes()])
    trainer.train()
    predictions = trainer.predict(dev)
accuracy = 100 * float((torch.as_tensor(predictions.predictions).argmax(-1) == torch.as_tensor(predictions.label_ids)).float().mean())
print(json.dumps({"dev_accuracy": accuracy, "steps": steps, "first_step": steps_at[0], "last_step": steps_at[1]}))
