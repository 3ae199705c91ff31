"""The API's layout holds: every route is served by the router named after its resource (a reader finds
``POST /v1/runs`` in ``judge_api/routers/runs.py``), and ``judge_api`` imports no other package of the repository
(the dependency direction is ``dialogue_judge`` -> ``dashboard`` / ``workers`` -> ``judge_api``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fastapi.routing import APIRoute

from judge_api.routers import ROUTERS

REPO_ROOT = Path(__file__).resolve().parents[2]
JUDGE_API = REPO_ROOT / "judge_api"

ROUTE_MODULES = [
    ("GET", "/healthz", "health"),
    ("GET", "/readyz", "health"),
    ("GET", "/metrics", "metrics"),
    ("GET", "/v1/limits", "limits"),
    ("GET", "/v1/rubrics", "rubrics"),
    ("GET", "/v1/rubrics/{rubric_id}/versions", "rubrics"),
    ("GET", "/v1/rubrics/{rubric_id}/versions/{version}", "rubrics"),
    ("POST", "/v1/runs", "runs"),
    ("POST", "/v1/runs/jsonl", "runs"),
    ("POST", "/v1/runs/estimate", "runs"),
    ("GET", "/v1/runs", "runs"),
    ("GET", "/v1/runs/{run_id}", "runs"),
    ("POST", "/v1/runs/{run_id}/retry", "runs"),
    ("POST", "/v1/runs/{run_id}/cancel", "runs"),
    ("DELETE", "/v1/runs/{run_id}", "runs"),
    ("POST", "/v1/runs/prune", "runs"),
    ("GET", "/v1/runs/{run_id}/export", "bundles"),
    ("POST", "/v1/runs/import", "bundles"),
    ("GET", "/v1/runs/{run_id}/judgments", "judgments"),
    ("GET", "/v1/runs/{run_id}/judgments.csv", "judgments"),
    ("GET", "/v1/runs/{run_id}/items", "judgments"),
    ("GET", "/v1/runs/{run_id}/item-scores", "item_aggregates"),
    ("GET", "/v1/runs/{run_id}/order-outcomes", "item_aggregates"),
    ("GET", "/v1/runs/{run_id}/score-deltas", "comparisons"),
    ("GET", "/v1/runs/{run_id}/worse-items", "comparisons"),
    ("GET", "/v1/runs/{run_id}/report", "reports"),
    ("GET", "/v1/runs/{run_id}/agreement", "reports"),
    ("GET", "/v1/runs/{run_id}/facts", "facts"),
    ("POST", "/v1/runs/{run_id}/human-ratings", "ratings"),
    ("GET", "/v1/runs/{run_id}/human-ratings", "ratings"),
    ("POST", "/v1/runs/{run_id}/verdicts", "verdicts"),
    ("POST", "/v1/monitors", "monitors"),
    ("GET", "/v1/monitors", "monitors"),
    ("GET", "/v1/monitors/{monitor_id}", "monitors"),
    ("PATCH", "/v1/monitors/{monitor_id}", "monitors"),
    ("DELETE", "/v1/monitors/{monitor_id}", "monitors"),
    ("POST", "/v1/monitors/{monitor_id}/responses", "monitors"),
    ("GET", "/v1/monitors/{monitor_id}/responses", "monitors"),
    ("GET", "/v1/monitors/{monitor_id}/series", "monitors"),
    ("POST", "/v1/otlp/v1/traces", "otlp"),
    ("GET", "/v1/runs/{run_id}/deliveries", "deliveries"),
    ("GET", "/v1/monitors/{monitor_id}/deliveries", "deliveries"),
    ("GET", "/v1/monitors/{monitor_id}/alerts", "alerts"),
]


def _router_routes() -> dict[tuple[str, str], APIRoute]:
    """(method, path) -> route, over the routers of ``judge_api.routers.ROUTERS``."""
    routes: dict[tuple[str, str], APIRoute] = {}
    for router in ROUTERS:
        for route in router.routes:
            assert isinstance(route, APIRoute), route
            for method in sorted(route.methods or ()):
                assert (method, route.path) not in routes, f"{method} {route.path} is defined twice"
                routes[(method, route.path)] = route
    return routes


@pytest.mark.parametrize(("method", "path", "module"), ROUTE_MODULES)
def test_a_route_lives_in_the_router_named_after_its_resource(method: str, path: str, module: str) -> None:
    route = _router_routes().get((method, path))
    assert route is not None, f"{method} {path} is in no router of judge_api.routers"
    assert route.endpoint.__module__ == f"judge_api.routers.{module}"


def test_every_operation_in_the_schema_comes_from_a_router_of_judge_api_routers() -> None:
    from judge_api.app import create_app

    schema = create_app().openapi()["paths"]
    operations = {(method.upper(), path) for path, item in schema.items() for method in item if method != "parameters"}
    routes = _router_routes()
    assert {key for key, route in routes.items() if route.include_in_schema} == operations
    assert {(method, path) for method, path, _ in ROUTE_MODULES} <= operations
    for route in routes.values():
        assert route.endpoint.__module__.startswith("judge_api.routers."), route.endpoint


def _imported_top_packages(source: Path) -> set[str]:
    """First components of every absolute import in a file, also those inside functions (lazy imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), filename=str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_judge_api_imports_no_other_package_of_the_repository() -> None:
    siblings = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")} - {"judge_api"}
    forbidden = siblings | {"workers", "dashboard", "dialogue_judge", "tests"}
    sources = sorted(JUDGE_API.rglob("*.py"))
    assert JUDGE_API / "routers" / "runs.py" in sources
    assert "judge_api" in _imported_top_packages(JUDGE_API / "routers" / "runs.py")  # the scan sees imports
    offenders = {
        str(source.relative_to(REPO_ROOT)): sorted(_imported_top_packages(source) & forbidden) for source in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}
