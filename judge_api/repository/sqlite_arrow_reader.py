"""A child process that reads a query's rows from a SQLite file through ADBC's SQLite driver and writes them to its
standard output as an Arrow IPC stream (issue 39: the driver fills Arrow batches in C, no Python object per value).

It runs in a process of its own, never in the service's: ADBC's driver carries its own copy of SQLite, and two copies
of SQLite in one process break each other's POSIX locks (closing the driver's connection left the process's own
connections with ``disk I/O error``; https://sqlite.org/howtocorrupt.html, "Multiple copies of SQLite linked into
the same application"). ``repository.frame_columns.read_sqlite_arrow`` starts it as ``python -I <this file> ...``;
it imports nothing of the service.

Arguments: the database file, the query (one parameter, ``?1``: the run's id; and a first row of the columns' types,
which this drops), the run's id, rows per batch, and the columns' kinds as JSON (``"string"``: dictionary-encoded;
``"bool"``: SQLite's 0 / 1 as booleans; ``"int"``, ``"float"``: as read). A value of another type than its column's
exits with ``MISMATCH`` (3) and the driver's message on standard error; the parent then reads the rows itself."""

from __future__ import annotations

import json
import sys

MISMATCH = 3
SENT = "rows sent: "
"""The last line on standard error once every batch is written, before the number of rows sent: the parent takes
the stream as whole only with it (a stream that ends between batches reads as complete, and an exit code can be
lost)."""
TYPED_ROW_ID = -(2**63)


def main(argv: list[str]) -> int:
    import adbc_driver_sqlite
    import adbc_driver_sqlite.dbapi as adbc_sqlite
    import pyarrow as pa
    import pyarrow.compute as pc

    database, query, run_id, chunk, kinds_json = argv
    kinds: list[str] = json.loads(kinds_json)
    as_read = {"string": pa.dictionary(pa.int32(), pa.string()), "bool": pa.bool_(), "int": pa.int64()}
    as_read["float"] = pa.float64()

    def column(array: pa.Array, kind: str) -> pa.Array:
        if kind == "string":
            if not pa.types.is_string(array.type):
                raise TypeError(f"a text column read as {array.type}")
            return pc.dictionary_encode(array)
        if kind == "bool":
            return array.cast(pa.int64()).cast(pa.bool_())
        if array.type != as_read[kind]:
            raise TypeError(f"a {kind} column read as {array.type}")
        return array

    out = sys.stdout.buffer
    writer = None
    try:
        with adbc_sqlite.connect(database) as connection, connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 60000")
            cursor.adbc_statement.set_options(**{adbc_driver_sqlite.StatementOptions.BATCH_ROWS.value: chunk})
            cursor.execute(query, (run_id,))
            reader = cursor.fetch_record_batch()
            names = reader.schema.names
            schema = pa.schema([(name, as_read[kind]) for name, kind in zip(names, kinds, strict=True)])
            writer = pa.ipc.new_stream(out, schema)
            sent = 0
            for number, batch in enumerate(reader):
                # the typed row first, and only there: a stored id equal to its id would make the order ambiguous
                ids = batch.column(0)
                typed = pc.sum(pc.equal(ids, TYPED_ROW_ID)).as_py() or 0
                if typed != (1 if number == 0 else 0) or (number == 0 and ids[0].as_py() != TYPED_ROW_ID):
                    raise TypeError("a stored row has the typed first row's id")
                if number == 0:
                    batch = batch.slice(1)
                columns = [column(array, kind) for array, kind in zip(batch.columns, kinds, strict=True)]
                writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
                sent += batch.num_rows
            writer.close()
            out.flush()
    except (OSError, TypeError, pa.ArrowException, adbc_sqlite.Error) as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return MISMATCH
    print(f"{SENT}{sent}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
