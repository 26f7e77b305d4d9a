"""Where a variant's fine-tuning starts: its own pre-training run, or one checkpoint that every
variant fine-tunes (the sweep's ``init:`` above scale=smoke, or ``init=`` on the command line)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig

from ..errors import UserError
from .spec import Sweep, SweepError


@dataclasses.dataclass
class Start:
    """Where a variant's fine-tuning starts: its pre-training run, or a checkpoint (``init:``)."""

    init: str  # the fine-tuning stage's init= (a run directory, a checkpoint dir or hub name)
    slug: str  # the init's name in fine-tuning run ids
    width: int  # hidden size (the protocols' learning rates depend on it)
    node: str | None = None  # the pre-training node, None for a checkpoint
    model_cfg: object = None  # its ModelConfig (None: a hub checkpoint that is not on disk)


def checkpoint_for(sweep: Sweep, settings: DictConfig) -> str | None:
    """The checkpoint every variant fine-tunes, or None to pre-train: ``init=`` on the command line
    (``init=pretrain``: pre-train even at scales above smoke), else the sweep's ``init:`` above smoke."""
    if settings.init is not None:
        return None if settings.init == "pretrain" else str(settings.init)
    return sweep.init if settings.scale != "smoke" else None


def checkpoint_start(init: str) -> Start:
    """A checkpoint's name and width, from its config when it is on disk (a directory, a convexp
    run, or the HF cache); a hub checkpoint not downloaded yet is assumed base-sized (768: only
    the convbert / chang protocols' learning rates depend on it)."""
    from ..models.io import is_model_dir, read_model_config

    p = Path(init).expanduser()
    model_dir = p / "model" if (p / "model").is_dir() else p
    if is_model_dir(model_dir):
        mc = read_model_config(model_dir)
        slug = model_dir.parent.name if model_dir.name == "model" else model_dir.name
        return Start(str(p.resolve()), slug, mc.hidden_size, None, mc)
    config = p / "config.json" if p.is_dir() else _hub_cached(init)
    if p.is_dir() and not config.exists():
        raise SweepError(
            f"init={init}: no config.json there; give a HF checkpoint directory or a convexp run"
        )
    if config is None:
        return Start(init, Path(init).name, 768)
    import json

    from ..models.hf import model_config_from_hf

    hf = json.loads(Path(config).read_text())
    try:
        mc = model_config_from_hf(hf, name=init)
    except UserError as e:
        raise SweepError(f"init={init}: {e}") from e
    return Start(str(p.resolve()) if p.is_dir() else init, Path(init).name, mc.hidden_size, None, mc)


def _hub_cached(name: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a valid repo id, no cache: unknown
        return None
    return Path(found) if isinstance(found, str) else None
