"""Nsight Systems exports, opened for reading: SQLite files, Parquet directories and reports.

`open_export` gives an `Export` whatever the input: an SQLite export (`nsys export --type sqlite`) is queried inside
SQLite through the ADBC driver; a Parquet export (`--type parquetdir`, one TABLE.parquet per table) through DuckDB views
named after its tables, with the same SQL; a report (.nsys-rep, .qdrep: a private format) is first exported to SQLite
by the user's own nsys (--nsys, else $NSYS, else PATH) in a directory the caller owns, after checking that this nsys
is at least as new as the one that wrote the report (reports name it in their section directory, near the end).
`stage` streams a query's rows into a DuckDB temp table as Arrow record batches; `rows` reads small results whole.

Errors: BadInputError for files that are not exports, truncated or damaged; ToolMissingError, in one line with the
exact `nsys export` command to run elsewhere, when nsys is missing, too old or fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as sqlite_dbapi
import duckdb
import pyarrow as pa

from ..db import execute_with, usable_cores
from ..errors import BadInputError, ToolMissingError
from . import IngestOptions, bounds, refuse_special_files
from .nsys_rows import Execute, sqlite_rows, valid_utf8

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME, DRIVER = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # --cuda-graph-trace=graph: one row per replay, no kernels
EXPORT_META = ("META_DATA_EXPORT", "EXPORT_META_DATA")
# Tables whose presence marks a file as an nsys export; any of them may be absent from a lazy export.
NSYS_TABLES = (*EXPORT_META, KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX, "StringIds", "TARGET_INFO_SESSION_START_TIME")
# The tables ingest reads, whose cost counts against an SQLite export's size (bounds.check_sqlite).
COSTED_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, NVTX, "StringIds", "ThreadNames", "PROCESSES", GRAPH_TRACE)
COSTED_TABLES += ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")
VERSION = re.compile(r"(20\d\d)\.(\d+)\.(\d+)(?:\.(\d+))?")
REPORT_VERSION = re.compile(rb"(?<![\d.])(20\d\d\.\d+\.\d+\.\d+)(?![\d.])")
REPORT_SCAN_BYTES = 1 << 20
BATCH_ROWS = 65536  # rows per Arrow record batch streamed from SQLite
EXPORT_TIMEOUT_S = 3600  # the longest `nsys export` of a report may take (a 1 GB report takes minutes)
STAGED_TYPES = {"i": "BIGINT", "n": "INTEGER", "t": "VARCHAR"}  # the column kinds of stage()
# SQLite exports from this size on have their large tables read by worker processes (prefetching). The three workers'
# start costs ~0.5 CPU-s: on 2 shared cores the 100 MB bench export took 5.3 -> 5.8 CPU-s with them, the 1 GB one
# 48.4-49.6 -> 47.3-48.4.
PREFETCH_MIN_BYTES = 512 << 20


# ---------------------------------------------------------------------------------------------------------
# Opening an export (exporting a report first)


@dataclass(frozen=True)
class Export:
    """An open export: the path named in messages, its tables' columns, and what runs queries on it.

    SQLite exports are queried inside SQLite through ADBC (`sqlite`); Parquet exports (one file per table) are
    queried by DuckDB itself (`duck`) through temporary views named after the tables. The SQL is the same.
    """

    shown: Path
    columns: dict[str, frozenset[str]]
    sqlite: Any = None
    duck: duckdb.DuckDBPyConnection | None = None
    source: Path | None = None  # the SQLite file queried (a report's own export)
    prefetched: dict[str, Prefetch] = field(default_factory=dict)  # staged table -> its worker (see prefetching)

    def has(self, table: str, column: str | None = None) -> bool:
        return table in self.columns and (column is None or column in self.columns[table])

    def col(self, table: str, alias: str, column: str) -> str:
        """`alias.column` when the table has that column (older exports lack some), else NULL."""
        return f'{alias}."{column}"' if self.has(table, column) else "NULL"


# What reading a damaged export raises: from the ADBC driver, Arrow, or DuckDB reading Arrow or Parquet.
READ_ERRORS = (adbc_driver_manager.Error, OSError, pa.ArrowException, UnicodeDecodeError, duckdb.InvalidInputException)
READ_ERRORS += (duckdb.IOException,)
NOT_AN_EXPORT = "give the .sqlite written by `nsys export --type sqlite` (or its --type parquetdir directory)"


@contextmanager
def open_export(con: duckdb.DuckDBPyConnection, path: Path, tmp: Path, options: IngestOptions) -> Iterator[Export]:
    if path.is_dir():
        with _parquet_export(con, path, options.max_expansion) as export:
            yield _checked(export)
        return
    with open(path, "rb") as handle:
        head = handle.read(100)
    sqlite_path = path
    if not head.startswith(SQLITE_MAGIC):
        if not path.name.lower().endswith(REPORT_SUFFIXES):
            raise BadInputError(path, "not an SQLite file", NOT_AN_EXPORT)
        sqlite_path = export_report(path, tmp, options)
    else:
        _check_not_truncated(path, head)
        _check_no_wal(path)
        bounds.check_sqlite(path, options.max_expansion, COSTED_TABLES)
    try:
        conn = sqlite_dbapi.connect(_sqlite_uri(sqlite_path))
    except adbc_driver_manager.Error as error:
        raise BadInputError(path, f"cannot open the SQLite file ({_first_line(error)})", NOT_AN_EXPORT) from error
    with closing(conn):
        export = Export(path, {}, sqlite=conn)
        tables = [r[0] for r in rows(export, "SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {
            t: frozenset(r[0] for r in rows(export, f"SELECT name FROM pragma_table_info('{t}')"))
            for t in tables
            if re.fullmatch(r"\w+", t)
        }
        yield _checked(Export(path, columns, sqlite=conn, source=sqlite_path))


def _sqlite_uri(path: Path) -> str:
    """Read-only and immutable: SQLite writes nothing beside the file (no -shm or -wal of a WAL-mode export), takes
    no lock."""
    return f"{path.absolute().as_uri()}?mode=ro&immutable=1"


@contextmanager
def _parquet_export(con: duckdb.DuckDBPyConnection, path: Path, ratio: float | None) -> Iterator[Export]:
    """A `nsys export --type parquetdir` directory: one temporary view per TABLE.parquet, dropped afterwards; each
    file's rows first checked against its size (bounds.check_parquet)."""
    files = {f.stem: f for f in sorted(path.glob("*.parquet")) if re.fullmatch(r"\w+", f.stem)}
    _refuse_traceview_names(con, files)
    refuse_special_files(files.values(), NOT_AN_EXPORT)
    for file in files.values():
        bounds.check_parquet(file, ratio)
    columns = {}
    try:
        try:
            for table, file in files.items():
                quoted = str(file).replace("'", "''")
                con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM read_parquet('{quoted}')")
                columns[table] = frozenset(r[0] for r in con.execute(f"DESCRIBE {table}").fetchall())
        except duckdb.Error as error:
            raise _damaged(path, error) from error
        yield Export(path, columns, duck=con)
    finally:
        for table in files:
            with suppress(duckdb.Error):
                con.execute(f"DROP VIEW IF EXISTS {table}")


def _refuse_traceview_names(con: duckdb.DuckDBPyConnection, files: dict[str, Path]) -> None:
    """A file named like a table or view of the connection (the schema's, DuckDB's own), or like ingest's staging
    tables (`_` first), would become a TEMP view in its place (DuckDB's names know no case): refused."""
    taken = con.execute(
        "SELECT lower(table_name) FROM duckdb_tables() UNION SELECT lower(view_name) FROM duckdb_views()"
    )
    names = {row[0] for row in taken.fetchall()}
    for table, file in files.items():
        if table.startswith("_") or table.lower() in names:
            raise BadInputError(
                file, f"named like {table}, a table traceview or DuckDB keeps, not one nsys exports", "remove it"
            )


def _checked(export: Export) -> Export:
    if not any(export.has(t) for t in NSYS_TABLES):
        raise BadInputError(
            export.shown,
            "not an Nsight Systems export (no NVTX_EVENTS, CUPTI_ACTIVITY_KIND_* or META_DATA_EXPORT table)",
            NOT_AN_EXPORT,
        )
    return export


def _check_no_wal(path: Path) -> None:
    """A WAL-mode export with a non-empty PATH-wal beside it is still being written (or its writer was killed): the
    file alone, opened immutable, lacks the rows in the WAL."""
    wal = path.with_name(path.name + "-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise BadInputError(
            path,
            f"the export is not complete ({wal.name} beside it holds rows not yet in the file)",
            "wait for nsys export to finish, or open the file once with sqlite3 to merge its WAL",
        )


def _check_not_truncated(path: Path, head: bytes) -> None:
    """The SQLite header gives page size and page count: a shorter file lost its end."""
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if len(head) < 100 or path.stat().st_size < page_size * pages:
        raise BadInputError(
            path,
            f"the SQLite file is truncated ({path.stat().st_size} of {page_size * pages} bytes)",
            "copy it again, or export the report again with `nsys export --type sqlite`",
        )


def rows(export: Export, sql: str) -> list[tuple[Any, ...]]:
    """A small query's rows (metadata, counts): read whole."""
    with _read_errors(export):
        if export.duck is not None:
            return export.duck.execute(sql).fetchall()
        with closing(export.sqlite.cursor()) as cursor:
            cursor.execute(sql)
            table = valid_utf8(cursor.fetch_record_batch()).read_all()
            return list(zip(*(column.to_pylist() for column in table.columns), strict=True))


@contextmanager
def _read_errors(export: Export) -> Iterator[None]:
    """A failure to read the export as one line: damaged files, or Parquet files not laid out as expected."""
    try:
        yield
    except READ_ERRORS as error:
        raise _damaged(export.shown, error) from error
    except duckdb.Error as error:
        raise _parquet_problem(export, error) or error from error


def _damaged(path: Path, error: Exception) -> BadInputError:
    return BadInputError(
        path,
        f"the export cannot be read ({_first_line(error)})",
        "the file is damaged or incomplete; export the report again with `nsys export`",
    )


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def stage(
    con: duckdb.DuckDBPyConnection, export: Export, table: str, parts: list[str], columns: dict[str, str]
) -> None:
    """Run the SQLite queries `parts` (each `expressions FROM ...`, in the order of `columns`) and stream their rows
    into DuckDB temp table `table`.

    `columns` maps each output column to i (integer), n (integer kept as INTEGER: a larger one becomes NULL) or t
    (text). The ADBC driver types a column from its first rows, so a text column that starts with NULLs would be
    typed int64 and fail at its first string: a first probe row of typed literals fixes every column's type (and its
    name), and is dropped on the DuckDB side.
    """
    sql, probe = _stage_query(parts, columns)
    create = "CREATE OR REPLACE TEMP TABLE {table} AS SELECT {typed} FROM {rows} WHERE _probe = 0"
    with _read_errors(export):
        try:
            if export.duck is not None:
                con.execute(create.format(table=table, typed=_typed(columns, None), rows=f"({sql})"))
                return
            with _staged_rows(export, table, (sql, probe), columns) as stream:
                typed = _typed(columns, stream.schema)
                execute_with(con, "_nsys_stream", stream, create.format(table=table, typed=typed, rows="_nsys_stream"))
        except adbc_driver_manager.ProgrammingError as error:
            if "malformed" in str(error):
                raise _damaged(export.shown, error) from error
            raise _not_laid_out(export.shown, error) from error


def _stage_query(parts: list[str], columns: dict[str, str]) -> tuple[str, str]:
    """(stage()'s query of the rows of `parts`, its first row: the probe of typed literals)."""
    literals = ", ".join(("''" if kind == "t" else "0") + f" AS {n}" for n, kind in columns.items())
    probe = f"SELECT 1 AS _probe, {literals}"
    return " UNION ALL ".join([probe] + [f"SELECT 0, {part}" for part in parts]), probe


@contextmanager
def _staged_rows(
    export: Export, table: str, query: tuple[str, str], columns: dict[str, str]
) -> Iterator[pa.RecordBatchReader]:
    """The rows of `query` (stage()'s query and probe) for staged `table`: from the file its worker wrote (see
    prefetching), else read here."""
    written = _prefetched_file(export, table, query[0])
    if written is None:
        with _cursors(export) as execute, sqlite_rows(execute, *query, columns) as stream:
            yield stream
        return
    try:
        with pa.OSFile(str(written)) as source:
            yield pa.ipc.open_stream(source)
    finally:
        written.unlink(missing_ok=True)


@contextmanager
def _cursors(export: Export) -> Iterator[Execute]:
    """Runs queries on the export's SQLite connection, BATCH_ROWS rows a batch; their cursors closed at the end."""
    cursors: list[Any] = []

    def execute(query: str) -> pa.RecordBatchReader:
        cursors.append(cursor := export.sqlite.cursor())
        cursor.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cursor.execute(query)
        return cursor.fetch_record_batch()

    try:
        yield execute
    finally:
        for cursor in reversed(cursors):
            cursor.close()


@dataclass(frozen=True)
class Prefetch:
    """A worker process (nsys_rows.main) reading the rows of stage()'s query `sql` into the Arrow IPC file `path`."""

    process: subprocess.Popen[bytes]
    sql: str
    path: Path

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.path.unlink(missing_ok=True)


@contextmanager
def prefetching(export: Export, tables: dict[str, tuple[list[str], dict[str, str]]], tmp: Path) -> Iterator[None]:
    """Read the rows of `tables` (staged table -> the parts and columns stage() will be given) in worker processes,
    one per table, each into an Arrow IPC file in `tmp` that stage() reads instead of the export: the ADBC driver
    holds the GIL while it reads, so the reads of a large export run beside each other and beside DuckDB only in
    processes. Only for SQLite exports of PREFETCH_MIN_BYTES or more, on more than one core, with room in `tmp`
    (the rows take about the export's size); workers not waited for are stopped at the end.

    1 GB bench export, 2 shared cores: staging in the ingest's process 10.5 -> 1.8 CPU-s (DuckDB appending from the
    files), the workers 10.5 CPU-s beside it; the whole ingest ~3.5 s faster at the same CPU (bench/README.md)."""
    source = _worth_prefetching(export, tmp)
    if source is not None:
        for table, (parts, columns) in tables.items():
            if parts:
                export.prefetched[table] = _start_worker(source, parts, columns, tmp / f"{table}.arrows")
    try:
        yield
    finally:
        for job in export.prefetched.values():
            job.stop()
        export.prefetched.clear()


def _worth_prefetching(export: Export, tmp: Path) -> Path | None:
    """The SQLite file to read in workers, when prefetching is worth it (see prefetching); else None."""
    source = export.source if export.sqlite is not None else None
    if source is None or usable_cores() < 2:
        return None
    size = source.stat().st_size
    return source if size >= PREFETCH_MIN_BYTES and shutil.disk_usage(tmp).free > 2 * size else None


def _start_worker(source: Path, parts: list[str], columns: dict[str, str], path: Path) -> Prefetch:
    """A worker reading stage()'s query of `parts` from SQLite file `source` into `path`; it runs this traceview
    package, wherever it is, and takes its job as JSON in its one argument."""
    sql, probe = _stage_query(parts, columns)
    job = {"uri": _sqlite_uri(source), "sql": sql, "probe": probe, "columns": columns}
    job |= {"batch_rows": BATCH_ROWS, "out": str(path)}
    root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {root!r}); from traceview.ingest.nsys_rows import main; sys.exit(main())"
    process = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(job)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return Prefetch(process, sql, path)


def _prefetched_file(export: Export, table: str, sql: str) -> Path | None:
    """The file of `table`'s worker once it is done, if it read `sql` and succeeded; else None (the rows are read
    here, and a damaged export is reported from there as always)."""
    job = export.prefetched.pop(table, None)
    if job is None:
        return None
    if job.process.wait() != 0 or job.sql != sql:
        job.path.unlink(missing_ok=True)
        return None
    return job.path


def _typed(columns: dict[str, str], schema: pa.Schema | None) -> str:
    """The select list that gives each staged column its type: a TRY_CAST (a value of the wrong type, text or 1e300
    in an integer column, becomes NULL instead of failing), left out where the Arrow stream's `schema` already has
    the type (64-bit integers, strings: a cast that changes nothing still cost ~1 CPU-s per 6 M rows of the 1 GB
    bench export's NVTX events)."""
    return ", ".join(
        n
        if schema is not None and _arrow_kind(schema.field(n).type) == kind
        else f"TRY_CAST({n} AS {STAGED_TYPES[kind]}) AS {n}"
        for n, kind in columns.items()
    )


def _arrow_kind(arrow_type: pa.DataType) -> str | None:
    """The staged column kind (see stage) that an Arrow type is as it stands: i for int64, t for strings."""
    if arrow_type == pa.int64():
        return "i"
    return "t" if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) else None


def _not_laid_out(path: Path, error: Exception) -> BadInputError:
    return BadInputError(
        path,
        f"the export's tables are not laid out as traceview expects ({_first_line(error)})",
        "export the report with nsys 2022.4 to 2026.x, or report the nsys version that wrote it",
    )


def _parquet_problem(export: Export, error: duckdb.Error) -> BadInputError | None:
    """The one-line error for DuckDB failing on a Parquet export's files: a column traceview reads is missing or of
    another kind (a binder error), else the files are damaged; None for the SQLite path's own DuckDB, and for what
    is no fault of the files (out of memory, an interruption)."""
    if export.duck is None or isinstance(error, duckdb.OutOfMemoryException | duckdb.InterruptException):
        return None
    if isinstance(error, duckdb.BinderException):
        return _not_laid_out(export.shown, error)
    return _damaged(export.shown, error)


def string_id(export: Export, id_sql: str) -> str:
    """SQL for the StringIds id that `id_sql` names when that string has a value (as string_value finds it), else
    NULL: staged rows keep the id, and each string is read once (see string_value)."""
    if not export.has("StringIds"):
        return "NULL"
    return f"(SELECT id FROM StringIds WHERE id = {id_sql} AND value IS NOT NULL)"


def string_value(export: Export, id_sql: str, fallback: str) -> str:
    """SQL for the StringIds value of `id_sql` (a scalar subquery on the primary key)."""
    if not export.has("StringIds"):
        return fallback
    return f"coalesce((SELECT value FROM StringIds WHERE id = {id_sql}), {fallback})"


# ---------------------------------------------------------------------------------------------------------
# .nsys-rep reports: exported by the user's own nsys


def export_report(report: Path, tmp: Path, options: IngestOptions) -> Path:
    """Export `report` to tmp/<name>.sqlite with the user's nsys; ToolMissingError when it is missing or too old."""
    writer = report_writer_version(report)
    needs = f"Nsight Systems {writer} or newer" if writer else "Nsight Systems"
    nsys = find_nsys(options)
    if nsys is None:
        given = options.nsys or os.environ.get("NSYS")
        raise ToolMissingError(
            report,
            f"reading an .nsys-rep report needs nsys, and there is no nsys at {given} (--nsys or $NSYS)"
            if given
            else "reading an .nsys-rep report needs nsys, which is not installed (not on PATH, no --nsys, no $NSYS)",
            f"install {needs} and pass --nsys PATH, or run `{export_command(report)}` where it is and ingest the "
            ".sqlite",
        )
    installed = nsys_version(nsys)
    if installed is None:
        raise ToolMissingError(
            report,
            f"{nsys} does not run as nsys (`nsys --version` failed)",
            f"pass --nsys PATH of {needs}, or run `{export_command(report)}` where it is and ingest the .sqlite",
        )
    if writer and _version_tuple(installed) < _version_tuple(writer):
        raise ToolMissingError(
            report,
            f"the report was written by nsys {writer} but {nsys} is version {installed}, which cannot read it",
            f"pass --nsys PATH of {needs}, or run `{export_command(report)}` where it is and ingest the .sqlite",
        )
    out = tmp / (report.name.rsplit(".", 1)[0] + ".sqlite")
    if options.progress:
        options.progress(f"exporting {report.name} with nsys {installed}", 0, 0)
    command = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]
    done = _run_in_group(command, EXPORT_TIMEOUT_S)
    if done is None:
        raise ToolMissingError(
            report,
            f"nsys {installed} did not finish exporting the report within {EXPORT_TIMEOUT_S:,} s (stopped)",
            f"run `{export_command(report)}` yourself and ingest the .sqlite",
        )
    if done.returncode != 0 or not out.is_file():
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ToolMissingError(
            report,
            f"nsys {installed} could not export the report (exit {done.returncode}: {(said or ['no message'])[-1]})",
            f"run `{export_command(report)}` with {needs} and ingest the .sqlite",
        )
    return out


def _run_in_group(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """Run `command` in a process group of its own; None when it ran past `timeout_s`. Whatever stops the wait (the
    timeout, Ctrl-C, SIGTERM) kills the whole group: nsys starts helper processes that would outlive it."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its helpers, also after a clean exit
        process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def find_nsys(options: IngestOptions) -> str | None:
    """The nsys to use: --nsys, else $NSYS, else nsys on PATH; None when there is none."""
    for given in (options.nsys, os.environ.get("NSYS")):
        if given:
            return shutil.which(given) or (given if Path(given).is_file() else None)
    return shutil.which("nsys")


def nsys_version(nsys: str) -> str | None:
    """`nsys --version` as 2026.2.1.210, or None when it does not run."""
    try:
        done = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=120, errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None
    match = VERSION.search(done.stdout + done.stderr)
    return match.group(0) if match and done.returncode == 0 else None


def report_writer_version(report: Path) -> str | None:
    """Version of the nsys that wrote the report (as 2022.4.2.1), from the version strings near its start or end."""
    size = report.stat().st_size
    with open(report, "rb") as handle:
        chunk = handle.read(REPORT_SCAN_BYTES)
        if size > REPORT_SCAN_BYTES:
            handle.seek(max(size - REPORT_SCAN_BYTES, REPORT_SCAN_BYTES))
            chunk += handle.read()
    found = [m.group(1).decode() for m in REPORT_VERSION.finditer(chunk)]
    return max(found, key=found.count) if found else None


def _version_tuple(version: str) -> tuple[int, ...]:
    match = VERSION.search(version)
    return tuple(int(p) for p in match.groups()[:3]) if match else ()


def export_command(report: Path) -> str:
    target = report.with_name(report.name.rsplit(".", 1)[0] + ".sqlite")
    return f"nsys export --type sqlite --output {shlex.quote(str(target))} {shlex.quote(str(report))}"
