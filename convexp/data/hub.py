"""Datasets from the Hugging Face hub: read at a revision, script repositories, and what was read.

``load_hub(path, name, revision, setting, **kwargs)`` is ``datasets.load_dataset(path, name,
revision=revision, **kwargs)`` for every hub source (pre-training corpora, GLUE, SQuAD), with:

  revision   a branch, tag or commit of the dataset repository; null: its current default branch.
             A study that must read the same text again pins one (``data.revision``,
             ``data.parts.N.revision``, ``glue.revision``, ``squad.revision``). Set, it is part of
             the run id and of the pre-training cache key; null changes neither (older ids stay).
  script     ``datasets`` >= 4 refuses a repository that still holds a loading script ("Dataset
  repos      scripts are no longer supported, but found X.py"). With the revision null, such a
             repository is read from the hub's parquet export (revision ``refs/convert/parquet``),
             saying so in one line, unless that export holds only part of the data (the hub's
             converter stops at a few GB: a ``partial-`` split folder): refused then, in one line
             naming the settings to give. With a revision given, it is refused in one line (a given
             revision is never replaced by another).

:func:`hub_reads` lists what this process read (path, config, split, the revision asked for, the
one read and, when the hub can be asked, its commit): the run record keeps it
(``store/record.py``). :func:`load_hub_or` is :func:`load_hub` with its other failures raised as a
task's own error, in one line.
"""

from __future__ import annotations

import os
import re
import sys

from .errors import HubDatasetError

PARQUET_EXPORT = "refs/convert/parquet"
_SCRIPT = re.compile(r"Dataset scripts are no longer supported, but found (\S+\.py)")
_READS: list[dict] = []


def load_hub(path: str, name: str | None, revision: str | None, setting: str, **kwargs):
    """``datasets.load_dataset(path, name, revision=revision, **kwargs)``; a script repository as the
    module docstring says (``setting``: the config key of this revision, for the one-line messages)."""
    import datasets

    read = revision
    try:
        ds = datasets.load_dataset(path, name, revision=revision, **kwargs)
    except RuntimeError as e:
        script = _SCRIPT.search(str(e))
        if script is None:
            raise
        if revision is not None:
            raise HubDatasetError(
                f"hub dataset {path!r} at {setting}={revision} is a dataset-script repository ({script.group(1)}), "
                f"which datasets >= 4 cannot read; set {setting}={PARQUET_EXPORT} (its parquet export) or a "
                "revision without the script"
            ) from None
        _refuse_partial_export(path, setting)
        print(
            f"note: hub dataset {path!r} is a dataset-script repository ({script.group(1)}, refused by "
            f"datasets >= 4): reading its parquet export ({setting}={PARQUET_EXPORT}; set it to pin this)",
            file=sys.stderr,
        )
        read = PARQUET_EXPORT
        ds = datasets.load_dataset(path, name, revision=read, **kwargs)
    _READS.append(
        {"path": path, "name": name, "split": kwargs.get("split"), "revision": revision, "read": read,
         "commit": _commit(path, read)}
    )  # fmt: skip
    return ds


def load_hub_or(
    error: type[Exception], what: str, fix: str,
    path: str, name: str | None, revision: str | None, setting: str, **kwargs,
):  # fmt: skip
    """:func:`load_hub`; a failure other than its own HubDatasetError (offline, an unknown name: the user
    can fix it) raised as ``error`` in one line: ``<what>: <exception type>: <its text, 160 characters
    at most>; <fix>``."""
    try:
        return load_hub(path, name, revision, setting, **kwargs)
    except HubDatasetError:
        raise
    except Exception as e:
        raise error(f"{what}: {type(e).__name__}: {' '.join(str(e).split())[:160]}; {fix}") from e


def forget_reads() -> None:
    """Empty this process's list of reads: a sweep's next node in the same process (sweep/node_state.py)
    records what it reads itself."""
    _READS.clear()


def hub_reads() -> list[dict]:
    """The hub datasets this process read (see the module docstring), in order, each once."""
    out = []
    for r in _READS:
        if r not in out:
            out.append(dict(r))
    return out


def _offline() -> bool:
    flags = (os.environ.get(k, "").lower() for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(flag in ("1", "true", "yes") for flag in flags)


def _refuse_partial_export(path: str, setting: str) -> None:
    """One-line HubDatasetError when the parquet export of ``path`` holds only part of the data
    (a ``partial-<split>`` folder); nothing when it is whole or the hub cannot be asked."""
    if _offline():
        return
    try:
        from huggingface_hub import HfApi

        files = HfApi().list_repo_files(path, repo_type="dataset", revision=PARQUET_EXPORT)
    except Exception:  # noqa: BLE001 - the export is then read, or its own error says why not
        return
    partial = sorted({f.split("/")[-2] for f in files if "/partial-" in f})
    if partial:
        raise HubDatasetError(
            f"hub dataset {path!r} is a dataset-script repository that datasets >= 4 cannot read, and its parquet "
            f"export ({PARQUET_EXPORT}) holds only part of the data ({', '.join(partial)}); set {setting} to a "
            "revision without the script, or read a local copy (data=files data.path=<folder>)"
        )


def _commit(path: str, revision: str | None) -> str | None:
    """The commit ``revision`` (None: the default branch) of ``path`` names now, when the hub can be
    asked (one request); None otherwise."""
    if _offline() or os.path.isdir(path):
        return None
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(path, revision=revision, timeout=10).sha
    except Exception:  # noqa: BLE001 - the record then says which revision was asked for, not its commit
        return None
