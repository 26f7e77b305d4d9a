"""Recipe cards: the settings a sweep's runs train with, one card per distinct recipe (variants and
tasks that share one share the card), built from the composed configs of the plan, so that what
``convexp ablate NAME --dry-run`` prints (sweep/show.py) is what will run.

A card's rows are raw values (numbers, text, tuples), formatted only when printed, so tests can
compare them with the papers' numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf


class Grid(tuple):
    """The values a fine-tuning setting takes across the runs of one (task, seed): a grid."""


@dataclasses.dataclass(frozen=True)
class Card:
    """One recipe: the stage, what it is (the recipe's name, or the tasks it fine-tunes), the
    variants that use it, and its (setting, value) rows. A fine-tuning value that differs between
    the runs of one (task, seed) (a grid) is the tuple of its values."""

    stage: str
    title: str
    variants: tuple[str, ...]
    rows: tuple[tuple[str, object], ...]
    notes: tuple[str, ...] = ()  # deviations and assumptions of these values (pretrain_notes, finetune_notes)

    def get(self, setting: str):
        return dict(self.rows)[setting]


def pretrain_rows(cfg: DictConfig) -> tuple[tuple[str, object], ...]:
    """The pre-training recipe of a composed ``convexp pretrain`` config."""
    o, t, obj = cfg.optim, cfg.trainer, cfg.objective
    rows: list[tuple[str, object]] = [
        ("recipe", cfg.recipe.name),
        ("objective", obj.name),
        ("lr", o.lr),
        ("batch_size", t.batch_size),
        ("steps", t.max_steps),
        ("warmup_steps", o.warmup_steps),
        ("adam_betas", tuple(o.betas)),
        ("adam_eps", o.eps),
        ("weight_decay", o.weight_decay),
        ("grad_clip", o.grad_clip),
        ("mask_prob", obj.mask_prob),
        ("replace_mask", obj.replace_mask),
        ("replace_random", obj.replace_random),
        ("exact_count", bool(obj.get("exact_count", False))),
        ("max_predictions", obj.get("max_predictions") if obj.get("exact_count") else None),
    ]
    if obj.name == "electra":
        rows.append(("generator_fraction", obj.generator_fraction))
    rows += [("seq_len", cfg.seq_len), ("corpus", corpus(cfg.data)), ("examples", cfg.data.examples)]
    rows.append(("tokenizer", tokenizer(cfg.tokenizer)))
    return tuple(rows)


def corpus(data: DictConfig) -> str:
    """The pre-training corpus as a user names it: the hub dataset (its parts, joined by " + "), the
    files, or synthetic."""
    if data.get("parts"):
        return " + ".join(corpus(part) for part in data.parts)
    name = data.get("path") or data.source
    return f"{name} ({data.name})" if data.get("name") else str(name)


def tokenizer(tok: DictConfig) -> str:
    """The tokenizer: its kind and vocabulary size (or the vocabulary it loads)."""
    what = tok.get("kind", "?")
    if tok.get("path"):
        return f"{what} from {tok.path}"
    size = tok.get("vocab_size")
    return f"{what}, {size:,} tokens" if size else str(what)


def pretrain_cards(cfgs: Mapping[str, DictConfig]) -> list[Card]:
    """One card per distinct pre-training recipe of ``{variant: composed config}`` (in order)."""
    grouped: dict[tuple, list[str]] = {}
    for variant, cfg in cfgs.items():
        grouped.setdefault(pretrain_rows(cfg), []).append(variant)
    return [
        Card("pretrain", str(dict(rows)["recipe"]), tuple(vs), rows, pretrain_notes(dict(rows)))
        for rows, vs in grouped.items()
    ]


# The rows ConvBERT's tables cite rather than re-run: recipe -> the corpus their numbers come from
CITED_CORPUS = {
    "bert_base": "Wikipedia + BooksCorpus (BERT §3.1; cited by ConvBERT's Tables 1 and 4)",
    "electra_base": "Wikipedia + BooksCorpus (ELECTRA §3.1, its base model; cited by ConvBERT's Tables 1, 4)",
}


def pretrain_notes(rows: Mapping) -> tuple[str, ...]:
    """What a pre-training card says besides its values: a cited row trained on another corpus."""
    cited = CITED_CORPUS.get(rows["recipe"])
    if cited is None or str(rows["corpus"]).startswith("synthetic"):
        return ()
    return (
        f"cited, re-run on another corpus: the paper's numbers come from {cited}; here {rows['corpus']} "
        "(ConvBERT's corpus; BooksCorpus is not openly distributed)",
    )


def finetune_notes(settings: Mapping, scale: str) -> tuple[str, ...]:
    """What a fine-tuning card says besides its values (``settings``: its rows, a grid's values as a
    ``Grid``): where a value at scale=paper is not the authors' code's, or rests on an assumption."""
    notes = []
    if scale == "paper" and settings.get("group_by_length"):
        notes.append(
            "deviation: training batches of rows of similar length (group_by_length=true, opted in); "
            "the authors' code draws its batches at random"
        )
    if settings.get("protocol") == "chang" and settings.get("adam_epsilon") == 1e-8:
        notes.append(
            "adam_epsilon 1e-8 is Chang et al.'s code (run_glue.py: Hugging Face Trainer's default); "
            "their Table 5 prints 1e-6"
        )
    distilled = settings.get("distill.teacher") and settings.get("pruning.method", "none") != "none"
    if settings.get("protocol") == "bermo" and distilled:
        notes.append(
            f"assumption: epochs {settings.get('epochs')} — BERMO's Table 11 (distillation) gives none; "
            "Tables 8-10's fine-pruning epochs of the task"
        )
    return tuple(notes)


# run-config keys (tasks/finetune_runs.finetune_run; qa: SQuAD's head and windows) that set how a fine-tuning run
# trains, besides its hp
RUN_KEYS = (
    "protocol", "max_len", "both_orders", "qa", "pruning", "distill", "scalar_mix", "scalar_mix_norm", "classifier",
    "group_by_length",
)


def finetune_settings(hp: Mapping, run_cfg: DictConfig | Mapping | None = None) -> dict:
    """A fine-tuning run's settings, flat: its hyper-parameters (``FinetuneRun.hp``) and the keys of its
    run config that change training (pruning, distillation...), nested ones as ``pruning.method``."""
    out = dict(_flat(hp))
    if run_cfg is not None:
        d = OmegaConf.to_container(run_cfg) if isinstance(run_cfg, DictConfig) else dict(run_cfg)
        for key in RUN_KEYS:
            if d.get(key) is not None:  # (SQuAD runs: max_len is qa.max_len, the windows')
                out.update(_flat({key: d[key]}))
    return out


def _flat(d: Mapping, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", tuple(v) if isinstance(v, list) else v))
    return out


def finetune_cards(nodes, scale: str = "paper") -> list[Card]:
    """One card per distinct fine-tuning recipe of the plan's fine-tuning nodes (``Node.hparams``:
    run id -> :func:`finetune_settings`); its title lists the tasks that use it."""
    from ..tasks.finetune_runs import RECIPE_KEYS

    grouped: dict[tuple, tuple[list[str], list[str]]] = {}
    for n in nodes:
        if n.stage != "finetune" or not n.hparams:
            continue
        values: dict[str, list] = {}
        for settings in n.hparams.values():
            for k, v in settings.items():
                if v not in values.setdefault(k, []):
                    values[k].append(v)
        first = [k for k in RECIPE_KEYS if k in values]  # the recipe's keys first, in its order
        keys = first + [k for k in values if k not in first]
        rows = tuple((k, values[k][0] if len(values[k]) == 1 else Grid(values[k])) for k in keys)
        variants, tasks = grouped.setdefault(rows, ([], []))
        if n.variant not in variants:
            variants.append(n.variant)
        if n.task not in tasks:
            tasks.append(n.task)
    return [
        Card("finetune", ", ".join(tasks), tuple(vs), rows, finetune_notes(dict(rows), scale))
        for rows, (vs, tasks) in grouped.items()
    ]


def recipe_cards(plan) -> list[Card]:
    """Every card of a plan: pre-training recipes first, then fine-tuning."""
    return pretrain_cards(plan.pretrain_cfgs) + finetune_cards(plan.order(), plan.settings.scale)
