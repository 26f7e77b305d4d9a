"""SQuAD v1.1 / v2.0: loading the official files, the hub datasets, or a synthetic stand-in.

Every source gives ``{split: [record, ...]}`` with splits ``train`` and ``validation`` and one
record format (the hub's, plus an explicit flag):

    {"id": str, "title": str, "context": str, "question": str,
     "answers": {"text": [str, ...], "answer_start": [int, ...]},  # character offsets into context
     "is_impossible": bool}                                          # v2.0: no answer in the context

Training questions have one answer, dev questions up to a few (the metrics take the best); an
unanswerable question has empty answer lists. Every answer is checked to be the span of the
context it claims to be (``context[start:start + len(text)] == text``).

Source config keys (missing keys take ``SQUAD_SOURCE_DEFAULTS``):

  version         v1.1 | v2.0
  source          synthetic | hub | local
  path            hub: dataset name (null: rajpurkar/squad or rajpurkar/squad_v2);
                  local: a folder holding train-v1.1.json and dev-v1.1.json (or the v2.0 pair)
  revision        hub: the dataset repository's branch, tag or commit (null: its default branch;
                  ``data/hub.py``); set, part of the run id
  seed            synthetic: the data seed
  synthetic_size  synthetic: training questions (dev: a quarter, at least 50)

The synthetic task asks questions about short documents of the synthetic language, e.g.
context "... the brave blorin zutas a klee. ..." and question "what does the brave blorin
zuta?" -> "a klee", or "what zutas a klee?" -> "the brave blorin". No two sentences of a
document share a verb, so the answer is determined (and a small model can find it by matching
the question's verb). For v2.0 a third of the questions ask about a noun phrase of the context
with a verb that the document never uses: unanswerable.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ...config.groups import SQUAD_SOURCES
from ...data.corpus import with_defaults
from ...data.errors import DataError
from ...data.hub import load_hub_or
from ...data.text_files import quoted

# The synthetic language's phrase builders; one import site, so moving the grammar touches one line.
from ...data.grammar import Clause, Words, sentence

VERSIONS = ("v1.1", "v2.0")
SOURCES = SQUAD_SOURCES  # squad.source's choices, declared with its schema (config/groups.py)
SPLITS = ("train", "validation")
HUB_NAMES = {"v1.1": "rajpurkar/squad", "v2.0": "rajpurkar/squad_v2"}
SQUAD_SOURCE_DEFAULTS: dict[str, Any] = {
    "version": "v1.1",
    "source": "synthetic",
    "path": None,
    "revision": None,
    "seed": 0,
    "synthetic_size": 2000,
}


class SquadError(DataError):
    """A SQuAD source problem: bad setting, missing or malformed file, bad answer, empty split."""


def official_file(version: str, split: str) -> str:
    """The official file name of a split, e.g. ``dev-v2.0.json``."""
    return f"{'train' if split == 'train' else 'dev'}-{version}.json"


def squad_source_settings(source_cfg=None) -> dict:
    """The source config with defaults, validated (one-line SquadError)."""
    s = with_defaults(source_cfg, SQUAD_SOURCE_DEFAULTS, "SQuAD source", SquadError)
    if s["version"] not in VERSIONS:
        raise SquadError(f"unknown SQuAD version {s['version']!r}; use one of: {', '.join(VERSIONS)}")
    if s["source"] not in SOURCES:
        raise SquadError(f"unknown SQuAD source {s['source']!r}; use one of: {', '.join(SOURCES)}")
    if s["source"] == "local" and not s["path"]:
        raise SquadError(
            f"SQuAD source 'local' needs a path; set path to the folder holding "
            f"{official_file(s['version'], 'train')} and {official_file(s['version'], 'validation')}"
        )
    return s


def check_source(source_cfg=None) -> None:
    """The source's settings and, for a local folder, both official files there, read and checked
    as a run reads them (~0.5 s for SQuAD 2.0's 40 MB of JSON): refused before the stage's imports,
    anything hashed or cached (one-line SquadError)."""
    s = squad_source_settings(source_cfg)
    if s["source"] == "local":
        for split in SPLITS:
            read_squad_json(Path(s["path"]).expanduser() / official_file(s["version"], split))


def _official_path(path: Path) -> Path:
    if not path.is_file():
        raise SquadError(f"no such SQuAD file: {path}; download the official {path.name} into that folder")
    return path


def load_squad(source_cfg=None) -> dict[str, list[dict]]:
    """{"train": [...], "validation": [...]} of checked records (see the module docstring)."""
    s = squad_source_settings(source_cfg)
    if s["source"] == "synthetic":
        return synthetic_squad(int(s["synthetic_size"]), int(s["seed"]), s["version"])
    if s["source"] == "hub":
        return _load_hub(s["path"] or HUB_NAMES[s["version"]], s["version"], s["revision"])
    root = Path(s["path"]).expanduser()
    return {split: read_squad_json(root / official_file(s["version"], split)) for split in SPLITS}


def read_squad_json(path) -> list[dict]:
    """The records of one official SQuAD JSON file (v1.1 or v2.0), checked."""
    path = _official_path(Path(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SquadError(
            f"{path} is not valid JSON ({' '.join(str(e).split())[:120]}); use the official file"
        ) from e
    where = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise SquadError(f"{where} has no top-level 'data' list; use an official SQuAD JSON file")
    records = []
    try:
        for article in data["data"]:
            title = article.get("title", "")
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = qa.get("answers", [])
                    impossible = bool(qa.get("is_impossible", False))
                    records.append(
                        {
                            "id": str(qa["id"]),
                            "title": title,
                            "context": context,
                            "question": qa["question"],
                            "answers": {
                                "text": [a["text"] for a in answers],
                                "answer_start": [int(a["answer_start"]) for a in answers],
                            },
                            "is_impossible": impossible,
                        }
                    )
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        qid = f" after question {quoted(records[-1]['id'])}" if records else ""
        raise SquadError(
            f"{where}{qid} is malformed ({type(e).__name__}: {e}); "
            "use the official layout data[].paragraphs[].qas[].answers[]"
        ) from e
    return check_records(records, where)


def check_records(records: list[dict], where: str) -> list[dict]:
    """Raise SquadError for an empty split, an answer whose offset does not point at its text,
    or an answerable question without an answer; return ``records``."""
    if not records:
        raise SquadError(f"{where} has no questions; use a non-empty SQuAD split")
    for r in records:
        texts, starts = r["answers"]["text"], r["answers"]["answer_start"]
        if len(texts) != len(starts):
            raise SquadError(
                f"{where} question {quoted(r['id'])}: {len(texts)} answer texts but {len(starts)} offsets"
            )
        if r["is_impossible"] and texts:
            raise SquadError(
                f"{where} question {quoted(r['id'])} is marked impossible but has answers; fix the file"
            )
        if not r["is_impossible"] and not texts:
            raise SquadError(f"{where} question {quoted(r['id'])} has no answer; give one or mark it is_impossible")
        for text, start in zip(texts, starts):
            if r["context"][start : start + len(text)] != text:
                raise SquadError(
                    f"{where} question {quoted(r['id'])}: answer {quoted(text, 40)} is not at offset {start} of "
                    "its context; fix answer_start"
                )
    return records


def _load_hub(name: str, version: str, revision: str | None = None) -> dict[str, list[dict]]:
    what = f"cannot load SQuAD {version} from hub dataset {name!r}"
    fix = "go online or use source=local with the official JSON files"
    dd = load_hub_or(SquadError, what, fix, name, None, revision, "squad.revision")
    out = {}
    for split in SPLITS:
        if split not in dd:
            raise SquadError(
                f"hub dataset {name!r} has no split {split!r} (has {', '.join(dd)}); use a SQuAD dataset"
            )
        records = []
        for row in dd[split]:
            answers = {
                "text": list(row["answers"]["text"]),
                "answer_start": list(row["answers"]["answer_start"]),
            }
            records.append(
                {
                    "id": str(row["id"]),
                    "title": row.get("title", ""),
                    "context": row["context"],
                    "question": row["question"],
                    "answers": answers,
                    "is_impossible": not answers["text"],
                }
            )
        out[split] = check_records(records, f"hub dataset {name!r} split {split}")
    return out


# ============================================================================ synthetic


def _np_text(words: list[str]) -> str:
    return " ".join(words)


def _synthetic_record(rng: random.Random, version: str, qid: str) -> dict:
    """One synthetic question with its document (see the module docstring)."""
    w = Words(rng, range(12))
    clauses: list[Clause] = []
    n_sentences = rng.randint(3, 7)
    while len(clauses) < n_sentences:
        c = w.clause()
        if any(c.verb == d.verb for d in clauses):  # one sentence per verb: the answer is determined
            continue
        clauses.append(c)
    sentences, offsets = [], []  # offsets: character offset of each sentence in the context
    pos = 0
    for c in clauses:
        s = sentence([*c.words(), "."])
        sentences.append(s)
        offsets.append(pos)
        pos += len(s) + 1
    context = " ".join(sentences)
    impossible = version == "v2.0" and rng.random() < 1 / 3
    k = rng.randrange(len(clauses))
    c = clauses[k]
    asks_object = rng.random() < 0.5
    aux = "do" if c.subj.plural else "does"
    if impossible:  # a verb this subject (or object) never takes in the document
        used = {d.verb for d in clauses}
        verb = w.pick("verbs", avoid=used)
        if asks_object:
            question = sentence(["what", aux, *c.subj.words(), verb, "?"])
        else:
            question = sentence(["what", verb + "s", *c.obj.words(), "?"])
        answers = {"text": [], "answer_start": []}
    else:
        subj, verb_words = _np_text(c.subj.words()), " ".join(c.verb_words())
        if asks_object:
            question = sentence(["what", aux, *c.subj.words(), c.verb, "?"])
            text = _np_text(c.obj.words())
            start = offsets[k] + len(subj) + 1 + len(verb_words) + 1
        else:
            question = sentence(["what", c.verb + "s", *c.obj.words(), "?"])
            text, start = subj, offsets[k]
        answers = {"text": [text], "answer_start": [start]}
    return {
        "id": qid,
        "title": "synthetic",
        "context": context,
        "question": question,
        "answers": answers,
        "is_impossible": impossible,
    }


def synthetic_squad(size: int, seed: int, version: str = "v1.1") -> dict[str, list[dict]]:
    """{split: records}: ``size`` training questions, a quarter (at least 50) for validation.
    Question i of a split depends only on (version, seed, split, i): deterministic, and a larger
    ``size`` extends a smaller one."""
    if version not in VERSIONS:
        raise SquadError(f"unknown SQuAD version {version!r}; use one of: {', '.join(VERSIONS)}")
    out = {}
    for split, n in (("train", size), ("validation", max(50, size // 4))):
        records = []
        for i in range(n):
            rng = random.Random(f"convexp-squad:{version}:{seed}:{split}:{i}")
            records.append(_synthetic_record(rng, version, f"{split}-{i}"))
        out[split] = check_records(records, f"synthetic SQuAD {version} {split}")
    return out
