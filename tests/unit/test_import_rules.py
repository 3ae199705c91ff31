"""The packages' import rules (docs/architecture.md), checked over the source: a layer never reaches into one it
must not know, also through a lazy import inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
OWN_PACKAGES = {"judge_api", "workers", "dashboard", "dialogue_judge", "judge_simulator"}

# package -> the repository's packages it may import (besides itself)
MAY_IMPORT: dict[str, set[str]] = {
    "judge_simulator": set(),
    "judge_api": set(),
    "workers": {"judge_api"},
    "dashboard": {"dialogue_judge"},
    "dialogue_judge": {"judge_api", "workers", "judge_simulator"},  # the CLI runs the simulator
}


def imported_top_packages(source: Path) -> set[str]:
    """First components of every absolute import in a file, lazy ones included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), filename=str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_package_has_a_rule() -> None:
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")} & (OWN_PACKAGES | {"tests", "bench"})
    assert packages - {"tests", "bench"} == set(MAY_IMPORT)


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_package_imports_only_what_its_rule_allows(package: str) -> None:
    sources = sorted((REPO_ROOT / package).rglob("*.py"))
    assert sources, package
    forbidden = OWN_PACKAGES - MAY_IMPORT[package] - {package}
    offenders = {
        str(source.relative_to(REPO_ROOT)): sorted(imported_top_packages(source) & forbidden) for source in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_scan_sees_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from workers.execute import x\n    import dashboard.app\n", encoding="utf-8")
    assert imported_top_packages(source) == {"workers", "dashboard"}


def test_statistics_are_pure() -> None:
    """judge_api/stats works on DataFrames only: no storage, API, worker or settings import."""
    offenders: dict[str, list[str]] = {}
    for source in sorted((REPO_ROOT / "judge_api" / "stats").rglob("*.py")):
        modules: set[str] = set()
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
        bad = sorted(m for m in modules if m.split(".")[0] in OWN_PACKAGES and not m.startswith("judge_api.stats"))
        if bad:
            offenders[str(source.relative_to(REPO_ROOT))] = bad
    assert offenders == {}
