"""Corpora as a ``datasets`` table with one ``text`` column: synthetic, hub or local files.

Data config keys (``conf/data/*.yaml``; missing keys take the values of ``DATA_DEFAULTS``):

  source        synthetic | hub | files
  path          hub dataset name (hub), or a file or folder (files)
  name          hub config name, or null
  revision      hub: the dataset repository's branch, tag or commit (null: its default branch;
                ``data/hub.py``: a script repository is read from its parquet export); set, part of
                the run id and the cache key
  split         split to read (hub; files always have one split, "train")
  text_field    the column holding the text (hub, .jsonl/.json, .parquet); renamed to `text`
  streaming     return an IterableDataset that reads lazily (hub datasets too big for the disk)
  num_docs      number of documents (synthetic)
  seed          corpus seed (synthetic)
  max_docs      keep only the first max_docs documents (null: all)
  line_by_line  .txt files: one document per line; default false = one document per block of
                lines separated by a blank line ("\\n\\n")
  examples      packed | sentence_pairs | electra: how pre-training examples are made (``packing.py``)
  parts         hub only, instead of path: a list of hub datasets read in turn and concatenated
                into one corpus (``datasets.concatenate_datasets``; Chang et al.'s BookCorpus +
                WikiText-103). Each part is {path, name, split, text_field, rows_per_doc,
                revision}; a key it leaves out takes the top-level value (revision: null, each
                repository has its own). ``rows_per_doc: N`` joins every N
                consecutive rows (newline-separated) into one document, for a dataset of one
                sentence per row and no document boundaries (BookCorpus); null: a row is a document
  cache, val_fraction, val_docs, val_split   used by ``pretraining.py`` (see there)
  num_proc      processes of the prepared (cached) build: a positive number or ``auto`` (the cores
                the run may use); the rows do not depend on it (``tasks/pretraining/build.py``)
  store_chunks  streaming: keep each chunk's examples on disk as they are made, so later passes and
                resumed runs read them instead of the source (``tasks/pretraining/chunk_store.py``;
                true or false, default true); where the rows are kept, not what they are

Files: ``path`` is one file or a folder, searched recursively (hidden files skipped) for one
format: .txt (builder "text"), .jsonl/.json ("json") or .parquet ("parquet"), all read with
``datasets.load_dataset(builder, data_files=...)``. Blank documents are dropped everywhere.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

from .datasets_cache import local_read
from .hub import load_hub
from .errors import (
    DataError,
    DataPathError,
    EmptyCorpusError,
    HubDatasetError,
    MissingFieldError,
    UnknownSourceError,
)

SOURCES = ("synthetic", "hub", "files")
DATA_DEFAULTS: dict[str, Any] = {
    "source": "synthetic",
    "path": None,
    "name": None,
    "revision": None,
    "split": "train",
    "text_field": "text",
    "streaming": False,
    "num_docs": 10_000,
    "seed": 0,
    "max_docs": None,
    "line_by_line": False,
    "examples": "packed",
    "parts": None,
    "cache": True,
    "num_proc": "auto",
    "store_chunks": True,
    "val_fraction": 0.01,
    "val_docs": None,
    "val_split": None,
}
FILE_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def to_dict(cfg) -> dict:
    """A plain dict from a DictConfig, a dict or None (resolved)."""
    if cfg is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(cfg)


def with_defaults(cfg, defaults: dict, group: str, error: type[DataError] = DataError) -> dict:
    """``cfg`` as a dict over ``defaults``; unknown keys raise ``error``; an unset path is None."""
    given = to_dict(cfg)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise error(
            f"unknown {group} config key(s) {', '.join(map(repr, unknown))}; known keys: {', '.join(defaults)}"
        )
    s = {**defaults, **given}
    if s.get("path") in ("", "???"):  # unset (Hydra's mandatory value)
        s["path"] = None
    return s


def data_settings(cfg) -> dict:
    """The data config with defaults filled in, validated (unknown source or key -> DataError)."""
    s = with_defaults(cfg, DATA_DEFAULTS, "data")
    if s["source"] not in SOURCES:
        raise UnknownSourceError(
            f"unknown data source {s['source']!r}; set data.source to one of: {', '.join(SOURCES)}"
        )
    if s["source"] == "synthetic" and not (isinstance(s["num_docs"], int) and s["num_docs"] > 0):
        raise DataError(
            f"data.num_docs must be a positive number for the synthetic corpus, not {s['num_docs']!r}"
        )
    if s["revision"] is not None and (s["source"] != "hub" or s["parts"] is not None):
        raise DataError(
            f"data.revision={s['revision']} names a revision of one hub dataset; "
            + ("give each part its own: data.parts.N.revision" if s["parts"] is not None
               else f"data.source={s['source']} has none: remove it")
        )  # fmt: skip
    check_store_chunks(s["store_chunks"])
    if s["parts"] is not None:
        _check_parts(s)
    elif s["source"] in ("hub", "files") and not s["path"]:
        raise DataPathError(
            f"data.path is required for source {s['source']!r}; set data.path=<"
            + ("hub dataset name>" if s["source"] == "hub" else "file or folder>")
        )
    return s


def check_store_chunks(value) -> None:
    """``data.store_chunks`` is true or false (one-line DataError: 0 or an empty value says nothing)."""
    if not isinstance(value, bool):
        raise DataError(
            f"data.store_chunks={value!r}: use true (keep a streaming corpus's examples on disk, ~2 bytes a token) "
            "or false (a corpus larger than the disk)"
        )


PART_KEYS = ("path", "name", "split", "text_field", "rows_per_doc", "revision")


def _check_parts(s: dict) -> None:
    """``data.parts``: hub datasets, each with a path and only part keys (one-line DataError)."""
    parts = s["parts"]
    if s["source"] != "hub" or not isinstance(parts, list) or not parts:
        raise DataError(
            "data.parts lists hub datasets to concatenate: give data.source=hub and a non-empty list, "
            "e.g. data.parts=[{path: Salesforce/wikitext, name: wikitext-103-raw-v1}]"
        )
    if s["val_split"]:
        raise DataError(
            "data.val_split names one dataset's split; with data.parts hold out data.val_docs "
            "(or data.val_fraction) documents instead"
        )
    for i, part in enumerate(parts):
        unknown = sorted(set(part) - set(PART_KEYS)) if isinstance(part, dict) else ["(not a mapping)"]
        if unknown or not part.get("path"):
            raise DataError(
                f"data.parts[{i}]: give a hub dataset as {{path: NAME, ...}} with keys "
                f"{', '.join(PART_KEYS)}" + (f" (unknown: {', '.join(map(str, unknown))})" if unknown else "")
            )
        n = part.get("rows_per_doc")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise DataError(f"data.parts[{i}].rows_per_doc={n!r}: give a positive number of rows, or null")


def find_data_files(path) -> tuple[str, list[str]]:
    """(builder, sorted file list) for a file or a folder holding one supported format."""
    p = Path(path).expanduser()
    kinds = "/".join(FILE_BUILDERS)
    if not p.exists():
        raise DataPathError(
            f"no such file or folder: {p}; set data.path to a {kinds} file or a folder of them"
        )
    if p.is_file():
        if p.suffix.lower() not in FILE_BUILDERS:
            raise DataPathError(f"unsupported file type {p.suffix or p.name!r}: {p}; use a {kinds} file")
        return FILE_BUILDERS[p.suffix.lower()], [str(p)]
    files = sorted(
        f
        for f in p.rglob("*")
        if f.is_file()
        and f.suffix.lower() in FILE_BUILDERS
        and not any(part.startswith(".") for part in f.relative_to(p).parts)
    )
    if not files:
        raise DataPathError(
            f"no {kinds} files in folder {p}; put the corpus there or point data.path at a file"
        )
    builders = {FILE_BUILDERS[f.suffix.lower()] for f in files}
    if len(builders) > 1:
        raise DataPathError(
            f"folder {p} mixes {' and '.join(sorted(builders))} files; keep one format per folder"
        )
    return builders.pop(), [str(f) for f in files]


def corpus_fingerprint(cfg) -> dict:
    """What identifies a corpus for caching: the settings, plus size and mtime of local files
    (not ``examples``: the same corpus and tokenizer make either kind of example; nor
    ``num_proc`` and ``store_chunks``: how it is read and kept)."""
    s = data_settings(cfg)
    for key in ("examples", "num_proc", "store_chunks"):
        s.pop(key)
    if s["parts"] is not None:
        s["parts"] = [dict(part) for part in s["parts"]]
    for settings in (s, *(s["parts"] or [])):  # a revision left null: the keys made before it existed
        if settings.get("revision", "") is None:
            settings.pop("revision")
    if s["source"] == "files":
        _, files = find_data_files(s["path"])
        s["files"] = [(f, Path(f).stat().st_size, Path(f).stat().st_mtime_ns) for f in files]
    return s


def load_corpus(cfg):
    """The corpus of a data config: a ``datasets.Dataset`` (or ``IterableDataset`` when streaming)
    with exactly one column, ``text``, and no blank document. Raises DataError subclasses; a
    refused local file leaves nothing in the datasets cache."""
    s = data_settings(cfg)
    local = s["source"] == "files" and s["parts"] is None
    with local_read() if local else nullcontext():
        return _corpus(s)


def _corpus(s: dict):
    import datasets

    if s["source"] == "synthetic":
        from .synthetic import synthetic_corpus

        ds = datasets.Dataset.from_dict({"text": synthetic_corpus(int(s["num_docs"]), int(s["seed"]))})
        ds, field = (ds.to_iterable_dataset() if s["streaming"] else ds), "text"
    elif s["parts"] is not None:
        ds, field = _load_parts(s), "text"
    elif s["source"] == "hub":
        ds, field = _load_hub(s), s["text_field"]
    else:
        ds, field = _load_files(s)
    ds = _text_column(ds, field, s["path"] or s["source"])
    ds = ds.filter(_non_blank, batched=True)
    if s["max_docs"] is not None:
        n = int(s["max_docs"])
        ds = ds.take(n) if isinstance(ds, datasets.IterableDataset) else ds.select(range(min(n, len(ds))))
    if _is_empty(ds):
        where = (s["path"] or "data.parts") if s["source"] != "synthetic" else "synthetic corpus"
        raise EmptyCorpusError(
            f"corpus {where} has no non-blank document; check data.path and data.text_field"
        )
    return ds


def _load_hub(s: dict, setting: str = "data.revision"):
    try:
        return load_hub(s["path"], s["name"], s["revision"], setting, split=s["split"], streaming=bool(s["streaming"]))
    except HubDatasetError:
        raise
    except Exception as e:  # offline, unknown name/config/split, missing credentials: all fixable by the user
        cause = " ".join(str(e).split())[:200]
        raise HubDatasetError(
            f"cannot load hub dataset {s['path']!r} (config {s['name']!r}, split {s['split']!r}): "
            f"{type(e).__name__}: {cause}; check the names, go online (unset HF_DATASETS_OFFLINE/HF_HUB_OFFLINE) "
            f"or use data=files with a local copy"
        ) from e


def _load_parts(s: dict):
    """The hub datasets of ``data.parts``, each as a ``text`` column without blank rows (grouped
    into documents of ``rows_per_doc`` rows), concatenated in order."""
    import datasets

    loaded = []
    for i, part in enumerate(s["parts"]):
        p = {**s, "revision": None, **part}
        ds = _text_column(_load_hub(p, f"data.parts.{i}.revision"), p["text_field"], p["path"])
        ds = ds.filter(_non_blank, batched=True)
        n = part.get("rows_per_doc")
        if n is not None:
            ds = ds.map(_joined, batched=True, batch_size=int(n))
        loaded.append(ds)
    return datasets.concatenate_datasets(loaded)


# functions of the module, not lambdas: a streaming corpus is pickled to DDP processes and loader workers


def _non_blank(batch: dict) -> list[bool]:
    return [isinstance(t, str) and bool(t.strip()) for t in batch["text"]]


def _joined(batch: dict) -> dict:
    """A batch of rows as one document (``rows_per_doc``)."""
    return {"text": ["\n".join(batch["text"])]}


def _load_files(s: dict):
    """(dataset, its text field): .txt files always give a `text` column."""
    import datasets

    builder, files = find_data_files(s["path"])
    if all(Path(f).stat().st_size == 0 for f in files):
        raise EmptyCorpusError(f"{s['path']} holds only empty files; put documents there or fix data.path")
    kwargs = {"sample_by": "line" if s["line_by_line"] else "paragraph"} if builder == "text" else {}
    try:
        ds = datasets.load_dataset(
            builder, data_files=files, split="train", streaming=bool(s["streaming"]), **kwargs
        )
    except Exception as e:  # a malformed file: name it
        cause = " ".join(str(e.__cause__ or e).split())[:200]
        raise DataError(
            f"cannot read {builder} data from {s['path']}: {cause}; fix or remove the file"
        ) from e
    return ds, "text" if builder == "text" else s["text_field"]


JSON_CHUNK = 10 << 20  # what datasets' json builder parses at once (its chunksize)


def peek_files(path) -> None:
    """The first chunk of the first JSON-lines file of ``data.path`` parsed as the stage's reader
    will parse it (pyarrow, the same block size): a malformed line there is refused before the
    stage's heavy imports, with :func:`_load_files`' line. One chunk of one file, whatever the
    corpus's size, in every process that checks (each DDP rank, each sweep worker). What the peek
    cannot tell for sure (a JSON document that is not lines, a later chunk or file) is left to the
    stage."""
    builder, files = find_data_files(path)
    if builder != "json":
        return
    import io

    import pyarrow as pa
    import pyarrow.json as paj

    for f in files[:1]:
        with open(f, "rb") as fh:
            batch = fh.read(JSON_CHUNK)
            if len(batch) == JSON_CHUNK:  # a whole last line only
                batch = batch[: batch.rfind(b"\n") + 1]
        if not batch.strip() or batch.lstrip().startswith((b"[", b"\xef\xbb\xbf")):
            continue
        block = max(JSON_CHUNK // 32, 16 << 10)
        block = len(batch) if len(batch) // 8 > block else block
        try:
            paj.read_json(io.BytesIO(batch), read_options=paj.ReadOptions(block_size=block))
        except pa.ArrowInvalid as e:
            if "straddling" in str(e) or "JSON parse error" not in str(e):
                continue
            cause = " ".join(str(e).split())[:200]
            raise DataError(f"cannot read json data from {path}: {cause}; fix or remove the file") from e


def _text_column(ds, field: str, where: str):
    """Keep only the text field, renamed to ``text``."""
    columns = ds.column_names
    if columns is None:  # a streaming dataset without known features: look at one row
        columns = list(next(iter(ds), {}).keys())
    if field not in columns:
        raise MissingFieldError(
            f"no field {field!r} in {where} (fields: {', '.join(columns) or 'none'}); "
            f"set data.text_field to the field holding the text"
        )
    feature = (ds.features or {}).get(field)
    if feature is not None and getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise MissingFieldError(f"field {field!r} in {where} holds {feature}, not text; set data.text_field")
    ds = ds.select_columns([field])
    return ds.rename_column(field, "text") if field != "text" else ds


def _is_empty(ds) -> bool:
    import datasets

    if isinstance(ds, datasets.IterableDataset):
        return next(iter(ds.take(1)), None) is None
    return len(ds) == 0
