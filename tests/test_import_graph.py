"""The import graph of the package: no cycle between modules or between packages,
and package faces (``__init__``) that load nothing.

Every import counts, at module level or inside a function, for type checkers
only or at run time: a cycle hidden behind a lazy import is still two concerns
that cannot be understood (or moved) one without the other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "slurmpool"
# A package face that is more than a docstring: the command line group itself.
FACES_WITH_CODE = {"slurmpool.cli"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, source: str, known: set[str], is_package: bool = False) -> set[str]:
    """The slurmpool modules ``name`` imports anywhere in its ``source``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in known else target)
    return {m for m in out if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: _imports(name, path.read_text(), known, path.name == "__init__.py")
        for name, path in modules.items()
    }


def _package(module: str) -> str:
    """The package a module belongs to (``slurmpool.gpu.nvml`` -> ``slurmpool.gpu``);
    a top-level module is its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _edges_within(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    inside = set(members)
    return [f"{a} -> {b}" for a in members for b in sorted(graph[a]) if b in inside]


def test_no_cycle_between_modules() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    assert cycles == [], [_edges_within(graph, c) for c in cycles]


def test_no_cycle_between_packages() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        here = _package(module)
        edges = packages.setdefault(here, set())
        edges.update(_package(t) for t in targets if _package(t) != here)
    cycles = _cycles(packages)
    assert cycles == [], [_edges_within(packages, c) for c in cycles]


def test_the_checks_see_cycles_and_lazy_imports() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    known = {"slurmpool.gpu", "slurmpool.gpu.nvml", "slurmpool.gpu.select", "slurmpool.sim"}
    lazy = "def f():\n    from slurmpool.gpu import nvml\n    from . import select\n"
    assert _imports("slurmpool.gpu.backend", lazy, known) == {
        "slurmpool.gpu.nvml",
        "slurmpool.gpu.select",
    }
    typing_only = "if TYPE_CHECKING:\n    import slurmpool.sim\n"
    assert _imports("slurmpool.gpu.backend", typing_only, known) == {"slurmpool.sim"}


@pytest.mark.parametrize(
    "package",
    sorted(m for m, p in _modules().items() if p.name == "__init__.py" and m != "slurmpool"),
)
def test_a_package_face_loads_nothing(package: str) -> None:
    """Importing a package runs no code of its modules: a job hook that needs one
    module pays for that module only."""
    if package in FACES_WITH_CODE:
        pytest.skip(f"{package} is the command line group")
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT.parent)!r}); import {package}; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('slurmpool'))))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == sorted(["slurmpool", package])
