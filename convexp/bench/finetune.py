"""``convexp bench finetune``: a whole fine-tuning job through convexp against what a researcher would
use instead, same data, model and settings, each in its own process: a plain ``transformers`` loop
(plain_finetune.py) and the ``transformers`` Trainer with its speed flags, length-grouped batches
and fused AdamW (trainer_finetune.py).

The job (issue 17): a BERT of MiniLM-L6's shape (6 layers, hidden 384, 12 heads, FFN 1536,
vocabulary 30522) in Hugging Face layout, SST-2, 1 epoch, batch 32, max length 64, AdamW at a
linear schedule (10% warm-up, no weight decay, no layer-wise decay: ``protocol=chang``), fp32 on
the CPU, bf16 autocast on a CUDA GPU (``--device``), dev accuracy at the end. Without ``--init`` the model directory is made here with random weights
(no hub access is needed); without ``--data`` the SST-2 files are synthetic sentences whose label
is given by a few cue words among neutral filler, with SST-2's length spread.

Each child's wall time comes from the parent's clock; its CPU time (user + system) and peak
resident memory (``ru_maxrss``: the largest of the process and the children it waited for)
from ``os.wait4``. Repeats alternate (convexp, plain, Trainer, convexp, ...) so that load on a
shared machine falls on all; repeat i runs each with seed 42 + i. The summary takes medians and
reports convexp / plain and convexp / Trainer ratios, and whether the median dev accuracies agree
within one point.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from ..errors import UserError

SHAPES = {  # BERT shapes: MiniLM-L6 (the job) and a tiny one for tests
    "minilm": {"layers": 6, "hidden": 384, "heads": 12, "intermediate": 1536, "vocab": 30522},
    "tiny": {"layers": 2, "hidden": 64, "heads": 2, "intermediate": 128, "vocab": 2100},
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LR = 1e-4  # one rate for both (the papers' small-model rate is 3e-4; 1e-4 is stabler from random weights)
SEED = 42
SCRIPTS = {  # the contenders beside convexp: scripts that import transformers, never convexp
    "plain": Path(__file__).with_name("plain_finetune.py"),
    "trainer": Path(__file__).with_name("trainer_finetune.py"),
}
LABELS = {"convexp": "convexp", "plain": "plain loop", "trainer": "Trainer"}
FLOOR_OF = {"convexp": "cls_only", "plain": "full", "trainer": "full"}  # the floor under each tool's wall


# ----------------------------------------------------------------------------- the job's inputs


def _words(n: int, seed: int) -> list[str]:
    """``n`` distinct lower-case pseudo-words (WordPiece keeps each one whole)."""
    rng = random.Random(seed)
    syll = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"]
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(rng.choice(syll) for _ in range(rng.randint(1, 3)))] = None
    return list(out)


def write_synthetic_sst2(root: Path, rows: int, dev_rows: int, seed: int = 0) -> list[str]:
    """``root/SST-2/{train,dev}.tsv`` in GLUE's layout; returns the words used (for the vocabulary).

    A sentence: 2-50 words (log-normal, median 10, as SST-2's spread), 1-3 cue words of its label's
    set of 8, the rest neutral filler: a task that a randomly initialised model learns in an epoch
    of a few thousand rows, so that both tools' dev accuracies say whether training worked."""
    words = _words(2016, seed)
    pos, neg, filler = words[:8], words[8:16], words[16:]
    rng = random.Random(seed + 1)
    (root / "SST-2").mkdir(parents=True, exist_ok=True)
    for split, n in (("train", rows), ("dev", dev_rows)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            label = rng.randint(0, 1)
            cues = rng.choices(pos if label else neg, k=rng.randint(1, 3))
            length = max(len(cues) + 1, min(50, int(rng.lognormvariate(2.3, 0.6))))
            sent = rng.choices(filler, k=length - len(cues)) + cues
            rng.shuffle(sent)
            lines.append(f"{' '.join(sent)}\t{label}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return words


def write_model_dir(path: Path, shape: dict, words: list[str], hf: bool) -> Path:
    """A randomly initialised BERT of ``shape`` with a vocab.txt holding ``words``: Hugging Face
    layout (``save_pretrained``) with transformers, else a convexp model directory."""
    import torch

    vocab = SPECIALS + words
    vocab += [f"zz{i}" for i in range(shape["vocab"] - len(vocab))]
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab[: shape["vocab"]]) + "\n")
    torch.manual_seed(0)
    if hf:
        from transformers import BertConfig, BertModel

        cfg = BertConfig(
            vocab_size=shape["vocab"],
            hidden_size=shape["hidden"],
            num_hidden_layers=shape["layers"],
            num_attention_heads=shape["heads"],
            intermediate_size=shape["intermediate"],
        )
        BertModel(cfg).save_pretrained(path)
        return path
    from ..models import ModelConfig, SequenceClassifier
    from ..models.io import save_model_dir

    cfg = ModelConfig(
        name="bert",
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        num_layers=shape["layers"],
        num_heads=shape["heads"],
        intermediate_size=shape["intermediate"],
        pooler=True,
    )
    out = path / "model"
    save_model_dir(SequenceClassifier(cfg, 2), cfg, out, extra_files=[path / "vocab.txt"])
    return out


# ----------------------------------------------------------------------------- timing children


def timed(cmd: list[str], env: dict, log: Path) -> dict:
    """Run ``cmd``; its wall time, CPU time and peak RSS (os.wait4), exit code, stdout. Stopped
    (the bench's other children too) when the wait ends otherwise: Ctrl-C, SIGTERM (scratch.py)."""
    from . import scratch

    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        start = time.perf_counter()
        proc = scratch.start(cmd, env=env, stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            scratch.stop_children()
            raise
        finally:
            scratch.forget(proc)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    return {
        "returncode": proc.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux: KiB
        "stdout": log.with_suffix(".out").read_text(),
        "stderr_tail": log.with_suffix(".err").read_text()[-2000:],
    }


def convexp_accuracy(outputs: Path) -> float | None:
    found = sorted(outputs.glob("runs/finetune/*/metrics.json"))
    if not found:
        return None
    return json.loads(found[0].read_text())["dev"]["validation"]["accuracy"]


def script_result(stdout: str) -> dict | None:
    """The JSON line a contender script prints last."""
    lines = [x for x in stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def script_metric(stdout: str, key: str) -> float | None:
    result = script_result(stdout)
    return result[key] if result else None


def run_repeats(commands, seeds: list[int], work: Path, console, metric: str, label: str, score,
                between=None) -> list[dict]:  # fmt: skip
    """Run ``commands(seed)`` (tool -> command) for every seed, the tools taking turns; each run's
    timing and ``metric`` (``score(tool, its outputs folder, its stdout)``), printed as it ends;
    ``between()``, where given, after every seed's turn but the last (the floor's rate samples)."""
    runs = []
    for i, seed in enumerate(seeds):
        if i and between is not None:
            between()
        for tool, cmd in commands(seed).items():
            outputs = work / f"{tool}-{i}"
            env = {**os.environ, "CONVEXP_OUTPUTS": str(outputs)}
            console.print(f"[{i + 1}/{len(seeds)}] {tool} ...", end=" ")
            r = timed(cmd, env, work / f"{tool}-{i}")
            if r["returncode"] != 0:
                raise UserError(f"{tool} failed (exit {r['returncode']}): {r['stderr_tail'][-600:]}")
            value = score(tool, outputs, r["stdout"])
            runs.append({"tool": tool, "repeat": i, "seed": seed, metric: value, **drop_keys(r, "stdout", "stderr_tail")})
            console.print(
                f"{r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} CPU-s, {r['peak_rss_mib']:.0f} MiB, "
                f"{label} {value:.2f}"
            )
    return runs


# ----------------------------------------------------------------------------- the benchmark


def check_inputs(init: str | None, data: str | None) -> None:
    """A given model or GLUE folder must exist and hold what the job reads."""
    if init is not None and not (Path(init) / "config.json").is_file():
        raise UserError(f"--init {init}: no config.json there; give a Hugging Face BERT directory")
    if data is not None:
        for split in ("train", "dev"):
            if not (Path(data) / "SST-2" / f"{split}.tsv").is_file():
                raise UserError(
                    f"--data {data}: no SST-2/{split}.tsv; give the classic GLUE folder (holding SST-2/)"
                )


def job_inputs(work: Path, rows: int, dev_rows: int, shape: str, hf: bool, init: str | None = None,
               data: str | None = None) -> tuple[Path, Path]:  # fmt: skip
    """The job's GLUE folder (``work/glue``: synthetic SST-2, or ``data``'s first ``rows`` training
    rows and whole dev set) and model directory (``init``, or a random ``shape`` one in ``work/model``)."""
    data_dir = work / "glue"
    if data is None:
        words = write_synthetic_sst2(data_dir, rows, dev_rows)
    else:  # a real SST-2: its first `rows` training rows, every dev row
        words = _cut(Path(data), data_dir, rows, SHAPES[shape]["vocab"] - len(SPECIALS))
    return data_dir, Path(init) if init else write_model_dir(work / "model", SHAPES[shape], words, hf)


def job_commands(model_dir: Path, data_dir: Path, epochs: int, batch_size: int, max_len: int, seed: int,
                 cuda: bool, tools=("convexp", *SCRIPTS)) -> dict[str, list[str]]:  # fmt: skip
    """The job's command (tool -> argv) through each of ``tools``: convexp, plain, trainer."""
    convexp_cmd = [
        sys.executable, "-m", "convexp.cli", "finetune", "glue", "task=sst2",
        f"init={model_dir}", "glue.source=local", f"glue.path={data_dir}", "protocol=chang",
        f"epochs={epochs}", f"batch_size={batch_size}", f"task.max_len={max_len}", f"lr={LR}",
        f"seeds=[{seed}]", "group_by_length=true",  # as the Trainer's flag (off at the default scale=paper)
        *(["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"] if cuda else []),
    ]  # fmt: skip
    script_args = [str(model_dir), str(data_dir), str(epochs), str(batch_size), str(max_len), str(LR), str(seed),
                   "cuda" if cuda else "cpu"]  # fmt: skip
    cmds = {"convexp": convexp_cmd, **{c: [sys.executable, str(path), *script_args] for c, path in SCRIPTS.items()}}
    return {t: cmds[t] for t in tools}


def bench_finetune(
    rows: int = 4000,
    dev_rows: int = 872,
    repeats: int = 3,
    epochs: int = 1,
    batch_size: int = 32,
    max_len: int = 64,
    shape: str = "minilm",
    init: str | None = None,
    data: str | None = None,
    out: str | None = None,
    workdir: str | None = None,
    hf: bool = True,
    device: str = "auto",
) -> dict:
    """Run the job ``repeats`` times through each tool, interleaved; the JSON record (see the
    module docstring), written to ``out`` or printed; a table of the medians and ratios."""
    from rich.console import Console

    from .floor import floor_line, floor_record
    from .scratch import work_folder

    console = Console()
    check_inputs(init, data)
    contenders = hf_contenders(hf, console)
    cuda = wants_cuda(device)
    with work_folder(workdir, "convexp-bench-ft-") as work:  # a temporary one: removed however the bench ends
        data_dir, model_dir = job_inputs(work, rows, dev_rows, shape, hf, init, data)

        def commands(seed: int) -> dict[str, list[str]]:
            return job_commands(model_dir, data_dir, epochs, batch_size, max_len, seed, cuda, ("convexp", *contenders))

        products = None if cuda else arithmetic_floor(model_dir, data_dir, batch_size, epochs, max_len)
        sample = products["rate"].sample if products else (lambda: None)  # before, between and after the runs
        sample()
        # Repeat i runs every tool with seed 42 + i: the tools draw their random numbers differently, so
        # one seed's accuracies differ by seed noise; the medians over the repeats compare the tools.
        seeds = [SEED + i for i in range(repeats)]
        runs = run_repeats(commands, seeds, work, console, "dev_accuracy", "dev accuracy",
                           lambda tool, outputs, stdout: convexp_accuracy(outputs) if tool == "convexp"
                           else script_metric(stdout, "dev_accuracy"), between=sample)  # fmt: skip
        sample()
        walls = {kind: [r["wall_s"] for r in runs if FLOOR_OF[r["tool"]] == kind] for kind in ("full", "cls_only")}
        floor = floor_record(products, walls) if products else None
        record = {
            "benchmark": "finetune",
            "command": " ".join(["convexp", *sys.argv[1:]]) if sys.argv[1:3] == ["bench", "finetune"] else None,
            "job": {
                "task": "sst2",
                "train_rows": _rows(data_dir / "SST-2" / "train.tsv"),
                "dev_rows": _rows(data_dir / "SST-2" / "dev.tsv"),
                "data": str(data) if data else "synthetic",
                "model": str(init) if init else f"random {shape}",
                "shape": None if init else SHAPES[shape],
                "epochs": epochs,
                "batch_size": batch_size,
                "max_len": max_len,
                "lr": LR,
                "device": "cuda" if cuda else "cpu",
                "precision": "bf16-mixed" if cuda else "fp32",
                "seeds": seeds,  # repeat i: seed seeds[i] in both commands
                "convexp_command": ["convexp", *commands(SEED)["convexp"][3:]],  # runnable as written
                **{f"{c}_command": ["python", *commands(SEED)[c][1:]] for c in contenders},
            },
            "machine": machine_info(),
            "repeats": repeats,
            "runs": runs,
            "summary": summarize(runs, epochs * _rows(data_dir / "SST-2" / "train.tsv")),
            "floor": floor,  # the job's matrix products alone on this CPU (floor.py); null on a GPU
        }
        write_record(record, out)
        print_table(console, record["summary"])
        if floor is not None:
            console.print(floor_line(floor))
        return record


def arithmetic_floor(model_dir: Path, data_dir: Path, batch_size: int, epochs: int, max_len: int) -> dict | None:
    """floor.py's floor of the job: its rows' token counts ([CLS] sentence [SEP], at most
    ``max_len``) under the model's vocabulary, its GEMM rate to be sampled on the threads convexp's
    run takes (``trainer.threads=auto``); None where the model has no vocab.txt."""
    import torch

    from ..tasks.classification.glue_files import read_classic
    from ..tasks.classification.registry import get_task
    from ..data.tokenizer import Tokenizer
    from ..train.accel import auto_threads
    from .floor import job_floor

    if not (model_dir / "vocab.txt").is_file():
        return None
    tok = Tokenizer.load(model_dir / "vocab.txt")
    config = json.loads((model_dir / "config.json").read_text())
    shape = {"hidden": config["hidden_size"], "intermediate": config["intermediate_size"],
             "layers": config["num_hidden_layers"]}  # fmt: skip
    splits = read_classic(get_task("sst2"), data_dir)
    train, dev = (
        torch.tensor([min(max_len, len(ids) + 2) for ids in tok.encode_batch(splits[s]["sentence"])])
        for s in ("train", "validation")
    )
    return job_floor(train, dev, batch_size, epochs, shape, SEED, threads=auto_threads()[0])


def write_record(record: dict, out: str | None) -> None:
    """The JSON record to ``out``, or printed."""
    text = json.dumps(record, indent=1)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    else:
        print(text)


def summarize(runs: list[dict], examples: int, metric: str = "dev_accuracy", rate: str = "examples_per_s",
              within: float = 1.0) -> dict:  # fmt: skip
    """Medians per tool (``rate``: ``examples`` / the median wall time); ``ratio[contender]``:
    convexp / that contender (below 1: convexp is faster or smaller), per repeat too (the
    interleaved runs shared the machine's load); the dev ``metric``'s differences and whether they
    are within ``within`` points."""
    out: dict = {}
    for tool in dict.fromkeys(r["tool"] for r in runs):
        mine = [r for r in runs if r["tool"] == tool]
        med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "cpu_s", "peak_rss_mib")}
        scores = [r[metric] for r in mine if r[metric] is not None]
        out[tool] = {**med, rate: examples / med["wall_s"], metric: statistics.median(scores) if scores else None}
    a = out["convexp"]
    for other in [t for t in out if t != "convexp"]:
        b = out[other]
        ratio = {k: a[k] / b[k] for k in ("wall_s", "cpu_s", "peak_rss_mib")}
        mine, theirs = ({r["repeat"]: r for r in runs if r["tool"] == t} for t in ("convexp", other))
        ratio["wall_s_per_pair"] = [mine[i]["wall_s"] / theirs[i]["wall_s"] for i in sorted(mine) if i in theirs]
        if a[metric] is not None and b[metric] is not None:
            ratio[f"{metric}_difference"] = a[metric] - b[metric]
            ratio[f"{metric}_within_{within:g}_point{'s' if within != 1 else ''}"] = abs(a[metric] - b[metric]) <= within
        out.setdefault("ratio", {})[other] = ratio
    return out


def print_table(console, summary: dict, job: str = "Fine-tuning job", metric: str = "dev_accuracy",
                metric_label: str = "dev accuracy (%)", rate: str = "examples_per_s",
                rate_label: str = "train examples / wall s") -> None:  # fmt: skip
    from rich.table import Table

    tools = [t for t in LABELS if t in summary]
    others = list(summary.get("ratio", {}))
    table = Table(title=f"{job}, medians (ratio = convexp / the other; below 1 is better)")
    table.add_column("")
    for t in tools:
        table.add_column(LABELS[t], justify="right")
    for t in others:
        table.add_column(f"vs {LABELS[t]}", justify="right")
    for key, label, fmt in (
        ("wall_s", "wall time (s)", ".1f"),
        ("cpu_s", "CPU time (s)", ".1f"),
        (rate, rate_label, ".1f"),
        ("peak_rss_mib", "peak RSS (MiB)", ".0f"),
        (metric, metric_label, ".2f"),
    ):
        cells = [format(summary[t][key], fmt) if summary[t][key] is not None else "-" for t in tools]
        for t in others:
            r = summary["ratio"][t]
            if key == metric:
                d = r.get(f"{metric}_difference")
                cells.append(f"{d:+.2f} pt" if d is not None else "")
            else:
                cells.append(f"{r[key]:.2f}" if key in r else f"{summary['convexp'][key] / summary[t][key]:.2f}")
        table.add_row(label, *cells)
    console.print(table)


def hf_contenders(hf: bool, console) -> list[str]:
    """The Hugging Face contenders that can run here: the plain loop needs transformers, the
    Trainer also accelerate; what is missing is said in one line."""
    if not hf:
        return []
    from .step import transformers_available

    if not transformers_available():
        console.print(
            "transformers is not installed: timing convexp alone "
            '(`pip install "convexp\\[bench]"` adds the plain loop and the Trainer)'
        )
        return []
    if importlib.util.find_spec("accelerate") is None:
        console.print('accelerate is not installed: no Trainer (`pip install "convexp\\[bench]"` adds it)')
        return ["plain"]
    return ["plain", "trainer"]


def wants_cuda(device: str) -> bool:
    """``--device``: cpu, cuda, or auto (cuda where a GPU is visible)."""
    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device}: use cpu, cuda or auto")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA GPU is visible here; use --device cpu")
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def _cut(src: Path, dst: Path, rows: int, vocab: int) -> list[str]:
    """``dst/SST-2`` with SST-2's first ``rows`` training rows and its whole dev set; the ``vocab``
    most frequent words and punctuation marks of both (the vocabulary of a random model)."""
    import collections
    import re

    (dst / "SST-2").mkdir(parents=True, exist_ok=True)
    train = (src / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()[: rows + 1]
    dev = (src / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    (dst / "SST-2" / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    (dst / "SST-2" / "dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")
    counts = collections.Counter(re.findall(r"\w+|[^\w\s]", "\n".join(train[1:] + dev[1:]).lower()))
    return [w for w, _ in counts.most_common(vocab)]


def _rows(tsv: Path) -> int:
    return sum(1 for line in tsv.read_text(encoding="utf-8").splitlines()[1:] if line.strip())


def drop_keys(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def machine_info() -> dict:
    import torch

    info = {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info
