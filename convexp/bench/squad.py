"""``convexp bench squad``: a whole SQuAD v1.1 fine-tune — windows, training, n-best decoding, the
official exact match and F1 — through ``convexp finetune squad`` against a plain ``transformers`` QA
loop and the ``transformers`` Trainer with its fused AdamW (hf_squad.py), each in its own process.

The job: a BERT of MiniLM-L6's shape in Hugging Face layout (random weights unless ``--init``),
BERMO's fine-tuning settings (``protocol=bermo``: AdamW, eps 1e-8, no weight decay, linear decay
without warm-up, clipping at 1), ``--questions`` training questions of a SQuAD-shaped synthetic set
written as the official JSON files (:func:`squad_shaped`: convexp's synthetic questions with their
contexts lengthened to SQuAD's, so that most windows hold 150-256 tokens) or of ``--data``, a
folder holding ``train-v1.1.json`` and ``dev-v1.1.json`` (its first questions); windows of
``--max-len`` tokens of which consecutive ones share ``--stride`` tokens (run_qa.py's windows;
convexp's ``stride_mode=overlap`` makes the same ones, tests/test_hf_parity.py), fp32 on a CPU,
bf16 autocast on a GPU.

Windows/s is the training windows (counted once, by convexp's featuriser: the same windows for
every tool) times the epochs over the whole process's wall time. Settings (random or length-grouped
batches), convexp's bare step, timing, repeats, ratios: jobs.py; the arithmetic floor (every tool's:
the full encoder over the windows): floor.py; dev F1 agrees when within two points.
"""

from __future__ import annotations

import collections
import json
import math
import random
import re
import sys
from pathlib import Path

from ..errors import UserError
from .finetune import SEED, SHAPES, SPECIALS, write_model_dir
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
    """{train, validation} records: SQuAD-shaped synthetic ones, or the first questions of ``data``'s
    official files."""
    from ..tasks.squad.data import read_squad_json, synthetic_squad

    if data is None:
        splits = synthetic_squad(questions, SEED)
        splits["validation"] = splits["validation"][: dev_questions or None]
        return {split: squad_shaped(records, SEED) for split, records in splits.items()}
    return {
        "train": read_squad_json(Path(data) / "train-v1.1.json")[:questions],
        "validation": read_squad_json(Path(data) / "dev-v1.1.json")[: dev_questions or 1000],
    }


TOKEN = re.compile(r"\w+|[^\w\s]")  # a word or a punctuation mark: a token of the bench's vocabulary


def squad_shaped(records: list[dict], seed: int, median: int = 180) -> list[dict]:
    """``records`` (convexp's synthetic questions) with contexts of SQuAD's length: each context gets
    sentences of the others' contexts before and after its own until it holds a drawn number of
    tokens (log-normal, median ``median``, from 100 to 400: most windows of 256 hold 150-256 tokens,
    about one context in ten needs a second window), its answer's offset moved with it. A sentence
    that holds one of the question's rarer words (the verb, the nouns) is not added, so the answer
    stays the one the question asks for; question i's context depends on (seed, i) alone."""
    sentences = [x for r in records for x in re.split(r"(?<=\.) ", r["context"])]
    counts = collections.Counter(w for x in sentences for w in set(x.split()))
    common = {w for w, n in counts.items() if n > len(sentences) / 50}  # determiners and the like
    out = []
    for i, r in enumerate(records):
        rng = random.Random(f"convexp-bench-squad:{seed}:{i}")
        target = min(400, max(100, round(rng.lognormvariate(math.log(median), 0.22))))
        asked = set(r["question"].rstrip("?").split()) - common
        before: list[str] = []
        after: list[str] = []
        size = len(TOKEN.findall(r["context"]))
        while size < target:
            extra = rng.choice(sentences)
            if asked & set(extra.rstrip(".").split()):
                continue
            (before if rng.random() < 0.5 else after).append(extra)
            size += len(TOKEN.findall(extra))
        head = " ".join(before) + " " if before else ""
        context = head + r["context"] + ("" if not after else " " + " ".join(after))
        moved = [start + len(head) for start in r["answers"]["answer_start"]]
        out.append({**r, "context": context, "answers": {**r["answers"], "answer_start": moved}})
    return out


def vocabulary(records: list[dict], size: int) -> list[str]:
    """The ``size`` most frequent lower-cased words and punctuation marks (a random model's vocabulary)."""
    text = "\n".join(r["context"] + "\n" + r["question"] for r in records).lower()
    return [w for w, _ in collections.Counter(TOKEN.findall(text)).most_common(size)]


def _f1(metrics: dict) -> float:
    return metrics["dev"]["validation"]["f1"]


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
    grouping: str = "both",
) -> dict:
    """Run the job ``repeats`` times through each tool in each setting, interleaved; the JSON record,
    written to ``out`` or printed; tables of the medians, the ratios and each tool's steps against
    its job."""
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
    settings = settings_of(grouping)
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
        floors = {} if cuda else {s: squad_floor(model_dir, lengths, batch_size, epochs, s == "grouped")
                                  for s in settings}  # fmt: skip
        samples = [f["rate"].sample for f in floors.values()]  # before, between and after the runs

        def sample() -> None:
            for s in samples:
                s()

        sample()

        def commands(seed: int) -> dict[str, list[str]]:
            cmds = {}
            for setting in settings:
                grouped = setting == "grouped"
                overrides = [
                    "task=squad1", f"init={model_dir}", "squad.source=local", f"squad.path={work / 'squad'}",
                    "protocol=bermo", f"epochs={epochs}", f"batch_size={batch_size}", f"lr={LR}", f"seeds=[{seed}]",
                    f"squad.max_len={max_len}", f"squad.doc_stride={stride}", "task.qa.bermo.stride_mode=overlap",
                    *(["group_by_length=true"] if grouped else []),  # the default at scale=paper: random batches
                    *(["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"] if cuda else ["trainer.accelerator=cpu"]),
                ]  # fmt: skip
                script_args = [str(model_dir), str(work / "squad"), str(epochs), str(batch_size), str(max_len),
                               str(stride), str(LR), str(seed), "cuda" if cuda else "cpu"]  # fmt: skip
                every = {
                    "convexp": [sys.executable, "-m", "convexp.cli", "finetune", "squad", *overrides],
                    "bare": [sys.executable, "-m", "convexp.bench.bare_step", "squad", *overrides],
                    **{c: [sys.executable, str(HF_SQUAD), c, *script_args, setting.replace("default", "random")]
                       for c in contenders},  # fmt: skip
                }
                cmds.update({job_key(t, setting): c for t, c in every.items() if not (grouped and t == "plain")})
            return cmds

        def score(tool: str, outputs: Path, stdout: str) -> dict:
            if tool == "convexp":
                return convexp_result(outputs, "dev_f1", _f1)
            if tool == "bare":
                return bare_result(stdout)
            return script_steps(_script_windows(script_result(stdout), windows), "dev_f1")

        seeds = [SEED + i for i in range(repeats)]
        runs = run_repeats(commands, seeds, work, console, "dev_f1", "dev F1", score, between=sample)
        sample()
        record = {
            "benchmark": "squad",
            "command": " ".join(["convexp", *sys.argv[1:]]) if sys.argv[1:3] == ["bench", "squad"] else None,
            "job": {
                "task": "squad1",
                "train_questions": len(splits["train"]),
                "dev_questions": len(splits["validation"]),
                "train_windows": windows,
                "train_window_tokens": _spread(lengths["train"]),
                "data": str(data) if data else "synthetic, SQuAD-shaped",
                "model": str(init) if init else f"random {shape}",
                "epochs": epochs,
                "batch_size": batch_size,
                "max_len": max_len,
                "stride": stride,
                "lr": LR,
                "device": "cuda" if cuda else "cpu",
                "precision": "bf16-mixed" if cuda else "fp32",
                "seeds": seeds,
                "settings": settings,
                "commands": {k: ["convexp", *c[3:]] if k.startswith("convexp") else ["python", *c[1:]]
                             for k, c in commands(SEED).items()},  # runnable as written  # fmt: skip
            },
            "machine": machine_info(),
            "repeats": repeats,
            "runs": runs,
            "summary": summarize(runs, epochs * windows, metric="dev_f1", rate="windows_per_s", within=2.0),
            # the job's matrix products alone on this CPU (floor.py), per setting; null on a GPU
            "floor": {s: floor_record(f, {"full": [r["wall_s"] for r in runs if r["setting"] == s
                                                   and r["tool"] != "bare"]}) for s, f in floors.items()} or None,
        }
        write_record(record, out)
        print_tables(console, record["summary"], "SQuAD fine-tune", "dev_f1", "dev F1", "windows_per_s",
                     "train windows / wall s")  # fmt: skip
        for s, f in (record["floor"] or {}).items():
            console.print(f"{SETTINGS[s]}: {floor_line(f)}")
        return record


def _spread(lengths: list[int]) -> dict:
    """Window lengths in tokens: the mean, and the share of windows of 150 tokens or more."""
    return {"mean": sum(lengths) / len(lengths), "share_150_or_more": sum(n >= 150 for n in lengths) / len(lengths)}


def squad_floor(model_dir: Path, lengths: dict[str, list[int]], batch_size: int, epochs: int, grouped: bool) -> dict:
    """floor.py's floor of the job: its training and dev windows' token counts through the full
    encoder (random or length-grouped batches), its GEMM rate to be sampled on the threads
    convexp's run takes."""
    import torch

    from ..train.accel import auto_threads
    from .floor import job_floor

    config = json.loads((model_dir / "config.json").read_text())
    shape = {"hidden": config["hidden_size"], "intermediate": config["intermediate_size"],
             "layers": config["num_hidden_layers"]}  # fmt: skip
    train, dev = torch.tensor(lengths["train"]), torch.tensor(lengths["validation"])
    return job_floor(train, dev, batch_size, epochs, shape, SEED, threads=auto_threads()[0], cls_only=False,
                     grouped=grouped)  # fmt: skip


def _script_windows(result: dict | None, windows: int) -> dict | None:
    """The contender's result; it must have trained on the same windows as convexp."""
    if result is not None and result["train_windows"] != windows:
        raise UserError(f"the contender made {result['train_windows']} training windows, convexp {windows}: "
                        "the jobs differ (tokenizers 0.23.2 drops overflowing windows; upgrade it)")  # fmt: skip
    return result
