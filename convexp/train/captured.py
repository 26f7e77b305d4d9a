"""Pre-training's whole training step as one CUDA graph (``trainer.compile=whole`` on one GPU).

``trainer.compile=step`` compiles the objective's forward (and so its backward) into Triton
kernels; left at that, every step still pays the host for each of them: dynamo's guards and the
CUDA-graph trees' input checks over every parameter, one ``AccumulateGrad`` per parameter in the
backward (570 for ConvBERT-small's generator and discriminator), the clipping norm. On an H100
those cost ~36 ms of host time a step against ~13 ms of device work (``bench pretrain --profile``).
:class:`WholeStep` captures everything from the batch to the clipped gradients — gradients
zeroed, forward, backward, the gradients' total norm, clipping — as one CUDA graph per batch kind
(padded or not), following PyTorch's whole-network capture:

1. the first ``warmup`` steps of each kind run eagerly on a side stream (the compile happens
   there, and cuBLAS/autograd set up their workspaces outside the capture) — real steps;
2. the next one is captured, with the batch copied into static input tensors, then replayed;
3. every later step copies its batch in and replays the graph: one launch.

The gradients live in buffers allocated before the first capture (the graph zeroes and fills them
on every replay, the optimizer reads them); AdamW then steps eagerly (the fused kernel: a few
launches), through Lightning, so the checkpoint, the learning-rate schedule and the divergence check
are Lightning's as for every other mode. Randomness (dropout, the generator's Gumbel samples)
follows ``torch.manual_seed`` set before each replay: CUDA's generator is graph-safe, so a replay
draws from the batch's own seed, as an eager step does (the numbers differ from eager's, as every
compiled mode's do).

Used only where the capture is valid: CUDA, one process (no DDP all-reduce inside the graph), no
gradient accumulation, no fp16 gradient scaler (``whole_step_applies``). Elsewhere ``whole`` is
``graphs``: the CUDA-graph trees of ``torch.compile(mode="reduce-overhead")``.

Status: opt-in. Its CPU path (the same loop, eager) matches Lightning's own loop to the bit
(tests/test_speed.py); its capture has not yet completed a measured run on a GPU (the one try,
on an H100, was stopped by its 150 s limit before the end of a 300-step stage, with no output to
say whether it was slow or stuck), so ``graphs`` keeps the CUDA-graph trees until it has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from .grad_norm import clip_with_norm, total_norm

WARMUP_STEPS = 3  # eager steps of each batch kind before its capture (PyTorch's examples use 3)


def whole_step_applies(trainer_cfg, cuda: bool) -> bool:
    """Whether ``trainer.compile=whole`` captures the whole step here (see the module docstring)."""
    from .accel import compile_mode

    devices = trainer_cfg.devices
    one_device = devices in (1, "1") or (isinstance(devices, (list, tuple)) and len(devices) == 1)
    return (
        compile_mode(trainer_cfg.compile) == "whole"
        and cuda
        and one_device
        and int(trainer_cfg.num_nodes) == 1
        and int(trainer_cfg.accumulate_grad_batches) == 1
        and not str(trainer_cfg.precision).startswith("16")
    )


class WholeStep:
    """``step(batch) -> (objective output, gradient norm)``: gradients zeroed, forward, backward,
    norm and clipping (``grad_clip``: max norm, or None), eagerly (``capture=False``: a CPU, or
    the first steps) or replayed from a CUDA graph. ``objective``: the compiled objective
    (``batch dict -> ObjectiveOutput``); ``params``: the parameters the optimizer steps."""

    def __init__(
        self,
        objective: Callable,
        params: list[torch.nn.Parameter],
        grad_clip: float | None,
        capture: bool,
        warmup: int = WARMUP_STEPS,
    ):
        self.objective, self.params, self.grad_clip = objective, params, grad_clip
        self.capture, self.warmup = capture, warmup
        self.graphs: dict[bool, tuple] = {}  # padded -> (graph, static inputs, static outputs)
        self.eager_steps: Counter = Counter()  # padded -> steps run eagerly so far
        self._side: torch.cuda.Stream | None = None

    def _grads(self) -> list[torch.Tensor]:
        for p in self.params:  # buffers that outlive every capture: the graphs write into them
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return [p.grad for p in self.params]

    def _run(self, inputs: dict, padded: bool):
        grads = self._grads()
        torch._foreach_zero_(grads)
        out = self.objective({**inputs, "padded": padded})
        out.loss.backward()
        norm = total_norm(grads)
        if self.grad_clip:
            clip_with_norm(self.params, self.grad_clip, norm)
        return out, norm

    def __call__(self, batch: dict):
        inputs = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        padded = bool(batch["padded"])
        if not self.capture:
            return self._run(inputs, padded)
        if padded not in self.graphs and self.eager_steps[padded] < self.warmup:
            self.eager_steps[padded] += 1
            return self._on_side_stream(inputs, padded)
        if padded not in self.graphs:
            self.graphs[padded] = self._capture(inputs, padded)
        graph, static_in, (out, norm) = self.graphs[padded]
        for k, v in static_in.items():
            v.copy_(inputs[k], non_blocking=True)
        graph.replay()
        # the outputs live in the graph's memory, which the next replay overwrites
        return type(out)(out.loss.clone(), {k: v.clone() for k, v in out.metrics.items()}), norm.clone()

    def _on_side_stream(self, inputs: dict, padded: bool):
        self._side = self._side or torch.cuda.Stream()
        current = torch.cuda.current_stream()
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            result = self._run(inputs, padded)
        current.wait_stream(self._side)
        return result

    def _capture(self, inputs: dict, padded: bool) -> tuple:
        static_in = {k: v.clone() for k, v in inputs.items()}
        self._grads()  # allocated outside the graph's private memory
        graph = torch.cuda.CUDAGraph()
        # autocast (bf16-mixed) without its cache of cast weights: a cast cached before the capture
        # would be left out of the graph (PyTorch's CUDA-graphs notes); thread_local: the loader's
        # prefetch thread may pin host memory while this thread captures
        autocast = torch.autocast(
            "cuda", torch.get_autocast_dtype("cuda"), enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False
        )
        with autocast, torch.cuda.graph(graph, capture_error_mode="thread_local"):
            static_out = self._run(static_in, padded)
        return graph, static_in, static_out
