"""What one node may change in the process that runs it, put back before the next node.

A sweep's nodes run one after another in one process: ``launcher.workers=1`` runs them all in the
command's own, and on a machine without GPUs each of ``launcher.workers=N``'s worker processes runs
node after node (launchers.pool_executor; with GPUs every node gets a fresh process). A node must
start as it would in a process of its own, whatever ran before it, so :func:`node_state` keeps
around each node:

  environment     the variables a node sets (Lightning's PL_GLOBAL_SEED and CUBLAS_WORKSPACE_CONFIG,
                  W&B's, a library's) are gone again, changed ones restored
  torch           deterministic algorithms (a pre-training run's ``trainer.deterministic`` sets
                  them; a fine-tune leaves them as it finds them), the default dtype, grad mode,
                  intra-op threads, the CPU generator's state
  logging         the root logger's handlers and level and the levels of the loggers that existed
                  (``-v`` installs a handler per node: without this its lines came once per node
                  run so far), the warning filters
  W&B             a run left open (a node that failed before its stage closed it) is finished
  hub reads       the run record's ``hub_read`` lists what this node read (data/hub.py), not what
                  the nodes before it read
"""

from __future__ import annotations

import logging
import os
import warnings
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def node_state() -> Iterator[None]:
    """Around one node: the process state above as it was before it (module docstring)."""
    import torch

    from ..data.hub import forget_reads
    from ..train.common import finish_wandb

    env = dict(os.environ)
    flags = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    dtype, grad, threads = torch.get_default_dtype(), torch.is_grad_enabled(), torch.get_num_threads()
    rng = torch.random.get_rng_state()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: lg.level for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    forget_reads()
    try:
        with warnings.catch_warnings():  # the filters, as they were
            yield
    finally:
        finish_wandb()
        forget_reads()
        for added in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(added)
            added.close()
        root.setLevel(level)
        for name, value in levels.items():
            logging.getLogger(name).setLevel(value)
        torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)
        torch.random.set_rng_state(rng)
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        os.environ.update(env)
