"""``convexp bench finetune``: a whole fine-tuning job through convexp against what a researcher would
use instead, same data, model and settings, each in its own process: a plain ``transformers`` loop
(plain_finetune.py) and the ``transformers`` Trainer with its fused AdamW (trainer_finetune.py).

The job (issue 17): a BERT of MiniLM-L6's shape (6 layers, hidden 384, 12 heads, FFN 1536,
vocabulary 30522) in Hugging Face layout, SST-2, 1 epoch, batch 32, max length 64, AdamW at a
linear schedule (10% warm-up, no weight decay, no layer-wise decay: ``protocol=chang``), fp32 on
the CPU, bf16 autocast on a CUDA GPU (``--device``), dev accuracy at the end. Without ``--init`` the
model directory is made here with random weights (no hub access is needed); without ``--data`` the
SST-2 files are synthetic sentences whose label is given by a few cue words among neutral filler,
with SST-2's length spread.

Two settings (jobs.py, ``--grouping``): ``default``, random batches for every tool (convexp's
command as a user runs it: ``scale=paper``'s batch order), and ``grouped``, length-grouped batches
(convexp's ``group_by_length=true``, the Trainer's ``group_by_length``). In each, convexp's bare step
(bare_step.py) runs on the stage's batches. Timing, repeats (repeat i: seed 42 + i for every tool;
the jobs take turns), medians and ratios: jobs.py; the arithmetic floor: floor.py.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from ..errors import UserError
from .jobs import (
    SETTINGS,
    bare_result,
    convexp_result,
    hf_contenders,
    job_key,
    machine_info,
    print_tables,
    run_repeats,
    script_result,
    script_steps,
    settings_of,
    summarize,
    wants_cuda,
    write_record,
)

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
                 cuda: bool, tools=("convexp", *SCRIPTS), settings=("default",)) -> dict[str, list[str]]:  # fmt: skip
    """The job's commands (jobs.job_key -> argv) through each of ``tools`` (convexp, bare, plain,
    trainer) in each of ``settings`` (default: random batches; grouped: length-grouped; the plain
    loop has random batches only)."""
    cmds = {}
    for setting in settings:
        grouped = setting == "grouped"
        overrides = [
            "task=sst2", f"init={model_dir}", "glue.source=local", f"glue.path={data_dir}", "protocol=chang",
            f"epochs={epochs}", f"batch_size={batch_size}", f"task.max_len={max_len}", f"lr={LR}", f"seeds=[{seed}]",
            *(["group_by_length=true"] if grouped else []),  # the default at scale=paper: random batches
            *(["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"] if cuda else ["trainer.accelerator=cpu"]),
        ]  # fmt: skip
        script_args = [str(model_dir), str(data_dir), str(epochs), str(batch_size), str(max_len), str(LR), str(seed),
                       "cuda" if cuda else "cpu"]  # fmt: skip
        every = {
            "convexp": [sys.executable, "-m", "convexp.cli", "finetune", "glue", *overrides],
            "bare": [sys.executable, "-m", "convexp.bench.bare_step", "glue", *overrides],
            "plain": [sys.executable, str(SCRIPTS["plain"]), *script_args],
            "trainer": [sys.executable, str(SCRIPTS["trainer"]), *script_args, "grouped" if grouped else "random"],
        }
        cmds.update({job_key(t, setting): every[t] for t in tools if not (grouped and t == "plain")})
    return cmds


def _accuracy(metrics: dict) -> float:
    return metrics["dev"]["validation"]["accuracy"]


def score(tool: str, outputs: Path, stdout: str) -> dict:
    """A job's dev accuracy and step times (jobs.py)."""
    if tool == "convexp":
        return convexp_result(outputs, "dev_accuracy", _accuracy)
    if tool == "bare":
        return bare_result(stdout)
    return script_steps(script_result(stdout), "dev_accuracy")


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
    grouping: str = "both",
) -> dict:
    """Run the job ``repeats`` times through each tool in each setting, interleaved; the JSON
    record (see the module docstring), written to ``out`` or printed; tables of the medians, the
    ratios and each tool's steps against its job."""
    from rich.console import Console

    from .floor import floor_line, floor_record
    from .scratch import work_folder

    console = Console()
    check_inputs(init, data)
    settings = settings_of(grouping)
    contenders = hf_contenders(hf, console)
    cuda = wants_cuda(device)
    with work_folder(workdir, "convexp-bench-ft-") as work:  # a temporary one: removed however the bench ends
        data_dir, model_dir = job_inputs(work, rows, dev_rows, shape, hf, init, data)

        def commands(seed: int) -> dict[str, list[str]]:
            tools = ("convexp", "bare", *contenders)
            return job_commands(model_dir, data_dir, epochs, batch_size, max_len, seed, cuda, tools, settings)

        floors = {} if cuda else arithmetic_floor(model_dir, data_dir, batch_size, epochs, max_len, settings)
        samples = [f["rate"].sample for f in floors.values()]  # before, between and after the runs

        def sample() -> None:
            for s in samples:
                s()

        sample()
        # Repeat i runs every tool with seed 42 + i: the tools draw their random numbers differently, so
        # one seed's accuracies differ by seed noise; the medians over the repeats compare the tools.
        seeds = [SEED + i for i in range(repeats)]
        runs = run_repeats(commands, seeds, work, console, "dev_accuracy", "dev accuracy", score, between=sample)
        sample()
        train_rows = _rows(data_dir / "SST-2" / "train.tsv")
        record = {
            "benchmark": "finetune",
            "command": " ".join(["convexp", *sys.argv[1:]]) if sys.argv[1:3] == ["bench", "finetune"] else None,
            "job": {
                "task": "sst2",
                "train_rows": train_rows,
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
                "seeds": seeds,  # repeat i: seed seeds[i] in every command
                "settings": settings,
                "commands": {k: ["convexp", *c[3:]] if k.startswith("convexp") else ["python", *c[1:]]
                             for k, c in commands(SEED).items()},  # runnable as written  # fmt: skip
            },
            "machine": machine_info(),
            "repeats": repeats,
            "runs": runs,
            "summary": summarize(runs, epochs * train_rows),
            # the job's matrix products alone on this CPU (floor.py), per setting; null on a GPU
            "floor": {s: floor_record(f, _walls(runs, s)) for s, f in floors.items()} or None,
        }
        write_record(record, out)
        print_tables(console, record["summary"], "Fine-tuning job")
        for s, f in (record["floor"] or {}).items():
            console.print(f"{SETTINGS[s]}: {floor_line(f)}")
        return record


def _walls(runs: list[dict], setting: str) -> dict[str, list[float]]:
    """The wall times of a setting's runs under each floor kind: convexp's [CLS]-only, the others' full."""
    kinds = {"convexp": "cls_only", "plain": "full", "trainer": "full"}
    return {kind: [r["wall_s"] for r in runs if r["setting"] == setting and kinds.get(r["tool"]) == kind]
            for kind in ("full", "cls_only")}  # fmt: skip


def arithmetic_floor(model_dir: Path, data_dir: Path, batch_size: int, epochs: int, max_len: int,
                     settings: list[str]) -> dict:  # fmt: skip
    """floor.py's floor of the job in each setting (random or length-grouped batches): its rows' token
    counts ([CLS] sentence [SEP], at most ``max_len``) under the model's vocabulary, its GEMM rate to
    be sampled on the threads convexp's run takes (``trainer.threads=auto``); none where the model
    has no vocab.txt."""
    import torch

    from ..tasks.classification.glue_files import read_classic
    from ..tasks.classification.registry import get_task
    from ..data.tokenizer import Tokenizer
    from ..train.accel import auto_threads
    from .floor import job_floor

    if not (model_dir / "vocab.txt").is_file():
        return {}
    tok = Tokenizer.load(model_dir / "vocab.txt")
    config = json.loads((model_dir / "config.json").read_text())
    shape = {"hidden": config["hidden_size"], "intermediate": config["intermediate_size"],
             "layers": config["num_hidden_layers"]}  # fmt: skip
    splits = read_classic(get_task("sst2"), data_dir)
    train, dev = (
        torch.tensor([min(max_len, len(ids) + 2) for ids in tok.encode_batch(splits[s]["sentence"])])
        for s in ("train", "validation")
    )
    return {s: job_floor(train, dev, batch_size, epochs, shape, SEED, threads=auto_threads()[0],
                         grouped=s == "grouped") for s in settings}  # fmt: skip


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
