"""The runs of a classification invocation (GLUE, SentEval probing, custom tasks), named before any
of them runs (no Lightning): its tasks (``task=all`` and ``probing_all`` are sets; MNLI first where
the protocol starts the intermediate tasks from it), each task's settings and seeds, and their run
directories (ids and hyper-parameters from the shared tasks/finetune_runs.py).

Configs arrive composed: an invocation's per-task configs are composed by its kind
(kinds.Classification.compose) for the tasks :func:`finetune_task_names` lists.
"""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig

from ...config.compose import override_key, parse_overrides
from ...config.name_tokens import command_tokens
from ...errors import UserError
from ...store.rundirs import FinetuneRun
from ..finetune_runs import RunNamer, hyperparameters
from .loading import task_data
from .. import PROBING

GLUE_ORDER = ("mnli", "qqp", "qnli", "sst2", "cola", "stsb", "mrpc", "rte")  # MNLI first: intermediate init
TASK_SETS = {"all": GLUE_ORDER, "probing_all": PROBING}  # task=<set>: these tasks in turn
INTERMEDIATE = ("rte", "stsb", "mrpc")
BERMO_PROBING_SEEDS = (63, 77, 9, 96, 39)  # BERMO Table 12


def finetune_task_names(cfg: DictConfig) -> list[str]:
    """The tasks a fine-tuning invocation fine-tunes, in execution order: ``task=all`` /
    ``probing_all`` are sets; MNLI comes first when the protocol starts the intermediate tasks from
    it; any other task (a probing task, ``custom``, a SQuAD task) alone."""
    names = list(TASK_SETS.get(cfg.task.name, [cfg.task.name]))
    if cfg.intermediate and "mnli" not in names and any(t in INTERMEDIATE for t in names):
        names = ["mnli", *names]  # the intermediate task runs first
    return names


def classification_runs(
    cfg: DictConfig,
    init_slug: str,
    hidden_size: int,
    task_cfgs: Mapping[str, DictConfig],
    tokens: list[str] | None = None,
) -> list[FinetuneRun]:
    """Every run of a classification invocation (GLUE, probing, custom tasks), in execution order
    (MNLI before the tasks that start from it).

    ``task_cfgs``: the composed config of each task of :func:`finetune_task_names` (``cfg`` itself for
    its own task may be left out). Needs only the init's name and width, not its weights:
    ``convexp ablate`` lays out fine-tunes of models that are not pre-trained yet, and ``convexp
    report`` finds them again. ``tokens``: the names' tokens (a sweep's); None: the command's."""
    tokens = command_tokens(cfg) if tokens is None else tokens
    intermediate = cfg.intermediate
    seeds = list(cfg.seeds)
    runs: list[FinetuneRun] = []
    mnli: dict[int, FinetuneRun] = {}
    for name in finetune_task_names(cfg):
        tcfg = task_config(cfg, task_cfgs, name)
        extra = {"group_by_length": True} if tcfg.get("group_by_length") else {}  # off: older ids
        data = task_data(tcfg.task)  # sample limits and a custom task's files, when set
        if data:
            extra["task_data"] = data
        runs_of = RunNamer(tcfg, extra)  # what the task's runs share, worked out once
        for hp in hyperparameters(tcfg, hidden_size):
            for seed in seeds:
                start = mnli.get(seed) if intermediate and name in INTERMEDIATE else None
                start_id = start.run.id if start else ""
                run, run_cfg = runs_of.run(init_slug, name, seed, hp, start_id, tokens)
                runs.append(FinetuneRun(name, seed, hp, run, run_cfg, start))
                if name == "mnli":
                    mnli.setdefault(seed, runs[-1])  # the first setting's run
    for p in runs:
        if p.start is not None:
            p.start.read_later = True  # its weights are read: kept (train/weights.py)
    return runs


def task_config(cfg: DictConfig, task_cfgs: Mapping[str, DictConfig], name: str) -> DictConfig:
    """The composed config of task ``name`` of the invocation ``cfg``."""
    if cfg.task.name == name:
        return cfg
    if name not in task_cfgs:
        raise KeyError(f"no composed config for task {name!r} (compose one per finetune_task_names(cfg))")
    return task_cfgs[name]


def probing_overrides(overrides: list[str]) -> list[str]:
    """`convexp finetune probing ARGS` as finetune overrides: task=all (the default) is the ten
    probing tasks (task=probing_all), protocol=bermo unless given, and at scale=paper BERMO's five
    seeds unless seeds= is given. A task that is not a probing task is refused."""
    parsed = parse_overrides(overrides)
    given = {override_key(o): o.value() for o in parsed}
    task = str(given.get("task", "all"))
    if task not in ("all", "probing_all", *PROBING):
        raise UserError(
            f"task={task} is not a probing task; use task=all or one of: {', '.join(PROBING)} "
            "(GLUE tasks: convexp finetune glue)"
        )
    out = [o for o, p in zip(overrides, parsed) if override_key(p) != "task"]
    out.append(f"task={'probing_all' if task == 'all' else task}")
    if "protocol" not in given:
        out.insert(0, "protocol=bermo")
    if "seeds" not in given and str(given.get("scale", given.get("finetune_scale", "paper"))) == "paper":
        out.append(f"seeds=[{','.join(map(str, BERMO_PROBING_SEEDS))}]")
    return out
