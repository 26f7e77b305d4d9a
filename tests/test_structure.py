"""The package's shape (issue 13): no import circle among convexp's modules, no module over 500
lines. Reads the source only (no imports), so it runs in well under a second."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import convexp

ROOT = Path(convexp.__file__).parent
MAX_LINES = 500
# Known and being taken apart (issue 13, by the task-layer and fine-tuning work); remove an entry
# once its module is split: the tests below fail when an entry is no longer needed.
KNOWN_CYCLES: set = set()
KNOWN_LONG: set = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The convexp modules ``name`` imports anywhere in its body (lazy imports in functions too:
    a circle through them is still a circle)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = ".".join(p for p in (base if node.level else "", node.module or "") if p)
            # `from .sweep import plan` imports the module convexp.sweep.plan
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import convexp.x.y` as a name inside a known module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_cycles() -> set[frozenset[str]]:
    """The strongly connected components of the import graph with more than one module."""
    mods = modules()
    graph = {m: imports(m, p, set(mods)) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = set()

    def visit(m: str) -> None:  # Tarjan's algorithm
        index[m] = low[m] = len(index)
        stack.append(m)
        for d in graph[m]:
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            component = []
            while True:
                x = stack.pop()
                component.append(x)
                if x == m:
                    break
            if len(component) > 1:
                cycles.add(frozenset(component))

    for m in graph:
        if m not in index:
            visit(m)
    return cycles


def test_no_import_cycle():
    cycles = import_cycles()
    new = [sorted(c) for c in cycles - KNOWN_CYCLES]
    assert not new, f"import circles among convexp modules: {new}"
    assert not KNOWN_CYCLES - cycles, "a known circle is gone: remove it from KNOWN_CYCLES"


def test_no_module_over_500_lines():
    long = {m for m, p in modules().items() if len(p.read_text().splitlines()) > MAX_LINES}
    assert not long - KNOWN_LONG, f"modules over {MAX_LINES} lines: {sorted(long - KNOWN_LONG)}"
    assert not KNOWN_LONG - long, "a known long module is short now: remove it from KNOWN_LONG"


# convexp/sweep: data flows one way (spec -> plan -> launcher -> execute -> run store); a module
# imports only modules before it here (show and wandb_sweep sit on top, nothing imports them)
SWEEP_ORDER = [
    *("spec", "args", "start", "compute", "disk", "memory", "gpus", "rates", "cards", "nodes", "plan", "schedule"),
    *("node_state", "execute", "slurm", "requests", "node_job", "launchers", "adaptive", "status", "wandb_sweep", "show"),
]


def test_sweep_package_flows_one_way():
    mods = modules()
    order = [f"convexp.sweep.{m}" for m in SWEEP_ORDER]
    assert sorted(order) == sorted(m for m in mods if m.startswith("convexp.sweep."))
    for i, m in enumerate(order):
        inside = {d for d in imports(m, mods[m], set(mods)) if d.startswith("convexp.sweep")}
        assert inside <= set(order[:i]), f"{m} imports {sorted(inside - set(order[:i]))}"


# The layers, from the command down (docs/architecture.md): a package imports nothing from those above
# it. Tasks own their commands and checks; config composes and types; store, models and data answer
# questions and are handed what they need (a task's choices are declared with their schema in
# config/groups.py, a preset's ModelConfig is passed to models/stats.py).
ABOVE = {
    "tasks": ("sweep", "report", "bench", "cli"),
    "train": ("tasks", "sweep", "report", "bench", "cli"),
    "config": ("tasks", "train", "sweep", "report", "bench", "cli"),
    "pruning": ("config", "tasks", "train", "sweep", "report", "bench", "cli"),
    "store": ("config", "tasks", "train", "sweep", "report", "bench", "cli"),
    "models": ("config", "store", "tasks", "train", "sweep", "report", "bench", "cli"),
    "data": ("config", "store", "tasks", "train", "sweep", "report", "bench", "cli"),
    # the package's own modules (errors, atomic, width, noise, logs, export): the ground floor
    "": ("tasks", "train", "sweep", "report", "bench", "cli"),
}


def reaching_up() -> list[str]:
    mods = modules()
    out = []
    for m, p in mods.items():
        if m in ("convexp", "convexp.cli"):  # the command line sits on top
            continue
        package = p.parent != ROOT  # convexp/<package>/...: its layer; convexp/<module>.py: the ground
        layer = p.relative_to(ROOT).parts[0] if package else ""
        for d in sorted(imports(m, p, set(mods))):
            if d.count(".") and d.split(".")[1] in ABOVE.get(layer, ()):
                out.append(f"{m} -> {d}")
    return out


def test_nothing_below_reaches_up():
    """config/, store/, models/, data/, train/ import nothing from tasks/; store/, models/, data/
    nothing from config/; the package's own modules nothing from a task, a stage or a command
    (issue 56): an invocation walks down, lazy imports included."""
    assert not reaching_up(), f"imports that run up a layer: {reaching_up()}"


def test_layer_check_sees_a_lazy_import_up(tmp_path, monkeypatch):
    """The check itself: an import inside a function from a lower layer to a higher one is found."""
    pkg = tmp_path / "convexp"
    for d in ("", "config", "tasks"):
        (pkg / d).mkdir(exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "tasks" / "t.py").write_text("X = 1\n")
    (pkg / "config" / "c.py").write_text("def f():\n    from ..tasks.t import X\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert reaching_up() == ["convexp.config.c -> convexp.tasks.t"]


def test_cycle_finder_sees_lazy_imports(tmp_path, monkeypatch):
    """The check itself: a circle closed by an import inside a function is found."""
    pkg = tmp_path / "convexp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from convexp.a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert import_cycles() == {frozenset({"convexp.a", "convexp.b"})}


def test_test_modules_share_helpers_not_each_other():
    tests = Path(__file__).resolve().parent
    offenders = [
        p.name
        for p in sorted(tests.glob("*.py"))
        if re.search(r"^\s*(from|import) test_\w+", p.read_text(), flags=re.M)
    ]
    assert not offenders, f"import shared helpers from tests/helpers.py instead: {offenders}"
