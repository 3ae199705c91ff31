"""Review r56a of 7690fdb (``judge_api.dberrors``): code that classifies database errors on its own and now disagrees
with the shared classification.

Finding (low-medium): the OTLP processor (``judge_api.otlp.intake._step``) looks at ``OperationalError`` only. A
transaction the server ended (25P03, an outage for the API and the workers since 7690fdb) is taken for "a fault of
ours": logged with a stack trace and the monitor left aside for ``BLOCKED_RETRY_S`` (30 s) in this process; while a
deterministic ``OperationalError`` (``cannot_be_retried``: a missing table) is taken for an outage and tried again
at every look (about a second), for ever, as a warning.

Finding (low): the workers' "wait for as long as it takes" (``database_unreachable``) takes every psycopg connect
error for the database away, its message starting "connection failed: ...": a database that does not exist or a
role the server does not know (a misconfiguration no retry mends) is waited for without end, and answered 503 by
the API, where SQLite's equivalent ("unable to open database file") is tried three times, as the docstring of
``database_unreachable`` says it should be ("a database file that cannot be opened").

Both fixed in session 56 (``dberrors.is_outage`` in the processor; the connect refusals are permanent words).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy import exc as sa_exc

from judge_api.dberrors import cannot_be_retried, database_unreachable
from judge_api.otlp import intake
from tests.conftest import PG_ADMIN


class _Driver(Exception):
    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class _Session:
    def rollback(self) -> None:
        pass


def _step_failing_with(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> bool:
    """Run one processor step whose first statement raises ``error``; whether the monitor was left aside."""
    monitor_id = "mon-r56a"

    def raises(*_: Any, **__: Any) -> bool:
        raise error

    monkeypatch.setattr(intake.spans_store, "lock_monitor", raises)
    monkeypatch.setattr(intake, "_blocked", {})
    assert intake._step(_Session(), monitor_id, 10, datetime.now(UTC), None) is None  # type: ignore[arg-type]
    return monitor_id in intake._blocked


def test_a_transaction_the_server_ended_does_not_leave_a_monitor_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """FIXED (7690fdb). 25P03 is the database ending the transaction (dberrors: an outage, the workers wait it out),
    not a fault of this monitor's spans: the next look should try it again, as for an OperationalError."""
    error = sa_exc.InternalError(
        "SELECT monitors ...",
        {},
        _Driver("terminating connection due to idle-in-transaction timeout", "25P03"),
        connection_invalidated=True,
    )
    assert database_unreachable(error)
    assert not _step_failing_with(monkeypatch, error)


def test_a_deterministic_operational_error_leaves_a_monitor_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """FIXED (7690fdb). "no such table" is a bug (dberrors: ``cannot_be_retried``, the API's 500): tried again at
    every look it spins the processor; as any other fault of ours it should leave the monitor aside for a while."""
    error = sa_exc.OperationalError("SELECT ...", {}, sqlite3.OperationalError("no such table: otlp_spans"))
    assert cannot_be_retried(error)
    assert _step_failing_with(monkeypatch, error)


def test_an_outage_does_not_leave_a_monitor_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """HOLDS. The database away (a deadlock, a lost connection): tried again at the next look."""
    error = sa_exc.OperationalError("SELECT ...", {}, _Driver("deadlock detected", "40P01"))
    assert not _step_failing_with(monkeypatch, error)


@pytest.mark.parametrize(
    "url",
    [
        PG_ADMIN.rsplit("/", 1)[0] + "/dj_r56a_no_such_database",
        PG_ADMIN.replace("postgres@", "dj_r56a_no_such_role@"),
    ],
    ids=["database does not exist", "role does not exist"],
)
def test_a_postgresql_misconfiguration_is_not_waited_for_without_end(url: str) -> None:
    """FIXED (7690fdb, low). The server answers, and refuses the connection for good: as SQLite's "unable to open
    database file", not the database away."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with pytest.raises(sa_exc.OperationalError) as caught, engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        engine.dispose()
    assert "does not exist" in str(caught.value.orig)
    assert not database_unreachable(caught.value), str(caught.value.orig)
