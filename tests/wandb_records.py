"""Read an offline W&B run file (`run-*.wandb`) in tests: it is a LevelDB-style log of protobuf
`Record`s (32 KiB blocks; each chunk: crc32 (4), length (2, little endian), type (1: full,
2: first, 3: middle, 4: last)), after a 7-byte ":W&B" header."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK, HEADER, CHUNK = 32768, 7, 7


def records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, parts = HEADER, []
    while pos + CHUNK <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK])
        if kind == 0 and length == 0:
            pos += left
            continue
        parts.append(data[pos + CHUNK : pos + CHUNK + length])
        pos += CHUNK + length
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(b"".join(parts))
            parts = []
            yield rec


def config_and_history(path: Path) -> tuple[dict, list[dict]]:
    """The run's config (key -> decoded value) and its logged history rows."""
    config, history = {}, []
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        items = rec.run.config.update if kind == "run" else rec.config.update if kind == "config" else []
        for item in items:
            config[item.key] = json.loads(item.value_json)
        if kind == "history":
            history.append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            )
    return config, history


def run_info(path: Path) -> dict:
    """The run's group, job type, tags, id, name, project, entity and final summary (key -> decoded value)."""
    info = {"group": None, "job_type": None, "tags": [], "summary": {}}
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            info.update(group=rec.run.run_group, job_type=rec.run.job_type, tags=list(rec.run.tags))
            info.update(id=rec.run.run_id, name=rec.run.display_name, project=rec.run.project, entity=rec.run.entity)
        elif kind == "summary":
            for item in rec.summary.update:
                info["summary"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return info


def artifacts(path: Path) -> dict[str, tuple[str, list[str]]]:
    """The run's logged artifacts: name -> (type, the file paths in its manifest)."""
    found = {}
    for rec in records(path):
        if rec.WhichOneof("record_type") == "artifact":
            paths = sorted(e.path for e in rec.artifact.manifest.contents)
            found[rec.artifact.name] = (rec.artifact.type, paths)
    return found


def api_serving(outputs: Path):
    """A stand-in for ``wandb.Api`` that serves the run store under ``outputs`` as finished W&B runs
    whose summary's ``result`` is the run's metrics.json (what each run logs)."""

    class Remote:
        state = "finished"

        def __init__(self, run_id):
            [d] = Path(outputs).glob(f"runs/*/{run_id}")
            self.summary = {"result": json.loads((d / "metrics.json").read_text())}

    class Api:
        def run(self, path):
            return Remote(path.rsplit("/", 1)[1])

    return Api
