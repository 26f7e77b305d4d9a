"""The built-in configs as a user meets them: a stage's ``--help`` listing of its config groups
and options (``stage_help``), and ``convexp cp``'s copy of one to edit (``copy_config``)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from ..errors import ConfigError
from .compose import CONF_DIR, SCALE_GROUP, group_sources, is_builtin


def stage_help(stage: str) -> list[tuple[str, str]]:
    """(name, options) rows for a stage command's ``--help``: every config group of the stage
    with its options (yours marked *), then the stage's own top-level keys."""
    spec = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{stage}.yaml"), resolve=False)
    rows = []
    for entry in spec.get("defaults", []):
        if not isinstance(entry, dict):
            continue
        (group,) = entry.keys()
        shown = "scale" if group == SCALE_GROUP.get(stage) else group
        names = [n + ("*" if not is_builtin(p) else "") for n, p in group_sources(group).items()]
        rows.append((shown, f"{', '.join(names)} (default {entry[group]})"))
    keys = [k for k, v in spec.items() if k != "defaults" and not isinstance(v, dict)]
    rows.append(("keys", ", ".join(keys) + "; --cfg prints every key with its value"))
    return rows


def copy_config(name: str, dest: str | Path) -> Path:
    """Copy the built-in config ``GROUP/NAME`` (or a ``NAME`` only one group has) to ``dest``: a
    folder gets ``DEST/GROUP/NAME.yaml`` (ready for ``--config-dir DEST``), a ``.yaml`` path is the
    file itself. Never overwrites."""
    group, _, stem = name.rpartition("/")
    if group:
        matches = [CONF_DIR / group / f"{stem}.yaml"]
        if not matches[0].is_file():
            raise ConfigError(f"no built-in config {name!r}; see `convexp models` or `convexp ablate --list`")
    else:
        matches = sorted(CONF_DIR.glob(f"*/{stem}.yaml")) + sorted(CONF_DIR.glob(f"{stem}.yaml"))
        if not matches:
            raise ConfigError(f"no built-in config named {name!r}; give GROUP/NAME, e.g. model/convbert_small")
        if len(matches) > 1:
            where = ", ".join(f"{p.parent.name}/{stem}" for p in matches)
            raise ConfigError(f"{name!r} is in several groups ({where}): give GROUP/NAME")
    src = matches[0]
    dest = Path(dest)
    target = dest if dest.suffix in (".yaml", ".yml") else dest / src.relative_to(CONF_DIR)
    if target.exists():
        raise ConfigError(f"{target} exists; choose another destination (convexp cp never overwrites)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x") as out:  # "x": never overwrites, even a file made meanwhile
            out.write(src.read_text())
    except OSError as e:
        raise ConfigError(
            f"cannot write {target} ({e.strerror or e}); choose a destination you can write, e.g. convexp cp {name} mine/"
        ) from e
    return target
