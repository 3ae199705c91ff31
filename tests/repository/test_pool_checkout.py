"""A pooled PostgreSQL connection is checked on checkout by looking at its socket, not by a ``SELECT 1`` round trip
(issue 26: service CPU; ``pool_pre_ping`` cost a ping and two autocommit switches on every checkout). What the ping
gave must still hold: a connection the server ended (a restart, a terminated backend, a cut proxy) is never handed
out; the pool replaces it and the statement runs."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from sqlalchemy import Engine, event, text

from judge_api.db import make_engine, socket_quiet


def pooled_backend(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("select pg_backend_pid()")).scalar_one())


def pings(engine: Engine) -> list[int]:
    seen: list[int] = []
    original = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        seen.append(1)
        return bool(original(dbapi_connection))

    engine.dialect.do_ping = counted  # type: ignore[method-assign]
    return seen


def test_a_quiet_connection_is_reused_without_a_ping(pg_url: str) -> None:
    engine = make_engine(pg_url)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    pinged = pings(engine)
    first = pooled_backend(engine)
    for _ in range(5):
        assert pooled_backend(engine) == first  # the same connection, checked out again
    assert pinged == []
    assert statements == ["select pg_backend_pid()"] * 6  # nothing but the statements themselves
    engine.dispose()


def test_a_connection_the_server_ended_is_replaced(pg_url: str) -> None:
    engine = make_engine(pg_url)
    pinged = pings(engine)
    first = pooled_backend(engine)
    with psycopg.connect(pg_url.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("select pg_terminate_backend(%s)", (first,))
    time.sleep(0.2)  # the termination notice and the close reach the pooled socket
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None and socket_quiet(raw)  # the connection handed out is a live one
        second = int(conn.execute(text("select pg_backend_pid()")).scalar_one())
    assert second != first and pinged  # the readable socket was pinged, failed, and replaced
    engine.dispose()


def test_a_connection_closed_on_our_side_is_never_handed_out_again(pg_url: str) -> None:
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        first = int(conn.execute(text("select pg_backend_pid()")).scalar_one())
        conn.rollback()
        raw.close()
    assert pooled_backend(engine) != first
    engine.dispose()


def test_socket_quiet_says_no_when_it_cannot_tell() -> None:
    class NoSocket:
        closed = False
        broken = False

        def fileno(self) -> int:
            raise psycopg.OperationalError("the connection is closed")

    class Closed:
        closed = True

    assert socket_quiet(NoSocket()) is False
    assert socket_quiet(Closed()) is False
    assert socket_quiet(object()) is False  # not a connection it knows: ping
