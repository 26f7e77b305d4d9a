"""The pre-training run a command will make, named before it runs (no Lightning): its run
directory, whose id hashes every value the run uses (its composed config, its recipe included), the
contents of its local corpus and tokenizer files, and a user's mixer or FFN source. ``convexp
ablate`` lays out its sweeps' pre-training runs this way, and ``convexp report`` finds them again."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from ...config.name_tokens import command_tokens
from ...data.digests import input_digests
from ...models.parts import code_digests
from ...store.run_names import run_key
from ...store.rundirs import checkpoint_identity
from ...store.runs import Run


def pretrain_run(cfg: DictConfig, tokens: list[str] | None = None) -> Run:
    """The run directory of a composed pre-training config (known before it runs): its recipe
    (conf/recipe/) is part of the composed config, so the id hashes every value the run uses.
    ``tokens``: the name's tokens (a sweep's); None: the command's (:func:`command_tokens`)."""
    slug = "-".join(filter(None, [cfg.model.name, cfg.objective.name, cfg.name]))
    hashed = cfg
    if cfg.get("init"):  # a run it continues by its id, not its path: the same id in any run store
        hashed = OmegaConf.merge(cfg, {"init": run_key(checkpoint_identity(str(cfg.init)))})
    named = {"data.path": cfg.data.get("path"), "tokenizer.path": cfg.tokenizer.get("path")}
    named.update({f"data.parts.{i}.path": part.get("path") for i, part in enumerate(cfg.data.get("parts") or [])})
    inputs = input_digests(named)
    hashed = OmegaConf.to_container(hashed, resolve=True)
    if inputs:  # local corpus or tokenizer files: their contents, not only their paths
        hashed["inputs"] = inputs
    code = code_digests(cfg.model)
    if code:  # a user's mixer or FFN: its source, not only its import path (the presets: none)
        hashed["code"] = code
    data = hashed.get("data") or {}
    for source in (data, *(data.get("parts") or [])):  # a revision left null: the ids made before revisions
        if isinstance(source, dict) and source.get("revision", "") is None:
            source.pop("revision")
    tokens = command_tokens(cfg) if tokens is None else tokens
    return Run.for_config(cfg.outputs, "pretrain", slug, hashed, tokens)
