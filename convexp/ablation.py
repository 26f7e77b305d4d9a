"""Named sweeps: ``sweeps/NAME.yaml`` → a graph of stage runs → a launcher → the run store.

A sweep (format: ``sweeps/README.md``) names its variants as sets of Hydra overrides. The plan
expands it into nodes, each one ordinary stage command (``convexp pretrain ...`` or ``convexp
finetune glue task=T seeds=[S] init=<that variant's pre-training run>``), and knows every node's
run directory before anything runs, because run ids are hashes of the composed configs. So:

- a node whose runs have finished is *cached*: re-running a sweep trains nothing twice;
- an unfinished node resumes from its last checkpoint (the stage commands do that);
- a node fails alone: its dependents are *blocked*, everything else still runs, and the failures
  are listed at the end (exit code 1);
- ``convexp report`` rebuilds the same plan and reads the same directories.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from .config import CONF_DIR, SWEEP_DIR, ConfigError, compose, compose_stage, group_options, to_model_config
from .errors import UserError
from .runs import Run

STAGES = ("pretrain", "finetune")
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# GLUE training-set sizes, for the compute estimate of fine-tuning on the real data (SentEval's
# probing tasks: 100k each)
GLUE_TRAIN = {
    "cola": 8551,
    "sst2": 67349,
    "mrpc": 3668,
    "stsb": 5749,
    "qqp": 363846,
    "mnli": 392702,
    "qnli": 104743,
    "rte": 2490,
    "wnli": 635,
}
REPORT_COLUMNS = {"params", "flops", "glue"}


class SweepError(UserError):
    """A problem with a sweep file or a sweep command line."""


# ----------------------------------------------------------------------------- sweep files


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    label: str
    pretrain: tuple[str, ...] = ()
    finetune: tuple[str, ...] = ()
    x: float | None = None
    paper: dict = dataclasses.field(default_factory=dict)
    teacher: str | None = None  # distil from this variant's fine-tuned run of the same task
    series: str | None = None  # the figure's series (a line) this variant belongs to


@dataclasses.dataclass(frozen=True)
class FinetuneSpec:
    tasks: tuple[str, ...]
    seeds: int | tuple[int, ...] | None = None
    overrides: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ReportSpec:
    style: str = "convbert"
    aggregate: str = "median"
    columns: tuple[str, ...] = ("params", "glue")
    paper_split: str | None = None
    figure: dict | None = None
    analyze: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    split: str = "dev"  # our numbers: dev, or test (labelled test splits: SentEval's)
    exclude_diverged: bool = False  # leave collapsed runs out of the aggregates (as BERMO does)


@dataclasses.dataclass(frozen=True)
class Sweep:
    name: str
    path: Path
    source: dict
    data: str | None  # the paper's pre-training corpus (conf/data/), used at scales above smoke
    pretrain: tuple[str, ...]
    init: str | None  # fine-tune this checkpoint instead of pre-training, at scales above smoke
    smoke: tuple[str, ...]  # arguments added at scale=smoke (before the command line's)
    finetune: FinetuneSpec | None
    variants: dict[str, Variant]
    report: ReportSpec

    @property
    def title(self) -> str:
        s = self.source
        return f"{s.get('paper', '?')}, {s.get('ref', '?')}"


def sweep_names() -> list[str]:
    return sorted(p.stem for p in SWEEP_DIR.glob("*.yaml"))


def load_sweep(name: str) -> Sweep:
    """``sweeps/NAME.yaml`` (or a path to a sweep file), checked: any problem is one line."""
    path = Path(name)
    if not (name.endswith((".yaml", ".yml")) and path.exists()):
        path = SWEEP_DIR / f"{name}.yaml"
        if not path.exists():
            raise SweepError(
                f"unknown sweep {name!r}; choose one of: {', '.join(sweep_names())} (or give a path to a .yaml file)"
            )
    where = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise SweepError(
            f"{where}: not valid YAML{at}: {getattr(e, 'problem', e)}; fix the file's syntax"
        ) from e
    d = _mapping(
        raw, where, {"source", "data", "init", "smoke", "pretrain", "finetune", "variants", "report"}
    )
    data = d.get("data")
    if data is not None and data not in group_options("data"):
        raise SweepError(
            f"{where}: data {data!r} is not a corpus; choose one of: {', '.join(group_options('data'))}"
        )
    source = _mapping(d.get("source") or {}, f"{where}: source", {"paper", "ref", "note"})
    if not d.get("variants"):
        raise SweepError(f"{where}: no variants; add `variants:` with at least one named set of overrides")
    variants = {}
    for vname, v in _mapping(d["variants"], f"{where}: variants").items():
        vwhere = f"{where}: variant {vname!r}"
        if not NAME.match(str(vname)):
            raise SweepError(f"{vwhere}: variant names may use letters, digits, _ . - only")
        v = _mapping(v or {}, vwhere, {"label", "pretrain", "finetune", "x", "paper", "teacher", "series"})
        paper = _mapping(v.get("paper") or {}, f"{vwhere}: paper")
        variants[str(vname)] = Variant(
            name=str(vname),
            label=str(v.get("label", vname)),
            pretrain=_overrides(v.get("pretrain"), f"{vwhere}: pretrain"),
            finetune=_overrides(v.get("finetune"), f"{vwhere}: finetune"),
            x=v.get("x"),
            paper={str(k): val for k, val in paper.items()},
            teacher=v.get("teacher"),
            series=None if v.get("series") is None else str(v["series"]),
        )
    for v in variants.values():
        if v.teacher is not None and (v.teacher not in variants or v.teacher == v.name):
            raise SweepError(
                f"{where}: variant {v.name!r}: teacher must name another variant, not {v.teacher!r}"
            )
        if v.teacher is not None and variants[v.teacher].teacher is not None:
            raise SweepError(f"{where}: variant {v.name!r}: its teacher {v.teacher!r} has a teacher itself")
    finetune = None
    if d.get("finetune") is not None:
        f = _mapping(d["finetune"], f"{where}: finetune", {"tasks", "seeds", "overrides"})
        tasks = _names(f.get("tasks"), f"{where}: finetune.tasks")
        seeds = f.get("seeds")
        if seeds is not None and not (
            (isinstance(seeds, int) and seeds > 0)
            or (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds))
        ):
            raise SweepError(f"{where}: finetune.seeds must be a positive count or a list of integers")
        finetune = FinetuneSpec(
            tasks=tasks,
            seeds=tuple(seeds) if isinstance(seeds, list) else seeds,
            overrides=_overrides(f.get("overrides"), f"{where}: finetune.overrides"),
        )
    if d.get("init") is not None and not (isinstance(d["init"], str) and finetune is not None):
        raise SweepError(
            f"{where}: init must be a checkpoint (HF hub name or directory) to fine-tune (needs `finetune:`)"
        )
    if any(v.teacher for v in variants.values()) and finetune is None:
        raise SweepError(f"{where}: a variant's teacher is a fine-tuned run: the sweep needs `finetune:`")
    r = _mapping(
        d.get("report") or {},
        f"{where}: report",
        {
            "style",
            "aggregate",
            "columns",
            "paper_split",
            "figure",
            "analyze",
            "notes",
            "split",
            "exclude_diverged",
        },
    )
    report = ReportSpec(
        style=r.get("style", "convbert"),
        aggregate=r.get("aggregate", "median"),
        columns=tuple(r.get("columns") or (ReportSpec.columns if finetune else ("params", "flops"))),
        paper_split=r.get("paper_split"),
        figure=r.get("figure"),
        analyze=tuple(r.get("analyze") or ()),
        notes=tuple(r.get("notes") or ()),
        split=r.get("split", "dev"),
        exclude_diverged=bool(r.get("exclude_diverged", False)),
    )
    _check_report(report, variants, finetune, where)
    return Sweep(
        name=path.stem,
        path=path,
        source=source,
        data=data,
        pretrain=_overrides(d.get("pretrain"), f"{where}: pretrain"),
        init=d.get("init"),
        smoke=_overrides(d.get("smoke"), f"{where}: smoke"),
        finetune=finetune,
        variants=variants,
        report=report,
    )


def _mapping(x, where: str, allowed: set[str] | None = None) -> dict:
    if not isinstance(x, dict):
        raise SweepError(f"{where}: expected a mapping (key: value), got {type(x).__name__}")
    unknown = sorted(set(map(str, x)) - allowed) if allowed is not None else []
    if unknown:
        raise SweepError(
            f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))} (see sweeps/README.md)"
        )
    return x


def _overrides(x, where: str) -> tuple[str, ...]:
    if x is None:
        return ()
    if not isinstance(x, list) or not all(isinstance(o, str) and "=" in o for o in x):
        raise SweepError(f"{where}: expected a list of KEY=VALUE overrides, e.g. [model=convbert_small]")
    return tuple(x)


def _names(x, where: str) -> tuple[str, ...]:
    if not isinstance(x, list) or not x or not all(isinstance(t, str) for t in x):
        raise SweepError(f"{where}: expected a list of task names, e.g. [cola, sst2]")
    return tuple(x)


def _check_report(r: ReportSpec, variants: dict, finetune: FinetuneSpec | None, where: str) -> None:
    from .data.scores import CHANG_COLUMNS, CONVBERT_COLUMNS
    from .data.tasks import GROUPS, PROBING_ORDER

    if r.style not in ("convbert", "chang", "probing"):
        raise SweepError(f"{where}: report.style must be convbert, chang or probing, not {r.style!r}")
    if r.aggregate not in ("median", "mean", "best"):
        raise SweepError(f"{where}: report.aggregate must be median, mean or best, not {r.aggregate!r}")
    if r.split not in ("dev", "test"):
        raise SweepError(f"{where}: report.split must be dev or test, not {r.split!r}")
    task_columns = set(CONVBERT_COLUMNS) | set(CHANG_COLUMNS) | {"mnli-m", "mnli-mm", "wnli"}
    task_columns |= set(PROBING_ORDER) | set(GROUPS) | {"probing", "seeds", "diverged"}
    for c in r.columns:
        head = c.split(".", 1)[0]
        if not (
            c in REPORT_COLUMNS | task_columns or head == "pretrain" or ("." in c and head in task_columns)
        ):
            raise SweepError(
                f"{where}: unknown report column {c!r}; use params, flops, glue, pretrain.<metric>, a task "
                "column (sst2, mnli-m, sentlen...), <task>.<metric>, seeds or diverged (see sweeps/README.md)"
            )
        if (c in task_columns | {"glue"} or head in task_columns) and finetune is None:
            raise SweepError(f"{where}: report column {c!r} needs a `finetune:` stage")
    for a in r.analyze:
        if a not in variants:
            raise SweepError(f"{where}: report.analyze names unknown variant {a!r}")
    if r.figure is not None:
        f = _mapping(r.figure, f"{where}: report.figure", {"kind", "x", "y"})
        if f.get("kind", "curve") != "curve" or "y" not in f:
            raise SweepError(
                f"{where}: report.figure must be {{kind: curve, x: <axis label>, y: <column or list of columns>}}"
            )
        if all(v.x is None for v in variants.values()):
            raise SweepError(
                f"{where}: a curve figure needs `x:` on its variants (those without are reference lines)"
            )


# ----------------------------------------------------------------------------- the plan


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

    @property
    def done(self) -> bool:
        return all(r.finished for r in self.runs)

    @property
    def state(self) -> str:
        if self.done:
            return "cached"
        if any(r.last_checkpoint() for r in self.runs):
            return "resume"
        return "new"

    @property
    def command(self) -> str:
        from .data.tasks import PROBING_ORDER

        kind = "probing" if self.task in PROBING_ORDER else "glue"
        head = "convexp pretrain" if self.stage == "pretrain" else f"convexp finetune {kind}"
        return " ".join([head, *(_quote(o) for o in self.overrides)])


def _quote(o: str) -> str:
    return f"'{o}'" if re.search(r"[\s\[\]{}*?$]", o) else o


@dataclasses.dataclass
class Start:
    """Where a variant's fine-tuning starts: its pre-training run, or a checkpoint (``init:``)."""

    init: str  # the fine-tuning stage's init= (a run directory, a checkpoint dir or hub name)
    slug: str  # the init's name in fine-tuning run ids
    width: int  # hidden size (the protocols' learning rates depend on it)
    node: str | None = None  # the pre-training node, None for a checkpoint
    model_cfg: object = None  # its ModelConfig (None: a hub checkpoint that is not on disk)


@dataclasses.dataclass
class Plan:
    sweep: Sweep
    settings: DictConfig  # conf/ablate.yaml as composed
    args: list[str]  # the command line's KEY=VALUE arguments
    nodes: dict[str, Node]
    starts: dict[str, Start]  # every planned variant -> where its fine-tuning starts
    pretrain_cfgs: dict[str, DictConfig]  # pre-trained variant -> resolved pre-training config
    outputs: Path
    logger: DictConfig  # the W&B settings the runs log with

    @property
    def variants(self) -> list[str]:
        return list(self.starts)

    @property
    def home(self) -> Path:
        """outputs/sweeps/NAME: the sweep's ledger, logs and launcher files."""
        return self.outputs / "sweeps" / self.sweep.name

    def order(self) -> list[Node]:
        """Nodes in dependency order (the plan is built in that order)."""
        return list(self.nodes.values())


def split_args(args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the sweep's own settings, {stage: overrides}) from the command line's KEY=VALUE list.

    ``pretrain.KEY=V`` / ``finetune.KEY=V`` go to one stage; keys of conf/ablate.yaml (scale,
    variants, tasks, seeds, tflops, launcher...) configure the sweep; any other key goes to every
    stage whose configuration has it (an unknown key is an error)."""
    own_keys = set(OmegaConf.load(CONF_DIR / "ablate.yaml")) | {"launcher"}
    own, stage = [], {s: [] for s in STAGES}
    bases = None
    for a in args:
        key, sep, value = a.partition("=")
        if not sep:
            raise SweepError(f"argument {a!r} is not KEY=VALUE; e.g. scale=smoke or pretrain.seed=1")
        bare = key.lstrip("+~")
        prefix = key[: len(key) - len(bare)]
        head = bare.split(".")[0]
        if head in STAGES and "." in bare:
            stage[head].append(prefix + bare.split(".", 1)[1] + "=" + value)
        elif head in own_keys:
            own.append(a)
        else:
            bases = bases or {s: compose_stage(s, [] if s == "pretrain" else ["init=none"]) for s in STAGES}
            targets = [s for s in STAGES if _has_key(bases[s], bare, s)]
            if not targets and not prefix:
                raise SweepError(
                    f"unknown key {bare!r}: neither stage has it; use pretrain.{bare}=... or finetune.{bare}=..., "
                    "or check the spelling (`convexp pretrain --cfg`, `convexp finetune glue init=x --cfg`)"
                )
            for s in targets or STAGES:
                stage[s].append(a)
    return own, stage


# the sweep sets these on the fine-tuning stage itself
_FINETUNE_RESERVED = {"init", "model", "init_model", "task", "seeds"}


def _has_key(cfg: DictConfig, key: str, stage: str) -> bool:
    head = key.split(".")[0]
    if stage == "finetune" and head in _FINETUNE_RESERVED:
        return False
    if (CONF_DIR / head).is_dir() and head in cfg.get("choices", {}):
        return "." not in key or OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING
    return OmegaConf.select(cfg, key, default=_MISSING) is not _MISSING


_MISSING = object()


def build_plan(sweep: Sweep, args: list[str] = ()) -> Plan:
    """Compose every node's configuration (so bad overrides fail here, before any training) and
    find every run directory."""
    own, stage_args = split_args(list(args))
    settings = _settings(own)
    if settings.scale == "smoke" and sweep.smoke:  # the sweep's smoke arguments, then the user's
        own, stage_args = split_args([*sweep.smoke, *args])
        settings = _settings(own)
    checkpoint = _checkpoint(sweep, settings)
    nodes: dict[str, Node] = {}
    starts: dict[str, Start] = {}
    pretrain_cfgs: dict[str, DictConfig] = {}
    by_run: dict[str, str] = {}  # pre-training run id -> its node (variants may share one)
    cache: dict[tuple, DictConfig] = {}  # fine-tuning compositions shared by variants
    for v in _selected(sweep, settings.variants):
        if checkpoint is not None:
            starts[v.name] = _checkpoint_start(checkpoint)
        else:
            pre, cfg, model_cfg = _pretrain_node(sweep, v, settings, stage_args["pretrain"])
            key = by_run.setdefault(pre.runs[0].id, pre.key)
            if key == pre.key:
                nodes[key] = pre
            pretrain_cfgs[v.name] = cfg
            run = pre.runs[0]
            starts[v.name] = Start(str(run.dir.resolve()), run.id, model_cfg.hidden_size, key, model_cfg)
        if sweep.finetune is not None:
            ft = _finetune_nodes(sweep, v, settings, stage_args["finetune"], starts, nodes, cache)
            for node in ft:
                if node.key in nodes:  # another grid setting of the same (task, seed)
                    nodes[node.key].runs += [r for r in node.runs if r not in nodes[node.key].runs]
                else:
                    nodes[node.key] = node
    if pretrain_cfgs:
        first = next(iter(pretrain_cfgs.values()))
    else:
        first = _compose_cached(cache, sweep.name, [f"scale={settings.scale}", *stage_args["finetune"]])
    return Plan(
        sweep,
        settings,
        list(args),
        _dependency_order(nodes),
        starts,
        pretrain_cfgs,
        Path(first.outputs),
        first.logger,
    )


def _checkpoint(sweep: Sweep, settings: DictConfig) -> str | None:
    """The checkpoint every variant fine-tunes, or None to pre-train: ``init=`` on the command line
    (``init=pretrain``: pre-train even at scales above smoke), else the sweep's ``init:`` above smoke."""
    if settings.init is not None:
        return None if settings.init == "pretrain" else str(settings.init)
    return sweep.init if settings.scale != "smoke" else None


def _checkpoint_start(init: str) -> Start:
    """A checkpoint's name and width, from its config when it is on disk (a directory, a convexp
    run, or the HF cache); a hub checkpoint not downloaded yet is assumed base-sized (768: only
    the convbert / chang protocols' learning rates depend on it)."""
    from .models.io import is_model_dir, read_model_config

    p = Path(init).expanduser()
    model_dir = p / "model" if (p / "model").is_dir() else p
    if is_model_dir(model_dir):
        mc = read_model_config(model_dir)
        slug = model_dir.parent.name if model_dir.name == "model" else model_dir.name
        return Start(str(p.resolve()), slug, mc.hidden_size, None, mc)
    config = p / "config.json" if p.is_dir() else _hub_cached(init)
    if p.is_dir() and not config.exists():
        raise SweepError(
            f"init={init}: no config.json there; give a HF checkpoint directory or a convexp run"
        )
    if config is None:
        return Start(init, Path(init).name, 768)
    import json

    from .models.hf import model_config_from_hf

    hf = json.loads(Path(config).read_text())
    try:
        mc = model_config_from_hf(hf, name=init)
    except UserError as e:
        raise SweepError(f"init={init}: {e}") from e
    return Start(str(p.resolve()) if p.is_dir() else init, Path(init).name, mc.hidden_size, None, mc)


def _hub_cached(name: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a valid repo id, no cache: unknown
        return None
    return Path(found) if isinstance(found, str) else None


def _settings(own: list[str]) -> DictConfig:
    """conf/ablate.yaml with the sweep's own arguments."""
    # `scale` names a config group too, so Hydra cannot take scale=... as a plain key: set it after
    scales = [a.split("=", 1)[1] for a in own if a.startswith("scale=")]
    settings = compose("ablate", [a for a in own if not a.startswith("scale=")])
    if scales:
        settings.scale = scales[-1]
    if settings.scale not in group_options("scale"):
        raise SweepError(
            f"unknown scale {settings.scale!r}; choose one of: {', '.join(group_options('scale'))}"
        )
    return settings


def _pretrain_node(sweep: Sweep, v: Variant, settings: DictConfig, cli: list[str]):
    """(the variant's pre-training node, its resolved config, its ModelConfig)."""
    from .stages.plan import pretrain_run, resolve

    where = f"sweep {sweep.name}, variant {v.name}"
    scale = settings.scale
    corpus = [f"data={sweep.data}"] if sweep.data and scale != "smoke" else []  # smoke: synthetic
    over = [f"scale={scale}", *corpus, *sweep.pretrain, *v.pretrain, *cli, *_logging(sweep, v)]
    cfg = _compose(where, "pretrain", over)
    try:
        model_cfg = to_model_config(cfg.model)
        cfg = resolve(cfg)
        flops = _pretrain_flops(cfg, model_cfg)
    except (ConfigError, ValueError) as e:  # e.g. seq_len beyond the position table
        raise SweepError(f"{where}: {e}") from e
    run = pretrain_run(cfg)
    over.append(
        f"outputs={Path(cfg.outputs).resolve()}"
    )  # absolute: workers and cluster jobs start elsewhere
    return Node(f"pretrain/{v.name}", "pretrain", v.name, over, [run], flops=flops), cfg, model_cfg


def _logging(sweep: Sweep, v: Variant) -> list[str]:
    """W&B: group = the sweep, tags = the variant (the job type is the stage)."""
    return [f"logger.group={sweep.name}", f"logger.tags=[{v.name}]"]


def _finetune_nodes(
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
    from .data.tasks import PROBING_ORDER
    from .stages.plan import plan_glue

    where = f"sweep {sweep.name}, variant {v.name}"
    start = starts[v.name]
    outputs = (
        f"outputs={Path(_compose_cached(cache, where, [f'scale={settings.scale}', *cli]).outputs).resolve()}"
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
        return _compose_cached(cache, where, over)

    nodes: dict[str, Node] = {}
    for t in tasks:
        tcfg = compose_task(t)
        if t in PROBING_ORDER and tcfg.glue.source not in ("local", "synthetic"):
            raise SweepError(
                f"{where}: probing task {t} needs SentEval's files: finetune.glue.source=local "
                "finetune.glue.path=<SentEval data/probing> (or scale=smoke: synthetic stand-ins)"
            )
        try:
            planned = plan_glue(tcfg, start.slug, start.width, compose_task)
        except UserError as e:
            raise SweepError(f"{where}: {e}") from e
        for p in planned:
            key = f"finetune/{v.name}/{p.task}/s{p.seed}"
            if key not in nodes:
                deps = [start.node] if start.node else []
                deps += [f"finetune/{v.name}/{p.start.task}/s{p.start.seed}"] if p.start else []
                deps += [teachers[p.task].key] if p.task in teachers else []
                over = [*base, f"task={p.task}", f"seeds=[{p.seed}]", *task_overrides(p.task)]
                nodes[key] = Node(key, "finetune", v.name, over, [], deps, p.task, p.seed)
            if p.run not in nodes[key].runs:
                nodes[key].runs.append(p.run)
    for node in nodes.values():
        node.flops = _finetune_flops(compose_task(node.task), start.model_cfg, node)
    return list(nodes.values())


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
    seeds = _seeds(sweep, settings, settings.scale)
    return [] if seeds is None else [f"seeds=[{','.join(map(str, seeds))}]"]


def _compose(where: str, stage: str, overrides: list[str]) -> DictConfig:
    try:
        return compose_stage(stage, overrides)
    except ConfigError as e:
        raise SweepError(f"{where}, {stage}: {e}") from e


def _compose_cached(cache: dict, where: str, overrides: list[str]) -> DictConfig:
    """A fine-tuning config for planning. Only the init's run id and width matter to the plan, so
    variants share compositions: init= and the W&B tags are left out (saves a compose per node)."""
    key = tuple(o for o in overrides if not o.startswith(("init=", "logger.tags=")))
    if key not in cache:
        cache[key] = _compose(where, "finetune", [*key, "init=planned"])
    return cache[key]


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


def _seeds(sweep: Sweep, settings: DictConfig, scale: str) -> list[int] | None:
    """Explicit seeds, or None for the scale's own (conf/finetune_scale/<scale>.yaml)."""
    if settings.seeds is not None:
        return [int(s) for s in (settings.seeds if not isinstance(settings.seeds, int) else [settings.seeds])]
    s = sweep.finetune.seeds
    if isinstance(s, tuple):  # the experiment's own seeds (e.g. BERMO Table 3): at every scale
        return list(s)
    if s is None or scale != "paper":
        return None
    if isinstance(s, int):
        paper = list(OmegaConf.load(CONF_DIR / "finetune_scale" / "paper.yaml").seeds)
        if s > len(paper):
            raise SweepError(
                f"sweep {sweep.name}: seeds: {s} but the paper scale lists only {len(paper)} seeds"
            )
        return paper[:s]
    return list(s)


def _dependency_order(nodes: dict[str, Node]) -> dict[str, Node]:
    done: dict[str, Node] = {}
    while len(done) < len(nodes):
        for k, n in nodes.items():
            if k not in done and all(d in done for d in n.deps):
                done[k] = n
    return done


# ----------------------------------------------------------------------------- compute estimate


def _pretrain_flops(cfg: DictConfig, model_cfg, generator: bool = True) -> float:
    """Training FLOPs of a pre-training run: per-token FLOPs x steps x batch x length; with
    ``generator``, an ELECTRA generator's too (the compute spent). ConvBERT's Table 3 counts the
    discriminator only (ConvBERT-small: 1.3e18 for 1M updates; ours 1.33e18 that way, 1.8e18 with
    the generator), so reports use generator=False."""
    from .stages.objectives import generator_config

    per_token = _flops_per_token(model_cfg, cfg.seq_len)
    if generator and cfg.objective.name == "electra":
        gen = generator_config(model_cfg, cfg.resolved.generator_fraction)
        per_token += _flops_per_token(gen, cfg.seq_len)
    return per_token * cfg.resolved.max_steps * cfg.resolved.batch_size * cfg.seq_len


def _finetune_flops(cfg: DictConfig, model_cfg, node: Node) -> float:
    """An upper bound: every example padded to the task's max_len (0 when the model is unknown)."""
    if model_cfg is None:
        return 0.0
    n = cfg.glue.synthetic_size if cfg.glue.source == "synthetic" else GLUE_TRAIN.get(node.task, 100_000)
    per_token = _flops_per_token(model_cfg, cfg.task.max_len)
    from .stages.plan import hyperparameters

    total = 0.0
    for hp in hyperparameters(cfg, model_cfg.hidden_size):
        total += per_token * n * hp["epochs"] * cfg.task.max_len
    return total


_FLOPS: dict = {}


def _flops_per_token(model_cfg, seq_len: int) -> float:
    from .models.stats import model_stats

    key = (repr(model_cfg), seq_len)
    if key not in _FLOPS:
        _FLOPS[key] = model_stats(model_cfg, seq_len)[1]
    return _FLOPS[key]


def model_flops(cfg: DictConfig) -> float:
    """A pre-training run's FLOPs as the papers report them (the model itself; see _pretrain_flops)."""
    return _pretrain_flops(cfg, to_model_config(cfg.model), generator=False)


def parameters(model_cfg) -> int:
    from .models.stats import model_stats

    return model_stats(model_cfg)[0]


# ----------------------------------------------------------------------------- running nodes


def run_node(stage: str, overrides: list[str]) -> None:
    """Run one node: exactly what ``convexp <stage> OVERRIDES`` does."""
    if stage == "pretrain":
        from .stages.pretrain import run_pretrain

        run_pretrain(compose_stage("pretrain", overrides))
    else:
        from .stages.finetune import run_glue

        run_glue(
            compose_stage("finetune", overrides),
            lambda task: compose_stage("finetune", [*overrides, f"task={task}"]),
            summary=False,
        )


@dataclasses.dataclass
class Outcome:
    status: str  # done | cached | failed | blocked
    seconds: float = 0.0
    error: str | None = None
    log: str | None = None


def error_line(e: BaseException) -> str:
    if isinstance(e, UserError):
        return str(e)
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0] if text else type(e).__name__


class Ledger:
    """outputs/sweeps/NAME/last.json: the last invocation's arguments and every node's outcome,
    rewritten (atomically) as nodes finish; ``convexp report NAME`` defaults to these arguments."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.outcomes: dict[str, Outcome] = {}
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S")

    def record(self, key: str, outcome: Outcome) -> None:
        self.outcomes[key] = outcome
        self.save()

    def save(self) -> None:
        Run(self.plan.home).write_json(
            "last.json",
            {
                "sweep": self.plan.sweep.name,
                "file": str(self.plan.sweep.path),
                "args": self.plan.args,
                "started": self.started,
                "nodes": {
                    k: {
                        "command": n.command,
                        "runs": [str(r.dir) for r in n.runs],
                        **dataclasses.asdict(self.outcomes.get(k, Outcome("pending"))),
                    }
                    for k, n in self.plan.nodes.items()
                },
            },
        )


def last_args(outputs: Path, name: str) -> list[str] | None:
    data = Run(Path(outputs) / "sweeps" / name).read_json("last.json")
    return data["args"] if data else None


def run_plan(plan: Plan) -> dict[str, Outcome]:
    """Run every node that has work left with the configured launcher; returns the outcomes."""
    from . import launchers

    ledger = Ledger(plan)
    for key, node in plan.nodes.items():
        if node.done:
            ledger.outcomes[key] = Outcome("cached")
    ledger.save()
    launcher = plan.settings.launcher
    if launcher.name == "local" and launcher.workers <= 1:
        launchers.run_sequential(plan, ledger)
    elif launcher.name == "local":
        launchers.run_pool(plan, ledger, int(launcher.workers))
    elif launcher.name == "submitit":
        launchers.run_submitit(plan, ledger, launcher)
    else:
        raise SweepError(f"unknown launcher {launcher.name!r}; use launcher=local or launcher=submitit")
    return ledger.outcomes


def blocked_by(node: Node, outcomes: dict[str, Outcome]) -> str | None:
    """The first dependency that failed or was blocked, or None."""
    for d in node.deps:
        if d in outcomes and outcomes[d].status in ("failed", "blocked"):
            return d
    return None


def ready(node: Node, outcomes: dict[str, Outcome]) -> bool:
    return all(d in outcomes and outcomes[d].status in ("done", "cached") for d in node.deps)


# ----------------------------------------------------------------------------- W&B sweeps


def wandb_sweep_spec(plan: Plan) -> dict:
    """A W&B sweep: one agent job per variant, each running that variant's whole pipeline with
    the same arguments as this command (``${args_no_hyphens}`` passes them as KEY=VALUE)."""
    sweep = plan.sweep
    fixed = {}
    for a in plan.args:
        key, _, value = a.partition("=")
        if key.lstrip("+~") not in ("variants", "launcher", "launcher.workers"):
            fixed[key] = {"value": value}
    return {
        "name": sweep.name,
        "description": f"convexp ablate {sweep.name}: {sweep.title}",
        "program": "convexp",
        "method": "grid",
        "parameters": {"variants": {"values": plan.variants}, **fixed},
        "command": ["convexp", "ablate", sweep.name, "${args_no_hyphens}"],
    }


def write_wandb_sweep(plan: Plan) -> Path:
    path = plan.home / "wandb-sweep.yaml"
    from .atomic import atomic_write

    atomic_write(path, yaml.safe_dump(wandb_sweep_spec(plan), sort_keys=False))
    return path


# ----------------------------------------------------------------------------- printing


def _console():
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def print_sweeps() -> None:
    from rich.table import Table

    table = Table(title="named sweeps (convexp ablate NAME; sweeps/NAME.yaml)")
    for col in ("sweep", "source", "variants", "stages"):
        table.add_column(col)
    for name in sweep_names():
        s = load_sweep(name)
        start = f"{s.init} (smoke: pretrain)" if s.init else "pretrain"
        stages = start + (f" → finetune {','.join(s.finetune.tasks)}" if s.finetune else "")
        note = s.source.get("note", "")
        table.add_row(name, f"{s.title}" + (f"\n{note}" if note else ""), str(len(s.variants)), stages)
    _console().print(table)


def _flops(x: float) -> str:
    return f"{x:.2e}" if x else "-"


def print_plan(plan: Plan) -> None:
    """The --dry-run view: every node, what is cached, and the compute still to do."""
    from rich.table import Table

    table = Table(title=f"convexp ablate {plan.sweep.name} ({plan.sweep.title}), scale={plan.settings.scale}")
    for col in ("node", "state", "run", "train FLOPs"):
        table.add_column(col, justify="right" if col == "train FLOPs" else "left")
    states: dict[str, int] = {}
    todo, unknown = 0.0, 0
    for n in plan.order():
        state = n.state
        states[state] = states.get(state, 0) + 1
        todo += 0 if state == "cached" else n.flops
        unknown += state != "cached" and not n.flops
        table.add_row(n.key, state, ", ".join(r.id for r in n.runs), _flops(n.flops))
    console = _console()
    console.print(table)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(states.items()))
    parts = [f"{len(plan.nodes)} runs ({counts})"]
    if todo:
        hours = todo / (plan.settings.tflops * 1e12) / 3600
        parts.append(
            f"to do: {_flops(todo)} training FLOPs ≈ {hours:.3g} h at {plan.settings.tflops} TFLOP/s "
            "sustained (set tflops=...)"
        )
    if unknown:
        parts.append(f"{unknown} runs of unknown compute (their checkpoint's config is not on disk)")
    elif not todo:
        parts.append("nothing to do")
    console.print("; ".join(parts))
    console.print(
        f"launcher: {plan.settings.launcher.name}; first command: {plan.order()[0].command}",
        markup=False,
        soft_wrap=True,
    )


def print_outcomes(plan: Plan, outcomes: dict[str, Outcome]) -> int:
    """The end-of-sweep summary; returns the number of failed runs."""
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o.status] = counts.get(o.status, 0) + 1
    console = _console()
    console.print(f"sweep {plan.sweep.name}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    failed = {k: o for k, o in outcomes.items() if o.status in ("failed", "blocked")}
    for k, o in failed.items():
        console.print(f"  {o.status}: {k}: {o.error}" + (f" (log: {o.log})" if o.log else ""), markup=False)
    if not failed:
        console.print(f"report: convexp report {plan.sweep.name}")
    return sum(o.status == "failed" for o in outcomes.values())
