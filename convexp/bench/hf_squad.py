"""The Hugging Face contenders of ``convexp bench squad``: SQuAD v1.1 fine-tuning as a researcher
writes it with ``transformers`` (no convexp import; run as a script in its own process).

    python hf_squad.py MODE MODEL_DIR SQUAD_DIR EPOCHS BATCH MAX_LEN STRIDE LR SEED DEVICE [GROUPING]

MODE ``plain``: a training loop by hand (random batches); ``trainer``: the Trainer with its fused
AdamW (``optim="adamw_torch_fused"``) and, for GROUPING ``grouped`` (default ``random``: random
batches), ``train_sampling_strategy="group_by_length"``. Both: run_qa.py's
windows (the question, then as much of the context as fits; consecutive windows share STRIDE
tokens; an answer not wholly inside a window points at [CLS]), ``AutoModelForQuestionAnswering``,
AdamW (eps 1e-8, no weight decay) with a linear decay and no warm-up, clipping at 1, batches
padded to their longest window; on ``cuda`` bf16 autocast. Dev: the 20 best start and end
positions of every window, spans of at most 30 tokens inside the context, the best-scoring span
of the question's windows, and the official v1.1 exact match and F1. Prints one JSON line (with the
wall-clock times of the first step's start and the last step's end)."""

import collections
import json
import math
import random
import re
import string
import sys
import tempfile
import time

import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, get_linear_schedule_with_warmup

N_BEST, MAX_ANSWER = 20, 30


def read_squad(path):
    out = []
    for article in json.load(open(path, encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                out.append({"id": qa["id"], "context": paragraph["context"], "question": qa["question"],
                            "answers": [(a["text"], a["answer_start"]) for a in qa["answers"]]})  # fmt: skip
    return out


def windows(records, train):
    enc = tok([r["question"] for r in records], [r["context"] for r in records], truncation="only_second",
              max_length=max_len, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)  # fmt: skip
    out = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        seq, r = enc.sequence_ids(i), records[enc["overflow_to_sample_mapping"][i]]
        feature = {k: enc[k][i] for k in ("input_ids", "token_type_ids", "attention_mask")}
        first, last = seq.index(1), len(seq) - 1 - seq[::-1].index(1)
        if train:
            text, a0 = r["answers"][0]
            a1, s, e = a0 + len(text), 0, 0
            if offsets[first][0] <= a0 and offsets[last][1] >= a1:
                s = first
                while s <= last and offsets[s][0] <= a0:
                    s += 1
                e = last
                while e >= first and offsets[e][1] >= a1:
                    e -= 1
                s, e = s - 1, e + 1
            feature.update(start_positions=s, end_positions=e)
        else:
            feature.update(example=enc["overflow_to_sample_mapping"][i], first=first, last=last, offsets=offsets)
        out.append(feature)
    return out


PUNCTUATION = set(string.punctuation)


def normalize(s):
    s = "".join(c for c in s.lower() if c not in PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def f1(prediction, truth):
    p, t = normalize(prediction).split(), normalize(truth).split()
    common = sum((collections.Counter(p) & collections.Counter(t)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(t)
    return 2 * precision * recall / (precision + recall)


def evaluate(records, features, start_logits, end_logits):
    best = {}
    for f, sl, el in zip(features, start_logits, end_logits):
        starts = sorted(range(len(sl)), key=lambda j: -sl[j])[:N_BEST]
        ends = sorted(range(len(el)), key=lambda j: -el[j])[:N_BEST]
        for s in starts:
            for e in ends:
                if f["first"] <= s <= e <= f["last"] and e - s + 1 <= MAX_ANSWER:
                    score = sl[s] + el[e]
                    if f["example"] not in best or score > best[f["example"]][0]:
                        best[f["example"]] = (score, f["offsets"][s][0], f["offsets"][e][1])
    em = f1_sum = 0.0
    for i, r in enumerate(records):
        text = r["context"][best[i][1] : best[i][2]] if i in best else ""
        em += max(float(normalize(text) == normalize(t)) for t, _ in r["answers"])
        f1_sum += max(f1(text, t) for t, _ in r["answers"])
    return 100 * em / len(records), 100 * f1_sum / len(records)


mode, model_dir, squad, epochs, bs, max_len, stride, lr, seed, device = sys.argv[1:11]
grouping = sys.argv[11] if len(sys.argv) > 11 else "random"
epochs, bs, max_len, stride, lr, seed = int(epochs), int(bs), int(max_len), int(stride), float(lr), int(seed)
cuda = device == "cuda"
torch.manual_seed(seed)
random.seed(seed)
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForQuestionAnswering.from_pretrained(model_dir)
train_records, dev_records = read_squad(f"{squad}/train-v1.1.json"), read_squad(f"{squad}/dev-v1.1.json")
train, dev = windows(train_records, True), windows(dev_records, False)
steps = epochs * math.ceil(len(train) / bs)
inputs = ("input_ids", "token_type_ids", "attention_mask")

if mode == "trainer":
    from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments

    steps_at: list[float] = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps_at[:1] = steps_at[:1] or [time.time()]

        def on_step_end(self, args, state, control, **kwargs):
            steps_at[1:] = [time.time()]

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, num_train_epochs=epochs, per_device_train_batch_size=bs, per_device_eval_batch_size=64,
            learning_rate=lr, weight_decay=0.0, adam_epsilon=1e-8, max_grad_norm=1.0, lr_scheduler_type="linear",
            warmup_steps=0, train_sampling_strategy="group_by_length" if grouping == "grouped" else "random",
            optim="adamw_torch_fused", bf16=cuda,
            use_cpu=not cuda, seed=seed, data_seed=seed, dataloader_num_workers=0, eval_strategy="no",
            save_strategy="no", logging_strategy="no", report_to="none", disable_tqdm=True,
        )  # fmt: skip
        trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tok),
                          callbacks=[StepTimes()])
        trainer.train()
        logits = trainer.predict([{k: f[k] for k in inputs} for f in dev]).predictions  # padded with -100
    start_logits = [row[: len(f["input_ids"])].tolist() for row, f in zip(logits[0], dev)]
    end_logits = [row[: len(f["input_ids"])].tolist() for row, f in zip(logits[1], dev)]
else:
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, eps=1e-8, weight_decay=0.0)
    sched = get_linear_schedule_with_warmup(opt, 0, steps)

    def batch(features, keys):
        padded = tok.pad([{k: f[k] for k in inputs} for f in features], return_tensors="pt").to(device)
        return {**padded, **{k: torch.tensor([f[k] for f in features], device=device) for k in keys}}

    model.train()
    steps_at = [time.time()]
    for _ in range(epochs):
        order = list(range(len(train)))
        random.shuffle(order)
        for i in range(0, len(order), bs):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                loss = model(**batch([train[j] for j in order[i : i + bs]], ("start_positions", "end_positions"))).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
    steps_at.append(time.time())
    model.eval()
    start_logits, end_logits = [], []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
        for i in range(0, len(dev), 64):
            chunk = dev[i : i + 64]
            out = model(**batch(chunk, ()))
            for f, s, e in zip(chunk, out.start_logits.float().tolist(), out.end_logits.float().tolist()):
                start_logits.append(s[: len(f["input_ids"])])
                end_logits.append(e[: len(f["input_ids"])])

em, f1_score = evaluate(dev_records, dev, start_logits, end_logits)
print(json.dumps({"dev_exact": em, "dev_f1": f1_score, "train_windows": len(train), "steps": steps,
                  "first_step": steps_at[0], "last_step": steps_at[1]}))
