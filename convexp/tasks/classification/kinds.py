"""``convexp finetune glue`` and ``convexp finetune probing``: the two kinds this folder owns, one
:class:`~convexp.tasks.kind.TaskKind` each (tasks/kind.py lists what a kind answers).

  compose  the invocation's config and, for every other task it fine-tunes (``task=all``, MNLI
           before the tasks that start from it), the same command's (runs.py)
  check    the fine-tuning inputs every task has (the outputs folder, ``init=``,
           ``distill.teacher=``, the tokenizer; ``init=none``: the model and every task's
           ``task.max_len``), the grid against the command line's values, and each task's data on
           disk (loading.py: a GLUE or SentEval folder, a saved dataset, a custom task's files), in
           one pass before the stage's heavy imports; the first problem as one line
  plan     the runs, named before any of them runs (runs.py): from the init's name and width alone,
           so a sweep's planner lays out runs of models it has yet to pre-train
  run      open the init (what only the opened model says: train/finetune.open_init), plan, and
           fine-tune the runs with work left (stage.py)

The dry run's estimates read GLUE's and SentEval's published split sizes below; the report scores a
run in the paper's style (results.py, scores.py).
"""

from __future__ import annotations

from .. import PROBING
from ...errors import UserError
from ..finetune_runs import check_grid
from ..kind import Invocation, TaskKind
from ...train.inputs import check_finetune_inputs
from .loading import check_task
from .runs import TASK_SETS, classification_runs, finetune_task_names, probing_overrides

# GLUE training-set sizes, for the compute estimate of fine-tuning on the real data (SentEval's
# probing tasks and a custom task: 100k each)
GLUE_TRAIN = {
    "cola": 8551, "sst2": 67349, "mrpc": 3668, "stsb": 5749, "qqp": 363846, "mnli": 392702,
    "qnli": 104743, "rte": 2490, "wnli": 635,
}  # fmt: skip
# Rows of the dev and test splits of each task (GLUE's published sizes; MNLI: matched, mismatched
# and the diagnostic AX), for the predictions and submissions a fine-tuning run keeps
GLUE_EVAL = {
    "cola": (1_043, 1_063), "sst2": (872, 1_821), "mrpc": (408, 1_725), "stsb": (1_500, 1_379),
    "qqp": (40_430, 390_965), "mnli": (19_647, 20_747), "qnli": (5_463, 5_463), "rte": (277, 3_000),
    "wnli": (71, 146),
}  # fmt: skip
PROBING_EVAL = (10_000, 10_000)  # SentEval's probing tasks: 10k dev and 10k test sentences each
PREDICTION_BYTES = 16  # a line of predictions/<split>.tsv (idx, label, prediction)
SUBMISSION_BYTES = 16  # a line of the GLUE server's file


class Classification(TaskKind):
    """Sentence(-pair) classification and regression: GLUE's tasks, SentEval's probing tasks
    (``probing``: BERMO's protocol and seeds by default) and a user's custom files (``task=custom``)."""

    def __init__(self, name: str, title: str, help: str):
        self.name, self.title, self.help = name, title, help

    def arguments(self, overrides: list[str]) -> list[str]:
        """``probing``: task=all is the ten probing tasks, BERMO's protocol and seeds
        (runs.probing_overrides)."""
        return probing_overrides(overrides) if self.name == "probing" else list(overrides)

    def task_names(self, cfg) -> list[str]:
        return finetune_task_names(cfg)

    def check(self, inv: Invocation, planned: bool = False) -> None:
        """``planned``: a sweep's plan: what the config alone decides (its init and teachers may be
        runs it has yet to make; the data files are checked when its node runs)."""
        cfgs = (inv.cfg, *inv.task_cfgs.values())
        if planned and self.name == "probing" and inv.cfg.glue.source not in ("local", "synthetic"):
            raise UserError(  # a sweep's plan: named as its sweep file and command line set it
                f"probing task {inv.cfg.task.name} needs SentEval's files: finetune.glue.source=local "
                "finetune.glue.path=<SentEval data/probing> (or scale=smoke: synthetic stand-ins)"
            )
        check_finetune_inputs(inv.cfg, inv.task_cfgs.values(), planned=planned)
        for c in cfgs:
            check_grid(c)
        for c in cfgs if not planned else ():
            if c.task.name not in TASK_SETS:  # task=all: each of its tasks is among task_cfgs
                check_task(c.task, c.glue, bool(c.both_orders))

    def plan(self, inv: Invocation, start, tokens: list[str] | None = None) -> list:
        """The invocation's runs (store/rundirs.FinetuneRun), MNLI before the tasks that start from
        it. ``start``: the init's ``slug`` and ``width``; ``tokens``: the names' tokens (a sweep's;
        None: the command's)."""
        return classification_runs(inv.cfg, start.slug, start.width, inv.task_cfgs, tokens)

    def run(self, inv: Invocation, summary: bool = True) -> None:
        from ...train.finetune import open_init
        from .stage import fine_tune

        init = open_init(inv.cfg, [inv.cfg, *inv.task_cfgs.values()])
        fine_tune(inv.cfg, inv.task_cfgs, init, self.plan(inv, init), summary=summary)

    # --- a sweep's estimates: every example padded to task.max_len (the default sequence_length)

    def train_examples(self, cfg, task: str) -> int:
        return int(cfg.glue.synthetic_size) if cfg.glue.source == "synthetic" else GLUE_TRAIN.get(task, 100_000)

    def kept_bytes(self, cfg, task: str) -> float:
        """Each dev row's prediction line and each test row's prediction and submission lines."""
        if cfg.glue.source == "synthetic":
            from .synthetic_glue import synthetic_split_sizes

            sizes = synthetic_split_sizes(task, int(cfg.glue.synthetic_size))
            dev = sum(n for s, n in sizes.items() if s.startswith("validation"))
            test = sum(n for s, n in sizes.items() if s.startswith("test"))
        else:
            dev, test = PROBING_EVAL if task in PROBING else GLUE_EVAL.get(task, (10_000, 10_000))
        return dev * PREDICTION_BYTES + test * (PREDICTION_BYTES + SUBMISSION_BYTES)

    # --- the report: the paper's score of the task's main split (``probing``: Chang et al.'s)

    def score(self, m: dict, style: str, split: str = "dev") -> float | None:
        from .results import style_score

        first = next(iter((m.get(split) or {}).values()), None)
        return style_score(m["task"], first, style) if first else None

    def score_columns(self, m: dict, style: str, split: str = "dev") -> dict[str, float]:
        from .scores import score_columns

        results = m.get(split) or {}
        style_ = "chang" if style == "probing" else style
        return dict(score_columns({m["task"]: results}, style_)) if results else {}

    def columns(self, task: str, style: str) -> tuple[str, ...]:
        from ...data.errors import UnknownTaskError
        from .scores import task_columns

        try:
            return task_columns(task, "chang" if style == "probing" else style)
        except UnknownTaskError:  # a custom task file not registered yet: its own column
            return (task,)


GLUE_KIND = Classification(
    "glue", "GLUE", "Fine-tune on GLUE: task=<name|all> init=<run dir | HF dir or hub name | none> [KEY=VALUE ...]."
)
PROBING_KIND = Classification(
    "probing",
    "probing",
    "Fine-tune on BERMO's SentEval probing tasks: task=<name|all> init=<run dir | HF dir | none> [KEY=VALUE ...] "
    "(protocol=bermo; data: glue.source=local glue.path=<SentEval data/probing> or glue.source=synthetic).",
)
