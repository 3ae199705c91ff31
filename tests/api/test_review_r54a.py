"""Review r54a of 9bd3927 (PostgreSQL stores judgment rows with COPY through the raw psycopg connection).

The COPY runs on ``driver_connection``, below SQLAlchemy: a database error it raises is psycopg's own exception
class, not SQLAlchemy's wrapper (``sqlalchemy.exc.IntegrityError`` / ``OperationalError``). Every handler of the
service that turned such an error into a clean answer matches SQLAlchemy's classes:

* ``routers/verdicts.py``: a concurrent import of the same verdicts (``uq_judgments_dedup``) -> 409 "written
  concurrently"; with COPY it is a 500.
* ``errors.py``: a database outage (``DATABASE_OUTAGES``) -> 503 with Retry-After, "never a 500"; with COPY a
  connection lost mid-store is a 500.

Each test runs twice: ``copy`` (the code under review) and ``insert`` (``insert_judgment_rows`` replaced by the
INSERT it replaced, on the same PostgreSQL): the ``insert`` variant passes, which shows the answer changed with COPY.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select, text

from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.repository import verdicts as verdicts_module
from judge_api.schemas import VerdictIn, VerdictSource
from tests.api.conftest import ApiFactory, run_body


def _verdict_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"item_id": f"item-{i}", "system": "a", "judge": "ext", "score": 3, "scale_min": 1, "scale_max": 5}
        for i in range(n)
    ]


def test_a_concurrent_import_of_the_same_verdicts_is_a_409_not_a_500(
    api_factory: ApiFactory, pg_url: str, store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests import the same verdicts at once: both pass the "already stored?" check, the first commits, the
    second's insert hits ``uq_judgments_dedup``. The route promises a 409 (nothing stored, send again)."""
    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(3))["id"]
    real_item_pks_for = verdicts_module.item_pks_for
    raced = [False]

    def the_other_request_commits_first(session: Any, rid: str) -> dict[str, int]:
        # called after the existing-keys check, before the insert: the concurrent request commits here
        if not raced[0]:
            raced[0] = True
            with session_scope() as other:
                run = other.get(Run, rid)
                assert run is not None
                verdicts: list[tuple[list[str | int], VerdictIn]] = [
                    ([k], VerdictIn.model_validate(r)) for k, r in enumerate(_verdict_rows(3))
                ]
                source = VerdictSource(name="other.jsonl", sha256="f" * 64, format="rows")
                verdicts_module.import_verdicts(other, run, verdicts, source)
        return real_item_pks_for(session, rid)

    monkeypatch.setattr(verdicts_module, "item_pks_for", the_other_request_commits_first)
    response = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": _verdict_rows(3)})
    assert raced[0]
    assert response.status_code == 409, (store_path, response.status_code, response.text)
    with session_scope() as session:  # the other request's three, none of ours
        assert session.scalar(select(func.count()).where(Judgment.run_id == run_id, Judgment.judge == "ext")) == 3


def test_a_lock_wait_given_up_while_verdicts_are_stored_is_a_503_not_a_500(
    api_factory: ApiFactory, pg_url: str, store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """errors.py: a database error of SQLAlchemy's ``OperationalError`` family (psycopg's lock timeout, deadlock,
    serialization failure, cancelled statement) is a 503 the client may retry. Here another transaction holds the run's
    row (the ``data_version`` trigger and the foreign key both need it) and the import's lock wait is given up
    (``lock_timeout``: the deterministic stand-in for a deadlock victim, ``DeadlockDetected``, the same family)."""
    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(3))["id"]
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    real = verdicts_module.insert_judgment_rows

    def with_lock_timeout(session: Any, built: Any) -> None:
        session.execute(text("SET LOCAL lock_timeout = '200ms'"))
        real(session, built)

    monkeypatch.setattr(verdicts_module, "insert_judgment_rows", with_lock_timeout)
    with psycopg.connect(admin) as holder:  # a transaction holding the run's row
        holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", [run_id])
        response = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": _verdict_rows(3)})
        holder.rollback()
    assert response.status_code == 503, (store_path, response.status_code, response.text)
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.run_id == run_id, Judgment.judge == "ext")) == 0
