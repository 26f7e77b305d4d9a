"""The pruning methods' names, without torch: what ``pruning.method`` accepts (the config check
reads these before torch is imported, so a bad value is refused at once)."""

from __future__ import annotations

METHODS = ("magnitude", "topk", "sigmoid_threshold", "l0")
ALIASES = {  # the reference's spellings and the paper's names
    "topK": "topk",
    "movement": "topk",
    "sigmoied_threshold": "sigmoid_threshold",
    "soft_movement": "sigmoid_threshold",
}


def canonical_method(method: str) -> str:
    """``method`` in its canonical spelling (an alias resolved); ValueError when unknown."""
    m = ALIASES.get(method, method)
    if m not in METHODS:
        raise ValueError(f"unknown pruning method {method!r}; choose one of {METHODS} (or {sorted(ALIASES)})")
    return m
