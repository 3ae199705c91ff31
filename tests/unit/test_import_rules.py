"""The packages' import rules (docs/architecture.md), checked over the source: every row of the architecture table has
a rule here, each rule is checked over every module it covers (lazy imports and type-only imports included, and the
third-party packages of the rows that restrict them), the table's third column says what the rules check, planted
violations of each rule that a wider or neighbouring rule allows are caught, and no import loop exists anywhere in
the repository's packages."""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
OWN_PACKAGES = ("judge_api", "workers", "dashboard", "dialogue_judge", "judge_simulator")
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Rule:
    row: str
    """The first column of the architecture table's row."""
    scopes: tuple[str, ...]
    """The modules the rule covers (a module and everything below it); the most specific rule covering a module
    is the one that applies."""
    may_import: tuple[str, ...]
    """Modules (and everything below them) of the repository this scope may import, besides its own scope."""
    never: tuple[str, ...] = ()
    """Modules below ``may_import`` that are still refused."""
    third_party: tuple[str, ...] | None = None
    """The third-party packages (top-level names) its modules may import besides the standard library; None: any."""


API_LAYER = ("judge_api.app", "judge_api.routers", "judge_api.deps", "judge_api.middleware")
# what the storage layer builds on: definitions and pure code of judge_api, never the API, the broker or settings
REPOSITORY_MAY_IMPORT = (
    "judge_api.models",
    "judge_api.schemas",
    "judge_api.planning",
    "judge_api.rubrics",
    "judge_api.judges",
    "judge_api.reference_metrics",
    "judge_api.facts",
    "judge_api.stats",
    "judge_api.adaptive.economy",
    "judge_api.gcpause",
)
PURE_ADAPTIVE = (
    "judge_api.adaptive.ranking",
    "judge_api.adaptive.planner",
    "judge_api.adaptive.sampling",
    "judge_api.adaptive.replay",
)

NUMERIC = ("numpy", "scipy", "pandas")  # the third-party packages of pure statistics

RULES: tuple[Rule, ...] = (
    Rule("judge_api/", ("judge_api",), ()),
    Rule("judge_api/repository/", ("judge_api.repository",), REPOSITORY_MAY_IMPORT),
    Rule("judge_api/adaptive/", ("judge_api.adaptive",), ("judge_api",), never=API_LAYER),
    Rule("judge_api/adaptive/ (pure)", PURE_ADAPTIVE, (*PURE_ADAPTIVE, "judge_api.stats"), third_party=NUMERIC),
    Rule("judge_api/stats/", ("judge_api.stats",), (), third_party=NUMERIC),
    Rule("workers/", ("workers",), ("judge_api",), never=API_LAYER),
    Rule("judge_simulator/", ("judge_simulator",), ()),
    Rule("dialogue_judge/", ("dialogue_judge",), ("judge_api", "workers", "judge_simulator")),
    Rule("dashboard/", ("dashboard",), ("dialogue_judge.client",)),
)
# rows whose content is data (no Python at all) or that may import anything
DATA_ROWS = {"rubrics/": REPO_ROOT / "rubrics", "strategies/": REPO_ROOT / "strategies"}
FREE_ROWS = {"bench/, tests/, scripts/"}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def repository_sources() -> dict[str, tuple[str, bool]]:
    """module name -> (source, is a package) for every module of the repository's packages (a fresh copy each call,
    so a test may plant modules in it)."""
    return dict(_read_sources())


@functools.cache
def _read_sources() -> dict[str, tuple[str, bool]]:
    out: dict[str, tuple[str, bool]] = {}
    for package in OWN_PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            out[module_name(path)] = (path.read_text(encoding="utf-8"), path.name == "__init__.py")
    return out


def imports_of(module: str, source: str, is_package: bool, known: set[str] | frozenset[str]) -> set[str]:
    """The repository modules a module imports: every import statement, lazy and type-only ones included;
    ``from pkg import sub`` counts as ``pkg.sub`` (not ``pkg``) when ``sub`` is a module."""
    found: set[str] = set()
    for base, names in _import_statements(module, source, is_package):
        if names is None:
            targets = [base]
        else:
            submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in known]
            targets = submodules if len(submodules) == len(names) else [*submodules, base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


@functools.cache
def _import_statements(module: str, source: str, is_package: bool) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """(module, None) for ``import module``; (base, names) for ``from base import names``, relative bases resolved."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[str, tuple[str, ...] | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.append((base, tuple(alias.name for alias in node.names)))
    return tuple(out)


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    known = frozenset(sources)
    return {name: imports_of(name, source, is_pkg, known) for name, (source, is_pkg) in sources.items()}


def rule_for(module: str) -> Rule | None:
    best: tuple[int, Rule] | None = None
    for rule in RULES:
        for scope in rule.scopes:
            if _under(module, scope) and (best is None or len(scope) > best[0]):
                best = (len(scope), rule)
    return best[1] if best else None


def allowed(rule: Rule, module: str, target: str) -> bool:
    own_scope = next(scope for scope in sorted(rule.scopes, key=len, reverse=True) if _under(module, scope))
    if _under(target, own_scope) or any(_under(target, scope) for scope in rule.scopes):
        return True
    if any(_under(target, refused) for refused in rule.never):
        return False
    return any(_under(target, prefix) for prefix in rule.may_import)


def violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for module, targets in graph.items():
        rule = rule_for(module)
        assert rule is not None, f"no rule covers {module}"
        bad = sorted(t for t in targets if not allowed(rule, module, t))
        if bad:
            out[module] = bad
    return out


def third_party_imports(module: str, source: str, is_package: bool) -> set[str]:
    """The top-level names of what a module imports from outside the standard library and the five packages."""
    tops = {base.split(".")[0] for base, _ in _import_statements(module, source, is_package)}
    return {top for top in tops if top and top not in OWN_PACKAGES and top not in sys.stdlib_module_names}


def third_party_violations(sources: dict[str, tuple[str, bool]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for module, (source, is_package) in sources.items():
        rule = rule_for(module)
        if rule is None or rule.third_party is None:
            continue
        bad = sorted(top for top in third_party_imports(module, source, is_package) if top not in rule.third_party)
        if bad:
            out[module] = bad
    return out


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))
    return loops


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(repository_sources())


def architecture_table() -> dict[str, str]:
    """The table under "Packages" in docs/architecture.md: its first column (backticks removed) -> its third column
    (what the row may import)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    cells = [[cell.strip() for cell in row.split("|")[1:-1]] for row in rows[1:]]
    return {cell[0].replace("`", ""): cell[2] for cell in cells}


def resolve(name: str, known: set[str] | frozenset[str]) -> str | None:
    """A module the table names: as written, or short for a module of ``judge_api``."""
    for candidate in (name, f"judge_api.{name}"):
        if candidate in known:
            return candidate
    return None


def cell_problems(rule: Rule, cell: str, known: set[str] | frozenset[str]) -> list[str]:
    """Where the third column of a rule's row and the rule part. The cell reads: the modules the row may import,
    then (after "never" or "but not") modules it refuses, then (after "third-party:") the only third-party
    packages its modules may import."""
    modules_part, _, third_part = cell.partition("third-party:")
    match = re.search(r"\bnever\b|\bbut not\b", modules_part)
    allowed_part, refused_part = (
        (modules_part[: match.start()], modules_part[match.start() :]) if match else (modules_part, "")
    )
    problems: list[str] = []
    probe = next(m for m in sorted(known) if rule_for(m) is rule)  # a real module of the row
    named_allowed: set[str] = set()
    for part, should_allow in ((allowed_part, True), (refused_part, False)):
        for name in re.findall(r"`([\w.]+)`", part):
            module = resolve(name, known)
            if module is None:
                problems.append(f"`{name}` names no module")
                continue
            is_base = any(_under(entry, module) and entry != module for entry in rule.may_import)
            if should_allow and not (allowed(rule, probe, module) or is_base):
                problems.append(f"`{name}` is said to be allowed but the rule refuses {module}")
            if not should_allow and allowed(rule, probe, module):
                problems.append(f"`{name}` is said to be refused but the rule allows {module}")
            if should_allow:
                named_allowed.add(module)
    for entry in rule.may_import:
        if entry not in named_allowed and not any(_under(entry, scope) for scope in rule.scopes):
            problems.append(f"{entry} may be imported but the table does not say so")
    for entry in rule.never:
        if not any(_under(entry, resolve(name, known) or name) for name in re.findall(r"`([\w.]+)`", refused_part)):
            problems.append(f"{entry} is refused but the table does not say so")
    documented_third = tuple(re.findall(r"`([\w.]+)`", third_part)) if third_part else None
    if documented_third != rule.third_party:
        problems.append(f"third-party: the table says {documented_third}, the rule {rule.third_party}")
    return problems


def test_every_row_of_the_architecture_table_has_a_rule() -> None:
    documented = set(architecture_table())
    assert documented == {rule.row for rule in RULES} | set(DATA_ROWS) | FREE_ROWS


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.row)
def test_the_table_says_what_the_rule_checks(rule: Rule, graph: dict[str, set[str]]) -> None:
    assert cell_problems(rule, architecture_table()[rule.row], frozenset(graph)) == []


def test_a_table_that_claims_more_than_the_rule_is_caught(graph: dict[str, set[str]]) -> None:
    known = frozenset(graph)
    rows = {rule.row: rule for rule in RULES}
    table = architecture_table()
    repository = rows["judge_api/repository/"]
    said_allowed = table[repository.row].replace("`adaptive.economy`;", "`adaptive.economy`, `config`;")
    assert cell_problems(repository, said_allowed, known) == [
        "`config` is said to be allowed but the rule refuses judge_api.config"
    ]
    unnamed = table[repository.row].replace("`facts`, ", "")
    assert cell_problems(repository, unnamed, known) == [
        "judge_api.facts may be imported but the table does not say so"
    ]
    workers = rows["workers/"]
    assert cell_problems(workers, table[workers.row].replace("`middleware`", "`logs`"), known) == [
        "`logs` is said to be refused but the rule allows judge_api.logs",
        "judge_api.middleware is refused but the table does not say so",
    ]
    stats = rows["judge_api/stats/"]
    assert cell_problems(stats, "numpy/scipy/pandas only", known) == [
        "third-party: the table says None, the rule ('numpy', 'scipy', 'pandas')"
    ]


def test_every_module_is_covered_by_a_rule(graph: dict[str, set[str]]) -> None:
    assert [module for module in graph if rule_for(module) is None] == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.row)
def test_the_rule_holds(rule: Rule, graph: dict[str, set[str]]) -> None:
    covered = {module: targets for module, targets in graph.items() if rule_for(module) is rule}
    assert covered, f"the rule for {rule.row} covers no module"
    assert violations(covered) == {}
    sources = {module: source for module, source in repository_sources().items() if module in covered}
    assert third_party_violations(sources) == {}


FREE_ROW = "bench/, tests/, scripts/"
# per row: imports it refuses, each with a row that allows it, so each plant tests what sets this row apart (a
# module every row refuses would pass for any rule)
PLANTED: dict[str, tuple[tuple[str, str], ...]] = {
    "judge_api/": (
        ("workers.execute", "dialogue_judge/"),
        ("judge_simulator.app", "dialogue_judge/"),
        ("dialogue_judge.client", "dashboard/"),
        ("dashboard.app", FREE_ROW),
    ),
    "judge_api/repository/": (
        ("judge_api.routers.runs", "judge_api/"),
        ("judge_api.app", "judge_api/"),
        ("judge_api.deps", "judge_api/"),
        ("judge_api.middleware", "judge_api/"),
        ("judge_api.sweeper", "judge_api/"),
        ("judge_api.queue", "judge_api/"),
        ("judge_api.config", "judge_api/"),
        ("judge_api.db", "judge_api/"),
        ("judge_api.adaptive.steps", "judge_api/"),
    ),
    "judge_api/adaptive/": (
        ("judge_api.routers.runs", "judge_api/"),
        ("judge_api.app", "judge_api/"),
        ("judge_api.deps", "judge_api/"),
        ("judge_api.middleware", "judge_api/"),
    ),
    "judge_api/adaptive/ (pure)": (
        ("judge_api.repository.plans", "judge_api/adaptive/"),
        ("judge_api.adaptive.steps", "judge_api/adaptive/"),
        ("judge_api.adaptive.economy", "judge_api/adaptive/"),
        ("judge_api.config", "judge_api/adaptive/"),
        ("judge_api.db", "judge_api/adaptive/"),
        ("judge_api.models", "judge_api/adaptive/"),
    ),
    "judge_api/stats/": (
        ("judge_api.models", "judge_api/"),
        ("judge_api.schemas", "judge_api/"),
        ("judge_api.config", "judge_api/"),
        ("judge_api.adaptive.ranking", "judge_api/"),
        ("judge_api.repository.frames", "judge_api/"),
    ),
    "workers/": (
        ("judge_api.routers.runs", "dialogue_judge/"),
        ("judge_api.app", "dialogue_judge/"),
        ("judge_api.deps", "dialogue_judge/"),
        ("judge_api.middleware", "dialogue_judge/"),
        ("dialogue_judge.client", "dashboard/"),
        ("dashboard.app", FREE_ROW),
    ),
    "judge_simulator/": (
        ("judge_api.models", "workers/"),
        ("workers.clients", "dialogue_judge/"),
        ("dialogue_judge.client", "dashboard/"),
    ),
    "dialogue_judge/": (("dashboard.app", FREE_ROW),),
    "dashboard/": (
        ("dialogue_judge.cli", "dialogue_judge/"),
        ("judge_api.schemas", "workers/"),
        ("workers.execute", "dialogue_judge/"),
    ),
}
# per row restricting third-party packages: packages it refuses that the wider row allows
PLANTED_THIRD_PARTY: dict[str, tuple[tuple[str, str], ...]] = {
    "judge_api/stats/": (("pydantic", "judge_api/"), ("sqlalchemy", "judge_api/")),
    "judge_api/adaptive/ (pure)": (("sqlalchemy", "judge_api/adaptive/"), ("redis", "judge_api/adaptive/")),
}


def row_allows(row: str, target: str, known: set[str] | frozenset[str]) -> bool:
    if row == FREE_ROW:
        return True
    rule = next(rule for rule in RULES if rule.row == row)
    probe = next(module for module in sorted(known) if rule_for(module) is rule)
    return allowed(rule, probe, target)


def planting(target: str, lazy: bool) -> str:
    """An import of ``target`` to add to a module: inside a function, or type-only as ``from parent import leaf``."""
    if lazy:
        return f"\n\ndef _planted() -> None:\n    import {target}\n"
    parent, _, leaf = target.rpartition(".")
    statement = f"from {parent} import {leaf}" if parent else f"import {target}"
    return f"\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    {statement}\n"


def test_every_rule_has_planted_violations() -> None:
    assert set(PLANTED) == {rule.row for rule in RULES}
    assert set(PLANTED_THIRD_PARTY) == {rule.row for rule in RULES if rule.third_party is not None}


@pytest.mark.parametrize(
    ("row", "target", "allowed_by"),
    [(row, target, by) for row, plants in PLANTED.items() for target, by in plants],
    ids=lambda value: str(value),
)
@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "type-only"])
def test_a_planted_violation_of_the_row_is_caught(
    row: str, target: str, allowed_by: str, lazy: bool, graph: dict[str, set[str]]
) -> None:
    """The import added to a real module of the row fails the check, though ``allowed_by`` allows it."""
    known = frozenset(graph)
    assert target in known, f"{target} is no module of the repository"
    assert row_allows(allowed_by, target, known), f"{allowed_by} refuses {target} too: the plant sets nothing apart"
    rule = next(rule for rule in RULES if rule.row == row)
    host = next(module for module in sorted(graph) if rule_for(module) is rule and target not in graph[module])
    sources = repository_sources()
    source, is_package = sources[host]
    sources[host] = (source + planting(target, lazy), is_package)
    assert violations(import_graph(sources)) == {host: [target]}


@pytest.mark.parametrize(
    ("row", "package", "allowed_by"),
    [(row, package, by) for row, plants in PLANTED_THIRD_PARTY.items() for package, by in plants],
    ids=lambda value: str(value),
)
def test_a_planted_third_party_import_of_the_row_is_caught(
    row: str, package: str, allowed_by: str, graph: dict[str, set[str]]
) -> None:
    wider = next(rule for rule in RULES if rule.row == allowed_by)
    assert wider.third_party is None or package in wider.third_party
    rule = next(rule for rule in RULES if rule.row == row)
    host = next(module for module in sorted(graph) if rule_for(module) is rule)
    sources = repository_sources()
    source, is_package = sources[host]
    sources[host] = (source + f"\n\ndef _planted() -> None:\n    from {package} import thing\n", is_package)
    assert third_party_violations(sources) == {host: [package]}


@pytest.mark.parametrize("row", sorted(DATA_ROWS))
def test_data_rows_hold_no_code(row: str) -> None:
    assert sorted(DATA_ROWS[row].rglob("*.py")) == []


def test_no_import_loop(graph: dict[str, set[str]]) -> None:
    assert import_loops(graph) == []


def test_a_planted_loop_is_caught() -> None:
    sources = repository_sources()
    before = import_loops(import_graph(sources))
    sources["workers.loop_a"] = ("from workers import loop_b\n", False)
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import workers.loop_a\n"
    sources["workers.loop_b"] = (type_only, False)
    after = import_loops(import_graph(sources))
    assert [loop for loop in after if loop not in before] == [["workers.loop_a", "workers.loop_b"]]


def test_the_scan_sees_lazy_relative_and_type_only_imports() -> None:
    known = {
        "pkg",
        "pkg.a",
        "pkg.b",
        "pkg.sub",
        "pkg.sub.c",
        "workers",
        "workers.execute",
        "dashboard",
        "dashboard.app",
    }
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import a\n"
        "from .sub.c import thing\n"
        "if TYPE_CHECKING:\n    from pkg.b import B\n"
        "def f():\n    from workers.execute import x\n    import dashboard.app\n"
    )
    assert imports_of("pkg.m", source, False, known) == {
        "pkg.a",
        "pkg.sub.c",
        "pkg.b",
        "workers.execute",
        "dashboard.app",
    }


# -- the report: computed, then rendered -----------------------------------------------------------------------------
REPORT_RENDERERS = "judge_api.stats.render"


def renderer_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The statistics modules that import a module of the report's renderers; the package's ``__init__`` re-exports
    them and is the one exception."""
    out: dict[str, list[str]] = {}
    for module, targets in graph.items():
        if not _under(module, "judge_api.stats") or _under(module, REPORT_RENDERERS) or module == "judge_api.stats":
            continue
        found = sorted(target for target in targets if _under(target, REPORT_RENDERERS))
        if found:
            out[module] = found
    return out


def test_the_report_is_computed_without_its_renderers(graph: dict[str, set[str]]) -> None:
    assert renderer_imports(graph) == {}
    # the one arrow between them runs from rendering to computing
    assert "judge_api.stats.report" in graph["judge_api.stats.render.tables"]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "type-only"])
def test_a_planted_renderer_import_is_caught(lazy: bool) -> None:
    sources = repository_sources()
    for host in ("judge_api.stats.report", "judge_api.stats.scores"):
        source, is_package = sources[host]
        sources[host] = (source + planting("judge_api.stats.render.formats", lazy), is_package)
    assert renderer_imports(import_graph(sources)) == {
        "judge_api.stats.report": ["judge_api.stats.render.formats"],
        "judge_api.stats.scores": ["judge_api.stats.render.formats"],
    }


# -- the judge path: layers, arrows one way ----------------------------------------------------------------------------
# workers/execute.py split into modules of one responsibility each (issue 26, rooms); docs/architecture.md draws the
# layers. A module of a layer imports the judge path's modules of lower layers only, so the pieces cannot knot again.
JUDGE_PATH_LAYERS: tuple[tuple[str, ...], ...] = (
    ("workers.judgecache", "workers.billing", "workers.verdicts", "workers.stages", "workers.keywait"),
    ("workers.retries", "workers.dispatch"),
    ("workers.asking",),
    ("workers.execute",),
    ("workers.batches",),
)


def judge_path_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The judge path's modules that import one of its modules of the same or a higher layer."""
    layer_of = {module: depth for depth, layer in enumerate(JUDGE_PATH_LAYERS) for module in layer}
    out: dict[str, list[str]] = {}
    for module, depth in layer_of.items():
        found = sorted(target for target in graph.get(module, ()) if layer_of.get(target, -1) >= depth)
        if found:
            out[module] = found
    return out


def test_the_judge_path_imports_one_way(graph: dict[str, set[str]]) -> None:
    assert [module for layer in JUDGE_PATH_LAYERS for module in layer if module not in graph] == []
    assert judge_path_violations(graph) == {}
    # the arrows the layers are drawn from exist
    assert {"workers.asking", "workers.dispatch"} <= graph["workers.execute"]
    assert "workers.retries" in graph["workers.asking"]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "type-only"])
def test_a_planted_judge_path_import_is_caught(lazy: bool) -> None:
    """An import up the layers, or within a layer, fails though the workers' row allows it (billing importing
    verdicts forms no loop, so the loop test alone would not catch it)."""
    sources = repository_sources()
    plants = {
        "workers.stages": "workers.execute",
        "workers.billing": "workers.verdicts",
        "workers.dispatch": "workers.asking",
        "workers.execute": "workers.batches",
    }
    for host, target in plants.items():
        source, is_package = sources[host]
        sources[host] = (source + planting(target, lazy), is_package)
    assert judge_path_violations(import_graph(sources)) == {host: [target] for host, target in plants.items()}


# -- where SQL is written --------------------------------------------------------------------------------------------
SQL_CONSTRUCTS = {"select", "insert", "update", "delete", "text", "func", "exists", "case"}
# modules outside judge_api/repository that build SQL statements themselves; docs/architecture.md names each, with why
SQL_OUTSIDE_REPOSITORY = {
    "judge_api.auth",
    "judge_api.operations",
    "judge_api.routers.health",
    "judge_api.sweeper",
    "workers.asking",
    "workers.dbwait",
    "dialogue_judge.gate.standalone",
    "dialogue_judge.importers",
}
SQL_HOME = ("judge_api.repository", "judge_api.models", "judge_api.db", "judge_api.migrate")


def sql_writers(sources: dict[str, tuple[str, bool]]) -> set[str]:
    """Modules that import a statement constructor of SQLAlchemy (lazy imports included)."""
    out: set[str] = set()
    for module, (source, _) in sources.items():
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[0] == "sqlalchemy"
                and {alias.name for alias in node.names} & SQL_CONSTRUCTS
            ):
                out.add(module)
    return out


def test_sql_is_written_only_where_the_map_says() -> None:
    outside = {m for m in sql_writers(repository_sources()) if not any(_under(m, home) for home in SQL_HOME)}
    assert outside == SQL_OUTSIDE_REPOSITORY


def test_the_map_names_every_module_that_writes_sql_outside_the_repository() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    paragraph = text.split("SQL outside the repository", 1)[1].split("\n\n", 1)[0]
    named = {m.replace("/", ".").removesuffix(".py") for m in re.findall(r"`([\w/]+\.py)`", paragraph)}
    assert named == SQL_OUTSIDE_REPOSITORY


def test_a_planted_sql_writer_is_caught() -> None:
    sources = repository_sources()
    before = sql_writers(sources)
    sources["judge_api.routers.planted"] = ("def f():\n    from sqlalchemy import select\n", False)
    assert sql_writers(sources) - before == {"judge_api.routers.planted"}


MAX_MODULE_LINES = 800


def test_no_module_of_the_service_is_over_800_lines() -> None:
    """A module past 800 lines is split by what it holds (as ``judge_api/schemas/`` is, by resource)."""
    long = {
        str(path.relative_to(REPO_ROOT)): n
        for package in OWN_PACKAGES
        for path in (REPO_ROOT / package).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
