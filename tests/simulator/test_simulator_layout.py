"""``judge_simulator`` stands alone, so it serves as test and benchmark equipment for every package and ships as a user
tool without pulling in the service: beyond ``tests/unit/test_import_rules.py`` (no other package of the repository
in its source), it imports only the standard library and the few third-party packages declared below, no relative
import leaves the package, and importing every module at run time loads no other package of the repository."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "judge_simulator"
FIRST_PARTY = {"workers", "judge_api", "dialogue_judge", "dashboard", "tests", "bench", "scripts"}
THIRD_PARTY = {"httpx", "pydantic", "pytest", "starlette", "uvicorn", "yaml"}


def _imports(source: Path) -> tuple[set[str], list[int]]:
    """First components of every absolute import in a file, also those inside functions (lazy imports), and the
    levels of its relative imports."""
    names: set[str] = set()
    levels: list[int] = []
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), filename=str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                levels.append(node.level)
            elif node.module:
                names.add(node.module.split(".")[0])
    return names, levels


def test_judge_simulator_needs_only_the_standard_library_and_its_declared_dependencies() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "app.py" in sources and PACKAGE / "__main__.py" in sources
    assert {"starlette", "pydantic"} <= _imports(PACKAGE / "app.py")[0]  # the scan sees imports ...
    assert "yaml" in _imports(PACKAGE / "script.py")[0]  # ... lazy ones too
    imported = set().union(*(_imports(source)[0] for source in sources))
    assert imported - set(sys.stdlib_module_names) - {"judge_simulator"} <= THIRD_PARTY
    leaving = [str(source.relative_to(REPO_ROOT)) for source in sources if any(n > 1 for n in _imports(source)[1])]
    assert leaving == []  # a relative import of level 2 would reach above judge_simulator


def test_importing_every_module_loads_no_other_package_of_the_repository() -> None:
    """In a fresh interpreter: nothing of the repository's other packages is loaded on the way."""
    modules = sorted(f"judge_simulator.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(FIRST_PARTY)!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert "judge_simulator.app" in modules and "judge_simulator.__main__" in modules
    assert result.stdout.strip() == "[]"
