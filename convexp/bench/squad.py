"""``convexp bench squad``: a whole SQuAD v1.1 fine-tune — windows, training, n-best decoding, the
official exact match and F1 — through ``convexp finetune squad`` against a plain ``transformers`` QA
loop and the ``transformers`` Trainer with its speed flags (hf_squad.py), each in its own process.

The job: a BERT of MiniLM-L6's shape in Hugging Face layout (random weights unless ``--init``),
BERMO's fine-tuning settings (``protocol=bermo``: AdamW, eps 1e-8, no weight decay, linear decay
without warm-up, clipping at 1), ``--questions`` training questions of convexp's synthetic SQuAD
v1.1 written as the official JSON files (or of ``--data``, a folder holding ``train-v1.1.json`` and
``dev-v1.1.json``: its first questions), windows of ``--max-len`` tokens of which consecutive ones
share ``--stride`` tokens (run_qa.py's windows; convexp's ``stride_mode=overlap`` makes the same
ones, tests/test_hf_parity.py), fp32 on a CPU, bf16 autocast on a GPU.

Windows/s is the training windows (counted once, by convexp's featuriser: the same windows for
every tool) times the epochs over the whole process's wall time. Timing, repeats, ratios and the
arithmetic floor (every tool's: the full encoder over the windows) as ``convexp bench finetune``
(finetune.py, floor.py); dev F1 agrees when within two points.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

from ..errors import UserError
from .finetune import (
    SEED,
    SHAPES,
    SPECIALS,
    wants_cuda,
    machine_info,
    hf_contenders,
    print_table,
    run_repeats,
    script_result,
    summarize,
    write_model_dir,
    write_record,
)

HF_SQUAD = Path(__file__).with_name("hf_squad.py")
LR = 1e-4  # the job (MiniLM, lr 1e-4); BERMO's own rate is 3e-5 for BERT-base


def write_official(path: Path, records: list[dict]) -> None:
    """Records (tasks/squad/data.py's format) as an official SQuAD v1.1 file, one paragraph each."""
    paragraphs = [
        {"context": r["context"], "qas": [{"id": r["id"], "question": r["question"], "answers": [
            {"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])]}]}
        for r in records
    ]  # fmt: skip
    path.write_text(json.dumps({"version": "v1.1", "data": [{"title": "bench", "paragraphs": paragraphs}]}))


def squad_splits(questions: int, dev_questions: int | None, data: str | None) -> dict[str, list[dict]]:
    """{train, validation} records: synthetic, or the first questions of ``data``'s official files."""
    from ..tasks.squad.data import read_squad_json, synthetic_squad

    if data is None:
        splits = synthetic_squad(questions, SEED)
        splits["validation"] = splits["validation"][: dev_questions or None]
        return splits
    return {
        "train": read_squad_json(Path(data) / "train-v1.1.json")[:questions],
        "validation": read_squad_json(Path(data) / "dev-v1.1.json")[: dev_questions or 1000],
    }


def vocabulary(records: list[dict], size: int) -> list[str]:
    """The ``size`` most frequent lower-cased words and punctuation marks (a random model's vocabulary)."""
    text = "\n".join(r["context"] + "\n" + r["question"] for r in records).lower()
    return [w for w, _ in collections.Counter(re.findall(r"\w+|[^\w\s]", text)).most_common(size)]


def _convexp_f1(outputs: Path) -> float | None:
    found = sorted(outputs.glob("runs/*/*/metrics.json"))
    return json.loads(found[0].read_text())["dev"]["validation"]["f1"] if found else None


def bench_squad(
    questions: int = 600,
    dev_questions: int | None = None,
    repeats: int = 3,
    epochs: int = 1,
    batch_size: int = 16,
    max_len: int = 256,
    stride: int = 128,
    shape: str = "minilm",
    init: str | None = None,
    data: str | None = None,
    out: str | None = None,
    workdir: str | None = None,
    hf: bool = True,
    device: str = "auto",
) -> dict:
    """Run the job ``repeats`` times through each tool, interleaved; the JSON record, written to
    ``out`` or printed; a table of the medians and ratios."""
    from rich.console import Console

    from ..tasks.squad.features import squad_features
    from ..data.tokenizer import Tokenizer
    from .floor import floor_line, floor_record
    from .scratch import work_folder

    console = Console()
    if init is not None and not (Path(init) / "config.json").is_file():
        raise UserError(f"--init {init}: no config.json there; give a Hugging Face BERT directory")
    for name in ("train-v1.1.json", "dev-v1.1.json") if data is not None else ():
        if not (Path(data) / name).is_file():
            raise UserError(f"--data {data}: no {name}; give the folder of the official SQuAD v1.1 files")
    cuda = wants_cuda(device)
    splits = squad_splits(questions, dev_questions, data)
    room = max_len - 3 - min(64, max(len(r["question"].split()) for r in splits["train"] + splits["validation"]))
    if not 0 < stride < room:  # a window: [CLS] question (at most 64 tokens) [SEP] context [SEP]
        raise UserError(f"--stride {stride}: windows of --max-len {max_len} hold about {room} context tokens "
                        f"after the longest question; give a --stride from 1 to {room - 1}")  # fmt: skip
    contenders = hf_contenders(hf, console)
    with work_folder(workdir, "convexp-bench-squad-") as work:  # a temporary one: removed however the bench ends
        (work / "squad").mkdir(parents=True, exist_ok=True)
        write_official(work / "squad" / "train-v1.1.json", splits["train"])
        write_official(work / "squad" / "dev-v1.1.json", splits["validation"])
        model_dir = Path(init) if init else write_model_dir(
            work / "model", SHAPES[shape], vocabulary(splits["train"] + splits["validation"],
                                                      SHAPES[shape]["vocab"] - len(SPECIALS)), hf=True)  # fmt: skip
        tok = Tokenizer.load(model_dir / "vocab.txt")
        window = {"max_len": max_len, "doc_stride": stride, "stride_mode": "overlap"}
        lengths = {s: [len(f["input_ids"]) for f in squad_features(splits[s], tok, **window)] for s in splits}
        windows = len(lengths["train"])
        products = None if cuda else squad_floor(model_dir, lengths, batch_size, epochs)
        sample = products["rate"].sample if products else (lambda: None)  # before, between and after the runs
        sample()

        def commands(seed: int) -> dict[str, list[str]]:
            convexp_cmd = [
                sys.executable, "-m", "convexp.cli", "finetune", "squad", "task=squad1", f"init={model_dir}",
                "squad.source=local", f"squad.path={work / 'squad'}", "protocol=bermo", f"epochs={epochs}",
                f"batch_size={batch_size}", f"lr={LR}", f"seeds=[{seed}]", f"squad.max_len={max_len}",
                f"squad.doc_stride={stride}", "task.qa.bermo.stride_mode=overlap",
                "group_by_length=true",  # as the Trainer's flag (off at the default scale=paper)
                *(["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"] if cuda else []),
            ]  # fmt: skip
            script_args = [str(model_dir), str(work / "squad"), str(epochs), str(batch_size), str(max_len), str(stride),
                           str(LR), str(seed), "cuda" if cuda else "cpu"]  # fmt: skip
            return {"convexp": convexp_cmd, **{c: [sys.executable, str(HF_SQUAD), c, *script_args] for c in contenders}}

        seeds = [SEED + i for i in range(repeats)]
        runs = run_repeats(commands, seeds, work, console, "dev_f1", "dev F1",
                           lambda tool, outputs, stdout: _convexp_f1(outputs) if tool == "convexp"
                           else _script_f1(stdout, windows), between=sample)  # fmt: skip
        sample()
        floor = floor_record(products, {"full": [r["wall_s"] for r in runs]}) if products else None
        record = {
            "benchmark": "squad",
            "command": " ".join(["convexp", *sys.argv[1:]]) if sys.argv[1:3] == ["bench", "squad"] else None,
            "job": {
                "task": "squad1",
                "train_questions": len(splits["train"]),
                "dev_questions": len(splits["validation"]),
                "train_windows": windows,
                "data": str(data) if data else "synthetic",
                "model": str(init) if init else f"random {shape}",
                "epochs": epochs,
                "batch_size": batch_size,
                "max_len": max_len,
                "stride": stride,
                "lr": LR,
                "device": "cuda" if cuda else "cpu",
                "precision": "bf16-mixed" if cuda else "fp32",
                "seeds": seeds,
                "convexp_command": ["convexp", *commands(SEED)["convexp"][3:]],
                **{f"{c}_command": ["python", *commands(SEED)[c][1:]] for c in contenders},
            },
            "machine": machine_info(),
            "repeats": repeats,
            "runs": runs,
            "summary": summarize(runs, epochs * windows, metric="dev_f1", rate="windows_per_s", within=2.0),
            "floor": floor,  # the job's matrix products alone on this CPU (floor.py); null on a GPU
        }
        write_record(record, out)
        print_table(console, record["summary"], "SQuAD fine-tune", "dev_f1", "dev F1", "windows_per_s",
                    "train windows / wall s")  # fmt: skip
        if floor is not None:
            console.print(floor_line(floor))
        return record


def squad_floor(model_dir: Path, lengths: dict[str, list[int]], batch_size: int, epochs: int) -> dict:
    """floor.py's floor of the job: its training and dev windows' token counts through the full
    encoder, its GEMM rate to be sampled on the threads convexp's run takes."""
    import torch

    from ..train.accel import auto_threads
    from .floor import job_floor

    config = json.loads((model_dir / "config.json").read_text())
    shape = {"hidden": config["hidden_size"], "intermediate": config["intermediate_size"],
             "layers": config["num_hidden_layers"]}  # fmt: skip
    train, dev = torch.tensor(lengths["train"]), torch.tensor(lengths["validation"])
    return job_floor(train, dev, batch_size, epochs, shape, SEED, threads=auto_threads()[0], cls_only=False)


def _script_f1(stdout: str, windows: int) -> float | None:
    """The contender's dev F1; it must have trained on the same windows as convexp."""
    result = script_result(stdout)
    if result is None:
        return None
    if result["train_windows"] != windows:
        raise UserError(f"the contender made {result['train_windows']} training windows, convexp {windows}: "
                        "the jobs differ (tokenizers 0.23.2 drops overflowing windows; upgrade it)")  # fmt: skip
    return result["dev_f1"]
