"""The bare training step of a fine-tuning job, on the stage's own batches (``convexp bench finetune``
and ``bench squad`` run it as a child process, beside the stage).

    python -m convexp.bench.bare_step glue|squad OVERRIDES...

The command's first run (task, seed) is built as the stage builds it (train/finetune.py's ``build``:
seeded, the same module, optimizer, schedule and data), its training batches for the whole run are
drawn from the stage's loader and collated before the clock starts, and then each is stepped with
nothing around it: the step's dropout seed, forward, loss, backward, the gradients' norm and
clipping, AdamW and the schedule, the gradients zeroed (on a CPU the kept word-embedding gradient,
as the stage). On a GPU the batch's copy to the device is in the step and the clock waits for the
device at the end only; under the stage's precision. glibc's heap is left as a plain loop has it.
Prints one JSON line: steps, seconds, steps_per_s, rows_per_s, threads.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from contextlib import nullcontext


def stage_job(kind: str, overrides: list[str]):
    """(cfg, planned run, FinetuneJob) of the first run ``convexp finetune KIND OVERRIDES`` makes."""
    from pathlib import Path

    from ..config.compose import compose_stage
    from ..train.finetune import resolve_init

    if kind == "squad":
        from ..tasks.squad.runs import squad_runs
        from ..tasks.squad.stage import squad_data, squad_job

        cfg = compose_stage("finetune", overrides)
        init = resolve_init(cfg)
        planned = squad_runs(cfg, init.slug, init.model_cfg.hidden_size)[0]
        return cfg, planned, squad_job(cfg, init, planned, squad_data(cfg, init.tokenizer))
    from ..tasks.classification.encoding import tokenize_task
    from ..tasks.classification.loading import prepare_task
    from ..tasks.classification.stage import classification_job
    from ..tasks.classification.kinds import GLUE_KIND
    from ..tasks.classification.runs import classification_runs, task_config

    cfg, task_cfgs = GLUE_KIND.compose(overrides, compose_stage("finetune", overrides))
    init = resolve_init(cfg)
    planned = classification_runs(cfg, init.slug, init.model_cfg.hidden_size, task_cfgs)[0]
    tcfg = task_config(cfg, task_cfgs, planned.task)
    task, raw = prepare_task(tcfg.task, tcfg.glue, tcfg.both_orders)
    splits = tokenize_task(task, raw, init.tokenizer, tcfg.task.max_len, Path(cfg.outputs) / "cache" / "glue")
    return tcfg, planned, classification_job(tcfg, init, planned, splits)


def bare_steps(kind: str, overrides: list[str]) -> dict:
    """Time the bare step over every training batch of the job's first run (module docstring)."""
    import torch

    from ..train.accel import kept_word_grad, on_cuda, set_threads
    from ..train.common import seed_step, step_seed
    from ..train.finetune import build
    from ..train.grad_norm import clip_with_norm, total_norm

    cfg, planned, job = stage_job(kind, overrides)
    module, data, _, total, _ = build(cfg, planned, job)
    set_threads(cfg.trainer)
    device = torch.device("cuda" if on_cuda(cfg.trainer) else "cpu")
    module.to(device)
    batches = list(itertools.islice(iter(data.batches(0)), total))  # the stage's batches, collated now
    optimizers = module.configure_optimizers()
    opt, schedule = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    module.keep_word_grad(kept_word_grad(device.type, 1))
    params = [p for group in opt.param_groups for p in group["params"]]
    clip = planned.hp["grad_clip"]
    bf16 = str(cfg.trainer.precision).startswith("bf16")
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if bf16 else nullcontext
    module.train()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for batch in batches:
        batch = {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
        seed_step(step_seed(planned.seed, batch["first_position"]), device)
        module.optimizer_zero_grad(0, 0, opt)
        with autocast():
            loss = module.forward_batch(batch).loss
        loss.backward()
        if clip:
            clip_with_norm(params, clip, total_norm([p.grad for p in params if p.grad is not None]))
        opt.step()
        schedule.step()
    sync()
    seconds = time.perf_counter() - start
    rows = total * planned.hp["batch_size"]
    return {"steps": total, "seconds": seconds, "steps_per_s": total / seconds, "rows_per_s": rows / seconds,
            "threads": torch.get_num_threads(), "device": device.type, "final_loss": float(loss.detach())}  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("glue", "squad"):
        sys.exit("usage: python -m convexp.bench.bare_step glue|squad OVERRIDES...")
    print(json.dumps(bare_steps(sys.argv[1], sys.argv[2:])), flush=True)
