"""`convexp report NAME`: a sweep's runs → outputs/reports/NAME/ (table, report.json, figures).

The report rebuilds the sweep's plan with the same arguments as the last ``convexp ablate NAME``
(or those given), so it reads exactly those runs: from the local run store (metrics.json) or,
with ``source="wandb"``, from the W&B runs of the same ids (their summary's ``result``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..atomic import atomic_write
from ..errors import UserError
from ..sweep.compute import parameters
from ..sweep.execute import last_args
from ..sweep.plan import Plan, build_plan
from ..sweep.spec import load_sweep
from . import tables
from .flops import NOTE as FLOPS_NOTE
from .flops import table3_flops

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
                finetune.setdefault(node.variant, []).append({**m, "seed": node.seed, "run": r.id})
    return pretrain, finetune, missing


# ----------------------------------------------------------------------------- the report


def make_report(
    name: str,
    args: list[str] | None = None,
    fmt: str = "md",
    source: str = "local",
    analyze: list[str] | None = None,
    out: Path | None = None,
    require_results: bool = True,
) -> Path:
    """Write outputs/reports/NAME/ and print the table; returns the directory. A sweep without a
    finished run is refused (``require_results=False``: the paper's side and what needs no run,
    parameters and FLOPs, are rendered alone)."""
    if fmt not in FORMATS:
        raise ReportError(f"unknown format {fmt!r}; use md, csv or latex")
    if source not in ("local", "wandb"):
        raise ReportError(f"unknown source {source!r}; use local or wandb")
    sweep = load_sweep(name)
    if args is None:  # the last `convexp ablate NAME`'s arguments
        args = last_args(Path(os.environ.get("CONVEXP_OUTPUTS", "outputs")), sweep.name) or []
    plan = build_plan(sweep, args)
    read = wandb_reader(plan) if source == "wandb" else local_result
    pretrain, finetune, missing = collect(plan, read)
    if require_results and not finetune and not any(p["metrics"] for p in pretrain.values()):
        given = " ".join(args)
        raise ReportError(
            f"sweep {sweep.name} has no finished runs{f' for {given}' if given else ''} in {plan.outputs}; "
            f"run them first: convexp ablate {name} {given}".rstrip()
        )
    spec = sweep.report
    columns = _columns(plan)
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
    out = Path(out) if out else plan.outputs / "reports" / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    title = f"{sweep.name}: {sweep.title}"
    lines = _header_lines(plan, rows, finetune, missing)
    text = {
        "md": lambda: tables.to_markdown(rows, columns, title, lines),
        "csv": lambda: tables.to_csv(rows, columns),
        "latex": lambda: tables.to_latex(rows, columns, title),
    }[fmt]()
    atomic_write(out / FORMATS[fmt], text)
    figures = []
    if spec.figure:
        from .figures import curve

        figures.append(str(curve(sweep, rows, out / "figure.png")))
    analyses = {}
    # the sweep's default analyses cover the variants that were run; --analyze names must exist
    wanted = analyze if analyze is not None else [v for v in spec.analyze if v in plan.pretrain_cfgs]
    for variant in wanted:
        analyses[variant] = _analyze(plan, variant, out)
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
        "missing": missing,
        "figures": figures,
        "analysis": analyses,
    }
    atomic_write(out / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    print(text if fmt != "md" else text.replace("## ", "", 1))
    for f in figures:
        print(f"figure: {f}")
    for v, a in analyses.items():
        print(f"analysis of {v}: " + (", ".join(a["files"]) if "files" in a else a.get("error", "")))
    print(f"report: {out}")
    return out


def _columns(plan: Plan) -> list[str]:
    """The report's columns, ``seeds`` expanded to one column per planned seed (``s<SEED>``)."""
    seeds = list(dict.fromkeys(n.seed for n in plan.order() if n.stage == "finetune"))
    out = []
    for c in plan.sweep.report.columns:
        out += [f"s{s}" for s in seeds] if c == "seeds" else [c]
    return out


def _header_lines(plan: Plan, rows: list, finetune: dict, missing: list[str]) -> list[str]:
    spec, sweep = plan.sweep.report, plan.sweep
    seeds = sorted({m["seed"] for ms in finetune.values() for m in ms})
    tasks = list(sweep.finetune.tasks) if sweep.finetune else []
    squad = [t for t in tasks if t.startswith("squad")]
    kind = "SQuAD" if squad and len(squad) == len(tasks) else "GLUE and SQuAD" if squad else "GLUE"
    lines = [
        f"Source: {sweep.source.get('paper', '?')}, {sweep.source.get('ref', '?')}."
        + (f" {sweep.source['note']}" if sweep.source.get("note") else ""),
        f"Ours: scale={plan.settings.scale}"
        + (f", arguments: {' '.join(plan.args)}" if plan.args else "")
        + f"; {'probing' if spec.style == 'probing' else kind} {spec.split}, "
        + f"{spec.aggregate} over {len(seeds)} seed(s) per task"
        + (" (± standard error)" if spec.aggregate == "mean" and len(seeds) > 1 else "")
        + (", collapsed runs left out" if spec.exclude_diverged else "")
        + f"; {spec.style} scoring.",
    ]
    if spec.paper_split and any(v.paper for v in sweep.variants.values()):
        lines.append(f"Paper: {spec.paper_split} numbers as printed.")
    start = next(iter(plan.starts.values()))
    if start.node is None:
        lines.append(f"Every variant fine-tunes the checkpoint {start.init} (no pre-training).")
    if any(m["task"] for ms in finetune.values() for m in ms) and "*" in "".join(
        r.ours["glue"].note for r in rows if "glue" in r.ours
    ):
        lines.append("GLUE marked * averages only the tasks that were run.")
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

    return analyze_model(run.model_dir, out, variant)
