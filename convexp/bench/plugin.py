"""What the plug-in path costs (``convexp bench``, CPU): a training step of Chang et al.'s
BERT-small with the built-in self-attention (``model.mixer=attention``) against the same model
whose mixer is a user's module, loaded from a file in a ``--user-dir`` folder as a researcher's
would be, that writes out the same self-attention (:data:`COPY`). The same math and the same
initial weights, the steps taking turns: the ratio is what the table of parts, the import path and
the ``first_only`` adapter cost (goal: within 3%)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import torch

from ..config.compose import model_config
from ..models import MaskedLM
from ..user_code import add_user_dirs
from ..tasks.pretraining.objectives import prediction_slots
from ..train.accel import fused_adamw
from .step import mlm_batch, time_interleaved, train_step, console, print_rows

# The user's file: BERT's self-attention on convexp's own attention kernel (`attend`), as the test
# suite's copy (tests/test_user_parts.py) that trains to the built-in's losses step for step.
COPY = '''
from torch import nn

from convexp.models.attention import attend, merge_heads, split_heads


class CopiedAttention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        D = cfg.hidden_size
        self.heads, self.dropout = cfg.num_heads, cfg.attention_dropout
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x, keep):
        q, k, v = (split_heads(p(x), self.heads) for p in (self.q, self.k, self.v))
        return self.out(merge_heads(attend(q, k, v, keep, None, self.dropout if self.training else 0.0)))
'''
MODULE = "convexp_bench_copied_attention"


def _loss(model, ids, positions, labels):
    return model(ids, labels=labels, positions=positions, padded=False).loss


def bench_plugin(steps: int, batch_size: int, seq_len: int) -> Iterator[dict]:
    """One row: ms per training step (forward, backward, AdamW) of each, and their ratio."""

    folder = Path(tempfile.mkdtemp(prefix="convexp-bench-user-"))
    (folder / f"{MODULE}.py").write_text(COPY)
    add_user_dirs([folder])
    fused = fused_adamw("auto", "cpu")
    contenders = {}
    for name, mixer in (("built-in", "attention"), ("user file", f"{MODULE}:CopiedAttention")):
        cfg = model_config("chang_small", [f"mixer={mixer}"])
        torch.manual_seed(0)
        model = MaskedLM(cfg)
        ids, mask, labels = mlm_batch(cfg.vocab_size, batch_size, seq_len)
        positions, slot_labels = prediction_slots(labels)
        loss = partial(_loss, model, ids, positions, slot_labels)
        contenders[name] = train_step(model, loss, False, fused)
    t = time_interleaved(contenders, steps)
    yield {
        "model": f"chang_small, batch {batch_size} x {seq_len}",
        "built-in ms": t["built-in"] * 1e3,
        "user file ms": t["user file"] * 1e3,
        "user / built-in": t["user file"] / t["built-in"],
    }


def run_plugin_benchmark(steps: int, batch_size: int, seq_len: int) -> None:
    print_rows(
        "Your own mixer: a user file's copy of self-attention vs the built-in (training step, fp32)",
        bench_plugin(steps, batch_size, seq_len),
        {"built-in ms": ".1f", "user file ms": ".1f", "user / built-in": ".3f"},
        console(),
        "the plug-in path: the same self-attention built in and from a user's file",
    )
