"""The plan of a sweep: every selected variant's nodes (stage commands and their run
directories) in dependency order, composed up front so that bad overrides fail before any
training. ``convexp ablate`` runs it; ``convexp report`` rebuilds it to find the runs."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..config import compose_cache
from .args import split_args, sweep_settings
from .nodes import Node, compose_cached, continuation_node, finetune_nodes, pretrain_node
from .spec import Sweep, SweepError, Variant
from .start import Start, checkpoint_for, checkpoint_start
from ..train.weights import has_weights


@dataclasses.dataclass
class Plan:
    """A sweep as a graph of nodes, with the settings and arguments it was planned with."""

    sweep: Sweep
    settings: DictConfig  # conf/ablate.yaml as composed
    args: list[str]  # the command line's KEY=VALUE arguments
    nodes: dict[str, Node]
    starts: dict[str, Start]  # every planned variant -> where its fine-tuning starts
    pretrain_cfgs: dict[str, DictConfig]  # pre-trained variant -> its composed pre-training config
    outputs: Path
    logger: DictConfig  # the W&B settings the runs log with

    @property
    def variants(self) -> list[str]:
        return list(self.starts)

    @property
    def home(self) -> Path:
        """outputs/sweeps/NAME: the sweep's ledger, logs and launcher files."""
        return self.outputs / "sweeps" / self.sweep.name

    def origins(self) -> dict[str, object]:
        """variant -> where its fine-tunes start: its pre-training's seed, or the checkpoint it names.
        Two variants' fine-tuning seeds pair where their origins match (the report's differences and
        adaptive seeds' tests alike)."""
        return {v: self.pretrain_cfgs[v].get("seed") if v in self.pretrain_cfgs else self.starts[v].init
                for v in self.variants}  # fmt: skip

    def width(self, node: Node) -> int:
        """The hidden size of the model a node trains."""
        return self.starts[node.variant].width

    def order(self) -> list[Node]:
        """Nodes in dependency order (the plan is built in that order)."""
        return list(self.nodes.values())


def build_plan(sweep: Sweep, args: list[str] = ()) -> Plan:
    """Compose every node's configuration (so bad overrides fail here, before any training) and
    find every run directory."""
    with compose_cache.one_state():  # the config files are not edited while a plan is made
        return _build_plan(sweep, args)


def _build_plan(sweep: Sweep, args: list[str]) -> Plan:
    own, stage_args = split_args(list(args))
    settings = sweep_settings(own)
    if settings.scale == "smoke" and sweep.smoke:  # the sweep's smoke arguments, then the user's
        own, stage_args = split_args([*sweep.smoke, *args])
        settings = sweep_settings(own)
    checkpoint = checkpoint_for(sweep, settings)
    nodes: dict[str, Node] = {}
    starts: dict[str, Start] = {}
    pretrain_cfgs: dict[str, DictConfig] = {}
    by_run: dict[str, str] = {}  # pre-training run id -> its node (variants may share one)
    tuned_by: dict[str, str] = {}  # fine-tuning run id -> the first node that trains it
    cache: dict[tuple, DictConfig] = {}  # fine-tuning compositions shared by variants
    for v in _selected(sweep, settings.variants):
        squad_start = None  # where the variant's SQuAD tasks start when not from starts[v] (a continuation)
        if checkpoint is not None:
            starts[v.name] = checkpoint_start(checkpoint)
        else:
            pre, cfg, model_cfg = pretrain_node(sweep, v, settings, stage_args["pretrain"])
            key = by_run.setdefault(pre.runs[0].id, pre.key)
            if key == pre.key:
                nodes[key] = pre
            pre = nodes[key]
            pretrain_cfgs[v.name] = cfg
            run = pre.runs[0]
            starts[v.name] = Start(str(run.dir.resolve()), run.id, model_cfg.hidden_size, key, model_cfg)
            continues = sweep.squad_continuation is not None and v.squad_continuation  # the row had the phase
            if continues and _continuing_tasks(sweep, settings):
                cont, squad_start = continuation_node(sweep, v, settings, pre, cfg, model_cfg)
                # variants sharing a pre-training run share its continuation
                ckey = by_run.setdefault(cont.runs[0].id, cont.key)
                if ckey == cont.key:
                    nodes[ckey] = cont
                squad_start = dataclasses.replace(squad_start, node=ckey)
        if sweep.finetune is not None:
            for part, start in _task_parts(sweep, settings, starts[v.name], squad_start):
                ft = finetune_nodes(sweep, v, part, stage_args["finetune"], {v.name: start}, nodes, cache)
                for node in ft:
                    if node.key in nodes:  # another grid setting of the same (task, seed)
                        nodes[node.key].runs += [r for r in node.runs if r not in nodes[node.key].runs]
                    else:
                        nodes[node.key] = node
                    _after_twin(nodes[node.key], tuned_by)
    nodes = _dependency_order(nodes)
    keep_read_weights(nodes)
    if pretrain_cfgs:
        first = next(iter(pretrain_cfgs.values()))
    else:
        first = compose_cached(cache, sweep.name, [f"scale={settings.scale}", *stage_args["finetune"]])
    return Plan(
        sweep,
        settings,
        list(args),
        nodes,
        starts,
        pretrain_cfgs,
        Path(first.outputs),
        first.logger,
    )


def keep_read_weights(nodes: dict[str, Node]) -> None:
    """Each fine-tuning node's ``keep_weights`` (train/weights.py): ``all`` where the sweep was
    given ``keep_weights=all``; ``read`` where a node that has yet to run loads its weights (a
    distillation teacher, the MNLI run an intermediate task starts from); else ``none``: nothing
    reads them (the report reads metrics and predictions). Read in reverse dependency order, so
    that a node trained again for its weights counts as one that has yet to run."""
    read: set[str] = set()
    for node in reversed(list(nodes.values())):
        if node.stage != "finetune":
            continue
        node.keep_weights = "all" if node.keep_weights == "all" else "read" if node.key in read else "none"
        if not node.done:
            read.update(node.reads)


def drop_spent_weights(plan: Plan) -> list[str]:
    """Delete the weights of the MNLI runs that intermediate tasks start from once every such task
    of the plan has finished (a step of Chang et al.'s protocol, not a result: its metrics and
    predictions stay); a distillation teacher keeps its weights (a fine-tuned model students distil
    from: more students, seeds or sweeps reuse it), as does every run under keep_weights=all.
    Returns the nodes whose weights were deleted."""
    keep_read_weights(plan.nodes)
    starts = {key for node in plan.nodes.values() for key in node.starts_from}
    teachers = {key for node in plan.nodes.values() for key in node.distils_from}
    dropped = []
    for key in sorted(starts - teachers, key=list(plan.nodes).index):
        node = plan.nodes[key]
        if node.keep_weights == "none" and any(has_weights(r) for r in node.runs):
            for run in node.runs:
                shutil.rmtree(run.model_dir, ignore_errors=True)
            dropped.append(key)
    return dropped


def _after_twin(node: Node, tuned_by: dict[str, str]) -> None:
    """A fine-tuning node whose runs another variant's node already trains (their configs differ
    only in how they run, e.g. trainer.compile) waits for that node and is then cached: one
    training, never two processes racing for one run's lock (on one GPU, when jobs are packed)."""
    for run in node.runs:
        twin = tuned_by.setdefault(run.id, node.key)
        if twin != node.key and twin not in node.deps:
            node.deps.append(twin)


def planned_tasks(sweep: Sweep, settings: DictConfig) -> list[str]:
    """The fine-tuning tasks the sweep's table has (``tasks=``, else the sweep file's)."""
    return list(settings.tasks) if settings.tasks is not None else list(sweep.finetune.tasks)


def _continuing_tasks(sweep: Sweep, settings: DictConfig) -> list[str]:
    from ..tasks import kind, task_kind

    return [t for t in planned_tasks(sweep, settings) if task_kind(kind(t)).continues] if sweep.finetune else []


def _task_parts(sweep: Sweep, settings: DictConfig, start: Start, squad_start: Start | None):
    """(settings with the tasks to plan, their start): all tasks from ``start``, or, with a
    continuation, the GLUE tasks from ``start`` (the length-128 model) and SQuAD from ``squad_start``."""
    if squad_start is None:
        return [(settings, start)]
    squad = _continuing_tasks(sweep, settings)
    rest = [t for t in planned_tasks(sweep, settings) if t not in squad]
    parts = [(OmegaConf.merge(settings, {"tasks": rest}), start)] if rest else []
    return [*parts, (OmegaConf.merge(settings, {"tasks": squad}), squad_start)]


def _selected(sweep: Sweep, wanted) -> list[Variant]:
    """The variants to plan, in the sweep's order; a selected variant's teacher is planned too."""
    if wanted is None:
        return list(sweep.variants.values())
    names = [wanted] if isinstance(wanted, str) else list(wanted)
    for n in names:
        if n not in sweep.variants:
            raise SweepError(
                f"sweep {sweep.name} has no variant {n!r}; its variants: {', '.join(sweep.variants)}"
            )
    names += [sweep.variants[n].teacher for n in names if sweep.variants[n].teacher]
    return [v for v in sweep.variants.values() if v.name in names]


def _dependency_order(nodes: dict[str, Node]) -> dict[str, Node]:
    done: dict[str, Node] = {}
    while len(done) < len(nodes):
        for k, n in nodes.items():
            if k not in done and all(d in done for d in n.deps):
                done[k] = n
    return done
