"""The training rates behind every GPU-hour figure: one table of what was measured on a card.

A job's hours are its training FLOPs (sweep/compute.py) over a rate in FLOP/s. The rate comes from
``MEASURED``, the pre-training stage's steps a second as `convexp bench` and `.ci/gpu` measured them
on a named card, in a named mode (precision, ``trainer.compile``), dated; a row's FLOPs a step are
counted as the bill counts them (``tasks/pretraining/cost.pretrain_flops``), so the row's own workload gets back
exactly the steps a second that were measured. Any other workload takes the rate of the row nearest
to it and says which row and what differs (``Rate.basis``):

* the same width class (``WIDE``: up to 512 wide the eager step is bound by the host, wider ones by
  the card, so their utilisation differs by ~6x), then the same ``trainer.compile``, then the same
  precision;
* a card without a row of its own takes the H100's rows scaled by the cards' dense bf16 peaks
  (``PEAK_TFLOPS``): a stated assumption, flagged in the basis;
* fine-tuning takes the pre-training stage's rate of its width class (no fine-tuning job has been
  timed on a card at a paper's size: the bill says so).

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
    objective: str
    batch: int
    seq_len: int
    precision: str
    compile: str  # trainer.compile: false | blocks | step | graphs | whole
    steps_s: float
    what: str  # "stage": the pre-training stage, Lightning's loop and all; "bare step": one step alone
    when: str
    where: str  # the record it comes from

    @property
    def mode(self) -> str:
        return f"{self.precision} {'eager' if self.compile == 'false' else 'compile=' + self.compile}"


MEASURED = (
    Measured("h100", "convbert_small", "electra", 128, 128, "bf16-mixed", "false", 7.0, "stage", "2026-11-26",
             "docs/performance.md, `.ci/gpu run` PARTS=\"stage-false stage-graphs\", torch 2.11, 600 steps"),
    Measured("h100", "convbert_small", "electra", 128, 128, "bf16-mixed", "graphs", 30.2, "stage", "2026-11-26",
             "docs/performance.md, the same call"),
    Measured("h200", "convbert_small", "electra", 128, 128, "bf16-mixed", "false", 7.9, "stage", "2026-11-26",
             "docs/performance.md, `convexp bench pretrain --profile`, torch 2.11"),
    # the bare MLM step (README's table), and the stage/bare ratio measured beside the H200 stage row
    Measured("h200", "convbert_base", "mlm", 32, 512, "bf16-mixed", "false", 1 / 0.0576, "bare step", "2026-11-26",
             "README, `convexp bench --device cuda`, torch 2.11"),
)  # fmt: skip
STAGE_OVER_BARE = 7.9 / 10.2  # the H200's eager stage against its bare step (ConvBERT-small, ELECTRA)


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a job trains, as far as its rate goes (a node's: nodes.py)."""

    stage: str  # pretrain | finetune
    width: int
    precision: str
    compile: str


@dataclasses.dataclass(frozen=True)
class Rate:
    flops_s: float  # FLOP/s of one GPU
    source: str  # the measurement it comes from, or how it was stated
    notes: tuple[str, ...] = ()  # what differs between that measurement and the job
    measured: bool = False  # the job's own workload was measured (not derived from another)

    @property
    def basis(self) -> str:
        return "; ".join([self.source, *self.notes])


def workload(stage: str, width: int, trainer: DictConfig) -> Workload:
    compile_ = trainer.get("compile", False)
    compile_ = "false" if compile_ in (False, None, "false") else "blocks" if compile_ is True else str(compile_)
    return Workload(stage, int(width), str(trainer.precision), compile_)


@functools.cache
def row_flops_s(row: Measured) -> float:
    """The row's FLOP/s, its FLOPs a step counted as the bill counts them."""
    from omegaconf import OmegaConf

    from ..config.compose import model_config
    from ..tasks.pretraining.cost import pretrain_flops

    cfg = OmegaConf.create({
        "seq_len": row.seq_len, "trainer": {"max_steps": 1, "batch_size": row.batch},
        "objective": {"name": row.objective, "generator_fraction": _generator_fraction(row.preset)},
    })  # fmt: skip
    rate = pretrain_flops(cfg, model_config(row.preset)) * row.steps_s
    return rate * (STAGE_OVER_BARE if row.what == "bare step" else 1.0)


def _generator_fraction(preset: str) -> float:
    """ELECTRA's generator size of the preset's recipe (conf/recipe/): 1/4 for the small models,
    1/3 for base (electra configure_pretraining.py)."""
    return 1 / 3 if "base" in preset else 0.25


def rate(card: str, w: Workload) -> Rate:
    """The rate of one GPU of ``card`` on workload ``w``: the nearest measured row (module docstring)."""
    wide = w.width > WIDE
    same_class = [r for r in MEASURED if (_width(r) > WIDE) == wide]
    own = [r for r in same_class if r.card == card]
    rows = own or same_class  # another card's rows of the class, scaled by the cards' peaks
    row = max(rows, key=lambda r: (r.compile == w.compile, r.precision == w.precision, r.what == "stage"))
    scale = PEAK_TFLOPS[card] / PEAK_TFLOPS[row.card]
    flops = row_flops_s(row) * scale
    exact = row.compile == w.compile and row.precision == w.precision and w.stage == "pretrain"
    source = f"{row.card} {row.mode}, {row.preset} {row.objective} {row.batch}x{row.seq_len}: "
    source += f"{row.steps_s:.3g} steps/s ({row.what}, measured {row.when})"
    notes = []
    if row.what == "bare step":
        notes.append(f"x {STAGE_OVER_BARE:.2f}, the stage/bare ratio measured on the H200")
    if not own:
        notes.append(f"scaled to {card} by the cards' bf16 peaks (no such row measured on {card})")
    if row.compile != w.compile or row.precision != w.precision:
        mode = f"{w.precision} {'eager' if w.compile == 'false' else 'compile=' + w.compile}"
        notes.append(f"{mode} not measured")
    if w.stage == "finetune":
        notes.append("fine-tuning at the pre-training stage's rate (not measured on a card)")
    return Rate(flops, source, tuple(notes), exact and bool(own))


def stated(tflops: float) -> Rate:
    """A rate given by ``tflops=``."""
    return Rate(tflops * 1e12, f"tflops={tflops:g} (stated)")


@functools.cache
def _width(row: Measured) -> int:
    from ..config.compose import model_config

    return model_config(row.preset).hidden_size
