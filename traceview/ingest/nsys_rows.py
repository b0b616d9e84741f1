"""Rows of an nsys SQLite export as Arrow batches, for the ingest (nsys_export.stage) and for its worker processes.

A worker (`main`, started by nsys_export.prefetching, one per large table) reads one staged table's rows into an
Arrow IPC stream file, so that the reads of a large export run beside each other and beside DuckDB: the ADBC driver
holds the GIL while it reads, so threads would take turns. It runs the query stage() would run through the same
reader (sqlite_rows: typing checks, UTF-8 repair) and takes its job as JSON in its one argument. Any failure exits
non-zero: the ingest then reads the table itself, and reports what is wrong with the export as it always does.

This module imports no more than a worker needs (ADBC's own statements, not its DB-API module, which loads pandas:
a worker starts in ~0.25 CPU-s instead of ~0.5).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager

import adbc_driver_manager
import adbc_driver_sqlite
import pyarrow as pa

Execute = Callable[[str], pa.RecordBatchReader]
"""Runs one SQLite query and returns its rows, batch by batch."""


def main() -> int:
    job = json.loads(sys.argv[1])
    with (
        closing(adbc_driver_sqlite.connect(job["uri"])) as database,
        closing(adbc_driver_manager.AdbcConnection(database)) as connection,
    ):
        statements: list[adbc_driver_manager.AdbcStatement] = []

        def execute(query: str) -> pa.RecordBatchReader:
            statements.append(statement := adbc_driver_manager.AdbcStatement(connection))
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(job["batch_rows"])})
            statement.set_sql_query(query)
            return pa.RecordBatchReader.from_stream(statement.execute_query()[0])

        try:
            with (
                sqlite_rows(execute, job["sql"], job["probe"], job["columns"]) as stream,
                pa.OSFile(job["out"], "wb") as sink,
                pa.ipc.new_stream(sink, stream.schema) as writer,
            ):
                for batch in stream:
                    writer.write_batch(batch)
        finally:
            for statement in reversed(statements):
                statement.close()
    return 0


@contextmanager
def sqlite_rows(execute: Execute, sql: str, probe: str, columns: dict[str, str]) -> Iterator[pa.RecordBatchReader]:
    """The rows of `sql` (its first row `probe`, then `columns` in order) from SQLite, as Arrow batches; `execute`
    runs each query this needs (and its caller closes them).

    SQLite columns hold any type, and a stray text or real in an integer column fails the driver's Arrow stream
    (or, within the first batch, from which it types the columns, turns the column into text or floats). Checking
    every value in SQLite (`typeof`) made the read 35-50% dearer, so the rows are read unchecked, and checked only
    when needed: from the start when the first batch typed a column otherwise, else from the row where the stream
    failed (the same query's order: delivered rows are skipped with OFFSET, behind a new probe row)."""
    text = {name for name, kind in columns.items() if kind == "t"}
    checked = "SELECT _probe, " + ", ".join(
        f"CAST({n} AS TEXT) AS {n}" if n in text else f"CASE WHEN typeof({n}) = 'integer' THEN {n} END AS {n}"
        for n in columns
    )
    unchecked = "SELECT _probe, " + ", ".join(f"CAST({n} AS TEXT) AS {n}" if n in text else n for n in columns)
    checked, unchecked = f"{checked} FROM ({sql})", f"{unchecked} FROM ({sql})"

    def rows(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
        delivered = 0
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (OSError, adbc_driver_manager.Error, pa.ArrowException) as error:
                if "type mismatch" not in str(error).lower():
                    raise
                break
            delivered += batch.num_rows
            yield batch
        rest = execute(f"{probe} UNION ALL SELECT * FROM ({checked} LIMIT -1 OFFSET {delivered})")
        for batch in rest:  # the same types as the unchecked read's (see _typed_as_staged)
            yield pa.RecordBatch.from_arrays(
                [c.cast(f.type) for c, f in zip(batch.columns, reader.schema, strict=True)], schema=reader.schema
            )

    reader = execute(unchecked)
    if _typed_as_staged(reader.schema, text):
        yield valid_utf8(pa.RecordBatchReader.from_batches(reader.schema, rows(reader)))
    else:
        yield valid_utf8(execute(checked))


def _typed_as_staged(schema: pa.Schema, text: set[str]) -> bool:
    """Whether the driver typed every column as stage() reads it: text as strings, the others as 64-bit integers."""
    return all(
        (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)) if f.name in text else f.type == pa.int64()
        for f in schema
    )


def valid_utf8(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """The batches of `reader`, with text that is not valid UTF-8 (SQLite does not check) decoded with U+FFFD
    replacements, so that one bad NVTX message does not fail the whole export. Valid batches pass untouched."""

    def repaired(column: pa.Array) -> pa.Array:
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            return column
        raw = column.cast(pa.large_binary()).to_pylist()
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw], column.type)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid:
                batch = pa.RecordBatch.from_arrays([repaired(c) for c in batch.columns], schema=batch.schema)
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())
