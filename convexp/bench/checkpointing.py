"""Gradient checkpointing (``trainer.gradient_checkpointing``) at long sequences: peak memory and
time of one MLM training step with and without it.

Each setting runs in its own process (peak RSS is per process and never goes down): the step's
peak is the process's peak resident memory minus its resident memory just before the first step.
``python -m convexp.bench.checkpointing [MODEL] [SEQ_LEN] [BATCH]`` prints one JSON record.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time, torch
from convexp.config.compose import model_config
from convexp.models import MaskedLM
name, L, B, on = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
cfg = model_config(name, [f"max_position_embeddings={max(L, 512)}"])
torch.manual_seed(0)
model = MaskedLM(cfg).train()
model.encoder.gradient_checkpointing = on
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(5, cfg.vocab_size, (B, L))
labels = torch.where(torch.rand(B, L) < 0.15, ids, torch.full_like(ids, -100))
def step():
    model(ids, torch.ones_like(ids), labels=labels).loss.backward()
    opt.step(); opt.zero_grad(set_to_none=False)
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
base = rss()
t, c = time.perf_counter(), time.process_time(); step(); first, cpu1 = time.perf_counter() - t, time.process_time() - c
t, c = time.perf_counter(), time.process_time(); step(); second, cpu2 = time.perf_counter() - t, time.process_time() - c
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_step_mib": (peak - base) / 2**20, "step_s": min(first, second), "step_cpu_s": min(cpu1, cpu2)}))
"""


def measure(model: str = "convbert_small", seq_len: int = 2048, batch: int = 1) -> dict:
    """Peak step memory (MiB) and step time (s) off and on, alternating off/on processes."""
    out = {"model": model, "seq_len": seq_len, "batch": batch}
    for on in ("0", "1"):
        res = subprocess.run(
            [sys.executable, "-c", CHILD, model, str(seq_len), str(batch), on],
            capture_output=True, text=True, check=True,
        )
        out["on" if on == "1" else "off"] = json.loads(res.stdout.strip().splitlines()[-1])
    out["memory_ratio"] = out["on"]["peak_step_mib"] / out["off"]["peak_step_mib"]
    out["time_ratio"] = out["on"]["step_s"] / out["off"]["step_s"]
    out["cpu_time_ratio"] = out["on"]["step_cpu_s"] / out["off"]["step_cpu_s"]
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(measure(*(args[:1] or ["convbert_small"]), *(int(a) for a in args[1:3])), indent=1))
