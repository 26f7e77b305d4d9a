"""Test environment: offline, no W&B account, deterministic."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# pytest -n 2 runs two workers on two cores: one thread each (and in the convexp subprocesses the
# tests start), or torch's thread pools oversubscribe the CPU and everything runs several times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# convexp's own cache (digests of local input files) in a folder of this test session, not ~/.cache
os.environ.setdefault("CONVEXP_CACHE", __import__("tempfile").mkdtemp(prefix="convexp-cache-"))


import pytest  # noqa: E402


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """A run store of the test's own (CONVEXP_OUTPUTS), W&B off: what a plan built in-process sees."""
    monkeypatch.setenv("CONVEXP_OUTPUTS", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return tmp_path


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny pre-trained model (4 steps): the init of the fine-tuning and probing tests."""
    from helpers import TINY, convexp

    out = tmp_path_factory.mktemp("pre")
    res = convexp("pretrain", *TINY, "trainer.max_steps=4", "trainer.val_every_n_steps=4", outputs=out)
    assert res.returncode == 0, res.stderr[-3000:]
    [run] = (out / "runs" / "pretrain").glob("*")
    return run


@pytest.fixture(scope="module")
def single_thread():
    """Tiny tensors: intra-op threads only add synchronisation cost (badly so on a busy machine).
    Use with ``pytestmark = pytest.mark.usefixtures("single_thread")``."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
