"""A transaction the server ends (``idle_in_transaction_session_timeout``, ``transaction_timeout``) is a 503 the
client may retry, nothing stored, as a lost connection is (errors.py): never a 500. Every store path (COPY, INSERT)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select, text

from judge_api.db import session_scope
from judge_api.errors import install_exception_handlers
from judge_api.models import Judgment, Run
from judge_api.repository import runs as runs_module
from judge_api.repository import verdicts as verdicts_module
from tests.api.conftest import ApiFactory, run_body


def _idle_past_the_timeout(module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the rows are stored the transaction sits idle (the route's Python work) past a short server timeout."""
    real = module.insert_judgment_rows

    def idle_then_store(session: Any, rows: Any) -> None:
        session.execute(text("SET LOCAL idle_in_transaction_session_timeout = '200ms'"))
        time.sleep(0.8)
        real(session, rows)

    monkeypatch.setattr(module, "insert_judgment_rows", idle_then_store)


def test_an_import_whose_transaction_the_server_ended_is_a_503(
    api_factory: ApiFactory, pg_url: str, store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(3))["id"]
    _idle_past_the_timeout(verdicts_module, monkeypatch)
    rows = [
        {"item_id": f"item-{i}", "system": "a", "judge": "ext", "score": 3, "scale_min": 1, "scale_max": 5}
        for i in range(3)
    ]
    response = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": rows})
    assert response.status_code == 503, (store_path, response.status_code, response.text)
    assert response.headers["Retry-After"] and "nothing was stored" in response.json()["detail"]
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.run_id == run_id, Judgment.judge == "ext")) == 0
    monkeypatch.undo()
    again = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": rows})  # the pool recovers
    assert again.status_code in (200, 201), again.text


def test_a_run_whose_transaction_the_server_ended_is_a_503_and_not_stored(
    api_factory: ApiFactory, pg_url: str, store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = api_factory(database_url=pg_url)
    with session_scope() as session:
        before = session.scalar(select(func.count()).select_from(Run))
    _idle_past_the_timeout(runs_module, monkeypatch)
    response = api.client.post("/v1/runs", json=run_body(3))
    assert response.status_code == 503, (store_path, response.status_code, response.text)
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == before
    monkeypatch.undo()
    assert api.client.post("/v1/runs", json=run_body(3)).status_code in (200, 201, 202)


class _DriverError(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(f"driver error {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (sa_exc.InternalError("SELECT 1", None, _DriverError("25P03")), 503),  # idle_in_transaction_session_timeout
        (sa_exc.InternalError("SELECT 1", None, _DriverError("25P04")), 503),  # transaction_timeout
        (sa_exc.OperationalError("SELECT 1", None, _DriverError("57P01")), 503),  # a shutdown: by its class
        (sa_exc.InternalError("SELECT 1", None, _DriverError("XX000"), connection_invalidated=True), 503),
        (sa_exc.InternalError("SELECT 1", None, _DriverError("XX000")), 500),  # a server's internal error: a bug
        (sa_exc.ProgrammingError("SELECT nope", None, _DriverError("42703")), 500),  # a query's bug stays a 500
        (sa_exc.DataError("SELECT 1", None, _DriverError(None)), 500),
        (sa_exc.DataError("SELECT 1", None, _DriverError("25P03")), 500),  # only an InternalError is looked into
    ],
)
def test_which_database_errors_are_a_503(error: Exception, status: int) -> None:
    app = FastAPI()
    install_exception_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise error

    response = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert response.status_code == status, response.text
    if status == 503:
        assert response.headers["Retry-After"] and "nothing was stored" in response.json()["detail"]
