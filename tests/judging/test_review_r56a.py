"""Review r56a of 7690fdb (``judge_api.dberrors``): the workers' side, on a real PostgreSQL server where the error can
be caused for real (``idle_in_transaction_session_timeout`` ends the transaction: psycopg's
``IdleInTransactionSessionTimeout``, SQLSTATE 25P03, an ``InternalError`` with the connection invalidated).

Held: a verdict write whose transaction the server ends is retried and written once, its paid call counted once.

Findings (tests that failed on 7690fdb, all fixed in session 56 by judge_api.dberrors.hand_back / is_outage):

1. ``VerdictWriter._count_lost`` retries ``claims.add_unused_calls`` on ``OperationalError``/``InterfaceError``
   only: a transaction the server ended (25P03, the very error 7690fdb teaches the writer to wait out) escapes,
   ``_finish`` logs it, and the provider calls the lost claim paid for are never recorded (its stash is already
   released, nothing asks again).
2. Celery's ``DURABLE_TASK`` retries ``OperationalError``/``InterfaceError``/``HandedBack`` but not the
   ``InternalError`` that ``dberrors`` now calls the database being away: a 25P03 in ``generate`` or
   ``poll_batches`` (or leaving ``run_batch`` once its gate gives up) fails the task, which ``acks_late``
   then acknowledges.
3. A transaction the server ends on every try (``transaction_timeout`` below the group's write time, an idle step
   inside the write longer than ``idle_in_transaction_session_timeout``) is retried for as long as it takes with the
   same group: the one writer thread of the process never takes another group (before 7690fdb the callers got the
   error at once and handed their judgments back).
4. ``workers.asking._ask`` hands a judgment back on ``OperationalError``/``InterfaceError`` only: a transaction the
   server ended while the judgment is being asked (its claim check, its cache reads) stores the judgment ``failed``
   ("internal error: InternalError ..."), for good.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, update
from sqlalchemy.exc import InternalError

from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, utcnow
from judge_api.repository import claims
from workers.singleflight import LocalSingleFlight
from workers.writer import VerdictWrite, VerdictWriter

from .harness import Harness
from .test_verdict_writes import done, make_run


@pytest.fixture
def pg_harness(harness: Harness, pg_url: str) -> Iterator[Harness]:
    harness.monkeypatch.setenv("DATABASE_URL", pg_url)
    harness.build()
    yield harness


@contextmanager
def server_ends_the_transaction_at(engine: Engine, marker: str) -> Iterator[list[str]]:
    """The first statement containing ``marker`` finds its transaction ended by the server: the transaction is set a
    100 ms ``idle_in_transaction_session_timeout`` and left idle past it, so the statement gets PostgreSQL's real
    FATAL 25P03 (psycopg's ``IdleInTransactionSessionTimeout``) and the connection is gone."""
    fired: list[str] = []

    def idle_past_the_timeout(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if not fired and marker in statement:
            fired.append(statement)
            cursor.execute("SET LOCAL idle_in_transaction_session_timeout = '100ms'")
            time.sleep(0.6)

    event.listen(engine, "before_cursor_execute", idle_past_the_timeout)
    try:
        yield fired
    finally:
        event.remove(engine, "before_cursor_execute", idle_past_the_timeout)


def _row(judgment_id: int) -> Judgment:
    with session_scope() as session:
        return session.execute(select(Judgment).where(Judgment.id == judgment_id)).scalar_one()


def test_a_verdict_write_whose_transaction_the_server_ended_is_written_once(pg_harness: Harness) -> None:
    """HOLDS. The real 25P03 in the middle of ``claims.write_verdicts`` (after the UPDATE, before the commit): the
    writer retries the group, the verdict is written once and its paid call counted once."""
    ids = make_run(pg_harness, 1)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, sleep=lambda _: None)
    with server_ends_the_transaction_at(get_engine(), "UPDATE judgments SET") as fired:
        written = writer.submit(VerdictWrite(ids[0], token, {**done(70.0), "cost_usd": 0.25})).result(timeout=20)
    assert fired and written is True
    row = _row(ids[0])
    assert (row.status, row.score, row.provider_calls, row.cost_usd) == ("done", 70.0, 1, 0.25)


def test_a_lost_claims_paid_calls_are_counted_when_the_server_ends_the_count_transaction(pg_harness: Harness) -> None:
    """FIXED (7690fdb, finding 1). Worker A's claim lapsed and B wrote the judgment; A's two paid calls are added
    to the row by ``claims.add_unused_calls``. The server ends that transaction once (25P03, a real one): the writer
    retries only ``OperationalError``/``InterfaceError`` there, so the InternalError is logged by ``_finish`` and the
    calls are never counted (the run's provider_calls and cost stay below what the provider billed)."""
    from workers.stash import LocalReplyStash

    ids = make_run(pg_harness, 1)
    token_a, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    with session_scope() as session:  # A's lease lapses and B takes the judgment over
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(claimed_at=utcnow().replace(year=2000)))
    token_b, taken = claims.claim_many(get_engine(), ids, lease_s=600)
    assert taken == set(ids)
    writer = VerdictWriter(
        get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, stash=LocalReplyStash(), sleep=lambda _: None
    )
    assert writer.submit(VerdictWrite(ids[0], token_b, {**done(60.0), "cost_usd": 0.5})).result(timeout=10) is True
    with server_ends_the_transaction_at(get_engine(), "UPDATE runs SET data_version") as fired:
        lost = writer.submit(VerdictWrite(ids[0], token_a, {**done(70.0), "provider_calls": 2, "cost_usd": 0.25}))
        assert lost.result(timeout=20) is False
    assert fired, "add_unused_calls did not run"
    row = _row(ids[0])
    assert (row.status, row.score, row.provider_calls, row.cost_usd) == ("done", 60.0, 3, 0.75)


class _TransactionTimeout(Exception):
    sqlstate = "25P04"  # psycopg's TransactionTimeout (PostgreSQL 17's transaction_timeout)


def test_a_transaction_the_server_ends_on_every_try_is_not_retried_forever(
    pg_harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (7690fdb, finding 3). The group's write always outlasts the server's ``transaction_timeout``
    (deterministic: the same group, the same statements, every try): 25P04 is retried for as long as it takes, the
    caller is never answered and the process's one writer thread takes no other group. Here the server relents
    after 30 tries; a bounded number of tries (then the judgments handed back, as any other repeated error) is
    expected, as for ``_PERMANENT_TRIES``."""
    ids = make_run(pg_harness, 1)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    real_write = claims.write_verdicts
    tries: list[int] = []

    def ended_every_time(*args: Any, **kwargs: Any) -> list[bool]:
        tries.append(1)
        if len(tries) <= 30:
            raise InternalError("UPDATE judgments ...", {}, _TransactionTimeout("canceling statement due to timeout"))
        return real_write(*args, **kwargs)

    monkeypatch.setattr(claims, "write_verdicts", ended_every_time)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, sleep=lambda _: None)
    future = writer.submit(VerdictWrite(ids[0], token, done(1.0)))
    with contextlib.suppress(InternalError):  # handed back: the task retries the judgment later
        future.result(timeout=20)
    assert len(tries) <= 10, f"the same group was tried {len(tries)} times"


class _IdleTimeout(Exception):
    sqlstate = "25P03"


def test_celery_retries_a_task_whose_transaction_the_server_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """FIXED (7690fdb, finding 2). The ``generate`` task (one response of a run with systems) meets a transaction
    the server ended (25P03): an ``OperationalError`` outage is retried by Celery (``autoretry_for``), but the
    ``InternalError`` that dberrors calls the database being away fails the task, which ``acks_late`` acknowledges
    (the same for ``poll_batches``, and for ``judge``/``judge_batch`` once ``run_batch``'s gate gives up)."""
    from workers import celery_app, runtime

    calls: list[int] = []

    def generate_stored(generation_id: int, *_: Any) -> str:
        calls.append(generation_id)
        if len(calls) == 1:
            orig = _IdleTimeout("terminating connection due to idle-in-transaction timeout")
            raise InternalError("UPDATE generations ...", {}, orig, connection_invalidated=True)
        return "done"

    engine = type("Engine", (), {"settings": None, "sessions": None, "limiter": None, "stash": None})()
    monkeypatch.setattr(runtime, "engine", lambda: engine)
    monkeypatch.setattr(celery_app, "generate_stored", generate_stored)
    result = celery_app.generate.apply(args=[7])
    assert (result.state, calls) == ("SUCCESS", [7, 7]), (result.state, result.result)


def test_a_transaction_the_server_ended_mid_judgment_is_not_a_failed_verdict(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (7690fdb, finding 4). ``workers.asking._ask`` hands a judgment back when the database goes away
    mid-judgment, but it recognises ``OperationalError``/``InterfaceError`` only: the check that the claim still
    holds before the provider call (``claims.claim_holds``) meeting a transaction the server ended (25P03/25P04,
    "the database away" for dberrors and run_batch) falls into "a bug must not leave the judgment claimed forever":
    the judgment is stored ``failed`` ("internal error: InternalError"), for good, instead of waiting for the
    database as run_batch does."""
    import sys

    ids = make_run(harness, 1)
    real = claims.claim_holds
    raised: list[int] = []

    def ended_once_while_asking(*args: Any, **kwargs: Any) -> Any:
        if not raised and sys._getframe(1).f_code.co_filename.endswith("asking.py"):
            raised.append(1)
            orig = _IdleTimeout("terminating connection due to idle-in-transaction timeout")
            raise InternalError("SELECT judgments ...", {}, orig, connection_invalidated=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(claims, "claim_holds", ended_once_while_asking)
    status = harness.engine.judge(ids[0])
    assert raised, "the claim was not checked while asked"
    row = _row(ids[0])
    assert (status, row.status) == ("done", "done"), (status, row.status, row.error)
