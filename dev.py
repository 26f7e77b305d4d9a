#!/usr/bin/env python3
"""Two commands from a fresh clone, each doing its own set-up (Python >= 3.10 and the package
registries are all it needs):

    python3 dev.py demo    the ten-minute path: a smoke sweep of one ablation and its report;
                           prints the figure's path at the end
    python3 dev.py test    the default test tier (extra arguments go to pytest)
    python3 dev.py docs    the documentation site, served at http://127.0.0.1:8000 (extra
                           arguments go to mkdocs serve)

Set-up, skipped where it is done (a second call spends seconds on it):

1. ``.venv`` in the checkout. Where this Python already has torch (a cluster's CUDA module, a
   conda environment), the venv sees it (``--system-site-packages``) and keeps it.
2. torch, if the venv has none: ``$CONVEXP_TORCH`` when set (a pip requirement, e.g.
   ``torch==2.13.0``, or a wheel's path); else PyPI's CUDA build where ``nvidia-smi`` finds a GPU;
   else the CPU-only build from pytorch.org's CPU index.
3. convexp itself, editable (``pip install -e .``; ``.[test]`` for ``test``, ``.[docs]`` for
   ``docs``), again only when pyproject.toml or the extras changed since the last install
   (``.venv/.convexp-install``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".convexp-install"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DEMO = ["ablate", "key-based-conv", "scale=smoke", "tasks=[cola,sst2]", "launcher.workers=2"]
TESTS = ["-n", "2", "-m", "not slow"]  # README's test command: pytest -n 2 -m "not slow"


def say(line: str) -> None:
    print(f"dev.py: {line}", flush=True)


def run(*cmd, **kw) -> None:
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def has_torch(python: Path | str) -> bool:
    return subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode == 0


def ensure_venv() -> None:
    if PY.exists():
        return
    keep = has_torch(sys.executable)  # the machine's own torch, kept
    say(f"creating {VENV.name}" + (" (with this Python's torch)" if keep else ""))
    run(sys.executable, "-m", "venv", *(["--system-site-packages"] if keep else []), VENV)


def ensure_torch() -> None:
    if has_torch(PY):
        return
    spec = os.environ.get("CONVEXP_TORCH", "").strip()
    if spec:
        args, why = spec.split(), "CONVEXP_TORCH"
    elif shutil.which("nvidia-smi"):
        args, why = ["torch>=2.4"], "a CUDA GPU: PyPI's CUDA build"
    else:
        args, why = ["torch>=2.4", "--index-url", CPU_INDEX], "no GPU: the CPU-only build"
    say(f"installing torch ({why})")
    run(PY, "-m", "pip", "install", "--quiet", *args)


def ensure_convexp(extras: str) -> None:
    target = f".[{extras}]" if extras else "."
    project = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    done_extras, _, done_project = (STAMP.read_text().strip() if STAMP.exists() else "").partition(":")
    if done_project == project and (done_extras == extras or not extras):  # .[test] holds all of .
        return
    say(f"installing convexp ({target}, editable)")
    run(PY, "-m", "pip", "install", "--quiet", "-e", target, cwd=ROOT)
    STAMP.write_text(f"{extras}:{project}\n")


def set_up(extras: str = "") -> None:
    if sys.version_info < (3, 10):
        sys.exit("dev.py: convexp needs Python 3.10 or newer")
    t = time.perf_counter()
    ensure_venv()
    ensure_torch()
    ensure_convexp(extras)
    say(f"set-up ready in {time.perf_counter() - t:.0f} s ({VENV})")


def demo() -> int:
    set_up()
    convexp = BIN / "convexp"
    say("convexp " + " ".join(DEMO))
    code = subprocess.run([str(convexp), *DEMO], cwd=ROOT).returncode
    if code:
        return code
    report = subprocess.run([str(convexp), "report", "key-based-conv"], cwd=ROOT, capture_output=True, text=True)
    sys.stdout.write(report.stdout)
    sys.stderr.write(report.stderr)
    if report.returncode:
        return report.returncode
    outputs = Path(os.environ.get("CONVEXP_OUTPUTS", ROOT / "outputs"))
    figures = sorted((outputs / "reports" / "key-based-conv").glob("*.png"))
    if not figures:
        say("the report wrote no figure")
        return 1
    for f in figures:
        print(f"figure: {f.resolve()}")
    return 0


def test(args: list[str]) -> int:
    set_up("test")
    return subprocess.run([str(BIN / "pytest"), *TESTS, *args], cwd=ROOT).returncode


def docs(args: list[str]) -> int:
    set_up("docs")
    return subprocess.run([str(BIN / "mkdocs"), "serve", *args], cwd=ROOT).returncode


def main() -> int:
    verb, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if verb == "demo" and not rest:
        return demo()
    if verb == "test":
        return test(rest)
    if verb == "docs":
        return docs(rest)
    print(__doc__.split("\n\n")[0].split("\n", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
