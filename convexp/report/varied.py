"""What a sweep varies: the override keys whose values differ between its planned variants.

Read from the sweep file's variant overrides (``pretrain:`` then ``finetune:``), so every figure
names the ablated component and its values ("model.kernel_size: 9 vs 17") with nothing written
per sweep. A variant that leaves a key to its recipe's default shows ``default``.
"""

from __future__ import annotations

import textwrap

DEFAULT = "default"


def varied(sweep, variants: list[str]) -> dict[str, dict[str, str]]:
    """{variant: {key: value}} over the keys whose value is not the same in every one of ``variants``
    (keys in the sweep file's order; {} each when nothing differs, e.g. a single variant)."""
    sets = {v: _overrides(sweep.variants[v]) for v in variants}
    keys = list(dict.fromkeys(k for s in sets.values() for k in s))
    differ = [k for k in keys if len({s.get(k, DEFAULT) for s in sets.values()}) > 1]
    return {v: {k: s.get(k, DEFAULT) for k in differ} for v, s in sets.items()}


def _overrides(variant) -> dict[str, str]:
    out = {}
    for o in (*variant.pretrain, *variant.finetune):
        key, _, value = o.partition("=")
        out[key.lstrip("+~")] = value
    return out


def describe(varies: dict[str, dict[str, str]], width: int = 90) -> str:
    """The line a figure's title carries: "varies model.kernel_size: 9 vs 17" ("1, 3, 5" for more
    values; one clause per key, values in the plan's order), wrapped at ``width``; "one variant" /
    "no override differs"."""
    if len(varies) < 2:
        return "one variant"
    keys = list(dict.fromkeys(k for kv in varies.values() for k in kv))
    if not keys:
        return "no override differs between the variants"
    values = {k: list(dict.fromkeys(kv[k] for kv in varies.values())) for k in keys}
    clauses = [f"{k}: {(' vs ' if len(vs) == 2 else ', ').join(vs)}" for k, vs in values.items()]
    return "\n".join(textwrap.wrap("varies " + "; ".join(clauses), width))


def settings(varies: dict[str, dict[str, str]], variant: str) -> str:
    """One variant's values of the varied keys: "model.kernel_size=9" ("" when nothing varies)."""
    return ", ".join(f"{k}={v}" for k, v in varies.get(variant, {}).items())


def keys(varies: dict[str, dict[str, str]]) -> list[str]:
    """The varied keys, in order."""
    return list(dict.fromkeys(k for kv in varies.values() for k in kv))
