"""A user's mixer or FFN, tried on a tiny batch before anything runs (models/parts.py's protocol).

:func:`check_parts` refuses, in one line each (:class:`~convexp.models.parts.PartError`): a module
or class that cannot be found, a class that is not an ``nn.Module``, options the class does not
take, a forward that raises, returns another shape or a non-finite value, and a mixer that lets
padding into real positions (unless ``model.reads_padding`` says it is meant): outputs at the real
positions of a sequence must stay the same when padding is appended. The built-in parts are held to
the same by the test suite; here only a user's are tried (a fraction of a second for a small model).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from .config import ModelConfig
from .parts import KINDS, PartError, build, check_options, code_digests, takes_first_only, user_parts

BATCH, REAL, PAD = 2, 5, 3  # the tiny batch: 2 sequences of 5 real tokens, the second padded by 3
PADDING_TOLERANCE = 1e-4  # largest change at a real position allowed by appended padding (fp32 noise)
_CHECKED: set[str] = set()


def check_parts(cfg: ModelConfig) -> None:
    """Try every user part of ``cfg`` (nothing for the papers' presets); once per process for the
    same configuration and source."""
    for kind in KINDS:  # a built-in part refuses options; a user's class takes the ones given
        check_options(cfg, kind)
    users = user_parts(cfg)
    if not users:
        return
    key = json.dumps([asdict(cfg), code_digests(cfg)], sort_keys=True, default=str)
    if key in _CHECKED:
        return
    import torch

    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        if "mixer" in users:
            _check_mixer(cfg, torch)
        if "ffn" in users:
            _check_ffn(cfg, torch)
    _CHECKED.add(key)


def _built(cfg: ModelConfig, kind: str):
    try:
        return build(kind, cfg, 0).eval()  # eval: no dropout, so a padding check compares like with like
    except PartError:
        raise
    except Exception as e:
        name = f"model.{kind}={getattr(cfg, kind)}"
        raise PartError(f"{name}: building it raised {type(e).__name__}: {e}") from None


def _run(cfg: ModelConfig, kind: str, module, what: str, *args, shape: tuple, **kw):
    """``module(*args, **kw)``, refused in one line when it raises, or its output is not a tensor of
    ``shape`` with finite values."""
    import torch

    name = f"model.{kind}={getattr(cfg, kind)}"
    try:
        out = module(*args, **kw)
    except Exception as e:
        raise PartError(f"{name}: forward on {what} raised {type(e).__name__}: {e}") from None
    if not isinstance(out, torch.Tensor):
        got = type(out).__name__
        raise PartError(f"{name}: forward on {what} must return a tensor {list(shape)}, got {got}")
    if tuple(out.shape) != shape:
        raise PartError(f"{name}: forward on {what} returned shape {list(out.shape)}, expected {list(shape)}")
    if not torch.isfinite(out).all():
        raise PartError(f"{name}: forward on {what} returned non-finite values (NaN or inf)")
    return out


def _check_mixer(cfg: ModelConfig, torch) -> None:
    D, L = cfg.hidden_size, REAL + PAD
    mixer = _built(cfg, "mixer")
    x = torch.randn(BATCH, L, D)
    keep = torch.ones(BATCH, L, dtype=torch.bool)
    keep[1, REAL:] = False
    what = f"x [{BATCH}, {L}, {D}] with keep [{BATCH}, {L}] (padding in the second row)"
    full = _run(cfg, "mixer", mixer, what, x, keep, shape=(BATCH, L, D))
    _run(cfg, "mixer", mixer, f"x [{BATCH}, {L}, {D}] with keep=None", x, None, shape=(BATCH, L, D))
    if takes_first_only(mixer):
        first = _run(cfg, "mixer", mixer, what + " and first_only=True", x, keep, first_only=True,
                     shape=(BATCH, 1, D))  # fmt: skip
        gap = (first - full[:, :1]).abs().max().item()
        if gap > PADDING_TOLERANCE * (1 + full.abs().max().item()):
            raise PartError(
                f"model.mixer={cfg.mixer}: forward(..., first_only=True) differs from position 0 of the "
                f"whole output by {gap:.3g}; return out[:, :1] of the same computation, or drop first_only"
            )
    if cfg.reads_padding:
        return
    real = x[1:, :REAL]  # the padded row's real tokens alone, no padding
    alone = _run(cfg, "mixer", mixer, f"x [1, {REAL}, {D}] with keep=None", real, None, shape=(1, REAL, D))
    junk = x.clone()
    junk[1, REAL:] = 100.0 * torch.randn(PAD, D)  # loud padding: a leak cannot hide in rounding
    padded = _run(cfg, "mixer", mixer, what, junk, keep, shape=(BATCH, L, D))[1:, :REAL]
    gap = (padded - alone).abs().max().item()
    if gap > PADDING_TOLERANCE * (1 + alone.abs().max().item()):
        raise PartError(
            f"model.mixer={cfg.mixer} lets padding into real positions: appending {PAD} padding tokens "
            f"changed their outputs by up to {gap:.3g}; mask with `keep` (True on real tokens), or set "
            "model.reads_padding=true if that is meant"
        )


def _check_ffn(cfg: ModelConfig, torch) -> None:
    D = cfg.hidden_size
    ffn = _built(cfg, "ffn")
    _run(cfg, "ffn", ffn, f"x [{BATCH}, {REAL}, {D}]", torch.randn(BATCH, REAL, D), shape=(BATCH, REAL, D))
