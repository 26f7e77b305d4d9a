"""convexp's model directory, and sharing it on the Hugging Face Hub.

A model directory is ``model.safetensors`` (the weights under the module names of
:class:`~convexp.models.MaskedLM` / ``ReplacedTokenDetector`` / ``SequenceClassifier``: ``encoder.*``
and ``head.*``, tied tensors once) + ``model_config.json`` (the :class:`ModelConfig`; a
structurally pruned model's has ``layer_sizes``) + the tokenizer files. Every model class is a
`HubModel`: huggingface_hub's ``PyTorchModelHubMixin`` on this layout, so any variant —
ConvBERT, Chang et al.'s composite convolution, BERMO, a pruned model — is shared and loaded by
name::

    model = SequenceClassifier.from_pretrained("outputs/runs/finetune/<id>/model")
    model.push_to_hub("me/convbert-small-sst2")          # or save_pretrained(DIR)
    SequenceClassifier.from_pretrained("me/convbert-small-sst2")
    convexp finetune glue init=me/convbert-small-mlm ...  # a hub name as any init

The mixin adds its ``config.json`` (the constructor's arguments, which the Hub counts downloads
by) and a model card ``README.md``; convexp reads ``model_config.json``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch
from huggingface_hub import PyTorchModelHubMixin
from safetensors.torch import load_file, save_model

from .config import ModelConfig

from .files import CONFIG, TOKENIZER_FILES, WEIGHTS


def write_model_files(model: torch.nn.Module, cfg: ModelConfig, d: Path, extra_files=(), texts=None) -> None:
    """The weights and the config into directory ``d``; ``extra_files`` copied in (tokenizer
    files), ``texts`` maps more file names to contents."""
    save_model(model, str(d / WEIGHTS))
    (d / CONFIG).write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    for f in extra_files:
        shutil.copy2(f, d / Path(f).name)
    for name, text in (texts or {}).items():
        (d / name).write_text(text)


def read_model_config(path: Path) -> ModelConfig:
    return ModelConfig.from_dict(json.loads((Path(path) / CONFIG).read_text()))


def model_kind(state: dict) -> tuple[str, int | None]:
    """Which model a model directory's tensors belong to, from its head's tensor names:
    ("classifier", num_labels) | ("mlm", None) | ("rtd", None)."""
    if "head.out.weight" in state:
        return "classifier", int(state["head.out.weight"].shape[0])  # [num_labels, D]
    if "head.prediction.weight" in state:
        return "rtd", None
    if "head.norm.weight" in state:
        return "mlm", None
    raise ValueError("no task head among the weights (head.out / head.prediction / head.norm)")


class HubModel(
    PyTorchModelHubMixin,
    library_name="convexp",
    tags=["convexp"],
):
    """``save_pretrained`` / ``from_pretrained`` / ``push_to_hub`` on convexp's model directory."""

    KIND = ""  # "classifier" | "mlm" | "rtd": which head the class has (model_kind)
    tokenizer_files: tuple[Path, ...] = ()  # copied by save_pretrained: those of the loaded directory

    def _save_pretrained(self, save_directory: Path) -> None:
        cfg = self.encoder.cfg
        state = self.state_dict()
        num_labels = model_kind(state)[1]
        with torch.device("meta"):  # the shapes the config builds, without memory
            built = type(self)(cfg, *([num_labels] if num_labels is not None else [])).state_dict()
        if {k: v.shape for k, v in built.items()} != {k: v.shape for k, v in state.items()}:
            raise ValueError(
                "the model's shapes are not those its config builds (pruned in place?): save the model "
                "built from convexp.pruning.structured.pruned_config(model), as convexp export does"
            )
        write_model_files(self, cfg, Path(save_directory), self.tokenizer_files)

    @classmethod
    def _from_pretrained(
        cls, *, model_id, revision, cache_dir, force_download, local_files_only, token, **model_kwargs
    ):
        path = Path(model_id)
        if not path.is_dir():
            from huggingface_hub import snapshot_download

            path = Path(
                snapshot_download(
                    repo_id=model_id,
                    revision=revision,
                    cache_dir=cache_dir,
                    force_download=force_download,
                    local_files_only=local_files_only,
                    token=token,
                )
            )
        return cls.load_dir(path)

    @classmethod
    def load_dir(cls, path: Path, state: dict | None = None) -> "HubModel":
        """The model in directory ``path`` (``state``: its weights, when already read), strictly
        loaded (the config, ``layer_sizes`` included, must build exactly the saved shapes), in
        eval mode on the CPU."""
        path = Path(path)
        state = load_file(str(path / WEIGHTS)) if state is None else state
        kind, num_labels = model_kind(state)
        if kind != cls.KIND:
            raise ValueError(f"{path} holds a {kind} model, not a {cls.KIND} ({cls.__name__})")
        model = cls(read_model_config(path), *([num_labels] if num_labels is not None else []))
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            first = " ".join(str(e).split())[:300]
            raise ValueError(f"{path}: the weights do not match {CONFIG}: {first}") from e
        model.tokenizer_files = tuple(path / n for n in TOKENIZER_FILES if (path / n).is_file())
        return model.eval()
