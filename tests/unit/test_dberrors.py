"""Which database errors are an outage (API: 503, workers: wait) and which a bug (API: 500, workers: hand back):
``judge_api.dberrors``, table-driven over the drivers' real classes and messages (session 56: a deterministic
error the drivers raise as ``OperationalError`` was a 503 "retry shortly", so retrying clients looped on a bug)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import exc as sa_exc

from judge_api.dberrors import cannot_be_retried, database_unreachable, hand_back, server_ended_transaction
from judge_api.errors import is_database_outage


class _Driver(Exception):
    """A driver error with psycopg's ``sqlstate`` attribute."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def _operational(message: str, sqlstate: str | None = None, invalidated: bool = False) -> sa_exc.OperationalError:
    orig: Exception = _Driver(message, sqlstate) if sqlstate else sqlite3.OperationalError(message)
    return sa_exc.OperationalError("SELECT 1", {}, orig, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    ("error", "outage", "unreachable"),
    [
        # the database away or busy: a 503, the workers wait
        (_operational("connection to server at 127.0.0.1 failed: Connection refused", "08006"), True, True),
        (_operational("terminating connection due to administrator command", "57P01"), True, True),
        (_operational("deadlock detected", "40P01"), True, True),
        (_operational("could not serialize access", "40001"), True, True),
        (_operational("out of memory", "53200"), True, True),
        (_operational("database is locked"), True, True),
        (_operational("server closed the connection unexpectedly"), True, True),
        (_operational("anything at all", invalidated=True), True, True),
        # an outage the workers do not wait out for ever, but the API still answers 503 (a client may retry)
        (_operational("canceling statement due to lock timeout", "55P03"), True, False),
        (_operational("canceling statement due to statement timeout", "57014"), True, False),
        (_operational("could not write to file: No space left on device", "58030"), True, False),
        (_operational("unable to open database file"), True, False),
        (_operational("disk I/O error"), True, False),
        # deterministic: a retry fails the same way, a 500 (logged)
        (_operational("no such table: judgments"), False, False),
        (_operational("no such column: judgments.score"), False, False),
        (_operational("table judgments has no column named score"), False, False),
        (_operational("too many SQL variables"), False, False),
        (
            _operational("sending query and params failed: number of parameters must be between 0 and 65535"),
            False,
            False,
        ),
        (_operational('syntax error at or near "SELEC"', "42601"), False, False),
        (_operational("stack depth limit exceeded", "54001"), False, False),
        (_operational("cannot pass more than 100 arguments to a function", "54023"), False, False),
        (_operational("division by zero", "22012"), False, False),
        (_operational("temporary file size exceeds temp_file_limit", "53400"), False, False),
        (_operational('database "dj" does not exist', "57P04"), False, False),
        (_operational("no such function: json_extract"), False, False),
        (_operational("integer overflow"), False, False),
        (_operational("malformed JSON"), False, False),
        (_operational("Expression tree is too large (maximum depth 1000)"), False, False),
        (_operational("too many terms in compound SELECT"), False, False),
        (_operational("attempt to write a readonly database"), False, False),
        # the server answers and refuses the connection for good (psycopg gives no SQLSTATE): a 500, not waited for
        (
            _operational(
                'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  database'
                ' "nope" does not exist'
            ),
            False,
            False,
        ),
        (_operational('connection failed: FATAL:  password authentication failed for user "dj"'), False, False),
        # the pool and the interface: outages
        (sa_exc.InterfaceError("SELECT 1", {}, Exception("connection already closed")), True, True),
        (sa_exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached"), True, None),
        # a transaction the server ended is an InternalError: an outage; other InternalErrors are bugs
        # (the workers try it a few times only: the same transaction may outlast the timeout every time, r56a)
        (sa_exc.InternalError("SELECT 1", {}, _Driver("idle-in-transaction timeout", "25P03")), True, False),
        (sa_exc.InternalError("SELECT 1", {}, _Driver("transaction timeout", "25P04")), True, False),
        (
            sa_exc.InternalError("S", {}, _Driver("terminating connection", "25P03"), connection_invalidated=True),
            True,
            True,
        ),
        (sa_exc.InternalError("SELECT 1", {}, _Driver("internal error", "XX000")), False, False),
        (sa_exc.IntegrityError("INSERT", {}, _Driver("duplicate key", "23505")), False, False),
        (ValueError("not a database error"), False, None),
    ],
    ids=lambda value: None if not isinstance(value, BaseException) else str(value).splitlines()[0][:50],
)
def test_each_database_error_is_an_outage_or_a_bug(
    error: BaseException, outage: bool, unreachable: bool | None
) -> None:
    assert is_database_outage(error) is outage
    if unreachable is not None:
        assert isinstance(error, sa_exc.DBAPIError)
        assert database_unreachable(error) is unreachable
    if isinstance(error, sa_exc.OperationalError):
        assert cannot_be_retried(error) is (not outage)


def test_an_error_the_workers_wait_out_is_never_one_the_api_calls_a_bug() -> None:
    """The two lists are narrow in opposite directions; no error may be on both."""
    for message, sqlstate in [("connection refused", "54000"), ("syntax error: connection", None)]:
        error = _operational(message, sqlstate)
        assert not (database_unreachable(error) and cannot_be_retried(error)), message


def test_only_an_internal_error_can_be_a_transaction_the_server_ended() -> None:
    assert server_ended_transaction(sa_exc.InternalError("s", {}, _Driver("x", "25P03")))
    assert not server_ended_transaction(_operational("idle", "25P03"))
    assert server_ended_transaction(sa_exc.InternalError("s", {}, Exception("x"), connection_invalidated=True))


@pytest.mark.parametrize(
    ("error", "handed_back"),
    [
        (_operational("no such table: judgments"), True),  # the judgment waits for the bug's fix, never failed for it
        (_operational("server closed the connection unexpectedly"), True),
        (sa_exc.InterfaceError("s", {}, Exception("connection already closed")), True),
        (sa_exc.InternalError("s", {}, _Driver("idle-in-transaction timeout", "25P03")), True),
        (sa_exc.InternalError("s", {}, _Driver("internal error", "XX000")), False),
        (sa_exc.IntegrityError("s", {}, _Driver("duplicate key", "23505")), False),
        (ValueError("a bug"), False),
    ],
)
def test_which_errors_hand_a_judgment_back(error: BaseException, handed_back: bool) -> None:
    assert hand_back(error) is handed_back
