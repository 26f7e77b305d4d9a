"""The sweep file (``conf/sweep/NAME.yaml``, format: ``docs/guides/own-sweep.md``): its dataclasses,
loading, and the checks that turn any problem in it into one line naming the fix."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import yaml

from ..config.compose import group_options, group_sources
from ..errors import UserError

NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
REPORT_COLUMNS = {"params", "flops", "glue"}


class SweepError(UserError):
    """A problem with a sweep file or a sweep command line."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One named set of overrides (a row of the table, a point of the figure)."""

    name: str
    label: str
    pretrain: tuple[str, ...] = ()
    finetune: tuple[str, ...] = ()
    x: float | None = None
    paper: dict = dataclasses.field(default_factory=dict)
    paper_se: dict = dataclasses.field(default_factory=dict)  # the paper's printed ± (standard errors)
    teacher: str | None = None  # distil from this variant's fine-tuned run of the same task
    series: str | None = None  # the figure's series (a line) this variant belongs to
    squad_continuation: bool = True  # false: the paper's row had no longer-sequence phase before SQuAD


@dataclasses.dataclass(frozen=True)
class FinetuneSpec:
    """The fine-tuning stage every variant goes through: its tasks, seeds and overrides."""

    tasks: tuple[str, ...]
    seeds: int | tuple[int, ...] | None = None
    overrides: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Continuation:
    """``squad_continuation:``: pre-training continued for ``fraction`` of its updates at length
    ``seq_len`` before the SQuAD tasks (ConvBERT Table 4: 10% at 512); GLUE keeps the length-128 model."""

    fraction: float = 0.1
    seq_len: int = 512


@dataclasses.dataclass(frozen=True)
class ReportSpec:
    """How ``convexp report`` lays out the sweep: the paper's style, columns, figure, notes."""

    style: str = "convbert"
    aggregate: str = "median"
    columns: tuple[str, ...] = ("params", "glue")
    paper_split: str | None = None
    figure: dict | None = None
    analyze: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    split: str = "dev"  # our numbers: dev, or test (labelled test splits: SentEval's)
    exclude_diverged: bool = False  # leave collapsed runs out of the aggregates (as BERMO does)
    baseline: str | None = None  # the variant the others are compared with (None: the first)
    detect: float = 0.5  # the difference (points) the seeds-needed table is for


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A checked sweep file."""

    name: str
    path: Path
    source: dict
    data: str | None  # the paper's pre-training corpus (conf/data/), used at scales above smoke
    tokenizer: str | None  # the paper's tokenizer (conf/tokenizer/), used at scales above smoke
    pretrain: tuple[str, ...]
    init: str | None  # fine-tune this checkpoint instead of pre-training, at scales above smoke
    smoke: tuple[str, ...]  # arguments added at scale=smoke (before the command line's)
    finetune: FinetuneSpec | None
    variants: dict[str, Variant]
    report: ReportSpec
    squad_continuation: Continuation | None = None  # SQuAD starts from a longer-sequence continuation

    @property
    def title(self) -> str:
        s = self.source
        return f"{s.get('paper', '?')}, {s.get('ref', '?')}"


def sweep_names() -> list[str]:
    """The named sweeps: the files in conf/sweep/ and in the user's config dirs' sweep/."""
    return group_options("sweep")


def load_sweep(name: str) -> Sweep:
    """``conf/sweep/NAME.yaml`` (or a path to a sweep file), checked: any problem is one line."""
    path = Path(name)
    if not (name.endswith((".yaml", ".yml")) and path.exists()):
        path = group_sources("sweep").get(name)
        if path is None:
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
        raw,
        where,
        {"source", "data", "tokenizer", "init", "smoke", "pretrain", "finetune", "variants", "report", "squad_continuation"},
    )
    data = d.get("data")
    if data is not None and data not in group_options("data"):
        raise SweepError(
            f"{where}: data {data!r} is not a corpus; choose one of: {', '.join(group_options('data'))}"
        )
    tokenizer = d.get("tokenizer")
    if tokenizer is not None and tokenizer not in group_options("tokenizer"):
        raise SweepError(
            f"{where}: tokenizer {tokenizer!r} is not a tokenizer config; choose one of: "
            f"{', '.join(group_options('tokenizer'))}"
        )
    source = _mapping(d.get("source") or {}, f"{where}: source", {"paper", "ref", "note", "assumption"})
    if not d.get("variants"):
        raise SweepError(f"{where}: no variants; add `variants:` with at least one named set of overrides")
    variants = {}
    for vname, v in _mapping(d["variants"], f"{where}: variants").items():
        vwhere = f"{where}: variant {vname!r}"
        if not NAME.match(str(vname)):
            raise SweepError(f"{vwhere}: variant names may use letters, digits, _ . - only")
        keys = {"label", "pretrain", "finetune", "x", "paper", "paper_se", "teacher", "series", "squad_continuation"}
        v = _mapping(v or {}, vwhere, keys)
        if not isinstance(v.get("squad_continuation", True), bool):
            raise SweepError(f"{vwhere}: squad_continuation is true or false (false: this row does not continue)")
        paper = _mapping(v.get("paper") or {}, f"{vwhere}: paper")
        paper_se = _mapping(v.get("paper_se") or {}, f"{vwhere}: paper_se")
        for k, se in paper_se.items():
            if not isinstance(paper.get(k), (int, float)) or not isinstance(se, (int, float)) or se < 0:
                raise SweepError(
                    f"{vwhere}: paper_se.{k} must be the standard error (a number ≥ 0) of a number in `paper:`"
                )
        variants[str(vname)] = Variant(
            name=str(vname),
            label=str(v.get("label", vname)),
            pretrain=_overrides(v.get("pretrain"), f"{vwhere}: pretrain"),
            finetune=_overrides(v.get("finetune"), f"{vwhere}: finetune"),
            x=v.get("x"),
            paper={str(k): val for k, val in paper.items()},
            paper_se={str(k): float(val) for k, val in paper_se.items()},
            teacher=v.get("teacher"),
            series=None if v.get("series") is None else str(v["series"]),
            squad_continuation=v.get("squad_continuation", True),
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
            "baseline",
            "detect",
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
        baseline=None if r.get("baseline") is None else str(r["baseline"]),
        detect=r.get("detect", ReportSpec.detect),
    )
    check_report(report, variants, finetune, where)
    continuation = _continuation(d.get("squad_continuation"), f"{where}: squad_continuation")
    return Sweep(
        name=path.stem,
        path=path,
        source=source,
        data=data,
        tokenizer=tokenizer,
        pretrain=_overrides(d.get("pretrain"), f"{where}: pretrain"),
        init=d.get("init"),
        smoke=_overrides(d.get("smoke"), f"{where}: smoke"),
        finetune=finetune,
        variants=variants,
        report=report,
        squad_continuation=continuation,
    )


def _continuation(x, where: str) -> Continuation | None:
    if x is None:
        return None
    c = _mapping(x, where, {"fraction", "seq_len"})
    fraction, seq_len = c.get("fraction", Continuation.fraction), c.get("seq_len", Continuation.seq_len)
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise SweepError(f"{where}: fraction must be a number in (0, 1], e.g. 0.1 (10% more updates)")
    if not (isinstance(seq_len, int) and seq_len > 0):
        raise SweepError(f"{where}: seq_len must be a positive integer, e.g. 512")
    return Continuation(float(fraction), seq_len)


FORMAT = "the sweep-file format: the site's guide 'Your own named sweep', docs/guides/own-sweep.md"


def _mapping(x, where: str, allowed: set[str] | None = None) -> dict:
    if not isinstance(x, dict):
        raise SweepError(f"{where}: expected a mapping (key: value), got {type(x).__name__}")
    unknown = sorted(set(map(str, x)) - allowed) if allowed is not None else []
    if unknown:
        raise SweepError(
            f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))} "
            f"({FORMAT})"
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


def check_detect(detect, where: str) -> None:
    """report.detect: the difference to detect, a positive number of points."""
    if isinstance(detect, bool) or not isinstance(detect, (int, float)) or not detect > 0:
        raise SweepError(f"{where} must be a positive number of points, e.g. 0.5, not {detect!r}")


def check_report(r: ReportSpec, variants: dict, finetune: FinetuneSpec | None, where: str) -> None:
    from ..tasks.classification.scores import CHANG_COLUMNS, CONVBERT_COLUMNS
    from ..tasks import PROBING, SQUAD
    from ..tasks.classification.registry import GROUPS

    if r.style not in ("convbert", "chang", "probing"):
        raise SweepError(f"{where}: report.style must be convbert, chang or probing, not {r.style!r}")
    if r.aggregate not in ("median", "mean", "best"):
        raise SweepError(f"{where}: report.aggregate must be median, mean or best, not {r.aggregate!r}")
    if r.split not in ("dev", "test"):
        raise SweepError(f"{where}: report.split must be dev or test, not {r.split!r}")
    task_columns = set(CONVBERT_COLUMNS) | set(CHANG_COLUMNS) | {"mnli-m", "mnli-mm", "wnli"}
    task_columns |= set(PROBING) | set(GROUPS) | set(SQUAD) | {"probing", "seeds", "diverged"}
    task_columns |= set(finetune.tasks) if finetune is not None else set()  # a task of the user's own kind
    for c in r.columns:
        head = c.split(".", 1)[0]
        if not (
            c in REPORT_COLUMNS | task_columns or head == "pretrain" or ("." in c and head in task_columns)
        ):
            raise SweepError(
                f"{where}: unknown report column {c!r}; use params, flops, glue, pretrain.<metric>, a task "
                f"column (sst2, mnli-m, sentlen, squad1...), <task>.<metric>, seeds or diverged ({FORMAT})"
            )
        if (c in task_columns | {"glue"} or head in task_columns) and finetune is None:
            raise SweepError(f"{where}: report column {c!r} needs a `finetune:` stage")
    if r.baseline is not None and r.baseline not in variants:
        raise SweepError(
            f"{where}: report.baseline names unknown variant {r.baseline!r}; choose one of: "
            + ", ".join(variants)
        )
    check_detect(r.detect, f"{where}: report.detect")
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
