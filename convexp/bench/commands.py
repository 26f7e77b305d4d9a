"""``convexp bench``: the benchmark commands (registered by cli.py), thin over the modules beside
this one; a bad option is one line and exit code 2 (a UserError, as every command's)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UserError


def _refuse(message: str) -> None:
    raise UserError(message)


bench_app = typer.Typer(
    help="Benchmarks against what a researcher would use instead: `convexp bench` "
    "times the training step, `bench finetune` and `bench squad` whole fine-tuning jobs, `bench pretrain` the stage.",
)
STEPS = typer.Option(10, help="Timed training steps per configuration (on CUDA: rounds of 5 steps).")
STEP_BATCH = typer.Option(None, help="Batch size of the training-step benchmark [CPU: 32; CUDA: the recipe's 128].")
STEP_LEN = typer.Option(128, help="Sequence length of the training-step benchmark.")
LENGTHS = typer.Option("128,512,2048", help="Lengths for the block benchmark (CPU).")
QUICK = typer.Option(False, "--quick", help="CPU: 3 timed steps and block lengths 128,512 (a first look; noisier).")
SKIP_HF = typer.Option(False, help="Skip the Hugging Face comparison.")
DEVICE = typer.Option("auto", help="cpu | cuda | auto (cuda where a GPU is visible).")
COMPILE = typer.Option("", help="CUDA: also time the step compiled whole, comma-separated modes: step, graphs.")
BENCH_OUT = typer.Option(None, "--out", help="CUDA: also write the table as JSON here.")
MODELS = typer.Option("convbert_small,electra_small,convbert_base", help="CUDA: the models of the step table.")
GROUPING = typer.Option(
    "both", help="Batches: default (random, as at scale=paper), grouped (by length: group_by_length=true and the "
    "Trainer's flag) or both."
)


def _bench_step(steps: int, batch_size: int | None, seq_len: int, lengths: str, skip_hf: bool, device: str,
                compile_modes: str, out: str | None, models: str) -> None:  # fmt: skip
    for flag, value in (("--steps", steps), ("--batch-size", batch_size), ("--seq-len", seq_len)):
        if value is not None and value < 1:
            _refuse(f"{flag} must be a positive integer, got {value}")
    try:
        sizes = [int(x) for x in lengths.split(",") if x]
    except ValueError:
        _refuse(f"--lengths must be comma-separated integers, got {lengths!r}")
    if not sizes or min(sizes) < 1:
        _refuse(f"--lengths must be positive integers, got {lengths!r}")
    if device not in ("auto", "cpu", "cuda"):
        _refuse(f"--device {device!r}: use cpu, cuda or auto")
    modes = tuple(m for m in compile_modes.split(",") if m)
    if set(modes) - {"step", "graphs"}:
        _refuse(f"--compile {compile_modes!r}: use step, graphs or both, comma-separated")
    from .shapes import STEP_SHAPES as SHAPES

    names = [m for m in models.split(",") if m]
    if not names or set(names) - {n for n, _, _ in SHAPES}:
        _refuse(f"--models {models!r}: choose from {', '.join(n for n, _, _ in SHAPES)}")
    if device == "cpu" and (modes or out or len(names) != len(SHAPES)):
        _refuse("--compile, --models and --out are for the CUDA step table (--device cuda)")
    import torch

    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        _refuse("--device cuda: no CUDA GPU is visible to torch here; use --device cpu")
    if cuda:
        import json

        from .cuda_step import run_cuda_benchmarks
        from .step import transformers_available

        b = batch_size or 128
        shapes = tuple((n, b, seq_len) if n.endswith("small") else (n, B, L) for n, B, L in SHAPES if n in names)
        record = run_cuda_benchmarks(steps, not skip_hf and transformers_available(), modes, shapes)
        if out:
            Path(out).write_text(json.dumps(record, indent=1))
        return
    if modes or out or len(names) != len(SHAPES):
        _refuse("--compile, --models and --out are for the CUDA step table (--device cuda)")
    from .plugin import run_plugin_benchmark
    from .step import run_benchmarks

    run_benchmarks(steps=steps, batch_size=batch_size or 32, seq_len=seq_len, lengths=sizes, hf=not skip_hf)
    run_plugin_benchmark(steps, batch_size or 32, seq_len)


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    steps: int = STEPS,
    batch_size: Optional[int] = STEP_BATCH,
    seq_len: int = STEP_LEN,
    lengths: str = LENGTHS,
    skip_hf: bool = SKIP_HF,
    device: str = DEVICE,
    compile: str = COMPILE,
    out: Optional[str] = BENCH_OUT,
    models: str = MODELS,
    quick: bool = QUICK,
) -> None:
    """Time masked-LM training steps against Hugging Face. CPU: ConvBERT-small (fp32, bf16) and
    attention vs mixed-attention blocks, each row printed as it is measured (171 s on a quiet
    2-core CPU, --quick 74 s; a busy machine takes several times longer). CUDA: ConvBERT-small, ELECTRA-small and ConvBERT-base with
    MFU against the measured matrix rate. `bench finetune` and `bench pretrain` time whole jobs."""
    if quick:  # in place of the defaults, not of values given
        steps = 3 if steps == 10 else steps
        lengths = "128,512" if lengths == "128,512,2048" else lengths
    if ctx.invoked_subcommand is None:
        _bench_step(steps, batch_size, seq_len, lengths, skip_hf, device, compile, out, models)


@bench_app.command("finetune")
def bench_finetune(
    rows: int = typer.Option(4000, help="SST-2 training rows (synthetic, or the first N of --data)."),
    dev_rows: int = typer.Option(872, help="Synthetic dev rows (with --data: SST-2's whole dev set)."),
    repeats: int = typer.Option(
        3, help="Runs of each tool, interleaved (convexp, plain, Trainer, convexp, ...); repeat i uses seed 42 + i."
    ),
    epochs: int = typer.Option(1, help="Training epochs."),
    batch_size: int = typer.Option(32, help="Training batch size."),
    max_len: int = typer.Option(64, help="Maximum tokens per row."),
    model: str = typer.Option("minilm", help="Shape of the random model made without --init: minilm | tiny."),
    init: Optional[str] = typer.Option(
        None, help="A Hugging Face BERT directory (default: a random MiniLM-L6-shaped one)."
    ),
    data: Optional[str] = typer.Option(
        None, help="A classic GLUE folder holding SST-2/ (default: synthetic sentences)."
    ),
    out: Optional[str] = typer.Option(None, "--out", help="Write the JSON record here (default: print it)."),
    workdir: Optional[str] = typer.Option(
        None, help="Where the runs and inputs go, kept (default: a temporary folder, removed at the end or on SIGTERM)."
    ),
    skip_hf: bool = typer.Option(False, help="Skip the Hugging Face contenders (plain loop and Trainer)."),
    device: str = typer.Option("auto", help="cpu (fp32) | cuda (bf16 autocast) | auto (cuda where a GPU is visible)."),
    grouping: str = GROUPING,
) -> None:
    """Time a whole SST-2 fine-tuning job through convexp, a plain transformers loop and the
    transformers Trainer (fused AdamW), with random and with length-grouped batches: wall time, CPU
    time, examples/s, peak RSS, dev accuracy, convexp's ratios to each, and every job's steps against
    its fixed cost (convexp's against its bare step on the same batches)."""
    from .finetune import SHAPES, bench_finetune
    from .jobs import settings_of

    for flag, value in (
        ("--rows", rows), ("--dev-rows", dev_rows), ("--repeats", repeats), ("--epochs", epochs),
        ("--batch-size", batch_size),
    ):  # fmt: skip
        if value < 1:
            _refuse(f"{flag} must be a positive integer, got {value}")
    if max_len < 3:
        _refuse(f"--max-len must be at least 3 ([CLS] a token [SEP]), got {max_len}")
    if model not in SHAPES:
        _refuse(f"--model {model!r}: use one of {', '.join(SHAPES)}")
    settings_of(grouping)
    bench_finetune(
        rows, dev_rows, repeats, epochs, batch_size, max_len, model, init, data, out, workdir, hf=not skip_hf,
        device=device, grouping=grouping,
    )  # fmt: skip


@bench_app.command("sweep")
def bench_sweep(
    jobs: Optional[int] = typer.Option(None, help="Fine-tunes per way, job i with seed 42 + i [CUDA: 16; CPU: 4]."),
    per_gpu: Optional[int] = typer.Option(
        None, help="Packed: jobs at once on the one GPU (on a CPU: sharing the cores) [CUDA: 4; CPU: 2]."
    ),
    rows: Optional[int] = typer.Option(None, help="Synthetic SST-2 training rows [CUDA: 10000; CPU: 2000]."),
    shape: str = typer.Option("minilm", help="Shape of the random checkpoint: minilm | tiny."),
    device: str = typer.Option("auto", help="cpu (fp32) | cuda (bf16 autocast) | auto (cuda where a GPU is visible)."),
    out: Optional[str] = typer.Option(None, "--out", help="Write the JSON record here (default: print it)."),
    workdir: Optional[str] = typer.Option(
        None, help="Where the runs and inputs go, kept (default: a temporary folder, removed at the end or on SIGTERM)."
    ),
    skip_hf: bool = typer.Option(False, help="Skip the Trainer's jobs."),
) -> None:
    """Time a small sweep's fine-tunes (SST-2, one checkpoint) three ways: convexp one at a time,
    convexp packed --per-gpu at once, and the transformers Trainer one at a time; on a CPU also as a
    sweep runs them (--per-gpu worker processes, job after job): wall time, GPU-seconds (CPU:
    core-seconds) per fine-tune, fine-tunes per GPU-hour, median dev accuracy, a job's fixed cost."""
    from .finetune import SHAPES
    from .sweep import bench_sweep

    for flag, value in (("--jobs", jobs), ("--per-gpu", per_gpu), ("--rows", rows)):
        if value is not None and value < 1:
            _refuse(f"{flag} must be a positive integer, got {value}")
    if shape not in SHAPES:
        _refuse(f"--shape {shape!r}: use one of {', '.join(SHAPES)}")
    if device not in ("auto", "cpu", "cuda"):
        _refuse(f"--device {device!r}: use cpu, cuda or auto")
    bench_sweep(jobs, per_gpu, rows, shape, device=device, out=out, workdir=workdir, hf=not skip_hf)



@bench_app.command("squad")
def bench_squad(
    questions: int = typer.Option(600, help="SQuAD training questions (synthetic, or the first N of --data)."),
    dev_questions: Optional[int] = typer.Option(
        None, help="Dev questions [synthetic: a quarter of --questions, at least 50; --data: the first 1000]."
    ),
    repeats: int = typer.Option(
        3, help="Runs of each tool, interleaved (convexp, plain, Trainer, convexp, ...); repeat i uses seed 42 + i."
    ),
    epochs: int = typer.Option(1, help="Training epochs."),
    batch_size: int = typer.Option(16, help="Training batch size (windows)."),
    max_len: int = typer.Option(256, help="Window length in tokens."),
    stride: int = typer.Option(128, help="Tokens two consecutive windows of a context share (run_qa.py's stride)."),
    model: str = typer.Option("minilm", help="Shape of the random model made without --init: minilm | tiny."),
    init: Optional[str] = typer.Option(None, help="A Hugging Face BERT directory (default: a random MiniLM-L6-shaped one)."),
    data: Optional[str] = typer.Option(None, help="A folder of the official train-v1.1.json and dev-v1.1.json (default: synthetic)."),
    out: Optional[str] = typer.Option(None, "--out", help="Write the JSON record here (default: print it)."),
    workdir: Optional[str] = typer.Option(None, help="Where the runs and inputs go, kept (default: a temporary folder, removed at the end or on SIGTERM)."),
    skip_hf: bool = typer.Option(False, help="Skip the Hugging Face contenders (plain loop and Trainer)."),
    device: str = typer.Option("auto", help="cpu (fp32) | cuda (bf16 autocast) | auto (cuda where a GPU is visible)."),
    grouping: str = GROUPING,
) -> None:
    """Time a whole SQuAD v1.1 fine-tune (windows, training, n-best decoding, official F1) through
    convexp, a plain transformers QA loop and the transformers Trainer, with random and with
    length-grouped batches: wall time, CPU time, training windows/s, peak RSS, dev F1, convexp's
    ratios to each, and every job's steps against its fixed cost (convexp's against its bare step)."""
    from .finetune import SHAPES
    from .jobs import settings_of
    from .squad import bench_squad

    for flag, value in (("--questions", questions), ("--repeats", repeats), ("--epochs", epochs),
                        ("--batch-size", batch_size), ("--dev-questions", dev_questions)):  # fmt: skip
        if value is not None and value < 1:
            _refuse(f"{flag} must be a positive integer, got {value}")
    if model not in SHAPES:
        _refuse(f"--model {model!r}: use one of {', '.join(SHAPES)}")
    settings_of(grouping)
    bench_squad(questions, dev_questions, repeats, epochs, batch_size, max_len, stride, model, init, data, out,
                workdir, hf=not skip_hf, device=device, grouping=grouping)  # fmt: skip


@bench_app.command(
    "pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def bench_pretrain_cmd(
    ctx: typer.Context,
    steps: int = typer.Option(10, help="Timed bare training steps (before and after the stage)."),
    profile: bool = typer.Option(
        False, help="Also print where the bare step's and the stage's step time goes (torch.profiler, hooks)."
    ),
    bare: bool = typer.Option(True, help="Time the bare step (--no-bare: the stage alone; no compile of its own)."),
) -> None:
    """The pretrain stage's tokens/s against its bare training step, same model, batch and length
    (`convexp bench pretrain [OVERRIDES]`, default scale=smoke); writes a JSON record."""
    from .pretrain import bench_pretrain, print_record

    if steps < 1:
        _refuse(f"--steps must be a positive integer, got {steps}")
    print_record(bench_pretrain(ctx.args, steps, profile=profile, bare=bare))


@bench_app.command("data")
def bench_data_cmd(
    size: int = typer.Option(20_000_000, help="Bytes of text of the generated OpenWebText-like corpus."),
    vocab: Optional[str] = typer.Option(None, help="A WordPiece vocab.txt (default: 30,522 tokens trained on the corpus)."),
    seq_len: int = typer.Option(128, help="Example length in tokens."),
    examples: str = typer.Option("packed", help="data.examples of convexp's build: packed | sentence_pairs | electra."),
    processes: Optional[int] = typer.Option(None, help="Processes of the parallel rows [the cores this process may use]."),
    repeats: int = typer.Option(2, help="Interleaved rounds of the timed rows; each row's best is kept."),
    out: Optional[str] = typer.Option(None, "--out", help="Write the JSON record here (default: print it)."),
    workdir: Optional[str] = typer.Option(None, help="Where the corpus and the builds go, kept (default: a temporary folder)."),
    skip_hf: bool = typer.Option(False, help="Skip Hugging Face run_mlm's way."),
) -> None:
    """Pre-training data preparation on one generated corpus: the tokenizer alone, convexp's prepared
    build on 1 process and on all cores, Hugging Face run_mlm's map + group_texts at the same
    process count, the whole stream against one shard of four, and the first block after resuming
    at two depths; the CPU named."""
    from ..tasks.pretraining.packing import EXAMPLES
    from .data import bench_data

    for flag, value in (("--size", size), ("--seq-len", seq_len), ("--processes", processes), ("--repeats", repeats)):
        if value is not None and value < 1:
            _refuse(f"{flag} must be a positive integer, got {value}")
    if seq_len < 5:
        _refuse(f"--seq-len must be at least 5 ([CLS] A [SEP] B [SEP]), got {seq_len}")
    if examples not in EXAMPLES:
        _refuse(f"--examples {examples!r}: use one of {', '.join(EXAMPLES)}")
    bench_data(size, vocab, seq_len, examples, processes, repeats, out, workdir, hf=not skip_hf)


@bench_app.command("plot")
def bench_plot_cmd(
    records: List[Path] = typer.Argument(
        ..., help="JSON records of the bench commands, or folders of them (e.g. outputs/bench)."
    ),
    out: Path = typer.Option(
        Path("bench-plots"), "--out", help="Folder for the PNGs (one per record, named after it)."
    ),
) -> None:
    """Plot benchmark records: one PNG per record, titled with what was measured and footed with
    the GPU or CPU it ran on and the date (the docs' performance page is drawn by the same code)."""
    from .plot import plot_records

    for path in plot_records(records, out):
        typer.echo(f"wrote {path}")

