"""The baseline of ``convexp bench finetune``: SST-2 fine-tuning as a researcher writes it with plain
``transformers`` (no convexp import; run as a script in its own process).

    python plain_finetune.py MODEL_DIR GLUE_DIR EPOCHS BATCH MAX_LEN LR SEED [DEVICE]

AutoModelForSequenceClassification, AdamW with a linear schedule (10% warm-up), gradient clipping
at 1, batches padded to their longest row, dev accuracy at the end; on ``cuda`` (DEVICE, default
``cpu``) under bf16 autocast. Prints one JSON line (with the wall-clock times of the first step's
start and the last step's end)."""

import csv
import json
import math
import random
import sys
import time

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup


def read_tsv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"] for r in rows], [int(r["label"]) for r in rows]


model_dir, glue, epochs, bs, max_len, lr, seed = sys.argv[1:8]
epochs, bs, max_len, lr, seed = int(epochs), int(bs), int(max_len), float(lr), int(seed)
device = sys.argv[8] if len(sys.argv) > 8 else "cpu"
torch.manual_seed(seed)
random.seed(seed)
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2).to(device)
train_x, train_y = read_tsv(f"{glue}/SST-2/train.tsv")
dev_x, dev_y = read_tsv(f"{glue}/SST-2/dev.tsv")
steps = epochs * math.ceil(len(train_x) / bs)
opt = torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-6, weight_decay=0.0)
sched = get_linear_schedule_with_warmup(opt, int(0.1 * steps), steps)


def batch(xs):
    return tok(xs, padding=True, truncation=True, max_length=max_len, return_tensors="pt").to(device)


def autocast():
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda")


model.train()
first_step = time.time()
for _ in range(epochs):
    order = list(range(len(train_x)))
    random.shuffle(order)
    for i in range(0, len(order), bs):
        ids = order[i : i + bs]
        with autocast():
            out = model(**batch([train_x[j] for j in ids]), labels=torch.tensor([train_y[j] for j in ids], device=device))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
last_step = time.time()
model.eval()
correct = 0
with torch.no_grad():
    for i in range(0, len(dev_x), 64):
        with autocast():
            pred = model(**batch(dev_x[i : i + 64])).logits.argmax(-1)
        correct += int((pred == torch.tensor(dev_y[i : i + 64], device=device)).sum())
print(json.dumps({"dev_accuracy": 100 * correct / len(dev_x), "steps": steps, "first_step": first_step,
                  "last_step": last_step}))
