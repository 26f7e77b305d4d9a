"""The built-in feed-forward as a part (the protocol: models/parts.py), without torch: it builds
its module (models/ffn.py) and says its parameters, FLOPs and ``transformers`` keys.

* :data:`FEEDFORWARD` (``ffn: feedforward``) — x -> act(x W1 + b1) W2 + b2, dense or ConvBERT's
  grouped linear (``ffn_groups``, eq. 7).
"""

from __future__ import annotations

from .attention_part import module_class, weight_bias_keys


class FeedForwardPart:
    """``ffn: feedforward``: :class:`~convexp.models.ffn.FeedForward`."""

    name = "feedforward"

    def __call__(self, cfg, layer: int):
        return module_class("convexp.models.ffn:FeedForward")(cfg, cfg.layer_size(layer)["intermediate"])

    def check(self, cfg, bad) -> None:
        if cfg.intermediate_size % cfg.ffn_groups or cfg.hidden_size % cfg.ffn_groups:
            bad(f"ffn_groups {cfg.ffn_groups} must divide hidden and intermediate sizes")

    def label(self, cfg) -> str:
        return "feedforward" if cfg.ffn_groups == 1 else f"grouped/{cfg.ffn_groups}"

    def count(self, cfg, i: int) -> tuple[int, int, int]:
        """(parameters, forward FLOPs per token, FLOPs per token per position: none)."""
        D, I, G = cfg.hidden_size, cfg.layer_size(i)["intermediate"], cfg.ffn_groups
        return D * I // G + I + I * D // G + D, 2 * 2 * D * I // G, 0

    def hf_keys(self, cfg, hf: str, cx: str) -> list[tuple[str, str, str]] | None:
        return weight_bias_keys(f"{hf}intermediate.dense", f"{cx}ffn.fc1") + weight_bias_keys(f"{hf}output.dense", f"{cx}ffn.fc2")


FEEDFORWARD = FeedForwardPart()
