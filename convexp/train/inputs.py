"""The checks every stage shares, called by each task's check (pre-training's command.py, a fine-tuning TaskKind)
before the stage is imported (no torch, no Lightning): the outputs folder can be written, ``init=`` and ``distill.teacher=`` (the kind of checkpoint their files make:
:mod:`convexp.store.locate`), the tokenizer file, a user's mixer or FFN on a tiny batch, and, for
``init=none``, that ``task.max_len`` fits the preset's position table. A mistake is one line at
once, before any input is hashed, any dataset cached or any run folder made."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from ..config.schema import init_none_problem
from ..data.tokenizer import check_tokenizer
from ..errors import UserError
from ..store.peek import peek_checkpoint
from .devices import refuse_the_cpu_at_paper_scale


def check_outputs_writable(outputs) -> None:
    """The outputs folder can be made and written: a folder is made in its nearest existing
    ancestor and removed again (permissions alone do not tell: ``/proc`` says it is writable)."""
    import tempfile

    path = Path(str(outputs)).expanduser().absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".convexp-probe-", dir=existing))
    except OSError as e:
        raise UserError(
            f"outputs {str(outputs)!r} cannot be made in {existing} ({e.strerror}); set outputs= "
            "(or CONVEXP_OUTPUTS) to a folder you can write, e.g. outputs=~/convexp-outputs"
        ) from None


def check_model_parts(cfg: DictConfig) -> None:
    """A user's mixer or FFN in the pre-training model (and in ELECTRA's generator, built from it at
    its own sizes) tried on a tiny batch (models/check.py); nothing for the papers' presets."""
    from ..config.compose import to_model_config
    from ..models.check import check_parts
    from ..models.config import generator_config
    from ..models.parts import user_parts

    model = to_model_config(cfg.model)
    check_parts(model)
    fraction = cfg.objective.get("generator_fraction") if cfg.objective.get("name") == "electra" else None
    if fraction and user_parts(model):
        check_parts(generator_config(model, fraction))


def check_finetune_inputs(cfg: DictConfig, task_cfgs=(), planned: bool = False) -> None:
    """``cfg``: a composed fine-tuning config; ``task_cfgs``: the other tasks' configs of the same
    command (task=all), whose ``task.max_len`` must fit as well. ``planned``: a sweep's plan, whose
    init and teachers may be runs it has yet to make (the sweep checks its starts: sweep/start.py)."""
    check_outputs_writable(cfg.outputs)
    problem = init_none_problem(cfg)
    if problem:
        raise UserError(problem)
    seen = peek_checkpoint(str(cfg.init), "init") if str(cfg.init) != "none" and not planned else None
    if cfg.get("tokenizer_path") and not planned:
        check_tokenizer(cfg.tokenizer_path, "tokenizer_path")
    elif seen is not None and not seen.tokenizer:
        raise UserError(
            f"{seen.name} holds no tokenizer file (tokenizer.json or vocab.txt beside its weights): give the "
            "tokenizer it was trained with, tokenizer_path=<file or folder>"
        )
    if seen is not None:  # what the checkpoint's config says, before torch (open_init checks a hub's)
        fits_positions(seen.positions, [cfg, *task_cfgs], f" ({seen.name})")
    if cfg.distill.get("teacher") and not planned:
        peek_checkpoint(str(cfg.distill.teacher), "distill.teacher", weights=False)
    if str(cfg.init) == "none":
        from ..config.compose import model_config
        from ..models.check import check_parts

        model = model_config(cfg.init_model)
        check_max_len(model, [cfg, *task_cfgs])
        check_parts(model)


def check_finetune_device(cfg: DictConfig, task_cfgs=()) -> None:
    """A fine-tuning command about to run at ``scale=paper`` where no GPU is visible: refused, naming
    what it would train (train/devices.py)."""
    refuse_the_cpu_at_paper_scale(cfg, cfg.get("choices", {}).get("finetune_scale"), lambda: _runs_here(cfg, task_cfgs))


def _runs_here(cfg: DictConfig, task_cfgs) -> str:
    """What a fine-tuning command would train: its tasks, seeds and settings."""
    tasks = [cfg.task.name, *(c.task.name for c in task_cfgs)]
    grid = " over ConvBERT's grid of settings" if cfg.get("grid") else ""
    seeds = len(cfg.get("seeds") or [cfg.get("seed")])
    return f"fine-tuning {', '.join(tasks)} with {seeds} seed{'s' if seeds > 1 else ''}{grid} would train on this CPU"


def check_max_len(model_cfg, cfgs) -> None:
    """task.max_len must fit the model's position table (models without absolute positions have
    none); refused before anything is written."""
    fits_positions(model_cfg.max_position_embeddings if model_cfg.absolute_positions else None, cfgs)


def fits_positions(positions: int | None, cfgs, whose: str = "") -> None:
    """Each config's task.max_len within ``positions`` (None: no position table, any length)."""
    for c in cfgs if positions is not None else ():
        n = c.task.get("max_len")
        if n is not None and n > positions:
            raise UserError(
                f"task.max_len={n} ({c.task.name}) exceeds the model's max_position_embeddings={positions}{whose}; "
                "lower task.max_len"
            )
