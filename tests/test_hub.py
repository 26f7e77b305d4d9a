"""convexp's model directories on the Hugging Face Hub (`convexp.models.hub`): save_pretrained,
from_pretrained and push_to_hub for any variant, and a hub name as init=. No network: a local
directory, a hub cache laid out as huggingface_hub lays it, and an upload recorded locally."""

from __future__ import annotations

import shutil

import pytest
import torch

from convexp.store.checkpoint import open_checkpoint
from convexp.models import MaskedLM, SequenceClassifier
from convexp.pruning.structured import pruned_config, remove_dead_structures
from helpers import batch, fake_hub_cache, kill_ffn_units, kill_heads, logits, make_model, write_vocab


def pruned(name: str) -> SequenceClassifier:
    """A variant with dead heads and FFN units cut out, rebuilt from its per-layer sizes."""
    model = make_model(name)
    kill_ffn_units(model)
    kill_heads(model)
    remove_dead_structures(model)
    rebuilt = SequenceClassifier(pruned_config(model), num_labels=3)
    rebuilt.load_state_dict(model.state_dict())
    return rebuilt.eval()


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    import huggingface_hub._snapshot_download
    import huggingface_hub.constants
    import huggingface_hub.file_download

    cache = tmp_path / "hub-cache"
    # older huggingface_hub releases copy the constant into these modules when they are imported
    hub = huggingface_hub
    for module in (hub.constants, hub._snapshot_download, hub.file_download):
        monkeypatch.setattr(module, "HF_HUB_CACHE", str(cache), raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.mark.parametrize(
    "model",
    [make_model("chang_composite_conv_qkv"), pruned("chang_depthwise_conv_qk")],
    ids=["composite", "pruned"],
)
def test_save_pretrained_from_pretrained_round_trip_with_equal_logits(tmp_path, model):
    model.save_pretrained(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"model.safetensors", "model_config.json", "config.json", "README.md"} <= files
    assert "library_name: convexp" in (tmp_path / "m" / "README.md").read_text()
    loaded = SequenceClassifier.from_pretrained(tmp_path / "m")
    ids, mask = batch()
    assert torch.equal(logits(loaded, ids, mask), logits(model, ids, mask))
    assert loaded.encoder.cfg == model.encoder.cfg
    with pytest.raises(ValueError, match="not a mlm"):
        MaskedLM.from_pretrained(tmp_path / "m")


def test_a_model_pruned_in_place_is_refused_with_the_fix(tmp_path):
    model = make_model("self_attention")
    kill_heads(model)
    remove_dead_structures(model)  # shapes changed, model.encoder.cfg still the uniform one
    with pytest.raises(ValueError, match="pruned_config"):
        model.save_pretrained(tmp_path / "m")


def test_a_hub_name_loads_a_convexp_model_and_serves_as_init(tmp_path, hub_cache):
    model = pruned("chang_composite_conv_qkv")
    model.tokenizer_files = (write_vocab(tmp_path / "vocab.txt", [f"w{i}" for i in range(40)]),)
    model.save_pretrained(tmp_path / "src")
    snap = fake_hub_cache(hub_cache, "me/tiny-composite-pruned", tmp_path / "src")
    ids, mask = batch()

    loaded = SequenceClassifier.from_pretrained("me/tiny-composite-pruned")
    assert torch.equal(logits(loaded, ids, mask), logits(model, ids, mask))
    assert [p.name for p in loaded.tokenizer_files] == ["vocab.txt"]

    ckpt = open_checkpoint("me/tiny-composite-pruned")  # how every stage opens init=
    assert (ckpt.kind, ckpt.slug, ckpt.source, ckpt.path) == (
        "hub", "tiny-composite-pruned", "me/tiny-composite-pruned", snap
    )
    assert ckpt.is_convexp and ckpt.tokenizer_path == snap / "vocab.txt"
    assert ckpt.model_cfg.layer_sizes == model.encoder.cfg.layer_sizes
    assert torch.equal(logits(ckpt.model(), ids, mask), logits(model, ids, mask))
    assert open_checkpoint("me/tiny-composite-pruned", weights=False).model_cfg == model.encoder.cfg


def test_push_to_hub_uploads_the_model_directory(tmp_path, hub_cache, monkeypatch):
    import huggingface_hub

    uploaded = tmp_path / "uploaded"

    class Repo:
        repo_id = "me/tiny-composite"

    def upload_folder(self, *, repo_id, folder_path, **kw):
        shutil.copytree(folder_path, uploaded)

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", lambda self, **kw: Repo())
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    model = make_model("chang_composite_conv_qkv")
    model.push_to_hub("me/tiny-composite")
    fake_hub_cache(hub_cache, "me/tiny-composite", uploaded)
    ids, mask = batch()
    loaded = SequenceClassifier.from_pretrained("me/tiny-composite")
    assert torch.equal(logits(loaded, ids, mask), logits(model, ids, mask))
