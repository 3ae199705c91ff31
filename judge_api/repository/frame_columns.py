"""A run's judgments read as columns (issue 39): the judgments frame without a Python object per value.

PostgreSQL sends the rows as CSV (``COPY (SELECT ...) TO STDOUT``), which pyarrow parses in C straight into typed
columns, block by block as the bytes arrive; SQLite's driver can only give tuples, so they are fetched in chunks and
each chunk is turned into Arrow columns (one struct array over the tuples) before the next is fetched. The string
columns are dictionary-encoded as they are read. Either way the result is one :class:`pyarrow.Table` with the
frame's stored columns, which :func:`to_pandas` turns into exactly the frame :func:`repository.frames.judgments_frame`
always gave (the same values and dtypes), its strings as categoricals with sorted categories (:func:`categorical`,
what ``stats.frames.encode_strings`` makes of them): ``tests/repository/test_frames_and_ratings.py`` and
``test_frame_encoded.py`` compare them on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import json
import logging
import mmap
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from sqlalchemy import Connection, Table

from judge_api.gcpause import collector_paused
from judge_api.repository.sqlite_arrow_reader import SENT

_log = logging.getLogger(__name__)

STRING = pa.string()
DICT = pa.dictionary(pa.int32(), STRING)
"""How the string columns are read: dictionary-encoded as they are parsed (a code per value; issue 39)."""
INT = pa.int64()
FLOAT = pa.float64()
BOOL = pa.bool_()

# the frame's stored columns read from the database (the frame's name, the table's column, the Arrow type); the
# run id is the query's own and is not read
COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("judgment_id", "id", INT),
    ("item_id", "item_key", STRING),
    ("mode", "mode", STRING),
    ("system_a", "system_a", STRING),
    ("system_b", "system_b", STRING),
    ("aspect", "aspect", STRING),
    ("judge", "judge", STRING),
    ("rubric_id", "rubric_id", STRING),
    ("rubric_version", "rubric_version", STRING),
    ("order", "order", STRING),
    ("sample_index", "sample_index", INT),
    ("status", "status", STRING),
    ("score", "score", FLOAT),
    ("preference", "preference", FLOAT),
    ("outcome", "outcome", STRING),
    ("len_a", "len_a", INT),
    ("len_b", "len_b", INT),
    ("input_tokens", "input_tokens", INT),
    ("output_tokens", "output_tokens", INT),
    ("latency_ms", "latency_ms", FLOAT),
    ("cost_usd", "cost_usd", FLOAT),
    ("cached", "cached", BOOL),
    ("source", "source", STRING),
    ("cached_input_tokens", "cached_input_tokens", INT),
    ("cache_write_tokens", "cache_write_tokens", INT),
    ("list_cost_usd", "list_cost_usd", FLOAT),
    ("cache_saved_usd", "cache_saved_usd", FLOAT),
    ("provider_calls", "provider_calls", INT),
    ("judgment_scale_min", "scale_min", FLOAT),
    ("judgment_scale_max", "scale_max", FLOAT),
)
ALWAYS_FLOAT = frozenset({"score", "preference", "judgment_scale_min", "judgment_scale_max"})
"""Columns the frame always holds as float64 (``judgments_frame`` casts them), even when every value is missing."""

SQLITE_CHUNK = 50_000
CSV_BLOCK = 8 << 20
"""Bytes pyarrow parses at a time (the COPY's output is never whole in memory)."""


def _schema() -> pa.Schema:
    """The columns as read: the strings dictionary-encoded (``DICT``)."""
    return pa.schema([(name, DICT if kind == STRING else kind) for name, _, kind in COLUMNS])


def _select_sql(table: Table, where: str) -> str:
    names = ", ".join(f'"{column}"' for _, column, _ in COLUMNS)
    return f'SELECT {names} FROM {table.name} WHERE {where} ORDER BY "id"'


class _CopyReader(io.RawIOBase):
    """A file over a COPY's blocks, for pyarrow's CSV reader."""

    def __init__(self, blocks: Iterator[Any]) -> None:
        self._blocks = blocks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            block = next(self._blocks, None)
            if block is None:
                return 0
            self._pending = memoryview(block)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def read_postgresql(connection: Connection, table: Table, run_id: str, *, readers: int = 1) -> pa.Table:
    """The run's columns through ``COPY ... TO STDOUT (FORMAT csv)``: NULL is an unquoted empty field, an empty
    string a quoted one; floats are printed exactly (shortest round trip, PostgreSQL 12+).

    With ``readers`` > 1 a run of ``PARALLEL_MIN_ROWS`` or more is read by that many connections at once, each a
    consecutive part of its ids, all in one snapshot (:func:`read_postgresql_parts`); else, or when that cannot
    be done, by this connection."""
    from psycopg import sql

    raw = connection.connection.driver_connection
    assert raw is not None
    if readers > 1:
        columns = read_postgresql_parts(connection, table, run_id, readers)
        if columns is not None:
            return columns
    return _copy_csv(raw, sql.SQL(_select_sql(table, "run_id = {}")).format(sql.Literal(run_id)))


def _copy_csv(raw: Any, select: Any) -> pa.Table:
    """The rows of ``select`` (a ``psycopg.sql`` query of the frame's columns) as the frame's Arrow table."""
    from psycopg import sql

    statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(select)
    schema = _schema()
    with raw.cursor() as cursor, cursor.copy(statement) as copy:
        blocks = iter(copy)
        first = next(blocks, None)
        if first is None:  # no row (pyarrow's reader refuses an empty file)
            return schema.empty_table()
        source = io.BufferedReader(_CopyReader(itertools.chain([first], blocks)), buffer_size=1 << 20)
        reader = pacsv.open_csv(
            source,
            # one thread: on 2 shared cores pyarrow's thread pool made the parse 2.3x slower (1M rows: 2.47 s with
            # threads, 1.06 s without, load 1.7)
            read_options=pacsv.ReadOptions(column_names=schema.names, block_size=CSV_BLOCK, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=schema,
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
        batches = list(reader)
    return pa.Table.from_batches(batches, schema=schema)


_PARTS_IN_FLIGHT = threading.Lock()
"""Held by the one PostgreSQL read in parts of this process: its connections are outside the engine's pool, so at
most ``DJ_FRAME_READERS`` of them are open at once; a report meanwhile reads with its session's ``COPY``."""


def read_postgresql_parts(connection: Connection, table: Table, run_id: str, readers: int) -> pa.Table | None:
    """The run's columns read by ``readers`` connections of their own at once, each a consecutive part of the run's
    ids (cut by the index on ``run_id, id``), put end to end in id order.

    The first part's connection exports its snapshot (``pg_export_snapshot``) and the others read in it (``SET
    TRANSACTION SNAPSHOT``, repeatable read): the parts see the rows of one moment, as the session's ``COPY`` in
    read committed would. None (the caller reads the run itself) when the run is smaller than
    ``PARALLEL_MIN_ROWS``; when this session is not in a read-committed transaction without writes (its own writes
    are not in the parts' snapshot, and a repeatable-read session's snapshot is not theirs); when another read in
    parts is under way in this process; and when any part fails."""
    from psycopg import sql

    raw = connection.connection.driver_connection
    assert raw is not None
    if raw.autocommit or raw.info.server_version < 130000:  # pg_current_xact_id_if_assigned: PostgreSQL 13
        return None
    with raw.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table.name} WHERE run_id = %s", (run_id,))
        rows = int(cursor.fetchone()[0])
        if rows < PARALLEL_MIN_ROWS:
            return None
        cursor.execute("SELECT current_setting('transaction_isolation'), pg_current_xact_id_if_assigned() IS NULL")
        isolation, unwritten = cursor.fetchone()
        if isolation != "read committed" or not unwritten:
            return None
        starts = _part_starts(cursor, table, run_id, rows, readers, "%s")
    of_run = sql.SQL("run_id = {}").format(sql.Literal(run_id))
    bounds: list[int | None] = [None, *starts, None]
    selects = []
    for low, high in itertools.pairwise(bounds):
        ranges = [sql.SQL('"id" >= {}').format(sql.Literal(low))] if low is not None else []
        ranges += [sql.SQL('"id" < {}').format(sql.Literal(high))] if high is not None else []
        where = sql.SQL(" AND ").join([of_run, *ranges])
        selects.append(sql.SQL(_select_sql(table, "{}")).format(where))
    if not _PARTS_IN_FLIGHT.acquire(blocking=False):
        return None
    parts_raw: list[Any] = []
    try:
        parts_raw = _snapshot_connections(connection, len(selects), run_id) or []
        if not parts_raw:
            return None
        from concurrent.futures import ThreadPoolExecutor

        def read_part(part_raw: Any, select: Any) -> pa.Table | None:
            try:
                return _copy_csv(part_raw, select)
            except Exception as error:  # the connection or a lock not had (lock_timeout): the session reads the run
                _log.info("a part of run %s could not be read: %s", run_id, error)
                return None

        # the session waits for its parts with nothing to do: a server's idle_in_transaction_session_timeout would
        # end it meanwhile, where its own COPY kept it busy (review r53b)
        with raw.cursor() as cursor:
            cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        try:
            with ThreadPoolExecutor(len(selects), thread_name_prefix="frame-part") as pool:
                parts = list(pool.map(read_part, parts_raw, selects))
        finally:
            with raw.cursor() as cursor:
                cursor.execute("SET LOCAL idle_in_transaction_session_timeout TO DEFAULT")
    finally:
        for part_raw in parts_raw:
            part_raw.close()
        _PARTS_IN_FLIGHT.release()
    if any(part is None for part in parts):
        return None
    return pa.concat_tables(cast(list[pa.Table], parts))


def _snapshot_connections(connection: Connection, count: int, run_id: str) -> list[Any] | None:
    """``count`` new connections (the engine's arguments, not its pool: parts waiting for a busy pool held their
    sessions' connections, and reports at once waited on each other, review r53a), each in a read-only
    repeatable-read transaction in the first one's snapshot, or None (every one opened is closed). Each waits at
    most ``PART_LOCK_TIMEOUT_MS`` for a lock: the session holds its lock on the table while its parts read, so a
    part queued behind an exclusive lock that waits for the session would wait for good, unseen by the deadlock
    detector (review r53a)."""
    from psycopg import sql

    dialect = connection.engine.dialect
    connect_args, connect_params = dialect.create_connect_args(connection.engine.url)
    opened: list[Any] = []
    try:
        snapshot = None
        for _ in range(count):
            part_raw: Any = dialect.connect(
                *connect_args, **{"connect_timeout": PART_CONNECT_TIMEOUT_S, **connect_params}
            )
            opened.append(part_raw)
            with part_raw.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                if snapshot is not None:
                    cursor.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
                cursor.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{PART_LOCK_TIMEOUT_MS}ms")))
                if snapshot is None:
                    cursor.execute("SELECT pg_export_snapshot()")
                    snapshot = cursor.fetchone()[0]
        return opened
    except Exception as error:  # no connection to be had (max_connections, connect_timeout), or the snapshot gone
        _log.info("the parts of run %s could not be opened: %s", run_id, error)
        for part_raw in opened:
            part_raw.close()
        return None


def read_sqlite(
    connection: Connection,
    table: Table,
    run_id: str,
    chunk: int = SQLITE_CHUNK,
    *,
    readers: int = 1,
    state: Callable[[], str | None] | None = None,
) -> pa.Table:
    """The run's columns from SQLite: a run of ``ARROW_CHILD_MIN_ROWS`` or more through ADBC's SQLite driver in a
    child process (:func:`read_sqlite_arrow`, Arrow batches built in C) when it can read what this connection would,
    else from the driver's tuples (:func:`read_sqlite_tuples`). Either reads the rows as :func:`sqlite_where` says.

    With ``readers`` > 1 and ``state`` (what the run's report depends on, read by this connection; None while the
    run is running: ``report_cache.finished_state``), a run of ``PARALLEL_MIN_ROWS`` or more is read by that many
    children at once, each a consecutive part of its ids (:func:`read_sqlite_parts`). The parts are read in
    snapshots of their own, so they are kept only when ``state`` is the same after them as before the plan was
    read: no write to the run committed in between, so every part read the rows one snapshot would have. Else one
    child reads the run again, in one snapshot."""
    before = state() if readers > 1 and state is not None else None
    rows, first, last = _id_range(connection, table, run_id)
    where = _by_span(table) if _spans(rows, first, last) else BY_INDEX
    database = adbc_database(connection) if rows >= ARROW_CHILD_MIN_ROWS else None
    columns = None
    if database is not None and state is not None and before is not None and rows >= PARALLEL_MIN_ROWS:
        parts = _part_wheres(connection, table, run_id, (rows, first, last), readers)
        columns = read_sqlite_parts(database, table, run_id, chunk, parts)
        if columns is not None and state() != before:
            _log.info("run %s was written while its parts were read: read again by one child", run_id)
            columns = None
    if database is not None and columns is None:
        columns = read_sqlite_arrow(connection, table, run_id, chunk, where)
    return columns if columns is not None else read_sqlite_tuples(connection, table, run_id, chunk, where)


ARROW_CHILD_MIN_ROWS = 50_000
"""Rows from which a run is read by the child process: starting it costs about 0.3 s, the tuples about 7 us a row."""

PARALLEL_MIN_ROWS = 200_000
PART_CONNECT_TIMEOUT_S = 5
PART_LOCK_TIMEOUT_MS = 1000
"""A PostgreSQL part's connection and lock waits: past them the session reads the run itself."""
"""Rows from which a run is read by several children (``DJ_FRAME_READERS``): each costs about 0.3 s to start."""

SPAN_FACTOR = 4
"""A run whose ids span at most this many times its rows is read by a scan of that id range (:func:`sqlite_where`)."""

BY_INDEX = "run_id = ?1"
"""The run's rows by the index on ``run_id``: a search of the table's b-tree per row."""

_CHILD = Path(__file__).with_name("sqlite_arrow_reader.py")
_KINDS = {STRING: "string", INT: "int", FLOAT: "float", BOOL: "bool"}


def _by_span(table: Table) -> str:
    bound = f'(SELECT {{}}("id") FROM {table.name} WHERE run_id = ?1)'
    # CAST: the unary + drops the column's TEXT affinity, which the bounds' comparisons apply to the parameter
    return f'"id" BETWEEN {bound.format("min")} AND {bound.format("max")} AND +run_id = CAST(?1 AS TEXT)'


def sqlite_where(connection: Connection, table: Table, run_id: str) -> tuple[int, str]:
    """The run's rows (counted now) and the WHERE clause that reads them (one parameter, ``?1``: the run's id).

    The index on ``run_id`` gives the rows in id order, but each is then found by a search of the table's b-tree:
    4-5 us a row at 1M, most of the frame's read (issue 39, docs/scaling.md). A run's rows are stored in id order
    and mostly next to each other, so when its ids span at most ``SPAN_FACTOR`` times its rows, the rows between
    its first and last id are scanned instead (the unary ``+`` keeps SQLite off the index) and the other runs' rows
    among them skipped: 5x faster at 1M. The bounds are subqueries of the same statement, so the rows are those of
    one snapshot, as the index's are; the count decides only the plan."""
    rows, first, last = _id_range(connection, table, run_id)
    return rows, (_by_span(table) if _spans(rows, first, last) else BY_INDEX)


def _id_range(connection: Connection, table: Table, run_id: str) -> tuple[int, int, int]:
    """The run's rows, first and last id (0, 0, 0 when it has none)."""
    raw = connection.connection.driver_connection
    assert raw is not None
    cursor = raw.cursor()
    try:
        cursor.execute(f'SELECT count(*), min("id"), max("id") FROM {table.name} WHERE run_id = ?', (run_id,))
        rows, first, last = cursor.fetchone()
    finally:
        cursor.close()
    return (int(rows), int(first), int(last)) if rows else (0, 0, 0)


def _spans(rows: int, first: int, last: int) -> bool:
    """Whether the run is read by a scan of its id range (:func:`sqlite_where`)."""
    return bool(rows) and last - first + 1 <= SPAN_FACTOR * rows


def _part_wheres(
    connection: Connection, table: Table, run_id: str, id_range: tuple[int, int, int], parts: int
) -> list[str]:
    """The run's rows cut into ``parts`` consecutive id ranges of about equal rows, as WHERE clauses (one parameter,
    ``?1``: the run's id) read as :func:`sqlite_where` would (a scan of each range, or the index on ``run_id``
    within it). The first id of each part after the first is found by that index, whose entries are in id order.
    The ranges cover the run's ids as ``id_range`` (:func:`_id_range`) saw them: the caller checks that no write
    came after."""
    rows, first, last = id_range
    raw = connection.connection.driver_connection
    assert raw is not None
    cursor = raw.cursor()
    try:
        starts = [first, *(start for start in _part_starts(cursor, table, run_id, rows, parts, "?") if start > first)]
    finally:
        cursor.close()
    ends = [start - 1 for start in starts[1:]] + [last]
    of_run = "+run_id = CAST(?1 AS TEXT)" if _spans(rows, first, last) else BY_INDEX
    return [f'"id" BETWEEN {low} AND {high} AND {of_run}' for low, high in zip(starts, ends, strict=True)]


def _part_starts(cursor: Any, table: Table, run_id: str, rows: int, parts: int, marker: str) -> list[int]:
    """The first id of each part after the first, ``rows`` cut into ``parts`` of about equal rows, found by the
    index on ``run_id`` (its entries are in id order); increasing, none repeated (``marker``: the driver's
    parameter marker)."""
    starts: list[int] = []
    for part in range(1, parts):
        cursor.execute(
            f'SELECT "id" FROM {table.name} WHERE run_id = {marker} ORDER BY "id" LIMIT 1 OFFSET {marker}',
            (run_id, rows * part // parts),
        )
        found = cursor.fetchone()
        if found is not None and (not starts or int(found[0]) > starts[-1]):
            starts.append(int(found[0]))
    return starts


def read_sqlite_parts(database: str, table: Table, run_id: str, chunk: int, wheres: list[str]) -> pa.Table | None:
    """The run's columns read by one child per WHERE clause, all started at once, then put end to end in the
    clauses' order. None when any part is: the caller reads the run again. Whatever is raised meanwhile (an
    interrupt, no memory), no child is left running or unwaited, and no file open (review r53b)."""
    children: list[_Child | None] = []
    parts: list[pa.Table | None] = []
    try:
        for where in wheres:
            children.append(_start_child(database, table, run_id, chunk, where))
        for child in children:
            parts.append(_received(child, run_id) if child is not None else None)
    finally:
        for child in children[len(parts) :]:  # what was not received: something was raised
            if child is not None:
                with contextlib.suppress(BaseException):  # already unwinding: the others must still be stopped
                    _abandon(child)
    if any(part is None for part in parts):
        return None
    return pa.concat_tables(cast(list[pa.Table], parts))


def adbc_database(connection: Connection) -> str | None:
    """The SQLite file another process can read this connection's data from, or None: without ADBC's driver, for an
    in-memory database (the connection's own), and while the connection is in a transaction, which may hold writes
    only it sees (pysqlite opens one before its first write, never for a read: a connection outside one reads the
    last commit, as any other connection does)."""
    raw = connection.connection.driver_connection
    if raw is None or getattr(raw, "in_transaction", True) or importlib.util.find_spec("adbc_driver_sqlite") is None:
        return None
    # the file the connection has open (absolute), not the URL's: a relative one read from another working
    # directory would be another file; an in-memory or temporary database has none
    cursor = raw.cursor()
    try:
        files = {name: file for _, name, file in cursor.execute("PRAGMA database_list").fetchall()}
    finally:
        cursor.close()
    database = files.get("main")
    if not database or not os.path.isfile(database):
        return None
    return str(database)


def read_sqlite_arrow(
    connection: Connection, table: Table, run_id: str, chunk: int = SQLITE_CHUNK, where: str = BY_INDEX
) -> pa.Table | None:
    """The run's columns read by ``sqlite_arrow_reader`` in a child process (ADBC's driver fills Arrow batches in C:
    about 3x faster than the tuples at 1M rows; issue 39, docs/scaling.md) and received as an Arrow IPC stream.
    Never in this process: the driver carries its own copy of SQLite, and two in one process break each other's
    locks (the child's docstring). None when it cannot serve (:func:`adbc_database` None, the child failed, or a
    value whose type differs from its column's: the driver infers a batch's types from the first batch); the caller
    then reads the tuples, which give the same table or the same error.

    The query puts one row of the frame's types before the run's rows (the child drops it): a column whose first
    batch is all NULL would otherwise be inferred as integers and fail on the first real number after it."""
    database = adbc_database(connection)
    if database is None:
        return None
    return _read_child(database, table, run_id, chunk, where)


def _read_child(database: str, table: Table, run_id: str, chunk: int, where: str) -> pa.Table | None:
    """The rows ``where`` selects, read by ``sqlite_arrow_reader`` from ``database`` (:func:`read_sqlite_arrow`)."""
    started = _start_child(database, table, run_id, chunk, where)
    return _received(started, run_id) if started is not None else None


class _Child(NamedTuple):
    process: subprocess.Popen[bytes]
    stream: IO[bytes]
    """The Arrow IPC stream it writes: a file in memory (``memfd_create``), else a temporary file."""
    messages: IO[bytes]


def _start_child(database: str, table: Table, run_id: str, chunk: int, where: str) -> _Child | None:
    """``sqlite_arrow_reader`` started on the rows ``where`` selects, writing its stream to a file this process
    maps when it is done (:func:`_received`). Not a pipe read as it comes: the stream's buffers would then be
    allocated by the thread that reads it, and several children read by threads at once left their memory in
    those threads' malloc arenas, which the report's own allocations never reuse (+140 MB of peak at 1M)."""
    typed = {STRING: "''", INT: "0", FLOAT: "0.5", BOOL: "0"}
    first = ", ".join(f'{-(2**63) if column == "id" else typed[kind]} AS "{column}"' for _, column, kind in COLUMNS)
    names = ", ".join(f'"{column}"' for _, column, _ in COLUMNS)
    query = f'SELECT {first} UNION ALL SELECT {names} FROM {table.name} WHERE {where} ORDER BY "id"'
    kinds = json.dumps([_KINDS[kind] for _, _, kind in COLUMNS])
    files: list[IO[bytes]] = []
    try:
        if hasattr(os, "memfd_create"):
            files.append(open(os.memfd_create("dj-frame", os.MFD_CLOEXEC), "w+b"))  # noqa: SIM115
        else:
            files.append(tempfile.TemporaryFile())  # noqa: SIM115
        # its messages go to a file too: a pipe read only after the stream could fill and stall both
        files.append(tempfile.TemporaryFile())  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-I", str(_CHILD), database, query, str(run_id), str(chunk), kinds],
            stdin=subprocess.DEVNULL,
            stdout=files[0],
            stderr=files[1],
        )
    except (OSError, ValueError) as error:  # no memory file, temporary directory, interpreter or process to be had
        _log.info("the SQLite Arrow reader could not start for run %s: %s", run_id, error)
        for file in files:
            file.close()
        return None
    return _Child(process, files[0], files[1])


def _abandon(child: _Child) -> None:
    """``child`` stopped and waited for, its files closed: its stream is not wanted."""
    try:
        child.process.kill()
        child.process.wait()
    finally:
        child.stream.close()
        child.messages.close()


def _received(child: _Child, run_id: str) -> pa.Table | None:
    """The table ``child`` wrote, once it has exited, read from its mapped stream without a copy (None when it did
    not serve: :func:`read_sqlite_arrow`). The table's buffers keep the mapping until they are freed."""
    received: pa.Table | None = None
    with child.stream, child.messages:
        try:
            code = child.process.wait()
        except BaseException:  # interrupted while it runs: it must not outlive the read
            _abandon(child)
            raise
        child.messages.seek(0)
        said = child.messages.read().decode(errors="replace").strip()
        if code == 0:
            try:
                mapped = mmap.mmap(child.stream.fileno(), 0, access=mmap.ACCESS_READ)
                received = pa.ipc.open_stream(pa.py_buffer(mapped)).read_all()
            except (OSError, ValueError, pa.ArrowException):  # empty, or cut short: its message says why
                received = None
    # a stream that ends between two batches reads as whole, and an exit code can be lost (SIGCHLD ignored): the
    # child's last line counts the rows it sent
    if code != 0 or received is None or said.rsplit("\n", 1)[-1] != f"{SENT}{received.num_rows}":
        _log.info("the SQLite Arrow reader did not serve run %s (exit %s): %s", run_id, code, said)
        return None
    schema = _schema()
    if received.schema.types != schema.types:
        _log.info("the SQLite Arrow reader sent run %s as %s", run_id, received.schema)
        return None
    return received.rename_columns(schema.names)


def read_sqlite_tuples(
    connection: Connection, table: Table, run_id: str, chunk: int = SQLITE_CHUNK, where: str = BY_INDEX
) -> pa.Table:
    """The run's columns from SQLite, ``chunk`` rows at a time: each chunk's tuples become one Arrow struct array
    (in C, no per-column lists), split into the columns, before the next chunk is fetched. The cyclic collector is
    paused meanwhile (the tuples are freed by reference counting; walking them once per chunk cost as much as the
    conversion)."""
    raw = connection.connection.driver_connection
    assert raw is not None
    schema = _schema()
    # SQLite's booleans are 0 / 1; the strings are dictionary-encoded as they are converted (fewer bytes copied,
    # and no second pass to encode them)
    row_type = pa.struct([(f.name, INT if f.type == BOOL else f.type) for f in schema])
    batches: list[pa.RecordBatch] = []
    cursor = raw.cursor()
    try:
        with collector_paused():
            cursor.execute(_select_sql(table, where), (run_id,))
            while rows := cursor.fetchmany(chunk):
                columns = pa.array(rows, type=row_type).flatten()
                del rows
                columns = [c.cast(BOOL) if f.type == BOOL else c for c, f in zip(columns, schema, strict=True)]
                batches.append(pa.RecordBatch.from_arrays(columns, schema=schema))
    finally:
        cursor.close()
    return pa.Table.from_batches(batches, schema=schema)


def categorical(column: pa.ChunkedArray | pa.Array) -> pd.Categorical:
    """A string column as a pandas categorical whose categories are its distinct values sorted (missing: code -1),
    straight from Arrow: one dictionary encode in C, the small dictionary sorted, the codes renumbered by a take.
    The same categorical as ``astype("category")`` of the ``str`` column (``stats.frames.encode_strings``), without
    the column of strings (issue 39: a few bytes per value instead of a string each)."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    if isinstance(column, pa.ChunkedArray):  # each chunk has its own dictionary: one for all, then one array
        column = pa.table({"c": column}).unify_dictionaries().column("c").combine_chunks()
    encoded = cast(pa.DictionaryArray, column)
    dictionary = encoded.dictionary
    order = pc.array_sort_indices(dictionary).to_numpy()  # Arrow sorts UTF-8 bytewise: code point order, as str
    rank = np.empty(len(order) + 1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    rank[-1] = -1  # a missing value's code
    indices = encoded.indices.fill_null(len(order)).to_numpy(zero_copy_only=False)
    categories = pd.Index(pd.array(dictionary.take(pa.array(order)), dtype="str"))
    return pd.Categorical.from_codes(rank[indices], dtype=pd.CategoricalDtype(categories))


def to_pandas(table: pa.Table, run_id: str, scale_of: Callable[[str], tuple[float, float]]) -> pd.DataFrame:
    """The columns as the frame ``judgments_frame`` builds from the driver's tuples: strings as categoricals with
    sorted categories (``categorical``: what ``stats.frames.encode_strings`` makes of the ``str`` columns);
    whole numbers as int64 when none is missing, else float64 (what pandas infers from ints and None);
    real numbers as float64; a column with every value missing as Python ``None`` objects (what pandas infers from
    a column of None) except the ones the frame casts to float; ``cached`` as bool; ``scale_min`` / ``scale_max``
    the judgment's own scale, else its rubric's (``scale_of``), computed once per rubric."""
    n = table.num_rows
    data: dict[str, Any] = {}
    for name, _, kind in COLUMNS:
        if name == "item_id":
            run = pd.CategoricalDtype(pd.Index(pd.array([run_id], dtype="str")))
            data["run_id"] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), dtype=run)
        column = table.column(name)
        nulls = column.null_count
        if kind == STRING:
            data[name] = categorical(column)
        elif kind == BOOL:
            data[name] = column.to_numpy(zero_copy_only=False).astype(bool)
        elif nulls == n and name not in ALWAYS_FLOAT:
            data[name] = np.full(n, None, dtype=object)
        elif kind == INT and not nulls:
            # arrays of the frame's own, writable (a zero-copy view of Arrow's buffer is read-only): OWNED below
            data[name] = np.require(column.to_numpy(), np.int64, ["W", "O"])
        else:
            data[name] = np.require(column.cast(FLOAT).to_numpy(zero_copy_only=False), np.float64, ["W", "O"])
    rubrics = data["rubric_id"]
    codes = np.asarray(rubrics.codes)
    scales = np.array([scale_of(r) for r in rubrics.categories], dtype=float).reshape(-1, 2)
    for own, side in (("judgment_scale_min", 0), ("judgment_scale_max", 1)):
        values = data.pop(own)
        data[own.removeprefix("judgment_")] = np.where(np.isnan(values), scales[codes, side], values)
    order = ["judgment_id", "run_id", *(name for name, _, _ in COLUMNS[1:-2]), "scale_min", "scale_max"]
    frame = pd.DataFrame({name: data[name] for name in order}, copy=False)
    from judge_api.stats.frames import ENCODED, owned_columns  # lazily: the statistics library loads scipy

    frame.attrs[ENCODED] = True
    owned_columns(frame)  # every array above is the frame's own: the report's validation need not copy it
    return frame
