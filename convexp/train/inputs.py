"""What a stage's config names on disk, checked before a stage is imported (no torch, no
Lightning, no file's content read): ``init=`` and ``distill.teacher=`` (the kind of checkpoint
their files make: :mod:`convexp.store.locate`), the tokenizer file, and, for ``init=none``, that
``task.max_len`` fits the preset's position table. A mistake is one line at once, before any
input is hashed, any dataset cached or any run folder made; what needs a file's content (damaged
weights, a malformed TSV) is refused by the stage, still before anything is written."""

from __future__ import annotations

from omegaconf import DictConfig

from ..config.schema import init_none_problem
import os
from pathlib import Path

from ..data.corpus import data_settings, find_data_files
from ..data.errors import DataPathError
from ..data.tokenizer import tokenizer_file, tokenizer_settings
from ..errors import UserError
from ..store.locate import locate


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


def check_pretrain_inputs(cfg: DictConfig) -> None:
    """``init=`` (a checkpoint to continue from), the corpus files (``data=files``: each there and
    readable), a pretrained tokenizer's file, and that the outputs folder can be written."""
    check_outputs_writable(cfg.outputs)
    if cfg.get("init"):
        locate(str(cfg.init), "init")
    d = data_settings(cfg.data)
    if d["source"] == "files":
        for f in find_data_files(d["path"])[1]:
            readable(f, "data.path")
    t = tokenizer_settings(cfg.tokenizer)
    if t["kind"] == "pretrained":
        tokenizer_file(t["path"])
    check_model_parts(cfg)


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


def readable(path, key: str) -> Path:
    """A file the run reads: refused at once when this process may not read it."""
    p = Path(path)
    if not os.access(p, os.R_OK):
        raise DataPathError(f"{key}: {p} cannot be read (no permission); fix its permissions or the path")
    return p


def check_finetune_inputs(cfg: DictConfig, task_cfgs=()) -> None:
    """``cfg``: a composed fine-tuning config; ``task_cfgs``: the other tasks' configs of the same
    command (task=all), whose ``task.max_len`` must fit as well."""
    check_outputs_writable(cfg.outputs)
    problem = init_none_problem(cfg)
    if problem:
        raise UserError(problem)
    if str(cfg.init) != "none":
        locate(str(cfg.init), "init")
    if cfg.get("tokenizer_path"):
        tok = tokenizer_file(cfg.tokenizer_path)
        if tok is not None:
            readable(tok, "tokenizer_path")
    if cfg.distill.get("teacher"):
        locate(str(cfg.distill.teacher), "distill.teacher", weights=False)
    if str(cfg.init) == "none":
        from ..config.compose import model_config
        from ..models.check import check_parts

        model = model_config(cfg.init_model)
        check_max_len(model, [cfg, *task_cfgs])
        check_parts(model)


def check_max_len(model_cfg, cfgs) -> None:
    """task.max_len must fit the model's position table (models without absolute positions have
    none); refused before anything is written."""
    if not model_cfg.absolute_positions:
        return
    for c in cfgs:
        n = c.task.get("max_len")
        if n is not None and n > model_cfg.max_position_embeddings:
            raise UserError(
                f"task.max_len={n} ({c.task.name}) exceeds the model's "
                f"max_position_embeddings={model_cfg.max_position_embeddings}; lower task.max_len"
            )
