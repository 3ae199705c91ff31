"""Which database errors are the database being away (wait, retry) and which are bugs a retry cannot mend.

Two questions, one classification, shared by the API (``judge_api.errors``: a 503 the client may retry, or a 500)
and the workers (``workers.writer``, ``workers.execute``: retry a write for as long as it takes, or hand the
judgments back):

- :func:`database_unreachable`: the database is away or busy for now, recognised by its SQLSTATE class or the
  driver's words. The workers retry these for as long as it takes, so the list is narrow: an error it does not name
  is retried a few times only.
- :func:`cannot_be_retried`: a driver's deterministic error (a missing table, more bind parameters than the protocol
  carries, a statement over a program limit), which the drivers also raise as ``OperationalError``. The API answers
  every other ``OperationalError`` with a 503, so this list is narrow the other way: what it does not name may be
  an outage.
"""

from __future__ import annotations

from sqlalchemy import exc as sa_exc

SERVER_ENDED_TRANSACTION = frozenset({"25P03", "25P04"})
"""SQLSTATEs of a transaction the server ended (``idle_in_transaction_session_timeout``, ``transaction_timeout``):
nothing of it was committed. psycopg raises them as an ``InternalError``, which is no ``OperationalError`` (a
shutdown, 57P01-57P03, is one already)."""

_TRANSIENT_SQLSTATE = ("08", "40", "53", "57P")
"""connection, rollback (deadlock, serialisation), resources, server shutdown (a transaction the server ended is not
waited for without end: the same transaction may outlast the server's timeout on every try, review r56a)"""
_TRANSIENT_WORDS = ("connection", "server closed", "terminating", "timeout", "database is locked", "busy")

_PERMANENT_SQLSTATE = ("0A", "22", "23", "42", "54", "F0", "HV", "53400", "57P04")
"""feature not supported, data, integrity, syntax or a missing object, program limit exceeded, configuration file,
foreign data wrapper, ``temp_file_limit`` exceeded, the database dropped: the same statement fails the same way
again (the last two are in classes otherwise taken as the database away)"""
_PERMANENT_WORDS = (
    "no such table",  # SQLite: the schema is not there (a database never migrated, a wrong path)
    "no such column",
    "has no column named",
    "too many sql variables",  # SQLite's bind-parameter limit
    "number of parameters must be between",  # psycopg: more than 65,535 bind parameters, refused before sending
    "syntax error",
    "no such function",
    "integer overflow",
    "malformed json",
    "expression tree is too large",
    "too many terms in compound select",
    "readonly database",  # SQLite: a read-only file or folder
    # the server answers and refuses the connection for good (psycopg: "connection failed: ... FATAL: ...")
    "does not exist",  # the database or the role
    "password authentication failed",
    "no pg_hba.conf entry",
)


def sqlstate(exc: sa_exc.DBAPIError) -> str | None:
    """The SQLSTATE of the driver's error (psycopg's ``sqlstate``); None for SQLite and for errors raised in the
    client before the server answered."""
    code = getattr(exc.orig, "sqlstate", None)
    return str(code) if code else None


def server_ended_transaction(exc: BaseException) -> bool:
    """An ``InternalError`` with which the connection was lost, or whose SQLSTATE says the server ended the
    transaction (``SERVER_ENDED_TRANSACTION``)."""
    if not isinstance(exc, sa_exc.InternalError):
        return False
    return bool(exc.connection_invalidated) or sqlstate(exc) in SERVER_ENDED_TRANSACTION


def database_unreachable(exc: sa_exc.DBAPIError) -> bool:
    """The database is away or busy for now (retry for as long as it takes), as opposed to an error retrying cannot
    mend (a missing table, a database file that cannot be opened, a database or role that does not exist)."""
    if isinstance(exc, sa_exc.InterfaceError) or exc.connection_invalidated:
        return True
    if not isinstance(exc, sa_exc.OperationalError) or _matches(exc, _PERMANENT_SQLSTATE, _PERMANENT_WORDS):
        return False
    return _matches(exc, _TRANSIENT_SQLSTATE, _TRANSIENT_WORDS)


def cannot_be_retried(exc: sa_exc.DBAPIError) -> bool:
    """A deterministic error the driver raised as an ``OperationalError`` (see the module docstring): a bug to log
    and answer with a 500, not an outage. A lost connection never is one."""
    if isinstance(exc, sa_exc.InterfaceError) or exc.connection_invalidated:
        return False
    return _matches(exc, _PERMANENT_SQLSTATE, _PERMANENT_WORDS)


def is_outage(exc: BaseException) -> bool:
    """The database away or the transaction ended by the server: nothing of that transaction was committed, and the
    same request may succeed later (the API answers 503, the OTLP processor tries again at its next look): an
    ``OperationalError`` other than a deterministic one (:func:`cannot_be_retried`), an ``InterfaceError``, the
    pool's ``TimeoutError``, a transaction the server ended (:func:`server_ended_transaction`)."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return not cannot_be_retried(exc)
    return isinstance(exc, sa_exc.TimeoutError) or server_ended_transaction(exc)


def hand_back(exc: BaseException) -> bool:
    """The workers: a database error after which a judgment is handed back and its task retried (Celery's
    ``autoretry_for``), not stored as a failed verdict: any ``OperationalError`` or ``InterfaceError`` (a
    deterministic one too: the judgment waits for the bug's fix, it is not failed for it) and a transaction the
    server ended."""
    return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError) or server_ended_transaction(exc)


def _matches(exc: sa_exc.DBAPIError, sqlstates: tuple[str, ...], words: tuple[str, ...]) -> bool:
    """The error's SQLSTATE starts with one of ``sqlstates``; without a SQLSTATE, its message holds one of ``words``."""
    code = sqlstate(exc)
    if code:
        return code.startswith(sqlstates)
    message = str(exc.orig).lower()
    return any(word in message for word in words)
