"""`convexp finetune glue`: fine-tune and evaluate on GLUE tasks, several seeds, into the run store.

One fine-tuning run = (task, seed, hyper-parameters): ``outputs/runs/finetune/<slug>-<hash>/``
holds metrics.json (dev metrics), predictions/ (dev and test), submission/ (the GLUE server's
files), checkpoints/ and model/ (the fine-tuned encoder, for intermediate-task initialisation).
One invocation = ``outputs/runs/glue/<slug>-<hash>/``: summary.json (every seed's result and the
aggregates: mean ± standard error, median, best-dev; GLUE averages both ways) and
submission.zip (each task's best-dev run).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader

from ..data import glue, probing
from ..errors import UserError
from ..models import ModelConfig, SequenceClassifier
from .. import pruning as pruner
from ..runs import Run
from .plan import CONVBERT_GRID, INTERMEDIATE, TASK_ORDER, Planned, finetune_run, hyperparameters, plan_glue  # noqa: F401
from .common import adamw_with_linear_schedule, finish_wandb, layerwise_groups, log_result, make_loggers, step_seed
from .streams import PermutedStream, StreamSampler

COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "label", "idx")


# ----------------------------------------------------------------------------- init model


@dataclasses.dataclass
class Init:
    """Where fine-tuning starts: a model config, encoder weights (or None) and a tokenizer."""

    model_cfg: ModelConfig
    state: dict | None
    tokenizer: object
    slug: str


def resolve_init(cfg: DictConfig) -> Init:
    from ..config import model_config
    from ..data.tokenizer import Tokenizer
    from ..models.io import is_model_dir, read_model_config

    init = str(cfg.init)
    tok_path = cfg.tokenizer_path
    if init == "none":
        if not cfg.init_model:
            raise UserError(
                "init=none needs model=<preset> (a randomly initialised baseline); see `convexp models`"
            )
        if not tok_path:
            raise UserError("init=none needs tokenizer_path=<tokenizer.json or vocab.txt>")
        tok = Tokenizer.load(tok_path)
        mc = dataclasses.replace(
            model_config(cfg.init_model), vocab_size=tok.vocab_size, pad_token_id=tok.pad_id
        )
        return Init(mc, None, tok, f"{cfg.init_model}-random")
    path = Path(init)
    if (path / "model").is_dir():  # a convexp pretrain / finetune run directory
        path = path / "model"
    if is_model_dir(path):
        from safetensors.torch import load_file

        mc = read_model_config(path)
        state = {
            k.removeprefix("encoder."): v
            for k, v in load_file(str(path / "model.safetensors")).items()
            if k.startswith("encoder.")
        }
        tok = Tokenizer.load(tok_path or path)
        slug = path.parent.name if path.name == "model" else path.name
    else:
        from ..models.hf import load_pretrained, resolve_checkpoint

        if path.exists() is False and ("/" not in init or init.startswith((".", "/", "~"))):
            raise UserError(
                f"init={init} does not exist; give a convexp run directory, a HF checkpoint directory or a hub name"
            )
        encoder, mc = load_pretrained(init)
        state = encoder.state_dict()
        tok = Tokenizer.load(tok_path or resolve_checkpoint(init))
        slug = Path(init).name
    if cfg.get("scalar_mix") is not None and bool(cfg.scalar_mix) != mc.scalar_mix:  # BERMO on any model
        mc = dataclasses.replace(mc, scalar_mix=bool(cfg.scalar_mix))
    if cfg.get("scalar_mix") and cfg.get("scalar_mix_norm"):  # BERMO mixing added here: its normalisation
        mc = dataclasses.replace(mc, scalar_mix_norm=cfg.scalar_mix_norm)
    if cfg.get("classifier"):  # e.g. classifier=hf: Hugging Face's head on an ELECTRA/ConvBERT encoder
        mc = dataclasses.replace(mc, classifier=cfg.classifier)
    if tok.vocab_size != mc.vocab_size:
        raise UserError(
            f"the tokenizer has {tok.vocab_size} tokens but init={init} has a vocabulary of {mc.vocab_size}; "
            "use the model's own tokenizer"
        )
    return Init(mc, state, tok, slug)


# ----------------------------------------------------------------------------- hyper-parameters


# ----------------------------------------------------------------------------- Lightning module


class FinetuneModule(pl.LightningModule):
    """Fine-tuning, optionally with fine-pruning (cfg.pruning: masks on the encoder's matrices,
    their threshold on the cubic schedule) and distillation from a frozen teacher."""

    def __init__(
        self,
        model: SequenceClassifier,
        task: glue.GlueTask,
        hp: dict,
        total_steps: int,
        seed: int,
        pruning: DictConfig | None = None,
        prune_warmup: int = 0,
        teacher: SequenceClassifier | None = None,
        distill: DictConfig | None = None,
    ):
        super().__init__()
        self.model, self.task, self.hp, self.total_steps, self.seed = model, task, hp, total_steps, seed
        self.pruning, self.prune_warmup, self.distill = pruning, prune_warmup, distill
        self._teacher = [teacher.eval().requires_grad_(False)] if teacher is not None else []  # not saved
        if pruning is not None:  # after the start weights are loaded, before the optimiser
            pruner.prune(model, pruning.method, mask_scale=pruning.mask_scale, mask_init=pruning.mask_init)
        self._val: list[tuple[torch.Tensor, torch.Tensor]] = []

    def threshold(self) -> tuple[float, float]:
        """(mask threshold, regularisation multiplier) at this step (Sanh et al.'s cubic schedule)."""
        p = self.pruning
        return pruner.cubic_threshold(
            self.global_step,
            self.total_steps,
            self.prune_warmup,
            p.initial_threshold,
            p.final_threshold,
            p.initial_warmup,
            p.final_warmup,
        )

    def training_step(self, batch, batch_idx):
        torch.manual_seed(step_seed(self.seed, int(batch["position"][0])))  # dropout, resumable
        if self.pruning is not None:
            t, multiplier = self.threshold()
            pruner.set_threshold(self.model, t)
            self.log("train/threshold", t)
        inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        out = self.model(*inputs, batch["labels"])
        loss = out.loss
        if self._teacher:
            with torch.no_grad():
                teacher_logits = self._teacher[0](*inputs).logits
            d = self.distill
            loss = pruner.distillation_loss(
                out.logits, teacher_logits, out.loss, d.alpha_ce, d.alpha_distil, d.temperature
            )
        if self.pruning is not None and self.pruning.regularization:
            reg = pruner.regularization(self.model, self.pruning.regularization)
            loss = loss + self.pruning.final_lambda * multiplier * reg
            self.log("train/regularization", reg)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        if self.pruning is not None:  # evaluated at the final threshold, as the reference does
            pruner.set_threshold(self.model, self.pruning.final_threshold)

    def validation_step(self, batch, batch_idx):
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        self._val.append((out.logits.float().cpu(), batch["labels"].cpu()))

    def on_validation_epoch_end(self) -> None:
        if self._val:
            logits, labels = (torch.cat(x) for x in zip(*self._val))
            self._val = []
            for k, v in glue.compute_metrics(self.task, logits, labels).items():
                self.log(f"val/{k}", v, prog_bar=True)
            if self.pruning is not None:
                self.log("val/remaining_weights", 100 * pruner.remaining_weights(self.model))

    def configure_optimizers(self):
        hp = self.hp
        groups = layerwise_groups(self.model, hp["lr"], hp["layerwise_lr_decay"]) or [
            {"params": list(self.model.named_parameters()), "lr": hp["lr"]}
        ]
        warmup = int(hp["warmup_fraction"] * self.total_steps)
        if hp.get("scalar_mix_lr"):  # protocol=bermo: the layer-mixing scalars have their own rate
            is_mix = lambda name: name.startswith("encoder.scalar_mix.")  # noqa: E731
            groups = [{**g, "params": [(n, p) for n, p in g["params"] if not is_mix(n)]} for g in groups]
            mix = [(n, p) for n, p in self.model.named_parameters() if is_mix(n)]
            groups.append({"params": mix, "lr": hp["scalar_mix_lr"]})
        if self.pruning is not None:  # the scores: their own learning rate, no weight decay
            scores = {id(p) for p in pruner.score_parameters(self.model)}
            groups = [
                {**g, "params": [(n, p) for n, p in g["params"] if id(p) not in scores]} for g in groups
            ]
            named = [(n, p) for n, p in self.model.named_parameters() if id(p) in scores]
            groups.append({"params": named, "lr": self.pruning.score_lr, "weight_decay": 0.0})
            warmup = self.prune_warmup  # Sanh et al.: one warm-up for the LR and the schedule
        return adamw_with_linear_schedule(
            self.model,
            hp["lr"],
            (0.9, 0.999),
            hp.get("adam_epsilon", 1e-6),
            hp["weight_decay"],
            warmup,
            self.total_steps,
            param_groups=groups,
        )


class _Padded:
    """collate: pad to the batch's longest row; keep the stream position for seeding."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        rows = [{k: v.tolist() if torch.is_tensor(v) else v for k, v in r.items()} for r in rows]
        out = glue.collate(rows, self.pad_id)
        if "position" in rows[0]:
            out["position"] = torch.stack([torch.as_tensor(r["position"]) for r in rows])
        return out


# ----------------------------------------------------------------------------- one run


def load_teacher(path: str, task: glue.GlueTask, init: Init) -> SequenceClassifier:
    """A fine-tuned teacher: a convexp fine-tuning run (or its model/) or a HF checkpoint."""
    from ..models.io import is_model_dir, read_model_config

    d = Path(path) / "model" if (Path(path) / "model").is_dir() else Path(path)
    if is_model_dir(d):
        from safetensors.torch import load_file

        teacher = SequenceClassifier(read_model_config(d), task.num_labels)
        try:
            missing, unexpected = teacher.load_state_dict(
                load_file(str(d / "model.safetensors")), strict=False
            )
        except RuntimeError:  # e.g. a head with another number of labels
            missing, unexpected = ["head (shape)"], []
        if missing or unexpected:
            raise UserError(
                f"distill.teacher={path} is not a {task.name} classifier (missing {missing[:2]}, "
                f"unexpected {unexpected[:2]}); give a fine-tuning run of the same task"
            )
    else:
        from ..models.hf import load_pretrained

        teacher, _ = load_pretrained(path, task="classification", num_labels=task.num_labels)
    if teacher.encoder.cfg.vocab_size != init.model_cfg.vocab_size:
        raise UserError(
            f"distill.teacher={path} has a vocabulary of {teacher.encoder.cfg.vocab_size} tokens, the student "
            f"{init.model_cfg.vocab_size}; teacher and student must share the tokenizer"
        )
    return teacher


def _predict(model: SequenceClassifier, rows, pad_id: int, batch_size: int = 64):
    model.eval()
    loader = DataLoader(rows, batch_size=batch_size, collate_fn=_Padded(pad_id))
    logits, labels, idx = [], [], []
    with torch.no_grad():
        for b in loader:
            out = model(b["input_ids"], b["attention_mask"], b["token_type_ids"])
            logits.append(out.logits.float())
            labels.append(b["labels"])
            idx.append(b["idx"])
    return torch.cat(logits), torch.cat(labels), torch.cat(idx)


def _save_predictions(path: Path, task: glue.GlueTask, idx, logits, labels) -> None:
    from ..atomic import atomic_write

    pred = logits.squeeze(-1) if task.is_regression else logits.argmax(-1)
    lines = ["idx\tlabel\tprediction"] + [
        f"{int(i)}\t{float(y):.9g}\t{float(p):.9g}" for i, y, p in zip(idx, labels, pred)
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def finetune_one(cfg: DictConfig, init: Init, planned: Planned, splits: dict) -> Run:
    """Fine-tune one planned run, or reuse it when it has finished."""
    task_name, seed, hp, run, run_cfg = planned.task, planned.seed, planned.hp, planned.run, planned.run_cfg
    task = glue.get_task(task_name)
    if run.finished:
        return run
    if run.last_checkpoint() and not cfg.resume:
        raise UserError(f"{run.dir} has an unfinished run; pass resume=true to continue it")
    run.dir.mkdir(parents=True, exist_ok=True)
    run.write_config(run_cfg)
    pl.seed_everything(seed, verbose=False)

    model = SequenceClassifier(init.model_cfg, task.num_labels)
    state = _encoder_state(planned.start.run) if planned.start else init.state
    if state is not None:
        missing, unexpected = model.encoder.load_state_dict(state, strict=False)
        # a BERT pooler missing from an ELECTRA-style checkpoint starts fresh; nothing else may
        if unexpected or [k for k in missing if not k.startswith(("pooler.", "scalar_mix."))]:
            raise UserError(
                f"init weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
            )
    train = splits["train"]
    steps_per_epoch = math.ceil(len(train) / hp["batch_size"])
    total = steps_per_epoch * hp["epochs"]
    pruning = cfg.pruning if cfg.pruning.method != "none" else None
    teacher = load_teacher(cfg.distill.teacher, task, init) if cfg.distill.teacher else None
    prune_warmup = 0
    if pruning is not None:
        prune_warmup = pruning.warmup_steps or pruner.default_warmup(
            steps_per_epoch, total, pruning.initial_warmup, pruning.final_warmup
        )
    module = FinetuneModule(model, task, hp, total, seed, pruning, prune_warmup, teacher, cfg.distill)
    pad = init.tokenizer.pad_id

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            t = self.trainer
            return DataLoader(
                PermutedStream(train, seed, COLUMNS),
                batch_size=hp["batch_size"],
                sampler=StreamSampler(t.global_step * hp["batch_size"]),
                collate_fn=_Padded(pad),
                num_workers=cfg.trainer.num_workers,
            )

        def val_dataloader(self):
            return DataLoader(splits[task.dev_splits[0]], batch_size=64, collate_fn=_Padded(pad))

    from pytorch_lightning.callbacks import ModelCheckpoint, RichProgressBar

    trainer = pl.Trainer(
        default_root_dir=str(run.dir),
        accelerator=cfg.trainer.accelerator,
        devices=1,
        precision=cfg.trainer.precision,
        max_steps=total,
        val_check_interval=steps_per_epoch,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        gradient_clip_val=cfg.optim.grad_clip,
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        use_distributed_sampler=False,
        enable_model_summary=False,
        logger=make_loggers(
            _logged_config(cfg, task_name, seed, hp), run, "finetune", tags=[task_name, f"seed{seed}"]
        ),
        callbacks=[
            ModelCheckpoint(
                dirpath=str(run.checkpoints),
                every_n_train_steps=max(1, steps_per_epoch // 2),
                save_last=True,
                save_top_k=0,
            ),
            RichProgressBar(),
        ],
    )
    run.set_status("running", stage="finetune", task=task_name, seed=seed)
    started = time.time()
    try:
        trainer.fit(
            module, datamodule=Data(), ckpt_path=str(run.last_checkpoint()) if run.last_checkpoint() else None
        )
        _evaluate_and_save(
            run,
            model,
            task,
            splits,
            pad,
            hp,
            time.time() - started,
            len(train) * hp["epochs"],
            pruning,
            init.tokenizer,
        )
    except BaseException as e:
        run.set_status("failed", error=f"{type(e).__name__}: {e}".splitlines()[0])
        finish_wandb()
        raise
    finish_wandb()
    return run


def _logged_config(cfg: DictConfig, task: str, seed: int, hp: dict) -> DictConfig:
    c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    with open_dict(c):
        c.run = {"task": task, "seed": seed, "hp": hp}
    return c


def _evaluate_and_save(
    run: Run,
    model,
    task: glue.GlueTask,
    splits: dict,
    pad: int,
    hp: dict,
    seconds: float,
    examples: int,
    pruning: DictConfig | None = None,
    tokenizer=None,
) -> None:
    from ..models.io import save_model_dir

    remaining = None
    if pruning is not None:  # the final masks; the saved model is an ordinary one with W ⊙ M
        pruner.set_threshold(model, pruning.final_threshold)
        model.eval()
        remaining = 100 * pruner.remaining_weights(model)
        pruner.fold_masks(model)
    dev, test = {}, {}
    diverged = False
    for split in task.dev_splits:
        logits, labels, idx = _predict(model, splits[split], pad)
        dev[split] = glue.compute_metrics(task, logits, labels)
        diverged = diverged or glue.collapsed(task, logits)
        _save_predictions(run.dir / "predictions" / f"{split}.tsv", task, idx, logits, labels)
    for split in task.test_splits:
        if split in splits:
            logits, labels, idx = _predict(model, splits[split], pad)
            _save_predictions(run.dir / "predictions" / f"{split}.tsv", task, idx, logits, labels)
            if task.submission:
                glue.write_submission(task, split, idx, logits, run.dir / "submission")
            if len(labels) and (labels >= 0).all():  # labelled test rows (SentEval's): scored too
                test[split] = glue.compute_metrics(task, logits, labels)
    if not run.model_dir.exists():  # with the tokenizer: the model dir is a self-contained init=
        files = sorted(tokenizer.save(run.dir / "tokenizer").iterdir()) if tokenizer is not None else []
        save_model_dir(model.cpu().float(), model.encoder.cfg, run.model_dir, extra_files=files)
    score = glue.task_score(task, dev[task.dev_splits[0]])
    metrics = {
        "task": task.name,
        "dev": dev,
        "diverged": diverged,  # every dev prediction the same: the run collapsed
        **({"test": test} if test else {}),
        "score": score,
        "convbert_score": glue.convbert_score(task, dev[task.dev_splits[0]]),
        "hp": hp,
        "wall_time_s": seconds,
        "examples_per_s": examples / seconds if seconds else None,
        **({"remaining_weights": remaining, "pruning": pruning.method} if pruning is not None else {}),
    }
    run.write_json("metrics.json", metrics)
    log_result(metrics)
    run.set_status("finished")


# ----------------------------------------------------------------------------- a GLUE invocation


def run_glue(cfg: DictConfig, compose_task, summary: bool = True) -> Path | None:
    """Fine-tune every requested task and seed (finished runs are reused); aggregate; print the
    GLUE table. compose_task(name) composes the same command for another task (task=all, MNLI).

    summary=False (a sweep's single run) skips the invocation summary; returns its directory."""
    import datasets

    datasets.disable_progress_bars()
    init = resolve_init(cfg)
    plan = plan_glue(cfg, init.slug, init.model_cfg.hidden_size, compose_task)
    for name in dict.fromkeys(p.task for p in plan):
        todo = [p for p in plan if p.task == name and not p.run.finished]
        if not todo:
            continue  # data is loaded only for tasks with work left
        tcfg = compose_task(name) if cfg.task.name != name else cfg
        task = glue.get_task(name)
        raw = glue.load_glue_task(task, tcfg.glue)
        splits = glue.tokenize_task(
            task, raw, init.tokenizer, tcfg.task.max_len, Path(cfg.outputs) / "cache" / "glue"
        )
        for planned in todo:
            if planned.start and not planned.start.run.finished:
                raise UserError(f"{planned.start.run.dir} has not finished; it must run before {name}")
            finetune_one(tcfg, init, planned, splits)
    if not summary:
        return None
    results: dict = {}
    for p in plan:
        results.setdefault(p.task, {}).setdefault(p.seed, []).append(p.run)
    return write_summary(cfg, init, results)


def _encoder_state(run: Run) -> dict:
    from safetensors.torch import load_file

    state = load_file(str(run.model_dir / "model.safetensors"))
    return {k.removeprefix("encoder."): v for k, v in state.items() if k.startswith("encoder.")}


def aggregate(scores: list[float]) -> dict:
    n = len(scores)
    return {
        "n": n,
        "mean": statistics.fmean(scores),
        "stderr": statistics.stdev(scores) / math.sqrt(n) if n > 1 else 0.0,
        "median": statistics.median(scores),
        "best": max(scores),
    }


def write_summary(cfg: DictConfig, init: Init, results: dict) -> Path:
    from ..atomic import config_hash

    per_task, columns = {}, {"convbert": {}, "chang": {}}
    best_runs = {}
    for name, by_seed in results.items():
        task = glue.get_task(name)
        runs = [(seed, r, r.read_json("metrics.json")) for seed, rs in by_seed.items() for r in rs]
        # with a grid: the setting with the best mean dev score over seeds is the task's result
        by_hp: dict[str, list] = {}
        for entry in runs:
            by_hp.setdefault(json.dumps(entry[2]["hp"], sort_keys=True), []).append(entry)
        chosen = max(by_hp.values(), key=lambda es: statistics.fmean(m["score"] for _, _, m in es))
        best = max(chosen, key=lambda e: e[2]["score"])  # best-dev run
        best_runs[name] = best[1]
        per_task[name] = {
            "runs": [{"run": r.id, "seed": seed, **m} for seed, r, m in runs],
            "hp": chosen[0][2]["hp"],
            "settings_tried": len(by_hp),
            "score": aggregate([m["score"] for _, _, m in chosen]),
            "best_run": best[1].id,
        }
        tests = [
            m["test"][task.test_splits[0]] for _, _, m in chosen if task.test_splits[0] in m.get("test", {})
        ]
        if tests and len(tests) == len(chosen):  # labelled test rows (the probing tasks)
            per_task[name]["test_score"] = aggregate([glue.task_score(task, t) for t in tests])
        for style in ("convbert", "chang"):
            columns[style].update(_columns(task, [m for _, _, m in chosen], style))
    glue_scores = {}
    for style, cols in columns.items():
        for stat in ("mean", "median", "best"):
            vals = {c: v[stat] for c, v in cols.items()}
            try:
                glue_scores[f"{style}_{stat}"] = glue.glue_average(vals, style)
            except Exception:
                glue_scores[f"{style}_{stat}"] = None  # not every task was run
    is_probing = all(glue.get_task(name).benchmark == "probing" for name in results)
    slug = "-".join(filter(None, [init.slug, cfg.task.name, cfg.protocol, cfg.name]))
    every_run = sorted(r.id for by_seed in results.values() for rs in by_seed.values() for r in rs)
    kind = "probing" if is_probing else "glue"
    out = Path(cfg.outputs) / "runs" / kind / f"{slug}-{config_hash(every_run, length=10)}"
    summary = {
        "init": init.slug,
        "protocol": cfg.protocol,
        "tasks": per_task,
        "columns": columns,
        "glue": glue_scores,
        **({"probing": probing_averages(per_task)} if is_probing else {}),
    }
    out.mkdir(parents=True, exist_ok=True)
    Run(out).write_json("summary.json", summary)
    sub = out / "submission"
    sub.mkdir(exist_ok=True)
    for name, run in best_runs.items():
        for f in (run.dir / "submission").glob("*.tsv"):
            (sub / f.name).write_bytes(f.read_bytes())
    if any(sub.iterdir()):
        glue.zip_submission(sub, out / "submission.zip")
    (print_probing_summary if is_probing else print_summary)(summary)
    print(f"summary: {out / 'summary.json'}")
    return out


def probing_averages(per_task: dict) -> dict:
    """BERMO Table 1's averages of the mean accuracies: over all ten tasks and per group (surface,
    syntactic, semantic), for every complete set: {set: {"dev": .., "test": .. or None}}."""
    out = {}
    for group, names in {"all": probing.PROBING_ORDER, **probing.GROUPS}.items():
        if all(n in per_task for n in names):
            dev = statistics.fmean(per_task[n]["score"]["mean"] for n in names)
            has_test = all("test_score" in per_task[n] for n in names)
            test = statistics.fmean(per_task[n]["test_score"]["mean"] for n in names) if has_test else None
            out[group] = {"dev": dev, "test": test}
    return out


def _columns(task: glue.GlueTask, ms: list[dict], style: str) -> dict:
    """{column: aggregate over runs} for one task in one style."""
    per_run = [glue.score_columns({task.name: m["dev"]}, style) for m in ms]
    return {c: aggregate([pr[c] for pr in per_run]) for c in per_run[0]}


def print_probing_summary(summary: dict) -> None:
    """The accuracies of a probing invocation, in BERMO Table 1's column order."""
    from rich.console import Console
    from rich.table import Table

    def cell(agg: dict | None) -> str:
        return f"{agg['mean']:.2f} ± {agg['stderr']:.2f}" if agg else "-"

    table = Table(title=f"SentEval probing accuracy ({summary['protocol']} protocol), init {summary['init']}")
    for col in ("task", "SentEval file", "dev mean ± s.e.", "test mean ± s.e.", "best dev", "runs"):
        table.add_column(col, justify="left" if col in ("task", "SentEval file") else "right")
    tasks = summary["tasks"]
    for name in [n for n in probing.PROBING_ORDER if n in tasks]:
        t = tasks[name]
        file = f"{glue.get_task(name).folder}.txt"
        table.add_row(
            f"{probing.COLUMNS[name]} ({name})",
            file,
            cell(t["score"]),
            cell(t.get("test_score")),
            f"{t['score']['best']:.2f}",
            str(t["score"]["n"]),
        )
    for group, avg in summary.get("probing", {}).items():
        test = "-" if avg["test"] is None else f"{avg['test']:.2f}"
        label = "average, all ten tasks" if group == "all" else f"average, {group} tasks"
        table.add_row(label, "", f"{avg['dev']:.2f}", test, "", "")
    Console(width=None if sys.stdout.isatty() else 140).print(table)


def print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"GLUE dev ({summary['protocol']} protocol), init {summary['init']}")
    for col in ("task", "metrics (mean over runs)", "score mean ± s.e.", "median", "best", "runs"):
        table.add_column(col, justify="left" if col in ("task", "metrics (mean over runs)") else "right")
    for name, t in summary["tasks"].items():
        runs = [r for r in t["runs"] if r["hp"] == t["hp"]]  # the chosen setting's seeds
        keys = [(s, k) for s, d in runs[0]["dev"].items() for k in d]
        mets = ", ".join(
            f"{k}{'' if len(runs[0]['dev']) == 1 else '/' + s.split('_')[-1][:2]} {statistics.fmean(r['dev'][s][k] for r in runs):.1f}"
            for s, k in keys
        )
        sc = t["score"]
        table.add_row(
            name,
            mets,
            f"{sc['mean']:.1f} ± {sc['stderr']:.1f}",
            f"{sc['median']:.1f}",
            f"{sc['best']:.1f}",
            str(sc["n"]),
        )
    g = summary["glue"]
    for style, label in (
        ("convbert", "GLUE, ConvBERT (8 tasks)"),
        ("chang", "GLUE, Chang et al. (9 columns)"),
    ):
        if g.get(f"{style}_mean") is not None:
            table.add_row(
                label,
                "",
                f"{g[f'{style}_mean']:.1f}",
                f"{g[f'{style}_median']:.1f}",
                f"{g[f'{style}_best']:.1f}",
                "",
            )
    Console(width=None if sys.stdout.isatty() else 140).print(table)
