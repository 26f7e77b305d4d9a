"""Online or offline: W&B's mode for a run, decided where wandb itself finds credentials.

wandb logs in with, in this order: ``WANDB_API_KEY`` (or ``WANDB_IDENTITY_TOKEN_FILE``); the
netrc entry for its server's host, in the file ``NETRC`` names, else ``~/.netrc`` (``~/_netrc``).
Its server is ``WANDB_BASE_URL``, else the ``base_url`` that ``wandb login --host`` saved in its
settings file (``$WANDB_CONFIG_DIR/settings``, default ``~/.config/wandb/settings``), else
``https://api.wandb.ai``. Credentials found there: online; none: offline (``wandb sync`` later).
``WANDB_MODE`` and ``logger.mode`` (other than ``auto``) decide first.
"""

from __future__ import annotations

import configparser
import netrc
import os
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_URL = "https://api.wandb.ai"


def base_url() -> str:
    """The W&B server wandb will talk to."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    config_dir = Path(os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb")
    settings = configparser.ConfigParser()
    try:
        settings.read(config_dir / "settings")
        return settings.get("default", "base_url", fallback=DEFAULT_URL) or DEFAULT_URL
    except configparser.Error:
        return DEFAULT_URL


def netrc_path() -> Path:
    if os.environ.get("NETRC"):
        return Path(os.environ["NETRC"]).expanduser()
    for name in ("~/.netrc", "~/_netrc"):
        if Path(name).expanduser().exists():
            return Path(name).expanduser()
    return Path("~/.netrc").expanduser()


def wandb_mode(logger_cfg) -> tuple[str, str]:
    """(mode, why): ``online``, ``offline`` or ``disabled``, and the reason in a few words."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"], "WANDB_MODE"
    if logger_cfg.mode != "auto":
        return logger_cfg.mode, f"logger.mode={logger_cfg.mode}"
    for variable in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if os.environ.get(variable):
            return "online", variable
    url = base_url()
    host, path = urlsplit(url).netloc, netrc_path()
    try:
        entry = netrc.netrc(path).authenticators(host) if host else None
    except (OSError, netrc.NetrcParseError):
        entry = None
    if entry and entry[2]:
        return "online", f"the key for {host} in {path}"
    where = f"~/{path.relative_to(Path.home())}" if path.is_relative_to(Path.home()) else str(path)
    return "offline", f"no key for {host or url} in {where}: `wandb login`"


def own_service() -> None:
    """Start this process's own W&B service, never join one another process left in
    ``WANDB_SERVICE`` (a parent that ran wandb, e.g. a notebook or a test runner, hands it to its
    children). A run killed while it shared that service keeps its ID registered there, and the
    service refuses the resume: "run ID ... is in use". The token reads ``3-<PID>-unix-<PATH>``,
    PID the process that started the service."""
    token = os.environ.get("WANDB_SERVICE", "")
    if token and token.split("-")[1:2] != [str(os.getpid())]:
        del os.environ["WANDB_SERVICE"]


LAUNCH_INPUTS = "wandb.sdk.launch.inputs.internal"


def skip_unstaged_launch_inputs() -> None:
    """Let ``wandb.init`` skip its look for W&B Launch job inputs when none can have been staged.

    Every ``wandb.init`` ends by applying the inputs staged with ``wandb.sdk.launch``'s
    ``manage_config_file`` / ``manage_wandb_config``, and imports that package to find them, staged
    or not. The import builds pydantic models whose docstring lookup walks every loaded module: in
    a process that has loaded torch and Lightning it took 0.8-1.2 s of each run's start here
    (0.16 s in a bare interpreter). Inputs are staged in the module that holds them
    (``LAUNCH_INPUTS``); while it is not loaded none exist, and the look is skipped. Once it is
    loaded (a Launch job's own code staged something), wandb's method runs as before. Guarded: a
    wandb without that method is left alone."""
    import sys

    from wandb.sdk import wandb_run

    method = getattr(wandb_run.Run, "_detect_and_apply_job_inputs", None)
    if method is None or getattr(method, "skips_unstaged", False):
        return

    def detect_and_apply_job_inputs(self) -> None:
        if LAUNCH_INPUTS in sys.modules:
            method(self)

    detect_and_apply_job_inputs.skips_unstaged = True
    wandb_run.Run._detect_and_apply_job_inputs = detect_and_apply_job_inputs
