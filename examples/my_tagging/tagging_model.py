"""The torch side of the tagging kind (tagging.py imports it only when it trains): rows as word
pieces, the tagger (convexp's encoder and a linear layer on every position), its Lightning
module and the run's evaluation, given to convexp's one-run driver (``train/finetune.train_one``).
"""

from __future__ import annotations

import json

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from convexp.models import Encoder
from convexp.models.heads import HeadOutput, cross_entropy
from convexp.train.accel import loader_workers
from convexp.train.common import log_result
from convexp.train.finetune import FinetuneJob
from convexp.train.streams import training_loader
from convexp.train.task_module import TaskModule

IGNORE = -100  # a position that is not a word's first piece: not scored
COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "labels")


def encode(rows: list[dict], tokenizer, labels: list[str], max_len: int) -> list[dict]:
    """[CLS] pieces [SEP], cut at ``max_len``; each word's first piece carries its tag's id."""
    index = {t: i for i, t in enumerate(labels)}
    out = []
    for row in rows:
        ids, tags = [tokenizer.cls_id], [IGNORE]
        for word, tag, pieces in zip(row["words"], row["tags"], tokenizer.encode_batch(row["words"])):
            pieces = pieces or [tokenizer.unk_id]
            ids += pieces
            tags += [index[tag]] + [IGNORE] * (len(pieces) - 1)
        ids, tags = ids[: max_len - 1] + [tokenizer.sep_id], tags[: max_len - 1] + [IGNORE]
        n = len(ids)
        out.append({"input_ids": ids, "token_type_ids": [0] * n, "attention_mask": [1] * n, "labels": tags,
                    "words": row["words"]})  # fmt: skip
    return out


class Collate:
    """Pad a batch to its longest row; a training batch keeps its stream position (the step's seed)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in rows)
        pad = {"input_ids": self.pad_id, "token_type_ids": 0, "attention_mask": 0, "labels": IGNORE}
        out = {k: torch.tensor([list(r[k]) + [v] * (width - len(r[k])) for r in rows]) for k, v in pad.items()}
        if "position" in rows[0]:
            out["first_position"] = int(rows[0]["position"])
            out["padded"] = len({len(r["input_ids"]) for r in rows}) > 1
        return out


class Tagger(nn.Module):
    """convexp's encoder and one linear layer on every position: logits [B, L, T]."""

    def __init__(self, cfg, num_labels: int):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.out = nn.Linear(cfg.hidden_size, num_labels)
        self.encoder.init_weights(self.out)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, padded=None) -> HeadOutput:
        features = self.encoder(input_ids, attention_mask, token_type_ids, padded=padded).features  # [B, L, D]
        logits = self.out(features)  # [B, L, T]
        loss = cross_entropy(logits.flatten(0, 1), labels.flatten()) if labels is not None else None
        return HeadOutput(loss, logits)


class TaggingModule(TaskModule):
    """The training step (with pruning and distillation) is TaskModule's; this says the batch's loss
    and the dev accuracy after each epoch."""

    def __init__(self, model_cfg, num_labels: int, hp: dict, total: int, seed: int, state, **settings):
        super().__init__(hp, total, seed, **settings)
        self.build(lambda: Tagger(model_cfg, num_labels), state, None, None)
        self._val: list[tuple[int, int]] = []

    def forward_batch(self, batch):
        return self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["labels"],
                          padded=batch.get("padded"))  # fmt: skip

    def validation_step(self, batch, batch_idx):
        self._val.append(correct(self.model, batch))

    def on_validation_epoch_end(self) -> None:
        if self._val:
            right, total = map(sum, zip(*self._val))
            self._val = []
            self.log("val/accuracy", 100.0 * right / max(total, 1), prog_bar=True)


def correct(model, batch) -> tuple[int, int]:
    """(tags predicted right, tags scored) on a batch."""
    logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    scored = batch["labels"] != IGNORE
    return int((logits.argmax(-1) == batch["labels"])[scored].sum()), int(scored.sum())


class TaggingData(pl.LightningDataModule):
    def __init__(self, train, dev, seed: int, batch_size: int, pad_id: int, workers: int):
        super().__init__()
        self.train, self.dev, self.seed, self.batch_size, self.pad_id, self.workers = (
            train, dev, seed, batch_size, pad_id, workers
        )  # fmt: skip

    def train_dataloader(self):  # resumable: a resumed run goes on from the batch after its last step
        return training_loader(self.train, self.seed, COLUMNS, self.batch_size, False, self.trainer.global_step,
                               Collate(self.pad_id), self.workers)  # fmt: skip

    def val_dataloader(self):
        return DataLoader(self.dev, batch_size=64, collate_fn=Collate(self.pad_id))


def tagging_job(cfg, init, planned, splits: dict, labels: list[str]) -> FinetuneJob:
    """What convexp's one-run driver trains (train/finetune.py): the module, the data, the finish."""
    train, dev, pad = splits["train_file"], splits["validation_file"], init.tokenizer.pad_id

    def module(total: int, pruning, prune_warmup: int, teacher) -> TaggingModule:
        if teacher is not None:
            raise ValueError("the tagging example distils from no teacher: leave distill.teacher unset")
        settings = {"pruning": pruning, "prune_warmup": prune_warmup, "distill": cfg.distill,
                    "fused_adamw": cfg.trainer.fused_adamw}  # fmt: skip
        return TaggingModule(init.model_cfg, len(labels), planned.hp, total, planned.seed, init.take_state(), **settings)

    def data() -> TaggingData:
        return TaggingData(train, dev, planned.seed, planned.hp["batch_size"], pad, loader_workers(cfg.trainer))

    def finish(module: TaggingModule, trained) -> None:
        """Token accuracy on the dev file, its predictions, and the run's metrics.json."""
        model, run = trained.model.eval(), trained.run
        right = total = 0
        run.dir.joinpath("predictions").mkdir(exist_ok=True)
        with torch.no_grad(), open(run.dir / "predictions" / "validation.jsonl", "w") as f:
            for start in range(0, len(dev), 64):
                rows = dev[start : start + 64]
                batch = {k: v.to(next(model.parameters()).device) for k, v in Collate(pad)(rows).items()}
                logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
                for row, pred, gold in zip(rows, logits.argmax(-1).tolist(), batch["labels"].tolist()):
                    tags = [labels[p] for p, g in zip(pred, gold) if g != IGNORE]
                    f.write(json.dumps({"words": row["words"][: len(tags)], "tags": tags}) + "\n")
                r, t = correct(model, batch)
                right, total = right + r, total + t
        accuracy = 100.0 * right / max(total, 1)
        metrics = {"task": planned.task, "dev": {"validation": {"accuracy": accuracy}}, "score": accuracy,
                   "hp": planned.hp, "wall_time_s": trained.seconds, **trained.speed()}  # fmt: skip
        log_result(metrics, run)
        run.finish(metrics)

    return FinetuneJob(len(train), True, module, data, finish)
