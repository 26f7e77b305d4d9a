"""A sweep's worker runs node after node in one process (CPU sweeps; launcher.workers=1 runs them all
in the command's own): each node starts as it would in a process of its own (sweep/node_state.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
import torch

from helpers import convexp


def test_a_node_leaves_the_process_as_it_found_it(monkeypatch):
    """What a node changes in its process — environment variables (Lightning's seed and cuBLAS
    settings), deterministic algorithms (a pre-training run's trainer.deterministic), threads, the
    default dtype, the generator, a log handler, the hub reads its record lists, an open W&B run —
    is put back, so the next node in a sweep worker starts as in a fresh process."""
    from convexp.data import hub
    from convexp.sweep import execute

    finished = []
    monkeypatch.setattr("convexp.train.common.finish_wandb", lambda: finished.append(1))
    monkeypatch.setattr(hub, "_READS", [{"path": "glue", "read": None}])  # an earlier node's read
    seen_reads = []

    def node(stage, overrides):
        seen_reads.append(hub.hub_reads())
        os.environ["PL_GLOBAL_SEED"] = "7"
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        os.environ["OMP_NUM_THREADS"] = "5"
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(max(1, torch.get_num_threads() + 1))
        torch.set_default_dtype(torch.float64)
        torch.rand(3)
        logging.getLogger().addHandler(logging.NullHandler())
        logging.getLogger("convexp").setLevel(logging.DEBUG)
        hub._READS.append({"path": "squad", "read": None})
        raise RuntimeError("the node failed")  # a failed node is put back too

    env = dict(os.environ)
    threads, handlers = torch.get_num_threads(), list(logging.getLogger().handlers)
    level = logging.getLogger("convexp").level
    rng = torch.random.get_rng_state()
    monkeypatch.setattr(execute, "_run_stage", node)
    with pytest.raises(RuntimeError, match="the node failed"):
        execute.run_node("finetune", [])
    assert seen_reads == [[]]  # the node's record lists its own reads only
    assert dict(os.environ) == env and hub.hub_reads() == [] and finished == [1]
    assert not torch.are_deterministic_algorithms_enabled() and torch.get_default_dtype() == torch.float32
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), rng)
    assert logging.getLogger().handlers == handlers and logging.getLogger("convexp").level == level


def test_the_command_lines_log_handler_is_installed_once_per_process(restore_logging_state):
    """`convexp -v ablate ... launcher.workers=2`: every node in a worker applies the command line's
    -v (set_verbosity); the rich handler is replaced, not added again (each line once in its log)."""
    from rich.logging import RichHandler

    from convexp.logs import set_verbosity

    for _ in range(3):
        set_verbosity(verbose=1)
    assert sum(isinstance(h, RichHandler) for h in logging.getLogger().handlers) == 1


@pytest.fixture
def restore_logging_state():
    root = logging.getLogger()
    saved = root.level, list(root.handlers), logging.getLogger("convexp").level
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    logging.getLogger("convexp").setLevel(saved[2])


def _results(outputs: Path) -> dict:
    """Per fine-tuning run of ``outputs``: its dev scores, predictions and weights (a digest)."""
    out = {}
    for metrics in sorted(outputs.glob("runs/finetune/*/metrics.json")):
        run = metrics.parent
        m = json.loads(metrics.read_text())
        weights = hashlib.sha256((run / "model" / "model.safetensors").read_bytes()).hexdigest()
        files = [f for p in sorted(run.glob("predictions*")) for f in ([p] if p.is_file() else sorted(p.rglob("*")))]
        predictions = {str(f.relative_to(run)): f.read_bytes() for f in files if f.is_file()}
        assert predictions, f"{run}: no predictions"
        out[run.name] = {"dev": m["dev"], "weights": weights, "predictions": predictions}
    return out


@pytest.mark.slow
def test_two_fine_tunes_in_one_worker_give_what_each_gives_in_a_process_of_its_own(tmp_path, pretrained):
    """A GLUE fine-tune (two threads, length-grouped batches) and then a SQuAD one run by one sweep
    worker process, as a CPU sweep's worker runs them (launchers.pool_job, -v), give the dev scores,
    predictions and weights (bitwise) that each gives as a command of its own."""
    from convexp.sweep.launchers import pool_job, pool_executor

    nodes = {
        "glue": ["task=mrpc", "scale=smoke", "glue.synthetic_size=160", "epochs=1", "batch_size=16",
                 "task.max_len=48", "seeds=[3]", "group_by_length=true", "trainer.threads=2"],
        "squad": ["task=squad1", "scale=smoke", "squad.synthetic_size=200", "epochs=1", "squad.max_len=96",
                  "seeds=[5]"],
    }  # fmt: skip
    worker = tmp_path / "worker"
    with pool_executor(1, gpus=False) as pool:
        pids, errors = [], []
        for name, overrides in nodes.items():
            args = ("finetune", [*overrides, f"init={pretrained}", f"outputs={worker}"], str(tmp_path / f"{name}.log"),
                    1, {"verbose": 1, "quiet": False})  # fmt: skip
            errors.append(pool.submit(pool_job, *args).result())
            pids.append(pool.submit(os.getpid).result())
    assert errors == [None, None], [(tmp_path / f"{n}.log").read_text()[-2000:] for n in nodes]
    assert pids[0] == pids[1]  # one process ran both
    fresh = tmp_path / "fresh"
    for name, overrides in nodes.items():
        kind = "squad" if name == "squad" else "glue"
        res = convexp("-v", "finetune", kind, *overrides, f"init={pretrained}", outputs=fresh,
                      env={"OMP_NUM_THREADS": "1"})  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
    in_worker, alone = _results(worker), _results(fresh)
    assert len(alone) == 2 and in_worker.keys() == alone.keys()
    for run, got in in_worker.items():
        assert got == alone[run], run
