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
