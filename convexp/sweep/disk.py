"""The disk a sweep takes (``--dry-run``'s bill) and uses so far (``--status``).

What a sweep leaves on disk, per stage: the pre-training corpus (the datasets cache of a hub corpus
that is not streamed) and its prepared examples, or a streamed corpus's chunk store (the same
examples, kept as the first pass makes them: ``data.store_chunks``); each pre-training run's last resumable checkpoint
(weights and AdamW's two moments, fp32: 12 bytes a parameter, the generator's too) and its final
model (``model/`` and ``hf/``, 4 bytes a parameter each); each fine-tuning run's results (metrics,
predictions, the GLUE server's files, its record) and the weights of the runs that keep them
(``keep_weights``, train/weights.py: 4 bytes a parameter, and the tokenizer). Estimates, from
the composed configs and the corpus sizes below; nothing is read but the configs.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .compute import SENTENCE_PAIR_TOKENS, example_tokens

PIECES_A_WORD = 1.3  # WordPiece tokens per word of English text: an assumption (compute.SENTENCE_PAIR_TOKENS)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A corpus as the dry run counts it: documents as convexp reads them, WordPiece tokens, the
    bytes of its datasets cache (a hub corpus not streamed), sentence pairs where known."""

    documents: float | None
    tokens: float
    cache_bytes: float
    pairs: float | None
    source: str


_WIKITEXT_WORDS, _BOOK_WORDS = 103_227_021, 984_846_357
CORPORA = {
    "openwebtext": Corpus(
        8_013_769, 9_035_582_198, 39_769_494_896, None,
        "Hugging Face's dataset info of Skylion007/openwebtext (8,013,769 documents, 39.8 GB of text: "
        "its datasets cache where it is not streamed); tokens: nanoGPT's count of the same corpus in GPT-2's "
        "BPE (9,035,582,198), which a WordPiece count is close to",
    ),
    "wikitext103": Corpus(
        1_801_350, _WIKITEXT_WORDS * PIECES_A_WORD, 524e6, None,
        "Merity et al. 2017: 103,227,021 words in 28,475 articles; Hugging Face's wikitext-103-raw-v1: "
        "1,801,350 lines (a document each when not blank: at most that many), 524 MB; x1.3 WordPiece "
        "tokens a word (an assumption)",
    ),
    "bookcorpus_wikitext103": Corpus(
        74_004_228 / 100 + 1_801_350, (_BOOK_WORDS + _WIKITEXT_WORDS) * PIECES_A_WORD, 4_854e6 + 524e6, 31e6,
        "Zhu et al. 2015: BookCorpus's 74,004,228 sentences and 984,846,357 words (Hugging Face's "
        "bookcorpus: 4.85 GB; 100 rows a document here), plus WikiText-103 as above; Chang et al. §4: "
        "31M sentence pairs",
    ),
}
SYNTHETIC_TOKENS_A_DOCUMENT = 121  # measured: scale=smoke's 20,000 documents are 2,419,513 WordPiece tokens
# of its 2,000-token vocabulary (data stats.json, 2026-11-28)

RUN_FILES_BYTES = 12_000  # config, status, record, metrics, csv/metrics.csv of one run (smoke runs: 7-12 kB)
TOKENIZER_BYTES = 700_000  # tokenizer.json + vocab.txt of a 30k WordPiece vocabulary, in each model/


def corpus_of(cfg) -> Corpus | None:
    """The corpus a composed pre-training config reads, as far as it is known (None: unknown, e.g.
    a user's files)."""
    name = cfg.choices.get("data")
    if name == "synthetic":
        docs = float(cfg.data.num_docs)
        return Corpus(docs, docs * SYNTHETIC_TOKENS_A_DOCUMENT, 0.0, None,
                      f"the built-in synthetic corpus: {SYNTHETIC_TOKENS_A_DOCUMENT} tokens a document (measured)")  # fmt: skip
    corpus = CORPORA.get(name)
    if corpus is None:
        return None
    most = cfg.data.get("max_docs")
    if most and corpus.documents and most < corpus.documents:  # the first max_docs documents
        share = most / corpus.documents
        corpus = dataclasses.replace(corpus, documents=float(most), tokens=corpus.tokens * share,
                                     pairs=corpus.pairs and corpus.pairs * share)  # fmt: skip
    return corpus


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A corpus's prepared examples as a pre-training config would have them."""

    rows: float
    bytes: float  # tasks/pretraining/build.prepared_bytes: 2 bytes a position (4 over 65,536 tokens), 4 a row
    seconds: float  # build.prepare_seconds at the measured rate, on ``processes`` cores
    processes: int  # data.num_proc; auto (the cores of the machine that prepares them): one, said so
    streamed: bool  # data.streaming: nothing is prepared (what preparing would take, beside)
    kept: bool  # on disk when the sweep has run: prepared, or a streamed corpus's chunk store
    # (data.store_chunks: the same rows, at the same bytes); neither with data.cache=false


def prepared(cfg, corpus: Corpus) -> Prepared:
    """The rows of a corpus as examples (its sentence pairs, or its tokens over an example's) and
    what building them takes, by the data pipeline's own measures (tasks/pretraining/build.py)."""
    from ..tasks.pretraining.build import build_processes, prepare_seconds, prepared_bytes

    examples = cfg.data.get("examples") or "packed"
    if examples == "sentence_pairs":
        rows = corpus.pairs or corpus.tokens / SENTENCE_PAIR_TOKENS.get(cfg.choices.data, SENTENCE_PAIR_TOKENS["wikitext103"])
    else:
        rows = corpus.tokens / example_tokens(cfg)
    vocab = int(cfg.tokenizer.get("vocab_size") or cfg.model.get("vocab_size") or 0)
    labelled = cfg.objective.get("pair_format") in ("nsp", "sop")
    num_proc = cfg.data.get("num_proc", "auto")
    processes = 1 if num_proc in (None, "auto") else build_processes(num_proc)  # auto: this machine's cores, not the one preparing
    streamed = bool(cfg.data.get("streaming"))
    kept = bool(cfg.data.get("cache", True)) and (not streamed or bool(cfg.data.get("store_chunks", True)))
    return Prepared(rows, float(prepared_bytes(int(rows), int(cfg.seq_len), vocab, labelled)),
                    prepare_seconds(int(corpus.tokens), processes, examples), processes, streamed, kept)  # fmt: skip


def data_key(cfg) -> tuple:
    """What a prepared corpus is cached by: runs that agree on it share one."""
    d = cfg.data
    return (cfg.choices.get("data"), str(cfg.choices.get("tokenizer")), int(cfg.seq_len), d.get("examples"),
            d.get("max_docs"), d.get("num_docs"), d.get("streaming"), d.get("store_chunks"), d.get("cache"))  # fmt: skip


def pretraining_data(cfg) -> tuple[tuple, Corpus | None, object]:
    """(what its prepared examples are cached by, its corpus, the config: ``prepared`` reads it
    when a bill is asked for) of a pre-training config."""
    return data_key(cfg), corpus_of(cfg), cfg


def pretrain_bytes(cfg, model_cfg) -> tuple[float, float]:
    """(its last resumable checkpoint, its final model) of a pre-training run."""
    from ..models.config import generator_config
    from ..models.stats import parameter_count

    params = parameter_count(model_cfg)
    trained = params
    if cfg.objective.name == "electra":
        trained += parameter_count(generator_config(model_cfg, cfg.objective.generator_fraction))
    return 12.0 * trained, 2 * (4.0 * params) + TOKENIZER_BYTES  # model/ and hf/


def weights_bytes(model_cfg) -> float:
    """A fine-tuned model's model/: its encoder and head in fp32, and the tokenizer."""
    from ..models.stats import parameter_count

    return 4.0 * parameter_count(model_cfg, mlm_head=False) + TOKENIZER_BYTES


def results_bytes(cfg, task: str) -> float:
    """What every fine-tuning run keeps: its small files, and what its kind says it writes beside
    them (tasks/kind.py ``kept_bytes``: predictions, the GLUE server's files)."""
    from ..tasks import config_kind, task_kind

    return RUN_FILES_BYTES + task_kind(config_kind(cfg)).kept_bytes(cfg, task)


def size(n: float) -> str:
    """Bytes as 1.3 TB / 21 GB / 3.4 MB (powers of 1,000)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def used_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (links not followed: last.ckpt is its step's file)."""
    total = 0
    stack = [Path(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                total += e.stat(follow_symlinks=False).st_size
    return total


@dataclasses.dataclass
class StageBill:
    runs: int = 0
    flops: float = 0.0
    memory_mib: int = 0  # the largest job's estimated peak (memory.py)
    disk: float = 0.0  # what the stage's runs keep when the sweep has run
    read_weights: float = 0.0  # fine-tuning: weights kept only while intermediate tasks read them
    every_weight: float = 0.0  # fine-tuning: the weights of every run (keep_weights=all)
    kept_weights: float = 0.0  # fine-tuning: the weights kept when the sweep has run (in disk)
    kept_runs: int = 0  # fine-tuning: runs that keep their weights
    unknown: int = 0  # runs of a model whose size is unknown (a hub checkpoint not yet downloaded)


@dataclasses.dataclass
class DataBill:
    name: str
    corpus: Corpus | None
    cache_bytes: float  # the datasets cache of the corpus (once, whatever reads it)
    examples: Prepared | None  # its prepared examples or chunk store (once per length, tokenizer, layout)

    @property
    def prepared_bytes(self) -> float:
        """On disk when the sweep has run: the prepared examples, or a streamed corpus's chunk store."""
        return self.examples.bytes if self.examples is not None and self.examples.kept else 0.0


def sweep_bill(plan) -> tuple[dict[str, StageBill], list[DataBill]]:
    """Per stage (pretrain, finetune): runs, FLOPs, the largest job's memory and the disk its runs
    keep; and the pre-training data, each prepared corpus once."""
    stages = {"pretrain": StageBill(), "finetune": StageBill()}
    teachers = {k for n in plan.nodes.values() for k in n.distils_from}
    starts = {k for n in plan.nodes.values() for k in n.starts_from}
    data: dict[tuple, DataBill] = {}
    cached: set = set()
    for node in plan.order():
        bill = stages[node.stage]
        bill.runs += len(node.runs)
        bill.flops += node.flops
        bill.memory_mib = max(bill.memory_mib, node.memory_mib)
        bill.disk += node.disk * len(node.runs)
        if node.stage == "finetune":
            bill.unknown += len(node.runs) if not node.weights else 0
            weights = node.weights * len(node.runs)
            bill.every_weight += weights
            if node.keep_weights == "all" or node.key in teachers:
                bill.disk += weights
                bill.kept_weights += weights
                bill.kept_runs += len(node.runs)
            elif node.key in starts:
                bill.read_weights += weights
        if node.data is not None and node.data[0] not in data:
            key, corpus, cfg = node.data
            new_corpus = key[0] not in cached
            cached.add(key[0])
            examples = prepared(cfg, corpus) if corpus is not None else None
            downloaded = examples is not None and not examples.streamed  # streamed: no datasets cache
            cache = corpus.cache_bytes if downloaded and new_corpus else 0.0
            data[key] = DataBill(key[0], corpus, cache, examples)
    return stages, list(data.values())


def bill_total(stages: dict[str, StageBill], data: list[DataBill], every_weight: bool = False) -> float:
    """The disk the sweep leaves (``every_weight``: had every fine-tuning run kept its weights)."""
    total = sum(s.disk for s in stages.values()) + sum(d.cache_bytes + d.prepared_bytes for d in data)
    ft = stages["finetune"]
    return total - ft.kept_weights + ft.every_weight if every_weight else total
