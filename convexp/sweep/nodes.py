"""One variant's stage commands: its pre-training node and its fine-tuning nodes (one per task
and seed), each with the run directories it produces, known before anything runs."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..config.compose import CONF_DIR, compose_stage, to_model_config
from ..config.lightning import LOADER_WORKERS_ON_GPU
from ..errors import ConfigError, UserError
from ..store.runs import Run
from ..train.weights import has_weights
from .cards import finetune_settings
from ..tasks.pretraining.cost import pretrain_flops
from .compute import finetune_flops
from .disk import pretrain_bytes, pretraining_data, results_bytes, weights_bytes
from ..tasks import Invocation, command, config_kind
from ..tasks import kind as task_kind
from .gpus import job_gpus
from .memory import finetune_mib, host_mib, pretrain_mib, trained_parameters
from .rates import Workload, workload
from .spec import Sweep, SweepError, Variant
from .start import Start


@dataclasses.dataclass
class Node:
    """One stage command of a sweep; ``runs`` are the run directories it produces."""

    key: str  # pretrain/<variant> | finetune/<variant>/<task>/s<seed>
    stage: str
    variant: str
    overrides: list[str]
    runs: list[Run]
    deps: list[str] = dataclasses.field(default_factory=list)
    task: str | None = None
    seed: int | None = None
    flops: float = 0.0
    hparams: dict = dataclasses.field(default_factory=dict)  # fine-tuning: run id -> cards.finetune_settings
    gpus: int = 0  # GPUs its job trains on, on each of its nodes (gpus.job_gpus: 0 on the CPU, -1 every GPU)
    num_nodes: int = 1  # machines its job spans (trainer.num_nodes: DDP across nodes)
    tasks: int = 1  # processes on each of its nodes (DDP: one a device)
    workers: int = 0  # loader worker processes of each task
    threads: int | None = None  # torch's threads of a task training on the CPU (trainer.threads; None: auto)
    host_mib: int = 0  # its job's estimated host memory on one node (memory.host_mib; 0: unknown)
    workload: Workload | None = None  # what its rate on a card depends on (rates.py)
    memory_mib: int = 0  # its job's estimated peak memory on one GPU (memory.py; 0: unknown)
    starts_from: list[str] = dataclasses.field(default_factory=list)  # an intermediate task's MNLI node
    distils_from: list[str] = dataclasses.field(default_factory=list)  # its distillation teacher's node
    # fine-tuning: all (asked for) | read (a node that has yet to run loads them) | none (plan.py)
    keep_weights: str | None = None
    disk: float = 0.0  # bytes each run keeps (disk.py): results, or a checkpoint and the final model
    weights: float = 0.0  # fine-tuning: the bytes of the weights each run keeps where it keeps them
    data: tuple | None = None  # pre-training: disk.pretraining_data (its corpus, for the bill)
    kind: str | None = None  # fine-tuning: which `convexp finetune` command runs it (tasks.config_kind)

    @property
    def reads(self) -> list[str]:
        """The nodes whose fine-tuned weights it loads."""
        return [*self.starts_from, *self.distils_from]

    @property
    def finished(self) -> bool:
        return all(r.finished for r in self.runs)

    @property
    def done(self) -> bool:
        """Finished, with the weights it must keep (a finished run that did not keep weights a
        later node reads is trained again for them)."""
        return self.finished and not self.weights_missing

    @property
    def weights_missing(self) -> bool:
        return self.keep_weights in ("all", "read") and not all(has_weights(r) for r in self.runs)

    @property
    def stage_args(self) -> list[str]:
        """Its stage command's arguments: the overrides, then the weights it keeps (not part of
        what the run computes: neither its id nor the plan's record of overrides hold it)."""
        keep = {"read": "all"}.get(self.keep_weights, self.keep_weights)
        return [*self.overrides, *([f"keep_weights={keep}"] if keep else [])]

    @property
    def state(self) -> str:
        if self.done:
            return "cached"
        if self.finished:  # its weights were not kept, and a node that has yet to run reads them
            return "weights"
        if any(r.status == "diverged" for r in self.runs):
            return "diverged"
        if any(r.last_checkpoint() for r in self.runs):
            return "resume"
        return "new"

    @property
    def command(self) -> str:
        kind = self.kind or task_kind(self.task or "all")  # a node the planner made says its kind
        head = "convexp pretrain" if self.stage == "pretrain" else f"convexp finetune {kind}"
        return " ".join([head, *(_quote(o) for o in self.stage_args)])


def _quote(o: str) -> str:
    return f"'{o}'" if re.search(r"[\s\[\]{}*?$]", o) else o


def pretrain_node(sweep: Sweep, v: Variant, settings: DictConfig, cli: list[str]):
    """(the variant's pre-training node, its composed config, its ModelConfig)."""
    from ..config.name_tokens import variant_tokens

    where = f"sweep {sweep.name}, variant {v.name}"
    scale = settings.scale
    corpus = [f"data={sweep.data}"] if sweep.data and scale != "smoke" else []  # smoke: synthetic
    vocab = [f"tokenizer={sweep.tokenizer}"] if sweep.tokenizer and scale != "smoke" else []  # smoke: trained
    over = [f"scale={scale}", *corpus, *vocab, *sweep.pretrain, *v.pretrain, *cli, *_logging(sweep, v)]
    cfg = _compose(where, "pretrain", over)
    try:
        model_cfg = to_model_config(cfg.model)
        pretrain = command("pretrain")
        pretrain.check(Invocation(cfg, {}), planned=True)  # as the node will: a user's mixer too
        flops = pretrain_flops(cfg, model_cfg)
    except (ConfigError, ValueError) as e:  # e.g. seq_len beyond the position table
        raise SweepError(f"{where}: {e}") from e
    [run] = pretrain.plan(Invocation(cfg, {}), None, variant_tokens(v.pretrain))  # named by what differs from the sweep's base
    over.append(
        f"outputs={Path(cfg.outputs).resolve()}"
    )  # absolute: workers and cluster jobs start elsewhere
    node = Node(f"pretrain/{v.name}", "pretrain", v.name, over, [run], flops=flops,
                disk=sum(pretrain_bytes(cfg, model_cfg)), data=pretraining_data(cfg))  # fmt: skip
    size_pretraining(node, cfg, model_cfg)
    return node, cfg, model_cfg


def size_pretraining(node: Node, cfg: DictConfig, model_cfg) -> None:
    """A pre-training node's job: its GPUs, nodes, tasks, loader workers, card and host memory, rate."""
    node.memory_mib = pretrain_mib(cfg, model_cfg)
    _size(node, cfg, model_cfg, node.memory_mib, int(cfg.trainer.get("num_workers", 0)), "pretrain")


def _size(node: Node, cfg: DictConfig, model_cfg, train_mib: int, workers: int, stage: str) -> None:
    t = cfg.trainer
    node.gpus, node.num_nodes = job_gpus(cfg), int(t.get("num_nodes", 1))
    devices = t.get("devices", 1)
    node.tasks = node.gpus if node.gpus > 1 else devices if isinstance(devices, int) and devices > 1 else 1
    node.workers = workers
    threads = t.get("threads", "auto")
    node.threads = int(threads) if isinstance(threads, int) and not isinstance(threads, bool) else None
    if model_cfg is not None:
        params = trained_parameters(cfg, model_cfg)
        node.host_mib = host_mib(train_mib, params, node.gpus != 0, workers, node.tasks)
        objective = cfg.objective.name if stage == "pretrain" else ""
        node.workload = workload(stage, model_cfg.hidden_size, t, objective)


def continuation_node(
    sweep: Sweep, v: Variant, settings: DictConfig, pre: Node, pre_cfg: DictConfig, model_cfg
) -> tuple[Node, Start]:
    """(the node continuing ``pre``'s pre-training at a longer length, the Start of the variant's
    SQuAD tasks): ConvBERT Table 4 (as ELECTRA and BERT) pre-trains at length 128, then runs an
    extra ``squad_continuation.fraction`` (10%) of its updates at ``seq_len`` (512) before SQuAD.

    The node is ``convexp pretrain`` with the pre-training's own overrides plus ``init=<its run>``,
    ``seq_len``, ``trainer.max_steps`` = fraction x the pre-training's resolved updates (multiplier
    included, so "train longer" continues 10% of 4M), the warm-up scaled by the same fraction (the
    schedule's shape kept) and ``name=seq<L>`` (readable in run ids). Its run id is the hash of that
    config, so another sweep continuing the same pre-training run finds it cached. At scale=smoke the
    length is the smoke models' position table (model.max_position_embeddings: 128, twice the smoke
    pre-training's 64): the stage runs, at the length a smoke model can hold."""
    from ..config.compose import override_key, parse_overrides
    from ..config.name_tokens import variant_tokens

    spec = sweep.squad_continuation
    where = f"sweep {sweep.name}, variant {v.name}, squad_continuation"
    positions = pre_cfg.model.max_position_embeddings
    seq_len = positions if settings.scale == "smoke" else spec.seq_len
    if model_cfg.absolute_positions and seq_len > positions:
        raise SweepError(
            f"{where}: seq_len {seq_len} exceeds model.max_position_embeddings={positions}; "
            "lower squad_continuation.seq_len or use a model with more positions"
        )
    steps = max(1, round(spec.fraction * pre_cfg.trainer.max_steps))
    t = pre_cfg.trainer
    name = "-".join(filter(None, [pre_cfg.name, f"seq{seq_len}"]))
    ours = {
        "init": str(pre.runs[0].dir.resolve()),
        "seq_len": seq_len,
        "trainer.max_steps": steps,
        "trainer.steps_multiplier": 1,
        "optim.warmup_steps": max(1, round(spec.fraction * pre_cfg.optim.warmup_steps)),
        "trainer.val_every_n_steps": min(t.val_every_n_steps, steps),
        "trainer.checkpoint_every_n_steps": min(t.checkpoint_every_n_steps, steps),
        "name": name,
    }
    kept = [o for o, p in zip(pre.overrides, parse_overrides(pre.overrides)) if override_key(p) not in ours]
    over = [*kept, *(f"{k}={val}" for k, val in ours.items())]
    cfg = _compose(where, "pretrain", over)
    try:
        flops = pretrain_flops(cfg, model_cfg)
    except (ConfigError, ValueError) as e:
        raise SweepError(f"{where}: {e}") from e
    [run] = command("pretrain").plan(Invocation(cfg, {}), None, variant_tokens(v.pretrain))
    node = Node(f"continue/{v.name}", "pretrain", v.name, over, [run], deps=[pre.key], flops=flops,
                disk=sum(pretrain_bytes(cfg, model_cfg)), data=pretraining_data(cfg))  # fmt: skip
    size_pretraining(node, cfg, model_cfg)
    start = Start(str(run.dir.resolve()), run.id, model_cfg.hidden_size, node.key, model_cfg)
    return node, start


def _logging(sweep: Sweep, v: Variant) -> list[str]:
    """W&B: group = the sweep, tags = the variant (the job type is the stage)."""
    return [f"logger.group={sweep.name}", f"logger.tags=[{v.name}]"]


def finetune_nodes(
    sweep: Sweep,
    v: Variant,
    settings: DictConfig,
    cli: list[str],
    starts: dict[str, Start],
    planned_nodes: dict[str, Node],
    cache: dict,
) -> list[Node]:
    """One node per (task, seed) fine-tuning the variant's start (MNLI included when the protocol
    starts other tasks from it). With a ``teacher:``, each task distils from the teacher variant's
    run of that task (its first seed), which must be planned first."""
    from ..config.name_tokens import variant_tokens

    where = f"sweep {sweep.name}, variant {v.name}"
    start = starts[v.name]
    outputs = (
        f"outputs={Path(compose_cached(cache, where, [f'scale={settings.scale}', *cli]).outputs).resolve()}"
    )
    base = [
        f"scale={settings.scale}",
        *sweep.finetune.overrides,
        *v.finetune,
        *cli,
        *_logging(sweep, v),
        f"init={start.init}",
        outputs,
    ]
    tasks = list(settings.tasks) if settings.tasks is not None else list(sweep.finetune.tasks)
    teachers = {t: _teacher_node(sweep, v, t, planned_nodes) for t in tasks} if v.teacher else {}

    def task_overrides(name: str) -> list[str]:
        teacher = teachers.get(name)
        return [f"distill.teacher={teacher.runs[0].dir.resolve()}"] if teacher else []

    def compose_task(name: str) -> DictConfig:
        over = [*base, *_seeds_override(sweep, settings), f"task={name}", *task_overrides(name)]
        return compose_cached(cache, where, over)

    nodes: dict[str, Node] = {}
    known: dict[str, set] = {}  # node -> its runs' directories
    settings_of: dict[tuple, tuple] = {}  # (task, its settings' hp) -> (hp, cards.finetune_settings)
    for t in tasks:
        tcfg = compose_task(t)
        kind = config_kind(tcfg)
        try:  # as its node will run it (its TaskKind, tasks/kind.py): checked, then planned
            owner = command(kind)
            inv = Invocation(tcfg, {n: compose_task(n) for n in owner.task_names(tcfg) if n != t})
            owner.check(inv, planned=True)
            planned = owner.plan(inv, start, variant_tokens(v.finetune))
        except UserError as e:
            raise SweepError(f"{where}: {e}") from e
        for p in planned:
            key = f"finetune/{v.name}/{p.task}/s{p.seed}"
            if key not in nodes:
                deps = [start.node] if start.node else []
                starts = [f"finetune/{v.name}/{p.start.task}/s{p.start.seed}"] if p.start else []
                distils = [teachers[p.task].key] if p.task in teachers else []
                over = [*base, f"task={p.task}", f"seeds=[{p.seed}]", *task_overrides(p.task)]
                nodes[key] = Node(key, "finetune", v.name, over, [], [*deps, *starts, *distils], p.task, p.seed,
                                  starts_from=starts, distils_from=distils, keep_weights=str(tcfg.keep_weights),
                                  kind=kind)  # fmt: skip
            if p.run.dir not in known.setdefault(key, set()):
                known[key].add(p.run.dir)
                nodes[key].runs.append(p.run)
                # the settings depend on the run's hp and its task's config alone: one per (task, hp)
                hit = settings_of.get((p.task, id(p.hp)))
                if hit is None or hit[0] is not p.hp:
                    hit = settings_of[(p.task, id(p.hp))] = (p.hp, finetune_settings(p.hp, p.run_cfg))
                nodes[key].hparams[p.run.id] = dict(hit[1])
    sized: dict[tuple, Node] = {}  # (task, batch) -> a node sized for it: the same for every seed
    weights = weights_bytes(start.model_cfg) if start.model_cfg is not None else 0.0
    for node in nodes.values():
        batch = max(int(hp["batch_size"]) for hp in node.hparams.values())  # its largest setting's
        if (node.task, batch) not in sized:
            tcfg = compose_task(node.task)
            node.flops = finetune_flops(tcfg, start.model_cfg, node.task)
            node.memory_mib = finetune_mib(tcfg, start.model_cfg, node.task, batch)
            node.disk = results_bytes(tcfg, node.task)
            _size(node, tcfg, start.model_cfg, node.memory_mib, _finetune_workers(tcfg), "finetune")
            sized[(node.task, batch)] = node
        else:
            like = sized[(node.task, batch)]
            for f in ("flops", "memory_mib", "disk", *SIZES):
                setattr(node, f, getattr(like, f))
        node.weights = weights
    return list(nodes.values())


SIZES = ("gpus", "num_nodes", "tasks", "workers", "threads", "host_mib", "workload")  # _size's fields


def _finetune_workers(cfg: DictConfig) -> int:
    """A fine-tuning task's loader workers (trainer.num_workers; auto: 2 on a GPU, 0 on the CPU)."""
    n = cfg.trainer.get("num_workers", "auto")
    if n == "auto":
        return 0 if job_gpus(cfg) == 0 else LOADER_WORKERS_ON_GPU
    return int(n)


def _teacher_node(sweep: Sweep, v: Variant, task: str, planned: dict[str, Node]) -> Node:
    """The teacher variant's fine-tuning node of ``task`` (the first seed's)."""
    found = [n for n in planned.values() if n.variant == v.teacher and n.task == task]
    if not found:
        raise SweepError(
            f"sweep {sweep.name}, variant {v.name}: its teacher {v.teacher!r} has no {task} run in this plan; "
            f"list {v.teacher!r} before {v.name!r} in the sweep (and keep it in variants=)"
        )
    return found[0]


def _seeds_override(sweep: Sweep, settings: DictConfig) -> list[str]:
    seeds = sweep_seeds(sweep, settings, settings.scale)
    return [] if seeds is None else [f"seeds=[{','.join(map(str, seeds))}]"]


def _compose(where: str, stage: str, overrides: list[str]) -> DictConfig:
    try:
        return compose_stage(stage, overrides)
    except ConfigError as e:
        raise SweepError(f"{where}, {stage}: {e}") from e


def compose_cached(cache: dict, where: str, overrides: list[str]) -> DictConfig:
    """A fine-tuning config for planning. Only the init's run id and width matter to the plan, so
    variants share compositions: init= and the W&B tags are left out (saves a compose per node)."""
    key = tuple(o for o in overrides if not o.startswith(("init=", "logger.tags=")))
    if key not in cache:
        cache[key] = _compose(where, "finetune", [*key, "init=planned"])
    return cache[key]


@functools.cache
def _paper_seeds() -> list[int]:
    return list(OmegaConf.load(CONF_DIR / "finetune_scale" / "paper.yaml").seeds)


def sweep_seeds(sweep: Sweep, settings: DictConfig, scale: str) -> list[int] | None:
    """Explicit seeds, or None for the scale's own (conf/finetune_scale/<scale>.yaml). Adaptive
    seeds (``adaptive.looks``) plan the cap's: the first of ``seeds=`` or of the papers' list, at
    every scale (sweep/adaptive.py cuts the plan to what each cell needs)."""
    looks = (settings.get("adaptive") or {}).get("looks")
    if looks is not None:
        cap = int(looks[-1])
        given = settings.seeds if settings.seeds is not None else _paper_seeds()
        given = [int(s) for s in (given if not isinstance(given, int) else [given])]
        if len(given) < cap:
            raise SweepError(
                f"adaptive.looks caps at {cap} seeds but {len(given)} are listed; give seeds=[...] with "
                f"{cap} or lower the cap"
            )
        return given[:cap]
    if settings.seeds is not None:
        return [int(s) for s in (settings.seeds if not isinstance(settings.seeds, int) else [settings.seeds])]
    s = sweep.finetune.seeds
    if isinstance(s, tuple):  # the experiment's own seeds (e.g. BERMO Table 3): at every scale
        return list(s)
    if s is None or scale != "paper":
        return None
    if isinstance(s, int):
        paper = _paper_seeds()
        if s > len(paper):
            raise SweepError(
                f"sweep {sweep.name}: seeds: {s} but the paper scale lists only {len(paper)} seeds"
            )
        return paper[:s]
    return list(s)
