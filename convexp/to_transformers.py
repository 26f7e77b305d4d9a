"""`convexp hf export`: a convexp run (or model directory) as a Hugging Face ``transformers``
directory that ``AutoModel*.from_pretrained`` and ``AutoTokenizer`` load, checked against convexp.

    RUN/model (or the generator of RUN/checkpoints/last.ckpt, an ELECTRA pre-training's)
      -> models/hf_export.export_hf: config.json + model.safetensors of the transformers class
         the architecture and head name (ConvBERT, BERT, ELECTRA; MLM, RTD, classifier), a
         classifier's label names in id2label
      -> the tokenizer files and tokenizer_config.json (AutoTokenizer)
      -> the transformers model, loaded from what was written, against convexp's on a random batch:
         max |Δ| of its outputs (logits, or the encoder's hidden states) at most TOLERANCE, else
         nothing is written (where transformers is installed; else the file says "not checked")
      -> DIR (default RUN/transformers), written atomically, with convexp_export.json.

`convexp hf push DIR REPO` uploads such a directory (or a convexp model directory) to the Hub.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from .errors import UserError
from .export import source_dir, tokenizer_files

TOLERANCE = 1e-5  # max |Δ| between convexp's and transformers' outputs (fp32, CPU)
RECORD = "convexp_export.json"
PARTS = ("model", "encoder", "generator")


class ExportMismatch(RuntimeError):
    """transformers does not reproduce the convexp model (a bug: nothing was written)."""


def default_out(src: Path, part: str) -> Path:
    base = src.parent if src.name == "model" else src
    return base / ("transformers" if part == "model" else f"transformers-{part}")


def _generator(run: Path, cfg):
    """An ELECTRA pre-training's generator, from the run's last checkpoint (its model/ holds the
    discriminator only)."""
    import torch
    from omegaconf import OmegaConf

    from .models import MaskedLM
    from .models.config import generator_config

    ckpt = run / "checkpoints" / "last.ckpt"
    config = run / "config.yaml"
    objective = OmegaConf.load(config).get("objective", {}) if config.is_file() else {}
    if objective.get("name") != "electra" or not ckpt.is_file():
        raise UserError(
            f"{run} is not an ELECTRA pre-training run with its last checkpoint: --part generator exports "
            "the generator of objective=electra (checkpoints/last.ckpt)"
        )
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    prefix = next((p for p in ("objective.generator.", "module.objective.generator.")
                   if any(k.startswith(p) for k in state)), None)  # fmt: skip
    if prefix is None:
        raise UserError(f"{ckpt} holds no generator weights; was it trained with objective=electra?")
    model = MaskedLM(generator_config(cfg, float(objective.generator_fraction)))
    model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return model.eval()


def _outputs(model, ids, types, mask):
    """The convexp model's outputs as transformers' model gives them (logits, or hidden states)."""
    import torch

    from .models import Encoder

    with torch.no_grad():
        if isinstance(model, Encoder):
            return model(ids, mask, types).last_hidden_state
        return model(ids, mask, types).logits


def check_against_transformers(model, out: Path) -> float | None:
    """max |Δ| between ``model`` and the transformers model in ``out``, or None where transformers
    is not installed."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    import torch
    import transformers

    config = json.loads((out / "config.json").read_text())
    transformers.utils.logging.disable_progress_bar()  # its loading bar is not this command's output
    theirs = getattr(transformers, config["architectures"][0]).from_pretrained(out).eval()
    cfg = model.cfg if hasattr(model, "cfg") else model.encoder.cfg
    gen = torch.Generator().manual_seed(0)
    length = min(32, cfg.max_position_embeddings)
    ids = torch.randint(0, cfg.vocab_size, (3, length), generator=gen)
    types = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    ours = _outputs(model, ids, types if cfg.type_vocab_size else None, mask)
    with torch.no_grad():
        got = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    got = got.logits if hasattr(got, "logits") else got.last_hidden_state
    return float((ours.float() - got.float()).abs().max())


def export_run(run: Path, out: Path | None = None, part: str = "model", labels: list[str] | None = None) -> dict:  # fmt: skip
    """Export ``run`` (see the module docstring); returns the record written beside the model."""
    from .models.hf_export import check_exportable, export_hf

    if part not in PARTS:
        raise UserError(f"--part {part!r}: choose one of {', '.join(PARTS)}")
    src = source_dir(run)
    out = Path(out).expanduser() if out else default_out(src, part)
    if out.exists():
        raise UserError(f"{out} exists; refusing to overwrite it (give another --out or delete it)")
    files = tokenizer_files(src)  # checked before torch and the weights
    from .models.hf_keys import ExportError
    from .models.hub import read_model_config
    from .store.checkpoint import open_checkpoint

    cfg = read_model_config(src)
    try:
        check_exportable(cfg)  # before the weights are read
        model = open_checkpoint(Path(run), label="", weights=True).model()
        from .models import ReplacedTokenDetector
        from .models.hf_export import CLASSES, hf_model_type

        rtd_less = isinstance(model, ReplacedTokenDetector) and (hf_model_type(cfg), "rtd") not in CLASSES
        if part == "encoder" or (part == "model" and rtd_less):  # ConvBERT's discriminator: its encoder
            model = model.encoder
        elif part == "generator":
            model = _generator(src.parent if src.name == "model" else src, cfg)
        kind = type(model).__name__
        from .atomic import atomic_dir

        with atomic_dir(out) as tmp:
            export_hf(model, None, tmp / "hf", labels if kind == "SequenceClassifier" else None)
            for f in (tmp / "hf").iterdir():
                f.rename(tmp / f.name)
            (tmp / "hf").rmdir()
            for f in files:
                shutil.copy2(f, tmp / f.name)
            if files:
                from .data.tokenizer import Tokenizer

                own = model.cfg if hasattr(model, "cfg") else model.encoder.cfg
                tok = Tokenizer.load(files[0].parent)
                config = tok.hf_config(own.max_position_embeddings)
                (tmp / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
            diff = check_against_transformers(model, tmp)
            if diff is not None and diff > TOLERANCE:
                raise ExportMismatch(f"transformers' outputs differ from convexp's by {diff:.3g} (> {TOLERANCE})")
            config = json.loads((tmp / "config.json").read_text())
            record = {
                "source": str(src),
                "part": part if not (part == "model" and rtd_less) else "encoder (transformers has no RTD head for it)",
                "class": config["architectures"][0],
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "max_abs_diff": diff if diff is not None else "not checked: transformers is not installed",
                "tokenizer": [f.name for f in files] or "none: the run's model directory holds no tokenizer files",
                "labels": config.get("id2label"),
            }
            (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    except ExportError as e:
        raise UserError(f"{src}: {e}") from e
    return {**record, "out": str(out)}


def push(folder: Path, repo: str, private: bool = False, message: str | None = None) -> str:
    """Upload ``folder`` (a transformers directory written by :func:`export_run`, or a convexp model
    directory) to the Hub repository ``repo``; returns its URL."""
    folder = Path(folder).expanduser()
    if not (folder / "config.json").is_file() and not (folder / "model_config.json").is_file():
        raise UserError(
            f"{folder} holds no config.json or model_config.json: push a directory `convexp hf export` wrote, "
            "or a convexp model directory"
        )
    if "/" not in repo.strip("/"):
        raise UserError(f"{repo!r}: name the repository as OWNER/NAME (your user or organisation, then its name)")
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                          commit_message=message or f"convexp: {folder.name}")  # fmt: skip
    except Exception as e:  # no network, no token, no permission: the hub's own words, one line
        first = " ".join(str(e).split())[:300]
        raise UserError(f"cannot push to {repo}: {first} (`huggingface-cli login`, or HF_TOKEN)") from e
    return str(url)
