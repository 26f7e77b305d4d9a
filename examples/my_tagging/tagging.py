"""A kind of task of your own: word tagging (one label a word: parts of speech, named entities,
chunks), which is not GLUE-shaped -- a label for every word, not one a sentence.

This module is the whole kind. convexp finds it on ``--user-dir`` (``KIND`` below), its task files
say ``kind: tagging`` (task/pos_tags.yaml beside it), and then::

    convexp --user-dir examples/my_tagging finetune tagging task=pos_tags init=<run or HF folder>
    convexp --user-dir examples/my_tagging ablate my-tagging --dry-run     # its own FLOPs, memory, disk
    convexp --user-dir examples/my_tagging report my-tagging               # its column: token accuracy

Data: JSON lines, ``{"words": [...], "tags": [...]}`` one sentence a line (``task.train_file``,
``task.validation_file``); the tag set is ``task.options.labels``. A word's first word piece is
tagged; its other pieces and the special tokens are not scored (the usual BERT recipe, Devlin et
al. 2019 §5.3). Runs are convexp's fine-tuning runs (ids, resume, sweeps, W&B); what is the kind's
own is the data, the head, the metric (token accuracy on the dev file) and the estimates below.
"""

from __future__ import annotations

import json
from pathlib import Path

from convexp.config.name_tokens import command_tokens
from convexp.errors import UserError
from convexp.store.rundirs import FinetuneRun
from convexp.tasks import TaskKind
from convexp.tasks.finetune_runs import RunNamer, hyperparameters
from convexp.train.inputs import check_finetune_inputs

FILES = ("train_file", "validation_file")


def read_rows(path, key: str) -> list[dict]:
    """The sentences of a JSON-lines file, checked: words and tags of the same, non-zero length."""
    rows = []
    for i, line in enumerate(Path(path).expanduser().read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"task.{key}: {path}:{i} is not JSON ({e.msg}); one {{words, tags}} object a line") from None
        words, tags = (row.get("words"), row.get("tags")) if isinstance(row, dict) else (None, None)
        if not isinstance(words, list) or not isinstance(tags, list) or not words or len(words) != len(tags):
            raise UserError(f"task.{key}: {path}:{i} needs lists `words` and `tags` of one length")
        rows.append({"words": [str(w) for w in words], "tags": [str(t) for t in tags]})
    if not rows:
        raise UserError(f"task.{key}: {path} has no sentences; give a file with one a line")
    return rows


def labels_of(cfg) -> list[str]:
    labels = list((cfg.task.get("options") or {}).get("labels") or [])
    if len(labels) < 2:
        raise UserError("task.options.labels: give the tag set (two or more tags), e.g. [NOUN, VERB, DET]")
    return labels


class Tagging(TaskKind):
    name = "tagging"
    title = "tagging"
    help = "Fine-tune a word tagger: task=<your task file> init=<run dir | HF dir | none> [KEY=VALUE ...]."

    # --- the command: check, plan, run ----------------------------------------------------------

    def check(self, inv, planned: bool = False) -> None:
        cfg = inv.cfg
        check_finetune_inputs(cfg, planned=planned)  # outputs, init=, the tokenizer, max_len...
        labels = set(labels_of(cfg))
        for key in FILES if not planned else ():  # a sweep's plan: its node checks the files
            path = cfg.task.get(key)
            if not path or not Path(path).expanduser().is_file():
                raise UserError(f"task.{key}={path}: no such file; give a JSON-lines file of {{words, tags}}")
            for i, row in enumerate(read_rows(path, key)[:20], 1):  # the first rows: a wrong tag set shows
                unknown = sorted(set(row["tags"]) - labels)
                if unknown:
                    raise UserError(f"task.{key}: sentence {i} has tags {unknown} outside task.options.labels")

    def plan(self, inv, start, tokens: list[str] | None = None) -> list[FinetuneRun]:
        """One run per (setting, seed); the id hashes the files' contents and the tag set too."""
        cfg = inv.cfg
        files = {k: str(Path(cfg.task[k]).expanduser().resolve()) for k in FILES}
        namer = RunNamer(cfg, {"task_data": {**files, "labels": labels_of(cfg)}})
        tokens = command_tokens(cfg) if tokens is None else tokens
        runs = []
        for hp in hyperparameters(cfg, start.width):
            for seed in cfg.seeds:
                run, run_cfg = namer.run(start.slug, cfg.task.name, seed, hp, tokens=tokens)
                runs.append(FinetuneRun(cfg.task.name, seed, hp, run, run_cfg))
        return runs

    def run(self, inv, summary: bool = True) -> None:
        from convexp.train.finetune import open_init, train_one
        from convexp.train.weights import has_work

        from tagging_model import encode, tagging_job

        cfg = inv.cfg
        init = open_init(cfg)
        labels = labels_of(cfg)
        splits = {k: encode(read_rows(cfg.task[k], k), init.tokenizer, labels, cfg.task.max_len) for k in FILES}
        for planned in self.plan(inv, init):
            if has_work(cfg, planned):
                print(f"{planned.task} seed {planned.seed} -> {planned.run.dir}", flush=True)
                train_one(cfg, init, planned, tagging_job(cfg, init, planned, splits, labels))

    # --- a sweep's estimates: its own files, not GLUE's sizes ----------------------------------------

    def train_examples(self, cfg, task: str) -> int | None:
        path = Path(str(cfg.task.get("train_file") or "")).expanduser()
        return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.is_file() else None

    def kept_bytes(self, cfg, task: str) -> float:
        """predictions/validation.jsonl: the dev file's words with their predicted tags (~ its size)."""
        path = Path(str(cfg.task.get("validation_file") or "")).expanduser()
        return 1.2 * path.stat().st_size if path.is_file() else 0.0

    # --- the report: the run's token accuracy (its metrics.json ``score``; the base class reads it)


KIND = Tagging()
