"""Ranges and choices of config values: the one-line checks the structured configs
(:mod:`convexp.schema`, :mod:`convexp.group_schemas`) are made of. Each names the key, the value,
what is allowed and, where it can, an example."""

from __future__ import annotations

import math


def choose(key: str, value, allowed, example) -> None:
    """``value`` must be one of ``allowed``: else one line naming the key, the choices and an example."""
    if value not in allowed:
        shown = ", ".join("null" if a is None else str(a) for a in allowed)
        raise ValueError(f"{key}={value!r}: choose one of {shown}; e.g. {key}={example}")


def non_negative(key: str, value) -> None:
    """``value`` must be a finite number >= 0."""
    in_range(key, value, 0, math.inf, high_open=True)


def in_range(key: str, value, low, high, *, low_open=False, high_open=False, none_means: str | None = None,
             example=None) -> None:
    """``value`` must be a finite number in the interval (``None`` only when ``none_means`` says what it is)."""
    if value is None and none_means:
        return
    outside = value is None or isinstance(value, bool) or not math.isfinite(value) or (
        value <= low if low_open else value < low) or (value >= high if high_open else value > high)
    if outside:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        hint = f" (null: {none_means})" if none_means else ""
        eg = f"; e.g. {key}={example}" if example is not None else ""
        raise ValueError(f"{key}={value}: must be in {interval}{hint}{eg}")


def positive(key: str, value, none_means: str | None = None) -> None:
    """``value`` must be a finite number > 0 (or None when ``none_means`` says what None is)."""
    if value is None and none_means:
        return
    if value is None or isinstance(value, bool) or not math.isfinite(value) or value <= 0 or value >= INT_LIMIT:
        hint = f" ({none_means})" if none_means else ""
        raise ValueError(f"{key}={value}: must be a number > 0{' and below 2**63' if value and value > 0 else ''}{hint}")


INT_LIMIT = 2**63  # what a step count or size can be (torch's int64, Lightning's step counter)


def count(key: str, value, low: int = 1, none_means: str | None = None) -> None:
    """``value`` must be a whole number >= ``low`` (below 2**63), or None where ``none_means`` says."""
    if value is None and none_means:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < INT_LIMIT:
        hint = f" (null: {none_means})" if none_means else ""
        raise ValueError(f"{key}={value}: must be a whole number >= {low}{hint}")
