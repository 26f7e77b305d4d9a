"""``convexp bench plot``: a figure per benchmark record (the JSON files the bench commands write),
each titled with what was measured and footed with the machine (GPU or CPU model) and the date.

A record is recognised by its ``benchmark`` key (``pretrain``, ``data``, ``finetune``, ``squad``,
``sweep``) or, for the CUDA step table (``convexp bench --device cuda --out FILE``), by its
``matmul_tflops``. The docs' performance page is drawn from the records in ``docs/bench/`` by the
same function, so what a user runs on their own records is what the site shows.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError


def kind(record: dict) -> str:
    """The benchmark a record comes from."""
    if "matmul_tflops" in record:
        return "step-cuda"
    name = record.get("benchmark")
    if name not in ("pretrain", "data", "finetune", "squad", "sweep"):
        raise UserError(f"not a convexp bench record (no known 'benchmark' key): {name!r}")
    return name


def machine(record: dict) -> str:
    """The device the record was measured on: the GPU's name, else the CPU's model and its cores."""
    m = record.get("machine") or {}
    device = record.get("device_name") or record.get("device")
    if device and device not in ("cpu", "cuda"):
        return device  # a GPU's name
    cpu = record.get("cpu") or m.get("cpu") or "CPU (model not recorded)"
    cores = record.get("cores") or m.get("cpus") or record.get("cpus")
    return f"{cpu}, {cores} cores" if cores else cpu


def date(record: dict, path: Path) -> str:
    """The record's UTC date (its ``time``), else the file's modification date, said so."""
    when = record.get("time") or (record.get("machine") or {}).get("time")
    if when:
        return str(when)[:10]
    import datetime as dt

    modified = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    return modified.strftime("%Y-%m-%d") + " (file date)"


def bars(record: dict) -> tuple[str, str, list[tuple[str, float]]]:
    """(title, the value axis's label, [(label, value)]) of a record."""
    k = kind(record)
    if k == "pretrain":
        title = (f"pretrain stage vs bare step: {record['model']} {record['objective']}, "
                 f"{record['batch_size']} x {record['seq_len']}, {record['precision']}")  # fmt: skip
        rows = [("bare step", record.get("bare_tokens_per_s")), ("stage", record.get("stage_tokens_per_s"))]
        return title, "tokens / s", [(n, v) for n, v in rows if v is not None]
    if k == "data":
        c = record["corpus"]
        title = f"data preparation: {c['tokens']:,} tokens, seq_len {record['seq_len']}, {record['examples']}"
        return title, "M tokens / s (wall)", [(n, v / 1e6) for n, v in record["tokens_per_s"].items()]
    if k in ("finetune", "squad"):
        rate = "examples_per_s" if k == "finetune" else "windows_per_s"
        job = record["job"]
        what = "SST-2" if k == "finetune" else "SQuAD v1.1"
        title = (f"whole {what} fine-tune: {job.get('model')}, {job.get('precision')}, "
                 f"median of {record['repeats']}")  # fmt: skip
        rows = []
        for setting, block in record["summary"].items():
            for tool, v in block.items():
                if tool not in ("loop", "ratio") and isinstance(v, dict) and v.get(rate) is not None:
                    rows.append((f"{tool} ({setting})", v[rate]))
        return title, rate.replace("_per_s", " / s (wall)"), rows
    if k == "sweep":
        title = f"a sweep's {record['jobs']} fine-tunes, {record['per_device']} at once when packed"
        rows = [(w, v["jobs_per_device_hour"]) for w, v in record["summary"].items() if w != "ratio"]
        return title, f"fine-tunes per {record.get('device_unit', 'device')}-hour", rows
    title = f"MLM training step, bf16 autocast (matrix rate {record['matmul_tflops']:.0f} TFLOP/s measured)"
    rows = [(f"{r['model']} {r['shape']}, {r['contender']}", r["ms/step"]) for r in record["rows"]]
    return title, "ms / step (lower is faster)", rows


def plot_record(path: Path, out_dir: Path) -> Path:
    """One PNG of the record at ``path`` in ``out_dir`` (named after the record's file)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable JSON record ({e.__class__.__name__})") from None
    if not isinstance(record, dict):
        raise UserError(f"{path}: not a convexp bench record (a JSON object is expected)")
    title, axis, rows = bars(record)
    if not rows:
        raise UserError(f"{path}: the record holds no measured rows to plot")
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.4 * len(rows)))
    labels, values = zip(*rows)
    ax.barh(range(len(rows)), values, color="#4c72b0")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:,.3g}", va="center", fontsize=8)
    ax.set_xlabel(axis)
    ax.margins(x=0.15)
    ax.set_title(title, fontsize=9)
    load = record.get("load_average") or (record.get("machine") or {}).get("load_average")
    busy = f" · load average {load[0]:.1f}" if load else ""
    footer = f"{machine(record)} · {date(record, path)}{busy} · {path.name}"
    fig.text(0.01, 0.01, footer, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{path.stem}.png"
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target


def plot_records(paths: list[Path], out_dir: Path) -> list[Path]:
    """A PNG per record; a folder stands for the ``*.json`` files in it."""
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    if not files:
        raise UserError("no records to plot: give JSON records or folders of them (e.g. outputs/bench)")
    for f in files:
        if not f.is_file():
            raise UserError(f"{f}: no such record")
    return [plot_record(f, out_dir) for f in files]
