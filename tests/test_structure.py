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
    *("spec", "args", "start", "compute", "disk", "memory", "gpus", "cpu_rate", "cards", "nodes", "plan", "schedule"),
    *("node_state", "execute", "slurm", "node_job", "launchers", "status", "wandb_sweep", "show"),
]


def test_sweep_package_flows_one_way():
    mods = modules()
    order = [f"convexp.sweep.{m}" for m in SWEEP_ORDER]
    assert sorted(order) == sorted(m for m in mods if m.startswith("convexp.sweep."))
    for i, m in enumerate(order):
        inside = {d for d in imports(m, mods[m], set(mods)) if d.startswith("convexp.sweep")}
        assert inside <= set(order[:i]), f"{m} imports {sorted(inside - set(order[:i]))}"


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
