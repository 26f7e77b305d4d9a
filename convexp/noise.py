"""Third-party output that asks nothing of the user, silenced by the command line (``-v`` keeps it).

Every entry says what it silences and why. Anything that asks the user to act stays visible;
convexp says itself what matters of what it silences (the device a run uses, where W&B writes).
Library users who import convexp keep their own logging and warnings: only the CLI calls
:func:`quiet`.
"""

from __future__ import annotations

import logging
import os
import warnings

# Loggers whose INFO lines are dropped (warnings and errors still shown).
LOGGERS = {
    # "GPU available: False, used: False", "TPU available: ...", the litlogger advertisement
    # ("💡 Tip: ... try installing litlogger"), "`Trainer.fit` stopped: `max_steps=N` reached.",
    # "You are using a CUDA device that has Tensor Cores ... set_float32_matmul_precision"
    # (convexp sets it itself: trainer.tf32), DDP's "All distributed processes registered".
    "pytorch_lightning.utilities.rank_zero": "Lightning's start and stop announcements",
    "lightning_fabric.utilities.rank_zero": "Lightning Fabric's (device, DDP start-up) announcements",
    "lightning_fabric.utilities.distributed": "'Initializing distributed: GLOBAL_RANK ...', once per process",
    "lightning.pytorch.utilities.rank_zero": "the same, under the `lightning` package name",
    "lightning.fabric.utilities.rank_zero": "the same, under the `lightning` package name",
    # "[rank: 0] Received SIGTERM: 15": convexp says the run was interrupted and how it resumes
    "pytorch_lightning.trainer.connectors.signal_connector": "Lightning's note of a SIGTERM",
}

# Warnings ignored: (regular expression the message starts with, why).
WARNINGS = (
    (
        "GPU available but not used",
        "scale=smoke runs on the CPU on purpose; convexp says so in one line with how to use the GPU",
    ),
    (
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        "Lightning's own use of a torch API that torch 2.13 deprecates: nothing to change in a run",
    ),
    (
        r"Checkpoint directory .* exists and is not empty",
        "the run's own checkpoints folder when it resumes (resume=true, a requeued or restarted job): "
        "convexp resumes from it on purpose and says so; on each requeued attempt of a SLURM job it "
        "was a line of the job's log that asked nothing",
    ),
    (
        r"The '(train|val)_dataloader' does not have many workers",
        "convexp sizes its loaders itself (pre-training batches come from a background thread; "
        "trainer.num_workers sets the workers where they help)",
    ),
)


# Ignored outside a SLURM job only (no SLURM_JOB_ID): on a login node, where `srun` exists but no job
# runs, Lightning warns at every Trainer that `srun` is not used (~300 characters with a path to
# its source), asking nothing of a run started there. Inside a job the hint may matter (a multi-GPU
# job step started without srun) and stays.
OUTSIDE_A_JOB = (
    (
        r"The `srun` command is available on your system but is not used",
        "a login node: no job, nothing to do",
    ),
)


# W&B's own lines of an offline run (its version, "syncing is set to offline", where its files
# are, the run's history as sparklines and its summary, the sync command, and a warning about a
# setting Lightning passes): convexp's one "W&B: offline (...)" line says where and how to sync.
_STATE = {"quiet": False}


def is_quiet() -> bool:
    """Whether the CLI silenced the third parties (no ``-v``): W&B runs offline silently then."""
    return _STATE["quiet"]


def quiet(verbose: bool = False) -> None:
    """Silence what :data:`LOGGERS` and :data:`WARNINGS` name, unless ``verbose``."""
    _STATE["quiet"] = not verbose
    if verbose:
        return
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    outside = () if "SLURM_JOB_ID" in os.environ else OUTSIDE_A_JOB
    for message, _why in (*WARNINGS, *outside):
        warnings.filterwarnings("ignore", message=message)
