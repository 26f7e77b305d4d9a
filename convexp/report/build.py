"""`convexp report NAME`: a sweep's runs → outputs/reports/NAME/ (table, report.json, figures).

The report rebuilds the sweep's plan with the same arguments as the last ``convexp ablate NAME``
(or those given), so it reads exactly those runs: from the local run store (metrics.json) or,
with ``source="wandb"``, from the W&B runs of the same ids (their summary's ``result``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ..atomic import atomic_write
from ..errors import UserError
from ..models.stats import is_measured
from ..sweep.compute import parameters
from ..tasks import kind as task_kind
from ..sweep import adaptive
from ..sweep.execute import last_args
from ..sweep.plan import Plan, build_plan
from ..sweep.spec import check_detect, load_sweep
from . import decide, tables
from .flops import NOTE as FLOPS_NOTE
from .flops import table3_flops
from .tables import MEASURED

MEASURED_NOTE = (
    f"{MEASURED} your own module: parameters counted from the built model, FLOPs measured by torch's "
    "FlopCounterMode on its blocks (the presets' are derived from their shapes, the same counts)."
)
from .varied import describe, settings, varied

FORMATS = {"md": "table.md", "csv": "table.csv", "latex": "table.tex"}


class ReportError(UserError):
    pass


# ----------------------------------------------------------------------------- reading results


def local_result(run) -> dict | None:
    """A finished run's metrics.json, or None."""
    return run.read_json("metrics.json") if run.finished else None


def wandb_reader(plan: Plan):
    """Results from W&B: the runs with the plan's run ids in the configured project."""
    import wandb

    cfg = plan.logger
    try:
        api = wandb.Api()
    except Exception as e:  # no key, no network
        raise ReportError(
            f"cannot use the W&B API ({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}); "
            "run `wandb login` (and `wandb sync` offline runs) or use --source local"
        ) from e
    path = f"{cfg.entity}/{cfg.project}" if cfg.entity else cfg.project

    def read(run) -> dict | None:
        try:
            remote = api.run(f"{path}/{run.id}")
        except Exception:  # not synced (yet), or no such run
            return None
        if remote.state != "finished":
            return None
        result = remote.summary.get("result")
        return dict(result) if result else None

    return read


def collect(plan: Plan, read) -> tuple[dict, dict, list[str]]:
    """({variant: pretrain info}, {variant: [fine-tuning results]}, [node keys without results]).

    A variant that fine-tunes a checkpoint has no pre-training metrics or FLOPs (its parameters are
    counted when the checkpoint's config is on disk); FLOPs are counted as ConvBERT's Table 3
    counts them (``flops.py``)."""
    pretrain, finetune, missing = {}, {}, []
    for v, start in plan.starts.items():
        cfg = plan.pretrain_cfgs.get(v)
        metrics = read(plan.nodes[start.node].runs[0]) if start.node else None
        if start.node and metrics is None and start.node not in missing:
            missing.append(start.node)
        pretrain[v] = {
            "metrics": metrics,
            "params": parameters(start.model_cfg) if start.model_cfg is not None else None,
            "flops": table3_flops(cfg, start.model_cfg) if cfg is not None else None,
            "measured": start.model_cfg is not None and is_measured(start.model_cfg),
            "run": start.slug,
        }
    for node in plan.order():
        if node.stage == "pretrain":
            continue
        results = [(r, read(r)) for r in node.runs]
        if any(m is None for _, m in results):
            missing.append(node.key)
        for r, m in results:
            if m is not None:
                own = {"seed": node.seed, "run": r.id, "kind": node.kind or task_kind(node.task)}
                finetune.setdefault(node.variant, []).append({**m, **own})
    return pretrain, finetune, missing


# ----------------------------------------------------------------------------- the report


def make_report(
    name: str,
    args: list[str] | None = None,
    fmt: str = "md",
    source: str = "local",
    analyze: list[str] | None = None,
    out: Path | None = None,
    figures: bool = True,
    require_results: bool = True,
) -> Path:
    """Write outputs/reports/NAME/ and print the table; returns the directory. ``args``: the sweep's
    arguments (None: the last ``convexp ablate NAME``'s) and ``report.baseline=`` / ``report.detect=``.
    A sweep without a finished run is refused (``require_results=False``: the paper's side and what
    needs no run, parameters and FLOPs, are rendered alone)."""
    if fmt not in FORMATS:
        raise ReportError(f"unknown format {fmt!r}; use md, csv or latex")
    if source not in ("local", "wandb"):
        raise ReportError(f"unknown source {source!r}; use local or wandb")
    sweep = load_sweep(name)
    args, own = _report_args(args)
    if args is None:  # the last `convexp ablate NAME`'s arguments
        args = last_args(Path(os.environ.get("CONVEXP_OUTPUTS", "outputs")), sweep.name) or []
    spec = dataclasses.replace(sweep.report, **own)
    if "columns" in own:
        from ..sweep.spec import check_report

        check_report(spec, sweep.variants, sweep.finetune, "report.columns")
    if spec.baseline is not None and spec.baseline not in sweep.variants:
        raise ReportError(
            f"report.baseline={spec.baseline} is not a variant of {sweep.name}; choose one of: "
            + ", ".join(sweep.variants)
        )
    plan = build_plan(sweep, args)
    design = adaptive.design_of(plan)
    if design is not None:  # adaptive seeds: the seeds the cells ran, not the cap's
        full = plan
        plan, cells = adaptive.current(plan, design)
    read = wandb_reader(plan) if source == "wandb" else local_result
    pretrain, finetune, missing = collect(plan, read)
    if require_results and not finetune and not any(p["metrics"] for p in pretrain.values()):
        given = " ".join(args)
        raise ReportError(
            f"sweep {sweep.name} has no finished runs{f' for {given}' if given else ''} in {plan.outputs}; "
            f"run them first: convexp ablate {name} {given}".rstrip()
        )
    columns = _columns(plan, spec.columns)
    rows = [
        tables.variant_row(
            sweep.variants[v],
            spec.style,
            spec.aggregate,
            columns,
            pretrain.get(v),
            finetune.get(v, []),
            spec.split,
            spec.exclude_diverged,
        )
        for v in plan.variants
    ]
    dec = _decisions(plan, spec, rows, columns) if any(r.seeds for r in rows) else None
    out = Path(out) if out else plan.outputs / "reports" / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    title = f"{sweep.name}: {sweep.title}"
    glue = tables.glue_note(rows, spec.style)  # ours beside the paper's GLUE: what each averages
    lines = _header_lines(plan, rows, finetune, missing, glue)
    if design is not None:
        lines += adaptive.report_lines(full, plan, design, cells)
    if fmt == "md":  # the verdicts beside the paper's numbers; the decisions' lines and tables under it
        text = tables.to_markdown(rows, columns, title, lines, decide.verdict_cells(dec) if dec else {})
        text += "".join(f"\n{x}" for x in decide.below_table(dec, rows, _paper_se(plan))) if dec else ""
    elif fmt == "latex":
        beside = decide.verdict_cells(dec, decide.tex) if dec else {}
        text = tables.to_latex(rows, columns, title, beside, (glue,) if glue else ())
        text += decide.latex(dec, rows) if dec else ""
    else:
        text = tables.to_csv(rows, columns)
    atomic_write(out / FORMATS[fmt], text)
    if fmt == "csv" and glue:  # the file stays data; the terminal says it
        text += glue + "\n"
    if dec:
        atomic_write(out / "statistics.csv", decide.to_csv(dec))
    written = _figures(plan, spec, rows, dec, out) if figures else []
    analyses = {}
    # the sweep's default analyses cover the variants that were run; --analyze names must exist
    wanted = analyze
    if wanted is None:
        wanted = [v for v in spec.analyze if v in plan.pretrain_cfgs] if figures else []
    for variant in wanted:
        analyses[variant] = _analyze(plan, variant, out)
    labels = {r.variant: r.label for r in rows}
    report = {
        "sweep": sweep.name,
        "source": sweep.source,
        "args": args,
        "results_from": source,
        "aggregate": spec.aggregate,
        "style": spec.style,
        "paper_split": spec.paper_split,
        "columns": columns,
        "rows": tables.to_json(rows, columns),
        "statistics": decide.to_json(dec, labels) if dec else None,
        "missing": missing,
        "adaptive": adaptive.to_json(full, plan, design, cells) if design is not None else None,
        "figures": written,
        "analysis": analyses,
    }
    atomic_write(out / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    if source == "wandb":
        _log_to_wandb(plan, report, out)
    print(text if fmt != "md" else text.replace("## ", "", 1))
    for f in written:
        print(f"figure: {f}")
    for v, a in analyses.items():
        print(f"analysis of {v}: " + (", ".join(a["files"]) if "files" in a else a.get("error", "")))
    print(f"report: {out}")
    return out


def _report_args(args: list[str] | None) -> tuple[list[str] | None, dict]:
    """The sweep's arguments (None when only report settings were given: the last ablate's) and
    the report settings among them: ``report.baseline=VARIANT``, ``report.detect=POINTS``,
    ``report.columns=[COLUMN,...]`` (checked as a sweep file's columns)."""
    if args is None:
        return None, {}
    own, rest = {}, []
    for a in args:
        key, _, value = a.partition("=")
        if not key.startswith("report."):
            rest.append(a)
        elif key == "report.baseline" and value:
            own["baseline"] = value
        elif key == "report.columns" and value:  # other columns than the sweep file's, e.g. the tasks run
            import yaml

            cols = yaml.safe_load(value)
            if not isinstance(cols, list) or not cols or not all(isinstance(c, str) for c in cols):
                raise ReportError(f"{a}: give a list of report columns, e.g. report.columns=[sst2,diverged]")
            own["columns"] = tuple(cols)
        elif key == "report.detect":
            try:
                own["detect"] = float(value)
            except ValueError:
                own["detect"] = value
            check_detect(own["detect"], "report.detect")
        else:
            raise ReportError(
                f"unknown report setting {a!r}; use report.baseline=VARIANT, report.detect=POINTS or "
                "report.columns=[COLUMN,...]"
            )
    return (None if own and not rest else rest), own


def _paper_se(plan: Plan) -> dict[str, dict[str, float]]:
    variants = plan.sweep.variants
    return {v: dict(variants[v].paper_se) for v in plan.variants if variants[v].paper_se}


def _decisions(plan: Plan, spec, rows: list, columns: list[str]) -> decide.Decisions:
    """Differences against the baseline, verdicts against the paper, seeds needed (``decide.py``).
    Seeds pair between variants fine-tuned from the same pre-training seed (or the same checkpoint):
    ``Plan.origins``."""
    same_split = spec.paper_split in (None, spec.split)  # no verdicts of our dev scores against test numbers
    return decide.decide(
        rows, columns, spec.aggregate, spec.baseline, spec.detect, plan.origins(), _paper_se(plan), same_split
    )


def _figures(plan: Plan, spec, rows: list, dec, out: Path) -> list[str]:
    """The sweep's own figure (``figure.png``), every seed's score per variant (``seeds.png``) and
    the forest plot of the differences (``differences.png``), each titled with what the sweep varies."""
    from . import figures

    varies = varied(plan.sweep, plan.variants)
    title = f"{plan.sweep.name} (scale={plan.settings.scale}): {plan.sweep.title}\n{describe(varies)}"
    written = []
    if spec.figure:
        written.append(str(figures.curve(plan.sweep, rows, varies, title, out / "figure.png")))
    if dec is not None:
        written.append(str(figures.seed_scores(dec, rows, varies, spec.split, spec.style, title, out / "seeds.png")))
        if any(d is not None for d in dec.differences.values()):
            written.append(str(figures.differences(dec, rows, varies, spec.style, title, out / "differences.png")))
    return written


def _log_to_wandb(plan: Plan, report: dict, out: Path) -> None:
    """The report as a W&B run of the sweep's group (job type ``report``): its statistics in the
    summary, the figures as images."""
    import wandb

    from ..train.wandb_mode import own_service, skip_unstaged_launch_inputs, wandb_mode

    cfg = plan.logger
    mode, _why = wandb_mode(cfg)
    if mode == "disabled":
        return
    own_service()
    skip_unstaged_launch_inputs()
    run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        group=plan.sweep.name,
        job_type="report",
        name=f"report-{plan.sweep.name}",
        dir=str(out),
        mode=mode,
        config={"sweep": plan.sweep.name, "args": report["args"]},
    )
    try:
        run.summary.update({k: report[k] for k in ("rows", "statistics", "missing")})
        images = {Path(f).stem: wandb.Image(f) for f in report["figures"]}
        if images:
            run.log(images)
    finally:
        run.finish()


def _columns(plan: Plan, columns) -> list[str]:
    """The report's ``columns``, ``seeds`` expanded to one column per planned seed (``s<SEED>``)."""
    seeds = list(dict.fromkeys(n.seed for n in plan.order() if n.stage == "finetune"))
    out = []
    for c in columns:
        out += [f"s{s}" for s in seeds] if c == "seeds" else [c]
    return out


def _titles(plan: Plan, tasks: list[str]) -> list[str]:
    """How the header names the sweep's tasks: each kind's title (tasks/kind.py), GLUE's first."""
    from ..tasks import task_kind as kind_object

    kinds = {n.task: n.kind for n in plan.order() if n.stage == "finetune" and n.kind}
    titles = [kind_object(kinds.get(t) or task_kind(t)).title for t in tasks if t not in ("all",)]
    titles = ["GLUE" if t == "probing" else t for t in titles]  # a probing task in a GLUE-style table
    return sorted(set(titles), key=lambda t: (t != "GLUE", titles.index(t)))


def _header_lines(plan: Plan, rows: list, finetune: dict, missing: list[str], glue: str | None) -> list[str]:
    spec, sweep = plan.sweep.report, plan.sweep
    seeds = sorted({m["seed"] for ms in finetune.values() for m in ms})
    tasks = list(sweep.finetune.tasks) if sweep.finetune else []
    kinds = _titles(plan, tasks)
    kind = "probing" if spec.style == "probing" else " and ".join(kinds) or "GLUE"
    lines = [
        f"Source: {sweep.source.get('paper', '?')}, {sweep.source.get('ref', '?')}."
        + (f" {sweep.source['note']}" if sweep.source.get("note") else ""),
        f"Ours: scale={plan.settings.scale}"
        + (f", arguments: {' '.join(plan.args)}" if plan.args else "")
        + f"; {kind} {spec.split}, "
        + f"{spec.aggregate} over {len(seeds)} seed(s) per task"
        + (" (± standard error)" if spec.aggregate == "mean" and len(seeds) > 1 else "")
        + (", collapsed runs left out" if spec.exclude_diverged else "")
        + f"; {spec.style} scoring.",
    ]
    if spec.paper_split and any(v.paper for v in sweep.variants.values()):
        other = spec.paper_split != spec.split
        lines.append(
            f"Paper: {spec.paper_split} numbers as printed"
            + (f" (ours are {spec.split} scores: no verdicts against them)." if other else ".")
        )
    start = next(iter(plan.starts.values()))
    if start.node is None:
        lines.append(f"Every variant fine-tunes the checkpoint {start.init} (no pre-training).")
    if glue:
        lines.append(glue)
    groups = [c for c in ("surface", "syntactic", "semantic", "probing") if any(c in r.ours for r in rows)]
    if any(r.ours[c].note == "*" for r in rows for c in groups):
        lines.append("Averages marked * leave out tasks without a result (not run, or every run collapsed).")
    if missing:
        lines.append(
            f"Missing ({len(missing)} runs not finished): {', '.join(missing[:6])}"
            + (" …" if len(missing) > 6 else "")
        )
    if "flops" in spec.columns:
        lines.append(FLOPS_NOTE)
    if any(c.note == MEASURED for r in rows for c in r.ours.values()):
        lines.append(MEASURED_NOTE)
    lines += list(spec.notes)
    return lines


def _analyze(plan: Plan, variant: str, out: Path) -> dict:
    """Attention maps, concentration C and learned kernels of a variant's pre-trained model."""
    if variant not in plan.starts:
        raise ReportError(
            f"no variant {variant!r} in this sweep's plan; choose one of: {', '.join(plan.variants)}"
        )
    if plan.starts[variant].node is None:
        return {
            "error": f"{variant} fine-tunes a checkpoint ({plan.starts[variant].init}); analyse that directly"
        }
    run = plan.nodes[plan.starts[variant].node].runs[0]
    if not run.finished:
        return {"error": f"{run.dir} has not finished"}
    from .analysis import analyze_model

    own = settings(varied(plan.sweep, plan.variants), variant)
    about = f"{plan.sweep.name} (scale={plan.settings.scale}), variant {variant}"
    about += f": {own}" if own else ""
    return analyze_model(run.model_dir, out, variant, about=about)
