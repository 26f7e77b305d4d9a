"""Helpers shared by the test modules: tiny configurations, running `convexp` in a subprocess,
sweep ledgers, and small models for the pruning / export tests. Test modules import from here,
never from each other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from convexp.models import ModelConfig, SequenceClassifier
from convexp.models.ffn import GroupedLinear

# --- pre-training and the command line


def example_rows(ds) -> list[dict]:
    """The rows of prepared (compact) pre-training examples as ``packing.py`` made them: dicts of
    lists (input_ids, attention_mask, token_type_ids; pair_label an int)."""
    from convexp.tasks.pretraining.chunks import expand

    cols = expand(ds.with_format("numpy")[:])
    return [{k: v[i].tolist() for k, v in cols.items()} for i in range(len(ds))]


# A tiny, fast configuration of the smoke scale (same code paths).
TINY = [
    "scale=smoke",
    "seq_len=32",
    "model.num_layers=2",
    "model.hidden_size=32",
    "model.embedding_size=16",
    "model.intermediate_size=64",
    "tokenizer.vocab_size=400",
    "data.num_docs=300",
    "trainer.batch_size=8",
    "trainer.val_batches=2",
    "trainer.log_every_n_steps=5",
]


def convexp(
    *args: str, outputs: Path, env: dict | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    # wide: pytest-xdist's workers have COLUMNS=80, which folds the tables these tests read
    e = {**os.environ, "CONVEXP_OUTPUTS": str(outputs), "WANDB_MODE": "offline", "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "convexp.cli", *args], capture_output=True, text=True, env=e, timeout=timeout
    )


def kill_when(args: list[str], outputs: Path, pattern: str, env: dict | None = None) -> None:
    """Run `convexp ARGS` and SIGKILL it as soon as a file matching `pattern` exists under outputs."""
    env = {**os.environ, "CONVEXP_OUTPUTS": str(outputs), "WANDB_MODE": "offline", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "convexp.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not list(outputs.glob(pattern)):
        time.sleep(0.02)
    time.sleep(0.3)  # let the checkpoint file be complete
    proc.send_signal(signal.SIGKILL)
    proc.wait()


# Loaded into a child `convexp pretrain` by `held_at_second_checkpoint` (on its PYTHONPATH): when
# Lightning is about to write the run's second periodic checkpoint, the process says so (a file
# ``held`` in the folder CONVEXP_TEST_HOLD names) and waits until the test writes ``release`` there (a
# signal raised while it waits ends it at once). Then the first checkpoint is whole and linked as
# last.ckpt, the steps after it have run and logged, and the run cannot finish: a test signals a run
# in a known state, however fast or slow the machine, never racing its speed.
HOLD_HOOK = """
import os, time
from pathlib import Path

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

_folder = Path(os.environ["CONVEXP_TEST_HOLD"])
_save = TorchCheckpointIO.save_checkpoint
_saved = []


def _held_save(self, checkpoint, path, *args, **kwargs):
    if Path(path).name.startswith("step="):
        _saved.append(path)
        if len(_saved) == 2 and not (_folder / "held").exists():
            (_folder / "held").write_text(str(path))
            deadline = time.monotonic() + 600
            while not (_folder / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
    return _save(self, checkpoint, path, *args, **kwargs)


TorchCheckpointIO.save_checkpoint = _held_save
"""


# sitecustomize for a pre-training subprocess: hold the run inside one phase of a training step
# ($CONVEXP_TEST_PHASE: data, forward, backward, optimizer, checkpoint, validation) at its fifth
# occurrence (the first checkpoint, the first validation), writing "held"; a KeyboardInterrupt that
# comes while held is swallowed (as a finalizer or a library's `except BaseException` would),
# writing "swallowed", and the run goes on once "release" exists.
PHASE_HOOK = """
import os, time
from pathlib import Path

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from convexp.tasks.pretraining import batches, stage

_folder, _phase = Path(os.environ["CONVEXP_TEST_HOLD"]), os.environ["CONVEXP_TEST_PHASE"]
_calls = []


def _hold(phase, first=5):
    if phase != _phase:
        return
    _calls.append(phase)
    if len(_calls) != first:
        return
    while True:
        try:  # "held" written inside: a signal that comes as it is written is swallowed too
            if not (_folder / "held").exists():
                (_folder / "held").write_text(phase)
            while not (_folder / "release").exists():
                time.sleep(0.01)
            return
        except KeyboardInterrupt:
            (_folder / "swallowed").write_text(phase)


def _wrap(owner, name, phase, first=5):
    original = getattr(owner, name)

    def held(*args, **kwargs):
        _hold(phase, first)
        return original(*args, **kwargs)

    setattr(owner, name, held)


_wrap(batches.Masker, "__call__", "data")  # a batch masked as the loader makes it
_wrap(stage.PretrainModule, "training_step", "forward")
_wrap(pl.LightningModule, "backward", "backward")
_wrap(torch.optim.Optimizer, "zero_grad", "optimizer")  # the optimizer's step done, its gradients freed
_wrap(stage.PretrainModule, "validation_step", "validation", first=1)
_save = TorchCheckpointIO.save_checkpoint


def _held_save(self, checkpoint, path, *args, **kwargs):
    if Path(path).name.startswith("step="):
        _hold("checkpoint", first=1)
    return _save(self, checkpoint, path, *args, **kwargs)


TorchCheckpointIO.save_checkpoint = _held_save
"""


def held_in_phase(args: list[str], outputs: Path, folder: Path, phase: str, env: dict | None = None,
                  **popen) -> subprocess.Popen:  # fmt: skip
    """Start `convexp pretrain ARGS` and return once it is held inside ``phase`` of a step
    (PHASE_HOOK); ``release(folder)`` lets it go on."""
    return _held(args, outputs, folder, PHASE_HOOK, {**(env or {}), "CONVEXP_TEST_PHASE": phase}, "in its " + phase, **popen)


def held_at_second_checkpoint(args: list[str], outputs: Path, folder: Path, env: dict | None = None,
                              **popen) -> subprocess.Popen:  # fmt: skip
    """Start `convexp ARGS` (pre-training, or a sweep whose job pre-trains) and return once it is
    held before its second periodic checkpoint (HOLD_HOOK); ``release(folder)`` lets it go on."""
    return _held(args, outputs, folder, HOLD_HOOK, env, "before its second checkpoint", **popen)


def _held(args: list[str], outputs: Path, folder: Path, hook: str, env: dict | None, where: str,
          **popen) -> subprocess.Popen:  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(hook)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CONVEXP_OUTPUTS": str(outputs), "WANDB_MODE": "offline", **(env or {}),
           "PYTHONPATH": path, "CONVEXP_TEST_HOLD": str(folder)}  # fmt: skip
    popen = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **popen}
    proc = subprocess.Popen([sys.executable, "-m", "convexp.cli", *args], env=env, **popen)
    while not (folder / "held").exists():
        if proc.poll() is not None:
            raise AssertionError(f"convexp {' '.join(args)} ended (exit {proc.returncode}) before it was held {where}")
        time.sleep(0.02)
    return proc


def release(folder: Path) -> None:
    (folder / "release").write_text("")


def kill_between_checkpoints(args: list[str], outputs: Path, folder: Path, env: dict | None = None) -> None:
    """Run `convexp ARGS` (pre-training) and SIGKILL it after its first checkpoint, before its second."""
    proc = held_at_second_checkpoint(args, outputs, folder, env)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def run_dirs(outputs: Path) -> list[Path]:
    return sorted((outputs / "runs" / "pretrain").glob("*"))


# The sweeps' own files with tiny models and data: the same code paths, seconds per run.


def write_vocab(path: Path, words: list[str]) -> Path:
    """A WordPiece vocab.txt: BERT's special tokens, then ``words``."""
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    return path


def official_json(path: Path, records: list[dict], version: str) -> None:
    """Records (tasks/squad/data.py's format) as an official SQuAD file: one paragraph per record."""
    paragraphs = [
        {
            "context": r["context"],
            "qas": [
                {
                    "id": r["id"],
                    "question": r["question"],
                    "answers": [
                        {"text": t, "answer_start": s}
                        for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])
                    ],
                    **({"is_impossible": r["is_impossible"]} if version == "v2.0" else {}),
                }
            ],
        }
        for r in records
    ]
    path.write_text(json.dumps({"version": version, "data": [{"title": "t", "paragraphs": paragraphs}]}))


# --- sweeps

SHRINK = [
    "scale=smoke",
    "tasks=[rte]",
    *[f"pretrain.{o}" for o in TINY if not o.startswith("scale=")],
    "pretrain.trainer.max_steps=6",
    "pretrain.trainer.val_every_n_steps=3",
    "pretrain.trainer.checkpoint_every_n_steps=3",
    "finetune.glue.synthetic_size=120",
    "finetune.epochs=1",
    "finetune.batch_size=16",
    "finetune.task.max_len=48",
]


QUIET = {"WANDB_MODE": "disabled"}


def fake_hub_cache(cache, repo: str, files_from):
    """The layout huggingface_hub's cache uses: models--org--name/{refs/main, snapshots/<commit>/}."""
    commit = "0" * 40
    root = cache / f"models--{repo.replace('/', '--')}"
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    for f in files_from.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    return snap


def ledger(outputs: Path, name: str) -> dict:
    return json.loads((outputs / "sweeps" / name / "last.json").read_text())


def statuses(outputs: Path, name: str) -> dict[str, str]:
    return {k: n["status"] for k, n in ledger(outputs, name)["nodes"].items()}


def write_sweep(path: Path, variants: dict, finetune: bool = True, **extra) -> Path:
    body = {
        "source": {"paper": "test", "ref": "Table 0"},
        "pretrain": ["model=bert_small"],
        "variants": variants,
        "report": {"columns": ["params", "rte", "glue"] if finetune else ["params", "pretrain.val_loss"]},
        **extra,
    }
    if finetune:
        body["finetune"] = {"tasks": ["rte"]}
    path.write_text(yaml.safe_dump(body))
    return path


# --- small models for the pruning and export tests

D, N_HEADS, K_SIZE, VOCAB = 32, 4, 5, 50


def make_cfg(**kw) -> ModelConfig:
    base = dict(
        vocab_size=VOCAB,
        hidden_size=D,
        num_heads=N_HEADS,
        intermediate_size=64,
        num_layers=2,
        max_position_embeddings=32,
        kernel_size=K_SIZE,
        pad_token_id=1,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        scalar_mix_dropout=0.0,
    )
    base.update(kw)
    return ModelConfig(**base)


VARIANTS = {
    "self_attention": dict(),
    "chang_composite_conv_qkv": dict(
        absolute_positions=False, fixed_conv=True, dynamic_conv=True, conv_qkv="qkv", scalar_mix=True
    ),
    "chang_depthwise_conv_qk": dict(depthwise_conv=True, conv_qkv="qk", key_conv=True, pooler=True),
    "convbert_sdconv": dict(mixer="mixed", conv_type="sdconv", embedding_size=16, ffn_groups=2),
    "convbert_conventional": dict(mixer="mixed", conv_type="conventional", num_heads=8, head_ratio=2),
    "convbert_dynamic": dict(mixer="mixed", conv_type="dynamic", ffn_groups=2),
}


def make_model(name: str, seed: int = 0) -> SequenceClassifier:
    torch.manual_seed(seed)
    model = SequenceClassifier(make_cfg(**VARIANTS[name]), num_labels=3)
    with torch.no_grad():  # exercise zero-initialised parameters (biases, β) too
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def batch(B: int = 3, L: int = 12):
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(2, VOCAB, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = 1
    return ids, mask


def logits(model, ids, mask):
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits


def kill_ffn_units(model) -> None:
    """Layer 0: units 1, 5 get a zero fc1 row (constant output), unit 9 a zero fc2 column. Grouped
    FFNs (2 groups of 32): the same in group 0; in group 1 units 1, 8, 12 (fc1) and 9 (fc2) -> 4 dead,
    but only min(3, 4) = 3 can go from every group."""
    with torch.no_grad():
        for block in model.encoder.layers:
            fc1, fc2 = block.ffn.fc1, block.ffn.fc2
            if isinstance(fc1, GroupedLinear):  # [G, D/G, I/G], [G, I/G, D/G]; 32 units per group
                for g, c in [(0, 1), (0, 5), (1, 1), (1, 8), (1, 12)]:
                    fc1.weight[g, :, c] = 0
                for g, c in [(0, 9), (1, 9)]:
                    fc2.weight[g, c, :] = 0
            else:
                fc1.weight[[1, 5]] = 0
                fc2.weight[:, 9] = 0
            break


def kill_heads(model) -> None:
    """Layer 0: head 0 loses its output columns, head 2 its value rows; layer 1: every head dead."""
    with torch.no_grad():
        for i, block in enumerate(model.encoder.layers):
            mixer = block.mixer
            H = mixer.heads
            d = (
                mixer.out.weight.shape[1] // H
                if not hasattr(mixer, "query")
                else mixer.query.weight.shape[0] // H
            )
            heads = [0, 2] if i == 0 else list(range(H))
            for h in heads[::2]:
                mixer.out.weight[:, h * d : (h + 1) * d] = 0
            for h in heads[1::2]:
                if hasattr(mixer, "value"):
                    mixer.value.weight[h * d : (h + 1) * d] = 0
                else:
                    half = mixer.v.conv.pointwise.weight.shape[0] // d if mixer.v.conv is not None else 0
                    lin, r = (mixer.v.conv.pointwise, h) if h < half else (mixer.v.linear, h - half)
                    lin.weight[r * d : (r + 1) * d] = 0
                    if mixer.depthwise is not None:  # a zero value does not kill a head there
                        mixer.out.weight[:, h * d : (h + 1) * d] = 0


# --- convexp report: models to analyse, figures as saved


def analysis_model_dir(tmp_path: Path, name: str, cfg: ModelConfig, extra_files=()):
    """A model directory of a MaskedLM with ``cfg`` (fixed β drawn from N(0, 1), not 0) for
    ``analyze_model``: (its path, its encoder in eval mode)."""
    from convexp.models import MaskedLM
    from convexp.models.io import save_model_dir

    torch.manual_seed(0)
    model = MaskedLM(cfg)
    with torch.no_grad():
        for layer in model.encoder.layers:
            if getattr(layer.mixer, "fixed", None) is not None:
                layer.mixer.fixed.normal_()
    save_model_dir(model, cfg, tmp_path / name, extra_files=extra_files)
    return tmp_path / name, model.encoder.eval()


def record_figures(monkeypatch) -> dict:
    """{file name: the matplotlib Figure saved to it}, filled by every ``Figure.savefig`` from now on."""
    from matplotlib.figure import Figure

    figs, save_png = {}, Figure.savefig

    def record(self, path, *args, **kwargs):
        figs[Path(path).name] = self
        return save_png(self, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return figs
