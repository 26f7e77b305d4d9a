"""The runs of a SQuAD invocation, named before any of them runs (no Lightning, no data).

A SQuAD fine-tuning run is a fine-tuning run like a GLUE one (``outputs/runs/finetune/<slug>-<hash>``,
id from :func:`finetune_runs.finetune_run`) whose hash also holds what only SQuAD has: the head and
windows of the protocol (``qa``: conf/task/squad*.yaml) and the data source (``squad``). ``convexp
ablate`` lays SQuAD runs out from the config alone and ``convexp report`` finds them again.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .. import SQUAD
from .data import squad_source_settings
from ...errors import UserError
from ...config.name_tokens import command_tokens
from ...store.rundirs import FinetuneRun
from ..finetune_runs import finetune_run, hyperparameters

SQUAD_PROTOCOLS = ("convbert", "bermo")  # ELECTRA's QA recipe, BERMO's (Sanh et al.'s masked_run_squad.py)
WINDOW_KEYS = ("max_len", "doc_stride")  # squad.<key>: overrides of the protocol's windows


def check_squad_config(cfg: DictConfig) -> None:
    """A SQuAD task under a protocol that has SQuAD settings (one-line UserError)."""
    if cfg.task.name not in SQUAD:
        raise UserError(
            f"task={cfg.task.name} is not a SQuAD task; use task=squad1 (v1.1) or task=squad2 (v2.0) "
            "(GLUE tasks: convexp finetune glue)"
        )
    if cfg.protocol not in SQUAD_PROTOCOLS:
        raise UserError(
            f"protocol={cfg.protocol} has no SQuAD settings; use protocol=convbert (ELECTRA's QA recipe) "
            "or protocol=bermo"
        )
    if cfg.grid:
        raise UserError("grid=true is the ConvBERT GLUE grid; SQuAD runs the protocol's one setting")


def qa_settings(cfg: DictConfig) -> dict:
    """The head, windows and decoding of the protocol (``task.qa.<protocol>``; ``squad.max_len``
    and ``squad.doc_stride`` override the window length and stride), plus the SQuAD version."""
    qa = dict(OmegaConf.to_container(cfg.task.qa[cfg.protocol], resolve=True))
    for key in WINDOW_KEYS:
        if cfg.squad.get(key) is not None:
            qa[key] = int(cfg.squad[key])
    qa["version"] = str(cfg.task.version)
    if qa["head"] == "electra" and not isinstance(qa.get("answerable"), bool):
        raise UserError(
            f"task.qa.{cfg.protocol}.answerable: give true (ELECTRA's answerable classifier, trained on "
            "v1.1 and v2.0 alike) or false for the electra head"
        )
    return qa


def squad_source(cfg: DictConfig) -> dict:
    """The data source of ``cfg.squad`` for the task's version, checked (a local path made absolute)."""
    source = {k: v for k, v in OmegaConf.to_container(cfg.squad, resolve=True).items() if k not in WINDOW_KEYS}
    source["version"] = str(cfg.task.version)
    s = squad_source_settings(source)
    if s["source"] == "local":
        s["path"] = str(Path(s["path"]).expanduser().resolve())
    if s["source"] != "synthetic":  # the synthetic task's settings are not part of other sources' runs
        s.pop("seed"), s.pop("synthetic_size")
    if s["revision"] is None:  # left null: the ids runs had before revisions existed
        s.pop("revision")
    return s


def squad_runs(
    cfg: DictConfig, init_slug: str, hidden_size: int, tokens: list[str] | None = None
) -> list[FinetuneRun]:
    """Every run of a SQuAD invocation (the task's seeds), in execution order. Needs only the
    init's name and width, not its weights; ``tokens`` as for classification/runs.classification_runs.
    The config is checked by the command first (:func:`check_squad_config`)."""
    tokens = command_tokens(cfg) if tokens is None else tokens
    # GLUE's data source and length are not SQuAD's: the id holds SQuAD's source and windows instead
    extra = {"glue": None, "max_len": None, "qa": qa_settings(cfg), "squad": squad_source(cfg)}
    if cfg.get("group_by_length"):  # off: the ids runs had before SQuAD could group
        extra["group_by_length"] = True
    runs = []
    for hp in hyperparameters(cfg, hidden_size):
        for seed in cfg.seeds:
            run, run_cfg = finetune_run(cfg, init_slug, cfg.task.name, seed, hp, extra=extra, tokens=tokens)
            runs.append(FinetuneRun(cfg.task.name, seed, hp, run, run_cfg))
    return runs
