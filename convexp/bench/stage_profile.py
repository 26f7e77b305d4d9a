"""Where a pre-training stage step's time goes (``bench pretrain --profile``): a Lightning callback
that times the stage's own steps from inside its loop.

Two windows in the middle of the run, after the compile and warm-up steps:

* **phases** (``PHASE_STEPS`` steps, nothing else running): the host's wall time between Lightning's
  hooks, as the loop calls them in automatic optimisation —

  ===================  =====================================================================
  phase                from -> to (what runs in between)
  ===================  =====================================================================
  loop + data          on_train_batch_end -> on_train_batch_start of the next step: the other
                       callbacks' batch-end work (progress bar, checkpoint, LR monitor,
                       logging), the LR scheduler, the next batch fetched and copied over
  forward              on_train_batch_start -> on_before_zero_grad: the training step (the
                       objective's forward, ``self.log``; Lightning's closure runs it first)
  zero_grad            on_before_zero_grad -> on_before_backward: the gradients cleared
  backward             on_before_backward -> on_after_backward
  before optimizer     on_after_backward -> on_before_optimizer_step
  clip+optimizer       on_before_optimizer_step -> on_train_batch_end: the clipping norm,
                       AdamW, the step's end
  ===================  =====================================================================

  The host never waits for the device except where something synchronises, so a phase that takes
  long is either host work or a wait; the device's time per step comes from the second window.
* **profile** (``PROFILE_STEPS`` steps under ``torch.profiler``): the device's kernel time and
  kernel count per step, and the host operators that take the most time.

The record is a dict (:attr:`StageProfile.result`); :func:`print_profile` prints it.
"""

from __future__ import annotations

import statistics
import time

import pytorch_lightning as pl
import torch

PHASE_STEPS = 30
PROFILE_STEPS = 5
PHASES = ("loop + data", "forward", "zero_grad", "backward", "before optimizer", "clip+optimizer")
HOOKS = ("on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
         "on_before_optimizer_step", "on_train_batch_end")  # fmt: skip


class StageProfile(pl.Callback):
    """Times steps ``[start, start + PHASE_STEPS)`` by phase, then profiles the next
    ``PROFILE_STEPS`` (see the module docstring). ``start`` should fall after the compile."""

    def __init__(self, start: int):
        self.start = start
        self.stamps: list[dict[str, float]] = []
        self.prof = None
        self.result: dict = {}

    def _window(self, trainer) -> str | None:
        step = trainer.global_step
        if self.start <= step < self.start + PHASE_STEPS:
            return "phases"
        if self.start + PHASE_STEPS <= step < self.start + PHASE_STEPS + PROFILE_STEPS:
            return "profile"
        return None

    def _stamp(self, trainer, hook: str) -> None:
        if self._window(trainer) != "phases":
            return
        if hook == HOOKS[0]:
            self.stamps.append({})
        if self.stamps:
            self.stamps[-1][hook] = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._window(trainer) == "profile" and self.prof is None:
            from torch.profiler import ProfilerActivity, profile

            cuda = pl_module.device.type == "cuda"
            self.prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
            self.prof.__enter__()
            self._t_prof = time.perf_counter()
        self._stamp(trainer, "on_train_batch_start")

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        self._stamp(trainer, "on_before_zero_grad")

    def on_before_backward(self, trainer, pl_module, loss):
        self._stamp(trainer, "on_before_backward")

    def on_after_backward(self, trainer, pl_module):
        self._stamp(trainer, "on_after_backward")

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._stamp(trainer, "on_before_optimizer_step")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # global_step has advanced by now: the step that ended is global_step - 1
        step = trainer.global_step - 1
        if self.start <= step < self.start + PHASE_STEPS and self.stamps:
            self.stamps[-1].setdefault("on_train_batch_end", time.perf_counter())
        if self.prof is not None and step == self.start + PHASE_STEPS + PROFILE_STEPS - 1:
            cuda = pl_module.device.type == "cuda"
            if cuda:
                torch.cuda.synchronize()
            wall = (time.perf_counter() - self._t_prof) / PROFILE_STEPS
            self.prof.__exit__(None, None, None)
            self.result = self._summary(self.prof, wall, cuda)
            self.prof = None

    def _summary(self, prof, profiled_wall: float, cuda: bool) -> dict:
        # phase i: HOOKS[i-1] -> HOOKS[i]; "loop + data": the last hook of one step -> the first of the
        # next. A hook the loop does not call (manual optimisation: the captured step has no backward
        # hook) merges its phase into the next one: "forward + zero_grad + backward", say.
        rows = [s for s in self.stamps if HOOKS[0] in s and HOOKS[-1] in s]
        present = [i for i, h in enumerate(HOOKS) if rows and all(h in s for s in rows)]
        phases = {}
        loop = [b[HOOKS[0]] - a[HOOKS[-1]] for a, b in zip(rows, rows[1:])]
        phases[PHASES[0]] = 1e3 * statistics.median(loop) if loop else None
        for prev, i in zip(present, present[1:]):
            spans = [s[HOOKS[i]] - s[HOOKS[prev]] for s in rows]
            phases[" + ".join(PHASES[prev + 1 : i + 1])] = 1e3 * statistics.median(spans)
        starts = [s[HOOKS[0]] for s in rows]
        step_ms = 1e3 * statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else None
        events = prof.key_averages()
        host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
        out = {
            "steps": len(rows),
            "step_ms": step_ms,
            "phases_ms": phases,
            "profiled_step_ms": 1e3 * profiled_wall,
            "top_host_ops": [
                {"name": e.key, "ms_per_step": e.self_cpu_time_total / 1e3 / PROFILE_STEPS,
                 "calls_per_step": e.count / PROFILE_STEPS}
                for e in host
            ],  # fmt: skip
        }
        if cuda:
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            out["kernels_per_step"] = len(kernels) / PROFILE_STEPS
            out["device_busy_ms"] = sum(e.device_time for e in kernels) / 1e3 / PROFILE_STEPS
        return out


def print_profile(result: dict, console) -> None:
    """The stage profile as two small tables: phases, and the host's top operators."""
    from rich.table import Table

    if not result:
        console.print("stage profile: the run ended before its profiling window")
        return
    t = Table(title=f"stage step by phase (median of {result['steps']} steps, host wall time)")
    t.add_column("phase")
    t.add_column("ms", justify="right")
    for name, ms in result["phases_ms"].items():
        t.add_row(name, "-" if ms is None else f"{ms:.2f}")
    t.add_row("step", "-" if result["step_ms"] is None else f"{result['step_ms']:.2f}")
    console.print(t)
    if "device_busy_ms" in result:
        console.print(
            f"under the profiler: {result['profiled_step_ms']:.2f} ms a step, the device busy "
            f"{result['device_busy_ms']:.2f} ms in {result['kernels_per_step']:.0f} kernels"
        )
    h = Table(title="host operators by self time, per step (torch.profiler)")
    h.add_column("operator")
    h.add_column("ms", justify="right")
    h.add_column("calls", justify="right")
    for op in result["top_host_ops"]:
        h.add_row(op["name"][:60], f"{op['ms_per_step']:.2f}", f"{op['calls_per_step']:.0f}")
    console.print(h)
