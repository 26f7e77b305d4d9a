"""``convexp finetune squad``: the kind this folder owns, a :class:`~convexp.tasks.kind.TaskKind`
(tasks/kind.py lists what a kind answers).

  check    the task and protocol (runs.py), the fine-tuning inputs every task has (the outputs
           folder, ``init=``, ``distill.teacher=``, the tokenizer, ``init=none``'s model), and the
           data source (data.py: a local folder holds both official files), in one pass before the
           stage's heavy imports; the first problem as one line
  plan     the runs, one per seed, named before any of them runs (runs.py)
  run      open the init (train/finetune.open_init), plan, and fine-tune each seed with work left
           (stage.py)

The dry run counts one window of the protocol's length a training question; the report takes the
run's score (F1; v2.0 at the dev-chosen no-answer threshold).
"""

from __future__ import annotations

from .. import SQUAD
from ..kind import Invocation, TaskKind
from ...train.inputs import check_finetune_inputs
from .data import check_source
from .runs import check_squad_config, qa_settings, squad_runs, squad_source

SQUAD_TRAIN = {"squad1": 87599, "squad2": 130319}  # training questions of train-v1.1 / train-v2.0
SQUAD_DEV = {"squad1": 10_570, "squad2": 11_873}  # questions of dev-v1.1 / dev-v2.0
ANSWER_BYTES = 48  # a question's line of predictions (its id and answer); v2.0 adds its null odds


class Squad(TaskKind):
    name = "squad"
    title = "SQuAD"
    continues = True  # ConvBERT's SQuAD starts from pre-training continued at length 512
    help = (
        "Fine-tune on SQuAD: task=squad1|squad2 init=<run dir | HF dir or hub name | none> [KEY=VALUE ...] "
        "(data: squad.source=hub | local squad.path=<folder of the official JSON files> | synthetic)."
    )

    def arguments(self, overrides: list[str]) -> list[str]:
        """SQuAD v1.1 unless ``task=`` is given."""
        return list(overrides) if any(o.startswith("task=") for o in overrides) else ["task=squad1", *overrides]

    def check(self, inv: Invocation, planned: bool = False) -> None:
        """``planned``: a sweep's plan: what the config alone decides (its init and teacher may be
        runs it has yet to make; the files are checked when its node runs)."""
        check_squad_config(inv.cfg)
        check_finetune_inputs(inv.cfg, planned=planned)
        source = squad_source(inv.cfg)
        if not planned:
            check_source(source)

    def plan(self, inv: Invocation, start, tokens: list[str] | None = None) -> list:
        """The invocation's runs (store/rundirs.FinetuneRun): ``start``, ``tokens`` as for
        classification's ``plan``."""
        return squad_runs(inv.cfg, start.slug, start.width, tokens)

    def run(self, inv: Invocation, summary: bool = True) -> None:
        from ...train.finetune import open_init
        from .stage import fine_tune

        init = open_init(inv.cfg)  # SQuAD's windows are checked against the model by each run
        fine_tune(inv.cfg, init, self.plan(inv, init))

    # --- a sweep's estimates: every training question one window of the protocol's max_len (longer
    # contexts make more windows)

    def train_examples(self, cfg, task: str) -> int:
        return int(cfg.squad.synthetic_size) if cfg.squad.source == "synthetic" else SQUAD_TRAIN.get(task, 100_000)

    def sequence_length(self, cfg) -> int:
        return int(qa_settings(cfg)["max_len"])

    def kept_bytes(self, cfg, task: str) -> float:
        dev = cfg.squad.synthetic_size // 4 if cfg.squad.source == "synthetic" else SQUAD_DEV.get(task, 10_000)
        return dev * ANSWER_BYTES * (2 if SQUAD.get(task) == "v2.0" else 1)

    # --- the report: the run's score, any style

    def score(self, m: dict, style: str, split: str = "dev") -> float | None:
        return float(m["score"]) if m.get(split) else None


SQUAD_KIND = Squad()
