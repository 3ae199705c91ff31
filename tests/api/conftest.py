"""In-process API fixtures: the real FastAPI app over a real database (SQLite file or PostgreSQL), no Redis.

``api`` builds the app with the environment of the test (auth on or off, limits), and ``keys`` mints API keys in
the same database. ``row_counts`` reads the table sizes so a rejected request can be shown to store nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines, session_scope
from judge_api.migrate import upgrade
from judge_api.repository import rows as rows_module
from judge_api.repository import runs as runs_module
from judge_api.repository import verdicts as verdicts_module

TABLES = (
    "projects",
    "api_keys",
    "runs",
    "items",
    "judgments",
    "provider_batches",
    "provider_batch_judgments",
    "human_ratings",
    "judge_cache",
    "rubric_snapshots",
    "idempotency_keys",
    "generations",
    "label_queue_items",
)
JUDGE = "openai-compatible:sim-judge@http://127.0.0.1:9/v1"  # never called: no worker runs in these tests


def item(i: int = 0, systems: tuple[str, ...] = ("a", "b"), **extra: Any) -> dict[str, Any]:
    return {
        "id": f"item-{i}",
        "dialogue": [
            {"speaker": "user", "text": f"I adopted a dog called Rex {i} years ago.", "session": 1},
            {"speaker": "bot", "text": "How lovely!", "session": 1},
            {"speaker": "user", "text": "Do you remember my dog's name?", "session": 2},
        ],
        "persona": {"user": ["I have a dog called Rex."], "bot": ["I like animals."]},
        "candidates": {s: f"Answer from {s} about Rex." for s in systems},
        **extra,
    }


def run_body(n_items: int = 2, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "items": [item(i) for i in range(n_items)],
        "rubrics": ["rsum-single"],
        "judges": [JUDGE],
        "mode": ["single"],
        "aspects": ["consistency"],
    }
    body.update(overrides)
    return body


def served_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, those of its included routers too (HEAD and OPTIONS left out).

    Since FastAPI 0.137 an included router is one node of ``app.routes`` (no path, no methods), and
    ``fastapi.routing.iter_route_contexts`` flattens the tree; before, ``app.routes`` was flat already."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        routes: list[Any] = list(app.routes)
    else:
        routes = list(iter_route_contexts(app.routes))
    served = []
    for route in routes:
        path = getattr(route, "path", None) or ""
        for method in sorted((getattr(route, "methods", None) or set()) - {"HEAD", "OPTIONS"}):
            served.append((method, path))
    return served


def counts(database_url: str) -> dict[str, int]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return {t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}
    finally:
        engine.dispose()


@dataclass
class Api:
    client: TestClient
    database_url: str
    keys: dict[str, str] = field(default_factory=dict)

    def as_key(self, name: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[name]}"} if name else {}

    def row_counts(self) -> dict[str, int]:
        return counts(self.database_url)

    def create_key(self, project: str, scopes: list[str], name: str) -> str:
        from judge_api.auth import create_key

        with session_scope() as session:
            _, secret = create_key(session, project, name, scopes)
        self.keys[name] = secret
        return secret

    def submit(self, key: str | None = None, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.client.post("/v1/runs", json=body or run_body(), headers=self.as_key(key))
        assert response.status_code == 202, response.text
        return dict(response.json())


ApiFactory = Callable[..., Api]


@pytest.fixture
def api_factory(settings_env: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[ApiFactory]:
    """``api_factory(auth=True, database_url=None, **env)`` -> a started app (lifespan run) and its database."""
    clients: list[TestClient] = []

    def build(auth: bool = False, database_url: str | None = None, **env: str) -> Api:
        url = database_url or f"sqlite:///{tmp_path / 'api.db'}"
        settings_env.setenv("DATABASE_URL", url)
        settings_env.setenv("DJ_AUTH", "true" if auth else "false")
        settings_env.setenv("DJ_RUNS_PER_MINUTE", env.pop("DJ_RUNS_PER_MINUTE", "100000"))
        # with auth on, openai-compatible judges must be allow-listed; JUDGE points at a closed port
        settings_env.setenv("DJ_JUDGE_URL_ALLOWLIST", env.pop("DJ_JUDGE_URL_ALLOWLIST", "http://127.0.0.1:9/v1"))
        for name, value in env.items():
            settings_env.setenv(name, value)
        reset_settings_cache()
        reset_engines()
        upgrade(url)
        from judge_api.app import create_app

        client = TestClient(create_app(), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return Api(client, url)

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def api(api_factory: ApiFactory) -> Api:
    """Auth off (the embedded default): every request is project 'default' with every scope."""
    return api_factory(auth=False)


@pytest.fixture
def secured(api_factory: ApiFactory) -> Api:
    """Auth on, with keys for two projects: alpha (submit+read, read-only, admin) and beta (submit+read)."""
    # callbacks to the example host are allowed without resolving it (no DNS here; judge_api/webhooks.py)
    built = api_factory(auth=True, DJ_CALLBACK_URL_ALLOWLIST="https://hooks.example.org")
    built.create_key("alpha", ["submit", "read"], "alpha")
    built.create_key("alpha", ["read"], "alpha-read")
    built.create_key("alpha", ["admin"], "alpha-admin")
    built.create_key("beta", ["submit", "read"], "beta")
    return built


def _insert_as_sqlite_does(session: Any, built: Any) -> None:
    session.execute(rows_module.INSERT_JUDGMENTS, list(built))


@pytest.fixture(params=["copy", "insert"])
def store_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How judgment rows are stored on PostgreSQL: ``copy`` (``rows.insert_judgment_rows``, as the service does) or
    ``insert`` (the bulk INSERT it sent before session 54, as on SQLite): reviews r54a/r54b compare the two."""
    if request.param == "insert":
        for module in (runs_module, verdicts_module):
            monkeypatch.setattr(module, "insert_judgment_rows", _insert_as_sqlite_does)
    return str(request.param)
