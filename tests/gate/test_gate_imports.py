"""The gate package's layering: each module imports only the modules below it, so no import cycle can come back.

Two checks: the import graph read from the source (every import, module-level or inside a function; imports under
``if TYPE_CHECKING:`` are for the type checker only and are left out), and each module imported first, alone, in a
fresh interpreter."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "dialogue_judge"
GATE = "dialogue_judge.gate"
GATE_DIR = REPO / "dialogue_judge" / "gate"

# module -> the gate modules it may import (docs/gate.md and the package docstring describe the same layers)
ALLOWED: dict[str, set[str]] = {
    "inputs": set(),
    "stats": set(),
    "outcome": set(),
    "reports": {"outcome"},
    "progress": set(),
    "config": {"inputs"},
    "result": {"outcome", "reports"},
    "decision": {"stats", "inputs", "reports", "result"},
    "calibrate": {"inputs", "outcome"},
    "standalone": {"progress"},
    "backends": {"config", "decision", "inputs", "progress", "result", "standalone"},
    "runner": {"stats", "backends", "calibrate", "config", "decision", "inputs", "reports", "result", "standalone"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:``."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the file imports at run time (``from pkg import sub`` counts as ``pkg.sub``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known)
    found.discard(name)
    return found


def package_graph() -> dict[str, set[str]]:
    files = sorted((REPO / PACKAGE).rglob("*.py"))
    known = {_module_name(f) for f in files}
    return {_module_name(f): imports_of(f, known) for f in files}


def cycles_through(graph: dict[str, set[str]], members: set[str]) -> list[list[str]]:
    """Import cycles (as paths) that pass through one of ``members``."""
    found = []
    for start in sorted(members):
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append([*path, start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


def test_every_gate_module_has_a_declared_layer() -> None:
    modules = {p.stem for p in GATE_DIR.glob("*.py") if p.name != "__init__.py"}
    assert modules == set(ALLOWED), "declare a new gate module's allowed imports in ALLOWED"


def test_gate_modules_import_only_the_layers_below_them() -> None:
    graph = package_graph()
    for short, allowed in ALLOWED.items():
        imported = graph[f"{GATE}.{short}"]
        gate_imports = {m.removeprefix(f"{GATE}.") for m in imported if m.startswith(f"{GATE}.")}
        assert gate_imports <= allowed, f"{short} imports {sorted(gate_imports - allowed)}"
        # the package namespace imports every module (runner included): a module that imports it closes a cycle
        assert GATE not in imported, f"{short} imports the {GATE} namespace; import the module instead"


def test_no_import_cycle_passes_through_the_gate() -> None:
    graph = package_graph()
    gate = {m for m in graph if m == GATE or m.startswith(f"{GATE}.")}
    assert cycles_through(graph, gate) == []


def test_the_cycle_check_sees_lazy_imports() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles_through(graph, {"a"}) == [["a", "b", "a"]]
    tree_path = GATE_DIR / "backends.py"
    # LocalBackend imports the in-process runner inside a method, not at the top of the file
    assert f"{GATE}.standalone" in imports_of(tree_path, {f"{GATE}.standalone"})
    # reports names GateResult under TYPE_CHECKING only: not a run-time edge
    assert f"{GATE}.result" not in imports_of(GATE_DIR / "reports.py", {f"{GATE}.result"})


# The package's __init__ imports every module (runner last), which would hide a cycle between two lower modules:
# the isolation check therefore registers an empty package object and lets the module pull in what it imports.
ISOLATED = """
import importlib, json, sys, types
pkg = types.ModuleType({gate!r})
pkg.__path__ = [{path!r}]
sys.modules[{gate!r}] = pkg
importlib.import_module({gate!r} + "." + {name!r})
print(json.dumps(sorted(m.removeprefix({gate!r} + ".") for m in sys.modules if m.startswith({gate!r} + "."))))
"""


def _below(short: str) -> set[str]:
    out: set[str] = set()
    todo = list(ALLOWED[short])
    while todo:
        module = todo.pop()
        if module not in out:
            out.add(module)
            todo.extend(ALLOWED[module])
    return out


@pytest.mark.parametrize("short", sorted(ALLOWED))
def test_each_gate_module_imports_alone_in_a_fresh_interpreter(short: str) -> None:
    code = ISOLATED.format(gate=GATE, path=str(GATE_DIR), name=short)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert short in loaded
    assert loaded - {short} <= _below(short), f"importing {short} loaded {sorted(loaded - {short} - _below(short))}"


def test_the_package_namespace_is_the_public_surface_and_stays_light() -> None:
    code = (
        "import json, sys, dialogue_judge.gate as g; "
        "print(json.dumps({'all': sorted(g.__all__), 'missing': [n for n in g.__all__ if not hasattr(g, n)], "
        "'heavy': [m for m in ('judge_api', 'workers', 'sqlalchemy', 'openai', 'anthropic') if m in sys.modules]}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    report = json.loads(proc.stdout)
    assert report["missing"] == []
    assert {"GateConfig", "GateResult", "GateInputError", "run_gate", "run_cli", "parse_aspects"} <= set(report["all"])
    # the judge stack loads when a gate runs, not when the CLI or the pytest plugin imports the package
    assert report["heavy"] == []
