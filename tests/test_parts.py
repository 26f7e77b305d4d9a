"""A part describes itself (issue 65, item 2): a new built-in mixer is its module (the nn.Module and
its part object), its line in the parts table and a preset. Everything else convexp asks of a
mixer — its checks, its self-attention heads, its parameters and FLOPs, its memory, its Table 3
FLOPs, its name in tables, its transformers class — it answers from the part, with no other file
touched. The test adds one such mixer (a depthwise convolution with an output projection) and
walks it through those questions."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from convexp.models import parts

MODULE = '''
import torch
from torch import nn


class DepthwiseMixer(nn.Module):
    """x -> W_out · depthwise_conv(x): one kernel of K taps a channel, then a dense projection."""

    def __init__(self, cfg, layer):
        super().__init__()
        D, K = cfg.hidden_size, cfg.kernel_size
        self.conv = nn.Conv1d(D, D, K, padding=K // 2, groups=D)
        self.out = nn.Linear(D, D)

    def forward(self, x, keep, first_only=False):  # [B, L, D] -> [B, L, D]
        if keep is not None:
            x = x * keep.unsqueeze(-1).to(x.dtype)
        y = self.out(self.conv(x.transpose(1, 2)).transpose(1, 2))
        return y[:, :1] if first_only else y


class DepthwisePart:
    name = "depthwise"
    maps_all_heads = False

    def __call__(self, cfg, layer):
        return DepthwiseMixer(cfg, layer)

    def check(self, cfg, bad):
        if cfg.kernel_size > 31:
            bad(f"kernel_size {cfg.kernel_size}: the depthwise mixer takes at most 31 taps")

    def heads(self, cfg):
        return cfg.num_heads

    def fixed_heads(self, cfg):
        return True

    def label(self, cfg):
        return f"depthwise/{cfg.kernel_size}"

    def count(self, cfg, i):
        D, K = cfg.hidden_size, cfg.kernel_size
        return D * K + D + D * D + D, 2 * D * K + 2 * D * D, 0

    def extra_saved(self, cfg, i, seq_len):
        return 0, 0

    def table3_extra(self, cfg, s, softmax_flops):
        return 0.0, 0

    def hf_model_type(self, cfg):
        return "bert"

    def hf_refusals(self, cfg):
        return ["mixer=depthwise (transformers has no depthwise mixer)"]

    def hf_keys(self, cfg, hf, cx):
        return None


PART = DepthwisePart()
'''
PRESET = """defaults: [chang_small]
name: chang_small_depthwise
mixer: depthwise
kernel_size: 9
"""


@pytest.fixture
def depthwise(tmp_path, monkeypatch):
    """The new mixer's module on sys.path, its line in the parts table, its preset in a config dir."""
    (tmp_path / "depthwise_mixer.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("depthwise_mixer", None)
    import depthwise_mixer

    monkeypatch.setitem(parts.BUILTIN["mixer"], "depthwise", depthwise_mixer.PART)  # the table's line
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "chang_small_depthwise.yaml").write_text(PRESET)
    monkeypatch.setenv("CONVEXP_CONFIG_PATH", str(tmp_path / "conf"))
    return depthwise_mixer


def test_a_new_builtin_mixer_is_its_module_its_table_line_and_a_preset(depthwise):
    from torch.utils.flop_counter import FlopCounterMode

    from convexp.config.compose import model_config
    from convexp.models import MaskedLM
    from convexp.models.hf_export import check_exportable
    from convexp.models.hf_keys import ExportError
    from convexp.models.stats import is_measured, model_stats
    from convexp.sweep.memory import peak_mib, pretrain_mib  # noqa: F401  (the dry run's estimate)

    cfg = model_config("chang_small_depthwise", ["num_layers=2"])
    assert cfg.mixer == "depthwise" and not is_measured(cfg)  # described, not measured
    # its own rules, through ModelConfig's validation
    with pytest.raises(Exception, match="the depthwise mixer takes at most 31 taps"):
        model_config("chang_small_depthwise", ["kernel_size=33"])
    # its parameters and FLOPs from its part equal the built model's, exactly
    for seq_len in (16, 64):
        with torch.device("meta"):
            model = MaskedLM(dataclasses.replace(cfg, pooler=False))
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model(torch.zeros(1, seq_len, dtype=torch.long, device="meta"))
        built = (sum(p.numel() for p in model.parameters()), 3 * counter.get_total_flops() / seq_len)
        assert model_stats(cfg, seq_len) == built
    # it trains: a real batch forward and backward through the encoder
    m = MaskedLM(cfg)
    ids = torch.randint(5, cfg.vocab_size, (2, 12))
    out = m(ids, torch.ones_like(ids), labels=ids)
    out.loss.backward()
    assert all(p.grad is not None for p in m.encoder.layers[0].mixer.parameters())
    # the dry run's memory estimate and convexp models' label come from the part
    assert peak_mib(cfg, 8, 128, "32-true") > 0
    assert parts.builtin_part(cfg, "mixer").label(cfg) == "depthwise/9"
    # transformers: refused in one line naming why
    with pytest.raises(ExportError, match="transformers has no depthwise mixer"):
        check_exportable(cfg)


def test_the_builtin_parts_answer_the_protocol():
    """Every built-in part answers every question a consumer asks (no consumer falls back to a
    branch on the part's name)."""
    mixer_questions = ("check", "heads", "fixed_heads", "label", "count", "extra_saved", "table3_extra",
                       "hf_model_type", "hf_refusals", "hf_keys", "maps_all_heads")  # fmt: skip
    for name, part in parts.BUILTIN["mixer"].items():
        assert callable(part) and all(hasattr(part, q) for q in mixer_questions), name
    for name, part in parts.BUILTIN["ffn"].items():
        assert callable(part) and all(hasattr(part, q) for q in ("check", "label", "count", "hf_keys")), name


def test_no_consumer_branches_on_a_builtin_mixers_name():
    """Outside the parts' own modules, no module tests ``mixer == "..."`` (models/config.py's
    field comment and the table itself aside)."""
    import re
    from pathlib import Path

    import convexp

    root = Path(convexp.__file__).parent
    own = {"models/attention_part.py", "models/ffn_part.py", "models/parts.py", "bench/plugin.py"}
    found = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).as_posix()
        if rel in own:
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"\.mixer (==|!=|in|not in) [\"'(]", line):
                found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, found
