"""The run store: one directory per run, named by a hash of the configuration that matters.

    outputs/runs/<stage>/<slug>-<hash>/
        config.yaml      the composed configuration
        status.json      new | running | finished | failed, with times and the error line
        metrics.json     final metrics (written last, atomically: if it exists, the run finished)
        checkpoints/     last.ckpt and periodic checkpoints (resume)
        csv/             Lightning CSV logs;  wandb/  W&B files (offline runs: `wandb sync`)
        model/           the exported model (weights, model config, tokenizer)

A repeated command finds the same directory: a finished run is reused, an unfinished one resumes.
Every file is written to a temporary name and renamed, so a crash never leaves a half-written
result that a report would read as real.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .atomic import atomic_write, config_hash

# Keys that change how a run is executed or logged, not what it computes.
EXECUTION_KEYS = (
    "logger",
    "resume",
    "outputs",
    "trainer.accelerator",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.num_workers",
    "trainer.log_every_n_steps",
    "choices",
    "invocation",
)


def run_hash(cfg: DictConfig | dict, ignore: tuple[str, ...] = EXECUTION_KEYS) -> str:
    """Hash of the configuration without the execution-only keys (10 hex digits)."""
    d = (
        OmegaConf.to_container(cfg, resolve=True)
        if isinstance(cfg, DictConfig)
        else json.loads(json.dumps(cfg))
    )
    for key in ignore:
        *parents, leaf = key.split(".")
        node = d
        for p in parents:
            node = node.get(p, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return config_hash(d, length=10)


@dataclass
class Run:
    dir: Path

    @classmethod
    def for_config(cls, outputs: str | Path, stage: str, slug: str, cfg: DictConfig) -> "Run":
        return cls(Path(outputs) / "runs" / stage / f"{slug}-{run_hash(cfg)}")

    @property
    def id(self) -> str:
        return self.dir.name

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints"

    @property
    def model_dir(self) -> Path:
        return self.dir / "model"

    # --- status ----------------------------------------------------------------------------
    @property
    def status(self) -> str:
        s = self.read_json("status.json")
        return s["status"] if s else "new"

    @property
    def finished(self) -> bool:
        return self.status == "finished" and (self.dir / "metrics.json").exists()

    def set_status(self, status: str, **info: Any) -> None:
        prev = self.read_json("status.json") or {}
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        record = {
            **prev,
            "status": status,
            "updated": now,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **info,
        }
        record.setdefault("created", now)
        self.write_json("status.json", record)

    def last_checkpoint(self) -> Path | None:
        last = self.checkpoints / "last.ckpt"
        return last if last.exists() else None

    # --- files -----------------------------------------------------------------------------
    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.dir / name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, name: str) -> Any:
        p = self.dir / name
        return json.loads(p.read_text()) if p.exists() else None

    def write_config(self, cfg: DictConfig) -> None:
        atomic_write(self.dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))

    def read_config(self) -> DictConfig:
        return OmegaConf.load(self.dir / "config.yaml")
