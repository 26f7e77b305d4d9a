"""The training rates behind every GPU-hour figure: one table of what was measured on a card.

A job's hours are its training FLOPs (sweep/compute.py) over a rate in FLOP/s. The rate comes from
``MEASURED``: steps a second of a whole pre-training stage or fine-tune, as `.ci/gpu` measured them
(PARTS=rates: ``.ci/rates_probe`` runs the papers' commands at their batch, length and precision) on
a named card, in a named mode (precision, ``trainer.compile``), dated. A row's FLOPs a step are
counted as the bill counts them (``tasks/pretraining/cost.pretrain_flops``; a fine-tune's every row
at its full length, as ``sweep/compute.finetune_flops``), so the row's own workload gets back exactly
the steps a second that were measured. Any other workload takes the rate of the row nearest to it and
says which row and what differs (``Rate.basis``):

* the same width class (``WIDE``: up to 512 wide the eager step is bound by the host, wider ones by
  the card, so their utilisation differs by ~6x), then the same kind of job (a fine-tune's rows, a
  pre-training's), then the same ``trainer.compile``, precision and objective;
* a card without a row of its own takes the H100's rows scaled by the cards' dense bf16 peaks
  (``PEAK_TFLOPS``): a stated assumption, flagged in the basis.

``PACKED`` is what fine-tunes sharing one card gain (jobs a GPU-hour against one alone), measured on
the same probe; ``pack_gain`` is what a SLURM pack's hours are divided by (sweep/requests.py).
``tflops=`` (conf/ablate.yaml) states a rate instead of the table's.
"""

from __future__ import annotations

import dataclasses
import functools

from omegaconf import DictConfig

# Dense bf16 tensor-core peak of one GPU in TFLOP/s, NVIDIA's datasheets (SXM parts; V100: fp16)
PEAK_TFLOPS = {"v100": 125.0, "a100": 312.0, "h100": 989.0, "h200": 989.0}
# Memory of one card in MiB, as nvidia-smi reports it (the 80 GB A100, the 32 GB V100): what
# launcher.per_gpu=auto packs a SLURM job's card by (CONVEXP_GPU_MEMORY_MIB says otherwise)
CARD_MIB = {"v100": 32_768, "a100": 81_920, "h100": 81_559, "h200": 143_771}
WIDE = 512  # wider models are bound by the card, narrower ones (eager) by the host


@dataclasses.dataclass(frozen=True)
class Measured:
    """One measurement of a training step's rate on a card."""

    card: str
    preset: str  # conf/model/<preset>.yaml
    objective: str  # the pre-training's objective; a fine-tune's task
    batch: int
    seq_len: int
    precision: str
    compile: str  # trainer.compile: false | blocks | step | graphs | whole
    steps_s: float
    what: str  # "stage": the pre-training stage, Lightning's loop and all; "fine-tune": its training steps
    when: str
    where: str  # the record it comes from

    @property
    def mode(self) -> str:
        return f"{self.precision} {'eager' if self.compile == 'false' else 'compile=' + self.compile}"


PROBE = "`.ci/gpu run` PARTS=rates (.ci/rates_probe), torch 2.11, synthetic text, BERT's vocabulary size"
MEASURED = (
    Measured("h100", "convbert_small", "electra", 128, 128, "32-true", "false", 10.52, "stage", "2026-12-05", PROBE),
    Measured("h100", "convbert_small", "electra", 128, 128, "bf16-mixed", "false", 9.94, "stage", "2026-12-05", PROBE),
    Measured("h100", "convbert_small", "electra", 128, 128, "bf16-mixed", "graphs", 30.2, "stage", "2026-11-26",
             "docs/performance.md, `.ci/gpu run` PARTS=\"stage-false stage-graphs\", torch 2.11, 600 steps"),
    Measured("h100", "chang_small", "mlm", 128, 128, "32-true", "false", 28.66, "stage", "2026-12-05", PROBE),
    Measured("h100", "convbert_base", "electra", 256, 128, "32-true", "false", 4.17, "stage", "2026-12-05", PROBE),
    Measured("h100", "convbert_base", "electra", 256, 128, "bf16-mixed", "false", 6.00, "stage", "2026-12-05", PROBE),
    Measured("h100", "convbert_small", "sst2", 32, 128, "32-true", "false", 23.46, "fine-tune", "2026-12-05", PROBE),
    Measured("h100", "convbert_base", "sst2", 32, 128, "32-true", "false", 26.32, "fine-tune", "2026-12-05", PROBE),
)  # fmt: skip
# Left out: the H200's eager stage of 2026-11-26 (7.9 steps/s, bf16), measured on code since made
# faster (the H100's same row then was 7.0, now 9.94): an H200 takes the H100's rows, scaled.
# Fine-tunes at once on one card: jobs a GPU-hour against one alone. H100, torch 2.11, 16 CPUs:
# ConvBERT-small, synthetic SST-2, 375 steps of 32 rows (<= 128 tokens), fp32, each job its own
# process with two loader workers (30 s alone, imports and evaluation included); PACK_JOBS=4 and 8
# of .ci/rates_probe, 2026-12-05. The eight shared 16 CPUs (a pack's job asks for 4 each).
PACKED = {"card": "h100", "width": 256, "when": "2026-12-05", "gain": {1: 1.0, 4: 3.23, 8: 3.76}}


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a job trains, as far as its rate goes (a node's: nodes.py)."""

    stage: str  # pretrain | finetune
    width: int
    precision: str
    compile: str
    objective: str = ""  # a pre-training's (mlm, electra, ...); "" for a fine-tune


@dataclasses.dataclass(frozen=True)
class Rate:
    flops_s: float  # FLOP/s of one GPU
    source: str  # the measurement it comes from, or how it was stated
    notes: tuple[str, ...] = ()  # what differs between that measurement and the job
    measured: bool = False  # the job's own workload was measured (not derived from another)

    @property
    def basis(self) -> str:
        return "; ".join([self.source, *self.notes])


def workload(stage: str, width: int, trainer: DictConfig, objective: str = "") -> Workload:
    compile_ = trainer.get("compile", False)
    compile_ = "false" if compile_ in (False, None, "false") else "blocks" if compile_ is True else str(compile_)
    return Workload(stage, int(width), str(trainer.precision), compile_, objective if stage == "pretrain" else "")


@functools.cache
def row_flops_s(row: Measured) -> float:
    """The row's FLOP/s, its FLOPs a step counted as the bill counts them."""
    from omegaconf import OmegaConf

    from ..config.compose import model_config
    from ..models.stats import flops_per_token
    from ..tasks.pretraining.cost import pretrain_flops

    model = model_config(row.preset)
    if row.what == "fine-tune":  # every row at its full length (sweep/compute.finetune_flops)
        return flops_per_token(model, row.seq_len) * row.batch * row.seq_len * row.steps_s
    cfg = OmegaConf.create({
        "seq_len": row.seq_len, "trainer": {"max_steps": 1, "batch_size": row.batch},
        "objective": {"name": row.objective, "generator_fraction": _generator_fraction(row.preset)},
    })  # fmt: skip
    return pretrain_flops(cfg, model) * row.steps_s


def _generator_fraction(preset: str) -> float:
    """ELECTRA's generator size of the preset's recipe (conf/recipe/): 1/4 for the small models,
    1/3 for base (electra configure_pretraining.py)."""
    return 1 / 3 if "base" in preset else 0.25


def rate(card: str, w: Workload) -> Rate:
    """The rate of one GPU of ``card`` on workload ``w``: the nearest measured row (module docstring)."""
    tuning = w.stage == "finetune"
    wide = w.width > WIDE
    same_class = [r for r in MEASURED if (_width(r) > WIDE) == wide]
    own = [r for r in same_class if r.card == card]
    rows = own or same_class  # another card's rows of the class, scaled by the cards' peaks
    row = max(rows, key=lambda r: ((r.what == "fine-tune") == tuning, r.compile == w.compile,
                                   r.precision == w.precision, tuning or r.objective == w.objective))  # fmt: skip
    flops = row_flops_s(row) * PEAK_TFLOPS[card] / PEAK_TFLOPS[row.card]
    source = f"{row.card} {row.mode}, {row.preset} {row.objective} {row.batch}x{row.seq_len}: "
    source += f"{row.steps_s:.3g} steps/s ({row.what}, measured {row.when})"
    notes = []
    if not own:
        notes.append(f"scaled to {card} by the cards' bf16 peaks (no such row measured on {card})")
    if row.compile != w.compile or row.precision != w.precision:
        mode = f"{w.precision} {'eager' if w.compile == 'false' else 'compile=' + w.compile}"
        notes.append(f"{mode} not measured")
    if tuning and row.what != "fine-tune":
        notes.append("fine-tuning at the pre-training stage's rate (no fine-tune measured in this class)")
    elif tuning:
        notes.append("every row counted at its full length (an upper bound: the steps are what was timed)")
    elif row.what == "fine-tune":
        notes.append("pre-training at a fine-tune's rate (no stage measured in this class)")
    elif row.objective != w.objective:
        notes.append(f"{w.objective or 'its objective'} at {row.objective}'s rate")
    exact = (row.what == "fine-tune") == tuning and row.compile == w.compile and row.precision == w.precision
    exact = exact and (tuning or row.objective == w.objective)
    return Rate(flops, source, tuple(notes), exact and bool(own))


def pack_gain(jobs: int, width: int) -> tuple[float, str]:
    """(what ``jobs`` fine-tunes of a ``width``-wide model gain by sharing one card, in jobs a
    GPU-hour against one alone; how that was found). Between the counts measured (``PACKED``) it is
    interpolated linearly, beyond the largest it stays there; a wide model's (no pack measured in
    its class) is 1: its jobs one after another."""
    if jobs <= 1:
        return 1.0, ""
    if (width > WIDE) != (PACKED["width"] > WIDE):
        return 1.0, f"{jobs} a card one after another (no pack measured {'over' if width > WIDE else 'up to'} {WIDE} wide)"
    points = sorted(PACKED["gain"].items())
    gain = points[-1][1]
    for (k0, g0), (k1, g1) in zip(points, points[1:]):
        if k0 <= jobs <= k1:
            gain = g0 + (g1 - g0) * (jobs - k0) / (k1 - k0)
            break
    how = f"{jobs} a card: x{gain:.2f} jobs a GPU-hour ({PACKED['card']}, measured {PACKED['when']}"
    most = max(PACKED["gain"])
    how += ")" if jobs in PACKED["gain"] else f", as {most}'s)" if jobs > most else ", interpolated)"
    return gain, how


def stated(tflops: float) -> Rate:
    """A rate given by ``tflops=``."""
    return Rate(tflops * 1e12, f"tflops={tflops:g} (stated)")


@functools.cache
def _width(row: Measured) -> int:
    from ..config.compose import model_config

    return model_config(row.preset).hidden_size
