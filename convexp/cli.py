"""The ``convexp`` command line: thin commands over plain functions.

Heavy imports (torch, hydra, lightning) happen inside the commands so ``convexp --help`` is fast.
Errors a user can cause print one line and exit with code 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperCommand, TyperGroup


class ConvexpGroup(TyperGroup):
    """The top-level command: an error the user can fix (:class:`convexp.errors.UserError`) becomes
    one red line and exit code 2, wherever it is raised (``--debug``: the traceback)."""

    def invoke(self, ctx):
        from .errors import UserError

        try:
            return super().invoke(ctx)
        except UserError as e:
            if _state["debug"]:
                raise
            _fail(str(e))


app = typer.Typer(
    cls=ConvexpGroup,
    no_args_is_help=True,
    help="Convolution inside BERT-style encoders: ConvBERT, Chang et al. 2021 and BERMO, reproduced.",
)
_state = {"debug": False}


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    config_dir: Optional[List[Path]] = typer.Option(
        None,
        "--config-dir",
        help="A folder of your own configs laid out as the built-in ones (model/, task/, sweep/, ...), "
        "searched first; repeatable. Also: CONVEXP_CONFIG_PATH.",
    ),
    user_dir: Optional[List[Path]] = typer.Option(
        None,
        "--user-dir",
        help="A folder of your own code and configs: its Python modules are importable (model.mixer="
        "module:Class, model.ffn=module:Class) in every process of the command, and its model/, sweep/, "
        "... folders are searched as --config-dir's; repeatable. Also: CONVEXP_USER_DIR.",
    ),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="Show convexp's INFO lines (data cached, loaded); -vv: debug."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Warnings and errors only (no Lightning INFO)."),
) -> None:
    _state["debug"] = debug
    if verbose and quiet:
        _fail("-v/--verbose and --quiet contradict each other: pass one")
    from .logs import set_verbosity

    set_verbosity(verbose, quiet)
    if config_dir:
        from .config.compose import add_config_dirs

        add_config_dirs(config_dir)
    if user_dir:
        from .user_code import add_user_dirs

        add_user_dirs(user_dir)


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", err=True, fg="red")
    raise typer.Exit(2)


OVERRIDES = typer.Argument(
    None,
    help="Hydra overrides, e.g. model=chang_small_composite scale=smoke, +new.key=1, ~key, key=\\[a,b].",
)
CFG_KINDS = ("job", "hydra", "all")
PRINT_CFG = typer.Option(
    None,
    "--cfg",
    help="Print the configuration and exit, as Hydra does: job (the default; what the run uses), "
    "hydra (Hydra's own: search path, choices) or all.",
)


class StageCommand(TyperCommand):
    """A stage command: ``--cfg`` with an optional kind (``--cfg``, ``--cfg job|hydra|all``), and a
    ``--help`` that lists the stage's config groups and their options."""

    stage = ""

    def parse_args(self, ctx, args):
        out, i = [], 0
        while i < len(args):
            if args[i] == "--cfg":
                kind = args[i + 1] if i + 1 < len(args) and args[i + 1] in CFG_KINDS else "job"
                out.append(f"--cfg={kind}")
                i += 2 if kind == (args[i + 1] if i + 1 < len(args) else None) else 1
            else:
                out.append(args[i])
                i += 1
        return super().parse_args(ctx, out)

    def format_help(self, ctx, formatter) -> None:
        from rich.markup import escape

        from .config.catalog import stage_help

        rows = "\n\n".join(f"[bold]{name}[/bold]: {escape(options)}" for name, options in stage_help(self.stage))
        self.epilog = f"Config groups (GROUP=OPTION; * = yours, from --config-dir):\n\n{rows}"
        super().format_help(ctx, formatter)


def stage_command(stage: str):
    return type(f"{stage.title()}Command", (StageCommand,), {"stage": stage})


def _composed(stage: str, overrides: list[str], print_cfg: str | None):
    """The stage's composed configuration, or None after printing it (--cfg)."""
    from omegaconf import OmegaConf

    from .config.compose import compose_stage, hydra_config

    if print_cfg not in (None, *CFG_KINDS):
        _fail(f"--cfg {print_cfg}: choose one of {', '.join(CFG_KINDS)}")
    composed = compose_stage(stage, overrides)
    if print_cfg is None:
        return composed
    if print_cfg in ("job", "all"):
        shown = OmegaConf.masked_copy(composed, [k for k in composed if k != "invocation"])
        typer.echo(OmegaConf.to_yaml(shown))
    if print_cfg in ("hydra", "all"):
        typer.echo(OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_config(stage, overrides)})))
    return None


def _task_command(task, overrides: list[str], print_cfg: str | None, kind: str | None = None) -> None:
    """``convexp pretrain`` and ``convexp finetune KIND``: the task's own command (``task``:
    pre-training's command module or the kind's TaskKind, as the task table names them), composed,
    checked in one pass before the stage's heavy imports, then run."""
    given = task.arguments(overrides)
    composed = _composed(task.STAGE, given, print_cfg)
    if composed is not None and kind is not None:
        from .tasks import check_kind

        check_kind(kind, composed)
    if composed is not None:
        invocation = task.compose(given, composed)
        task.check(invocation)
        task.check_device(invocation)
        task.run(invocation)


@app.command(cls=stage_command("pretrain"))
def pretrain(overrides: Optional[List[str]] = OVERRIDES, cfg: Optional[str] = PRINT_CFG) -> None:
    """Pre-train a model preset (MLM or ELECTRA) into outputs/runs/pretrain/<id>; re-running resumes."""
    from .tasks.pretraining import command

    _task_command(command, overrides or [], cfg)


class FinetuneGroup(TyperGroup):
    """``convexp finetune KIND``: one command per kind of task, made from its TaskKind (tasks/kind.py):
    the built-in kinds of the task table (``tasks.KINDS``, imported when the group is first asked for
    its commands: ``convexp pretrain`` never imports them) and a user's, named by ``kind:`` in the
    task files of their ``--user-dir`` / ``--config-dir`` (a module defining ``KIND``)."""

    @property
    def commands(self) -> dict:
        if not getattr(self, "_kinds_added", False):
            from .tasks import KINDS, task_kind

            self._kinds_added = True
            for kind in KINDS:
                self._commands.setdefault(kind, _kind_command(kind, task_kind(kind).help))
        return self._commands

    @commands.setter
    def commands(self, value: dict) -> None:
        self._commands = value

    def list_commands(self, ctx):
        from .config.compose import user_task_kinds

        return sorted({*self.commands, *user_task_kinds()})

    def get_command(self, ctx, name):
        from .config.compose import user_task_kinds

        if name in self.commands:
            return self.commands[name]
        if name in user_task_kinds() or ":" in name:
            return _kind_command(name, f"Fine-tune a task of your kind {name} (its module's KIND, on --user-dir).")
        return None


def _kind_command(kind: str, help: str):
    one = typer.Typer()

    @one.command(kind, cls=stage_command("finetune"), help=help)
    def run(overrides: Optional[List[str]] = OVERRIDES, cfg: Optional[str] = PRINT_CFG) -> None:
        from .tasks import command

        _task_command(command(kind), overrides or [], cfg, kind)

    return typer.main.get_command(one)


finetune_app = typer.Typer(
    cls=FinetuneGroup, no_args_is_help=True, help="Fine-tune and evaluate (GLUE, SentEval probing, SQuAD)."
)
app.add_typer(finetune_app, name="finetune")


@app.command()
def ablate(
    name: Optional[str] = typer.Argument(
        None, help="A sweep in sweeps/ (see --list) or a path to a sweep file."
    ),
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="scale=smoke|small|paper, variants=[..], tasks=[..], seeds=[..], launcher=local|submitit, "
        "launcher.workers=N, pretrain.KEY=VALUE, finetune.KEY=VALUE, or KEY=VALUE for every stage.",
    ),
    list_sweeps: bool = typer.Option(False, "--list", help="List the named sweeps and their sources."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan (runs, cache, compute); run nothing."
    ),
    wandb_sweep: bool = typer.Option(
        False, "--wandb-sweep", help="Write a W&B sweep file (a grid over the runs: one per agent job) instead of running."
    ),
    status: bool = typer.Option(
        False, "--status", help="SLURM: where the submitted sweep stands (states, GPU-hours, estimated finish)."
    ),
    follow: bool = typer.Option(
        False, "--follow", help="SLURM: after submitting, watch the jobs and print each node's outcome."
    ),
) -> None:
    """Run a named sweep: pre-train every variant, fine-tune each; finished runs are reused."""
    import os

    from .sweep.execute import last_args
    from .sweep.launchers import run_plan
    from .sweep.slurm import on_slurm
    from .sweep.plan import build_plan
    from .sweep.show import print_outcomes, print_plan, print_status, print_sweeps
    from .sweep.spec import load_sweep
    from .sweep.status import follow as follow_jobs
    from .sweep import adaptive
    from .sweep.wandb_sweep import write_wandb_sweep

    if list_sweeps:
        print_sweeps()
        return
    if not name:
        _fail("give a sweep name (convexp ablate --list shows them)")
    sweep = load_sweep(name)
    if status and not overrides:  # the last `convexp ablate NAME`'s arguments
        overrides = last_args(Path(os.environ.get("CONVEXP_OUTPUTS", "outputs")), sweep.name)
        if overrides is None:
            _fail(f"sweep {sweep.name} has not been run here yet (no ledger); run `convexp ablate {name} ...` first")
    plan = build_plan(sweep, overrides or [])
    design = adaptive.design_of(plan)
    if design is not None:  # adaptive seeds: the cells' seeds now, from the results so far
        full = plan
        plan, cells = adaptive.current(plan, design)
    if (status or follow) and not on_slurm(plan.settings.launcher):
        _fail("--status and --follow watch SLURM jobs: use launcher=submitit on a SLURM cluster (srun on PATH)")
    if status:
        print_status(plan)
        if design is not None:
            typer.echo("\n".join(adaptive.summary(plan, design, cells)))
        return
    if dry_run:
        print_plan(plan)
        if design is not None:
            typer.echo("\n".join([*adaptive.summary(plan, design, cells), adaptive.bill_line(full, design)]))
        return
    if wandb_sweep:
        path = write_wandb_sweep(plan)
        typer.echo(
            f"wrote {path}\nstart it with `wandb sweep {path}`, then run `wandb agent <sweep id>` on each machine"
        )
        return
    if design is not None and not on_slurm(plan.settings.launcher):
        outcomes = adaptive.run_looks(sweep, overrides or [], full, design)
    else:
        outcomes = run_plan(plan)
        if design is not None:  # SLURM: the next look is planned by a job after this one's
            typer.echo("\n".join(adaptive.summary(plan, design, cells)))
            adaptive.submit_planner(plan, outcomes, name, overrides or [])
    if follow:
        outcomes = follow_jobs(plan, float(plan.settings.launcher.poll_s))
    failed = print_outcomes(plan, outcomes)
    if failed:
        raise typer.Exit(1)


@app.command()
def report(
    name: str = typer.Argument(..., help="The sweep (as given to convexp ablate)."),
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="The sweep's arguments (default: those of the last `convexp ablate NAME`); "
        "report.baseline=VARIANT and report.detect=POINTS set the comparisons' baseline and the "
        "difference the seeds-needed table is for.",
    ),
    fmt: str = typer.Option("md", "--format", help="md | csv | latex"),
    source: str = typer.Option("local", "--source", help="local (the run store) | wandb (the W&B API)"),
    analyze: Optional[List[str]] = typer.Option(
        None, "--analyze", help="Variant whose attention maps and kernels to plot (default: the sweep's)."
    ),
    no_figures: bool = typer.Option(
        False, "--no-figures", help="Write no figures (and run the sweep's default analyses only if named)."
    ),
) -> None:
    """Turn a sweep's runs into the paper's table (ours beside the paper's numbers, with verdicts),
    the differences between variants, the seeds needed, and figures."""
    from .report.build import make_report

    make_report(name, overrides or None, fmt, source, analyze, figures=not no_figures)


@app.command()
def models(
    seq_len: int = typer.Option(128, help="Sequence length for the FLOPs count."),
    names: Optional[List[str]] = typer.Argument(None, help="Presets to show (default: all)."),
) -> None:
    """List every model preset with its parameter count and training FLOPs per token."""
    from .config.compose import group_sources, is_builtin, model_configs
    from .models.stats import preset_table

    if seq_len < 1:
        _fail(f"--seq-len must be a positive number of tokens, got {seq_len}")
    known = group_sources("model")
    for n in names or []:
        if n not in known:
            _fail(f"unknown model preset {n!r}; run `convexp models` to list them")
    user = {n for n, p in known.items() if not is_builtin(p)}
    preset_table(model_configs(names or list(known)), seq_len, user)


@app.command()
def cp(
    name: str = typer.Argument(..., help="A built-in config: GROUP/NAME (model/convbert_small, sweep/objective) "
                               "or a NAME that only one group has."),
    dest: Path = typer.Argument(..., help="A folder (the copy goes to DEST/GROUP/NAME.yaml, ready for "
                                "--config-dir DEST) or a .yaml file path."),
) -> None:
    """Copy a built-in preset, task, sweep or other config to edit (as `tune cp`); never overwrites."""
    from .config.catalog import copy_config

    path = copy_config(name, dest)
    typer.echo(f"wrote {path}")


from .bench.commands import bench_app  # noqa: E402  (the bench commands live in bench/)

app.add_typer(bench_app, name="bench")


@app.command()
def export(
    run: str = typer.Argument(
        ..., help="A fine-tuning (or pre-training) run directory, or a model directory."
    ),
    out: Optional[str] = typer.Option(None, "--out", help="Where to write the export (default: RUN/export)."),
    no_structured: bool = typer.Option(
        False, "--no-structured", help="Keep every head and FFN unit (re-save, check and time only)."
    ),
    batch: int = typer.Option(32, "--batch", help="Batch size of the speed measurement."),
    seq_len: int = typer.Option(128, "--seq-len", help="Sequence length of the speed measurement."),
    tokenizer: Optional[str] = typer.Option(
        None,
        "--tokenizer",
        help="tokenizer.json / vocab.txt (or its folder) to ship; default: the run's model dir's.",
    ),
) -> None:
    """Export a fine-pruned run: cut dead heads and FFN units, check and time it, save a loadable model."""
    from .export import export_model, print_export
    from .sweep.execute import weights_again

    weights_again(run)  # a finished fine-tune that did not keep its weights is trained again for them
    print_export(export_model(run, out, not no_structured, batch, seq_len, tokenizer))


hf_app = typer.Typer(help="Hugging Face: a run as a transformers model, and to the Hub.", no_args_is_help=True)
app.add_typer(hf_app, name="hf")


@hf_app.command("export")
def hf_export(
    run: str = typer.Argument(..., help="A pre-training or fine-tuning run directory, or a convexp model directory."),
    out: Optional[str] = typer.Option(None, "--out", help="Where to write it (default: RUN/transformers)."),
    part: str = typer.Option(
        "model", "--part", help="model (as trained: MLM, ELECTRA's discriminator, a classifier), encoder, "
        "or generator (an ELECTRA pre-training's, from its last checkpoint)."
    ),
) -> None:
    """Export a run as a transformers model (ConvBERT, BERT, ELECTRA), with its tokenizer and labels."""
    from .to_transformers import export_run
    from .tasks.classification.registry import run_labels

    info = export_run(Path(run), Path(out) if out else None, part, run_labels(Path(run)))
    diff = info["max_abs_diff"]
    checked = f"max |Δ| {diff:.2e} against transformers" if isinstance(diff, float) else diff
    typer.echo(f"wrote {info['out']}: {info['class']} ({checked}); tokenizer: {info['tokenizer']}")


@hf_app.command("push")
def hf_push(
    folder: str = typer.Argument(..., help="A directory `convexp hf export` wrote (or a convexp model directory)."),
    repo: str = typer.Argument(..., help="The Hub repository, OWNER/NAME (created if missing)."),
    private: bool = typer.Option(False, "--private", help="Create the repository private."),
    message: Optional[str] = typer.Option(None, "--message", help="The commit message."),
) -> None:
    """Upload an exported model to the Hugging Face Hub (`huggingface-cli login` or HF_TOKEN first)."""
    from .to_transformers import push

    typer.echo(f"pushed {folder} to {push(Path(folder), repo, private, message)}")


def main() -> None:
    """Entry point: user errors become one red line and exit code 2 (``--debug``: traceback)."""
    from .errors import UserError

    try:
        app()  # standalone: usage errors exit 2, typer.Exit carries its code
    except UserError as e:
        if _state["debug"]:
            raise
        typer.secho(f"error: {e}", err=True, fg="red")
        sys.exit(2)


def entry() -> None:
    """The ``convexp`` program (and ``python -m convexp.cli``): :func:`main`, then the process ends
    without Python tearing down every module it imported (``_exit_now``)."""
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    _exit_now(code)


def _exit_now(code) -> None:
    """Exit with ``code`` as ``sys.exit`` would. After a command that succeeded, without the
    interpreter's own teardown: freeing every module and object once Lightning, W&B, datasets and
    transformers are loaded takes ~1.5 s on a 2-core machine, and changes nothing on disk. What
    does matter still runs first: the exit handlers (W&B's finish, loggers, temporary directories,
    child processes, file locks) and the flush of stdout and stderr. An error's exit, or a
    non-daemon thread still running, gets Python's normal exit (W&B reads the code from it and
    marks the run failed; the thread is waited for)."""
    import atexit
    import os
    import threading

    main_thread = threading.main_thread()
    busy = any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main_thread)
    if code not in (0, None) or busy:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said
            pass
    os._exit(0)


if __name__ == "__main__":
    entry()
