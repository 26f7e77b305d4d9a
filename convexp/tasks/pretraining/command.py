"""``convexp pretrain``: the command this task owns. The CLI, a sweep's planner (for each variant's
pre-training node) and a sweep's worker (running that node) call the same steps, in order:

  compose  the composed configuration of the run (no other task config: one run per command)
  check    everything the run will read, in one pass before the stage's heavy imports (torch,
           Lightning, datasets), with the light readers (json, safetensors' header, pyarrow's JSON
           reader, tokenizers): the outputs folder, ``init=``, the corpus files, a pretrained
           tokenizer's file, and a user's mixer or FFN tried on a tiny batch; the first problem
           found is raised as one line (:class:`convexp.errors.UserError`), nothing written
  check_device  where it is about to run: a paper-scale run that finds no GPU is refused
  plan     the run, named before it runs (its id and directory: runs.py)
  run      plan, and pre-train (stage.py)
"""

from __future__ import annotations

from omegaconf import DictConfig

from .. import Invocation
from ...data.corpus import data_settings, find_data_files, peek_files
from ...data.tokenizer import check_tokenizer, tokenizer_settings
from ...store.peek import peek_checkpoint
from ...data.text_files import readable
from ...train.devices import refuse_the_cpu_at_paper_scale
from ...train.inputs import check_model_parts, check_outputs_writable
from .cost import pretrain_flops
from .runs import pretrain_run

STAGE = "pretrain"


def arguments(overrides: list[str]) -> list[str]:
    """The command line's overrides as the stage's (pre-training adds nothing of its own)."""
    return list(overrides)


def compose(overrides: list[str], cfg: DictConfig) -> Invocation:
    return Invocation(cfg, {})


def check(inv: Invocation, planned: bool = False) -> None:
    """``planned``: a sweep's plan (``--dry-run``, ``--status``, a submission): what the config
    alone decides; the files it names are checked when its node runs (made by then, or on the
    machine that runs it), as ``init=`` may be a run of the same plan."""
    cfg = inv.cfg
    check_outputs_writable(cfg.outputs)
    if not planned:
        if cfg.get("init"):
            peek_checkpoint(str(cfg.init), "init")
        d = data_settings(cfg.data)
        if d["source"] == "files":
            for f in find_data_files(d["path"])[1]:
                readable(f, "data.path")
            peek_files(d["path"])
        t = tokenizer_settings(cfg.tokenizer)
        if t["kind"] == "pretrained":
            check_tokenizer(t["path"], "tokenizer.path")
    check_model_parts(cfg)


def check_device(inv: Invocation) -> None:
    """Where it is about to run (after :func:`check`; a sweep's node checks where its job runs):
    ``scale=paper`` where no GPU is visible (train/devices.py) is refused with what the CPU would
    cost (its training FLOPs at the rate measured on this CPU, train/cpu_rate.py)."""
    cfg = inv.cfg

    def cost() -> str:
        from ...config.compose import to_model_config
        from ...train.cpu_rate import cpu_rate

        flops = pretrain_flops(cfg, to_model_config(cfg.model))
        rate, _ = cpu_rate(cfg)
        days = flops / rate / 86_400
        took = f"{days:,.0f} days" if days >= 2 else f"{days * 24:,.1f} hours"
        return (f"its {cfg.trainer.max_steps:,} steps would train on this CPU, ≈ {took} ({flops:.2g} training "
                f"FLOPs at {rate / 1e9:,.0f} GFLOP/s measured on it)")  # fmt: skip

    refuse_the_cpu_at_paper_scale(cfg, cfg.get("choices", {}).get("scale"), cost)


def plan(inv: Invocation, start=None, tokens: list[str] | None = None) -> list:
    """The run (store/runs.Run), alone in a list as the fine-tuning commands' runs are. ``start``:
    none (a pre-training run starts from ``init=`` or nothing, both in its config); ``tokens``: the
    name's tokens (a sweep's; None: the command's)."""
    return [pretrain_run(inv.cfg, tokens)]


def run(inv: Invocation, summary: bool = True) -> None:
    from .stage import run_pretrain

    run_pretrain(inv.cfg, *plan(inv))
