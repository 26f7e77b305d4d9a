"""convexp installs as a library: version ranges (never a pin) so that pip keeps the torch a
machine already has, the optional parts as extras, and CI's newest-releases step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))
from newest_requirements import NEWEST, requirements  # noqa: E402

EXTRAS = {"bench": {"transformers"}, "slurm": {"submitit"}}


def check_requirements(reqs: list[Requirement]) -> None:
    """Ranges only; torch accepts the builds researchers have (2.4 up); Lightning has an upper bound."""
    for r in reqs:
        assert not any(s.operator in ("==", "===") for s in r.specifier), f"pinned: {r}"
    base = {r.name.lower(): r for r in reqs if r.marker is None}
    for version in ("2.4.0", "2.5.1", "2.12.0", "2.13.0"):
        assert base["torch"].specifier.contains(version), version
    assert not base["torch"].specifier.contains("2.3.1")
    lightning = base["pytorch-lightning"].specifier
    assert lightning.contains("2.6.6") and not lightning.contains("3.0.0")
    assert not base["datasets"].specifier.contains("3.6.0")  # datasets.List is new in 4.0
    assert "pyarrow" in base
    for extra, names in EXTRAS.items():
        assert {r.name.lower() for r in reqs if r.marker and r.marker.evaluate({"extra": extra})} >= names
        assert not names & set(base), f"{names} should be optional ({extra})"


def test_pyproject_declares_ranges_and_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra, listed in project["optional-dependencies"].items():
        reqs += [Requirement(f"{r}; extra == '{extra}'") for r in listed]
    check_requirements(reqs)


def test_newest_releases_step_drops_only_the_chosen_bounds():
    reqs = {Requirement(r).name.lower(): Requirement(r) for r in requirements(ROOT / "pyproject.toml")}
    assert NEWEST <= set(reqs) and all(not reqs[n].specifier for n in NEWEST)
    assert str(reqs["torch"].specifier) == ">=2.4"  # torch: as declared (CI constrains it to the CPU build)
    assert {"transformers", "submitit", "pytest"} <= set(reqs)  # the test extra, its own extras expanded


@pytest.mark.slow
def test_wheel_metadata_and_install_beside_an_older_torch(tmp_path):
    src, dist = tmp_path / "src", tmp_path / "dist"  # built from a copy: the build leaves build/ behind
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "convexp", src / "convexp", ignore=shutil.ignore_patterns("__pycache__"))
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*pip_wheel, "-w", str(dist), str(src)], check=True)
    [wheel] = dist.glob("convexp-*.whl")
    with zipfile.ZipFile(wheel) as z:
        [meta] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(z.read(meta).decode())
    assert set(metadata.get_all("Provides-Extra")) >= {"bench", "slurm", "test"}
    check_requirements([Requirement(r) for r in metadata.get_all("Requires-Dist")])

    # A venv that holds torch 2.5.1 (a researcher's CUDA build) and, through a .pth file, this
    # environment's packages: pip's plan for the wheel must leave that torch alone.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.check_output([python, "-c", purelib], text=True).strip())
    for name, version in (("torch", "2.5.1"), ("convexp", "0.0.1")):  # convexp: hides this env's own
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text("")
    (site / "outer.pth").write_text(sysconfig.get_path("purelib") + "\n")
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout is no installed convexp
    done = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--no-index", "--report", str(report), str(wheel)],
        capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(report.read_text())["install"]
    installs = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in plan}
    assert installs == {"convexp": "0.1.0"}, installs  # torch 2.5.1 kept, nothing else needed
    assert Version("2.5.1") in Requirement("torch>=2.4").specifier


def test_submitit_launcher_without_the_slurm_extra_is_one_clear_line(monkeypatch):
    import importlib.util

    from convexp.sweep.launchers import require_submitit
    from convexp.sweep.spec import SweepError

    find_spec = importlib.util.find_spec
    hidden = lambda name, *a: None if name == "submitit" else find_spec(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hidden)
    with pytest.raises(SweepError, match=r'pip install "convexp\[slurm\]"'):
        require_submitit()
