"""Opening traceview databases: read-only connections for queries, and atomic write sessions for ingest.

Reads: `schema.sql`. Writes: the database file. A new database is built beside its final path and renamed
into place only when ingest succeeded; an existing database is changed inside one transaction. Either way
an interrupted or failed ingest leaves what was there before.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from . import interrupts
from .errors import DatabaseError, is_text, os_problem
from .scratch import process_exists, scratch_directory
from .version import SCHEMA_VERSION

# Never download DuckDB extensions: opening a file DuckDB takes for SQLite would otherwise fetch sqlite_scanner from
# the internet (a delay, a multi-line error offline, and traffic nobody asked for). What traceview uses is built in.
CONNECT_CONFIG = {"autoinstall_known_extensions": False}

MIN_MEMORY_BUDGET = 1 << 30  # below this, a small trace's ingest would spill for nothing
RAM_SHARE = 0.8  # DuckDB's own default limit: 80% of physical memory
# sha256 of schema.sql's columns as _columns_digest writes them. Every command checks a database's columns against
# it (3 ms) instead of building schema.sql in memory (0.12 s); tests/test_startup.py checks it against schema.sql.
SCHEMA_COLUMNS_SHA256 = "82f2651178bbef174b20d48642ce05ebf4c306fc1af52b0415995119a8aa6827"


def duckdb_connect(path: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """duckdb.connect with traceview's settings: no extension downloads (CONNECT_CONFIG), no progress bar
    (DuckDB draws it on stdout during long statements, in the middle of a command's data)."""
    con = duckdb.connect(path, read_only=read_only, config=CONNECT_CONFIG)
    con.execute("SET enable_progress_bar = false")
    return con


def first_row(rows: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The first of `rows` (from fetchall), or None: DuckDB wants every result read to its end."""
    return rows[0] if rows else None


def has_rows(con: duckdb.DuckDBPyConnection, query: str) -> bool:
    """Whether `query` (SQL) returns a row; DuckDB stops at the first."""
    return bool(con.execute(f"SELECT EXISTS ({query})").fetchall()[0][0])


def execute_with(con: duckdb.DuckDBPyConnection, name: str, data: Any, sql: str, params: Any = None) -> None:
    """Run `sql` with `data` (a DataFrame, an Arrow table or reader) readable as the view `name`, then drop the
    view. When the statement fails, DuckDB has aborted the transaction and refuses the drop as well: the
    statement's own error is the one raised (an interrupted one stays an interruption)."""
    con.register(name, data)
    try:
        con.execute(sql, params)
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.unregister(name)
        raise
    con.unregister(name)


def schema_sql() -> str:
    """The DDL of every table, with a comment on each table and column."""
    return resources.files("traceview").joinpath("schema.sql").read_text()


def connect(path: str | Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open an existing traceview database (read-only by default) after checking its schema version."""
    path = Path(path)
    if not path.is_file():
        raise DatabaseError(path, "no such database", "create it with `traceview ingest TRACE -o " + str(path) + "`")
    con = _open(path, read_only=read_only)
    _checked_or_closed(con, path)
    return con


def _open(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    _check_name(path)
    try:
        con = duckdb_connect(str(path), read_only=read_only)
        _OPENED.append(path)
        return con
    except duckdb.IOException as error:
        if "lock" in str(error).lower():
            raise DatabaseError(
                path,
                "the database is open for writing in another process",
                "wait for that process (an ingest?) to finish, or write to another -o file",
            ) from error
        kind = _kind_of_file(path)
        if kind is not None:
            remedy = f"ingest it: `traceview ingest {path} -o NEW.db`" if "trace" in kind or "export" in kind else ""
            remedy = remedy or "give a .db file written by `traceview ingest`"
            raise DatabaseError(path, f"this is {kind}, not a traceview database", remedy) from error
        reason = str(error).strip().splitlines()[0]
        raise DatabaseError(path, f"cannot open the database ({reason})", "check the path") from error
    except duckdb.Error as error:
        raise DatabaseError(path, "not a DuckDB database", "give a .db file written by `traceview ingest`") from error


# What a file that DuckDB cannot open is, by its first bytes: DuckDB would say "extension sqlite_scanner not found"
# of an SQLite file, and "not a valid DuckDB database file" of the rest.
_FILE_KINDS = (
    (b"SQLite format 3\x00", "an SQLite database (an Nsight Systems export? a trace to ingest)"),
    (b"\x1f\x8b", "gzip-compressed data (a trace to ingest?)"),
    (b"PAR1", "a Parquet file"),
    (b"{", "JSON (a trace to ingest?)"),
    (b"[", "JSON (a trace to ingest?)"),
)


def _kind_of_file(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(64).lstrip()
    except OSError:
        return None
    if not head:
        return "an empty file"
    return next((kind for magic, kind in _FILE_KINDS if head.startswith(magic)), None)


def check_schema_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse databases that traceview did not write, that come from another schema version, or that lack a table
    or column of this one (changed by hand): every command would otherwise fail halfway with DuckDB's error."""
    try:
        row = first_row(con.execute("SELECT value FROM traceview_meta WHERE key = 'schema_version'").fetchall())
    except duckdb.CatalogException as error:
        raise DatabaseError(
            path, "not a traceview database (no traceview_meta table)", "ingest a trace into a new -o file"
        ) from error
    found = str(row[0]).strip() if row else "0"
    if found != str(SCHEMA_VERSION):
        raise DatabaseError(
            path,
            f"database schema version {found[:40]}, this traceview reads version {SCHEMA_VERSION}",
            "ingest the trace again into a new -o file",
        )
    present = _columns(con)
    if _columns_digest(present) == SCHEMA_COLUMNS_SHA256:
        return
    missing = sorted(_schema_columns().items() - present.items())
    if missing:
        (table, column), kind = missing[0]
        has_table = any(t == table for t, _ in present)
        what = f"column {table}.{column} {kind}" if has_table else f"table {table}"
        raise DatabaseError(
            path,
            f"the database lacks {what} of schema version {SCHEMA_VERSION} (changed by hand?)",
            "ingest the trace again into a new -o file",
        )


@cache
def _schema_columns() -> dict[tuple[str, str], str]:
    """(table, column) -> type of every column schema.sql creates."""
    with duckdb_connect() as con:
        con.execute(schema_sql())
        return _columns(con)


def _columns_digest(columns: dict[tuple[str, str], str]) -> str:
    """sha256 of "table.column TYPE" lines, sorted: the same for the same columns and types."""
    lines = "\n".join(f"{table}.{column} {kind}" for (table, column), kind in sorted(columns.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _columns(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], str]:
    rows = con.execute(
        """SELECT table_name, column_name, data_type FROM duckdb_columns()
           WHERE database_name = current_database() AND NOT internal
             AND table_oid IN (SELECT table_oid FROM duckdb_tables())  -- tables, not the SQL library's views"""
    ).fetchall()
    return {(table, column): kind for table, column, kind in rows}


def _checked_or_closed(con: duckdb.DuckDBPyConnection, path: Path, verify: bool = False) -> None:
    """check_schema_version (and verify_intact when `verify`), closing the connection when they refuse (else the
    file stays open, and locked)."""
    try:
        try:
            check_schema_version(con, path)
            if verify:
                verify_intact(con, path)
        except duckdb.Error as error:
            damaged = damage_error(error, [path])
            if damaged is None:
                raise
            raise damaged from error
    except BaseException:
        con.close()
        raise


# Damage DuckDB reports when it reads a block: a checksum that does not match, or a file cut short.
_DAMAGE_SIGNS = ("Corrupt database file", "Could not read enough bytes from file")
_OPENED: list[Path] = []  # the databases this process opened, which a damaged block found later belongs to


def verify_intact(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Read every block of every table: DuckDB checks each block's checksum as it reads it. Done before writing to
    an existing database, which would otherwise add a run to a damaged file without reading the damaged part
    (~0.1 s per million kernels). Reading commands need no such pass: every block they read is checked, and
    damage found then is reported by damage_error."""
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary"
    ).fetchall()
    for (table,) in tables:
        quoted = table.replace('"', '""')
        con.execute(f'SELECT bit_xor(hash(COLUMNS(*))) FROM "{quoted}"').fetchall()


def damage_error(error: BaseException, paths: list[Path] | None = None) -> DatabaseError | None:
    """The one-line error for a damaged database file (`paths`, by default those this process opened), when
    `error` is DuckDB finding damage; else None."""
    if not isinstance(error, duckdb.Error) or not any(sign in str(error) for sign in _DAMAGE_SIGNS):
        return None
    where = " or ".join(dict.fromkeys(str(p) for p in (paths if paths is not None else _OPENED))) or None
    return DatabaseError(
        where,
        f"the database file is damaged ({str(error).strip().splitlines()[0]})",
        "ingest the traces again into a new -o file (a disk or copy error damaged this one)",
    )


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table of schema.sql (idempotent) and record the schema version."""
    con.execute(schema_sql())
    con.execute("INSERT OR REPLACE INTO traceview_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


@contextlib.contextmanager
def write_session(path: str | Path, memory_limit: int | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose changes all land, or none do.

    New database: built in `PATH.tmp-PID`, renamed over PATH on success, deleted on failure.
    Existing database: one transaction, committed on success and rolled back on failure (DuckDB's WAL
    keeps the previous state if the process is killed).
    With `memory_limit` (bytes; see memory_budget), DuckDB's memory is capped; it spills beyond the cap to a
    temporary directory that outlives the connection.
    """
    if memory_limit is None:
        with _write_session(Path(path)) as con:
            yield con
        return
    with scratch_directory("spill") as spill, _write_session(Path(path)) as con:
        con.execute(f"SET temp_directory = '{_sql_quoted(spill)}'")
        con.execute(f"SET memory_limit = '{int(memory_limit)}B'")
        yield con


def memory_budget(data_bytes: int) -> int:
    """DuckDB's memory cap, in bytes, for writing `data_bytes`: that much, at least 1 GiB (below that a small
    trace would spill for nothing), at most DuckDB's own default (80% of RAM).

    A 1 GB Kineto trace peaks at ~1.3 GB of RSS with the cap, 1.7-1.8 GB without, for ~1 s more system time
    (the spill) and the same wall time. Only
    what DuckDB can spill (its tables, sorts, joins) is bounded; Python's own memory is not. A statement that
    cannot spill enough fails with duckdb.OutOfMemoryException (api.ingest then ingests again without a cap).
    """
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(max(MIN_MEMORY_BUDGET, data_bytes), RAM_SHARE * physical))


def _sql_quoted(text: str) -> str:
    return text.replace("'", "''")


@contextlib.contextmanager
def _write_session(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """_existing_session or _new_session; an OS failure on the way (no space, read-only, ...) becomes one
    DatabaseError, after the database was left as it was. A symbolic link is followed: its target is written."""
    path = _followed(path)
    _check_name(path)
    if "?" in str(path.absolute()):  # DuckDB cuts a path at '?' to name the WAL file: the commit would fail
        raise DatabaseError(
            path, "DuckDB cannot write a database whose path holds '?'", "write it elsewhere, then move it there"
        )
    try:
        with _existing_session(path) if path.exists() else _new_session(path) as con:
            yield con
    except (OSError, duckdb.Error) as error:
        found = os_problem(error)
        if found is None or isinstance(error, duckdb.OutOfMemoryException):  # api.ingest retries without a cap
            raise
        problem, remedy = found
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DatabaseError(path, f"{problem} ({detail}); nothing was written", remedy) from error


def _check_name(path: Path) -> None:
    """DuckDB takes only UTF-8 file names (it fails with std::bad_cast on others)."""
    if not is_text(str(path.absolute())):
        raise DatabaseError(
            path, "DuckDB cannot open a file whose path holds bytes of no encoding", "rename it, or write elsewhere"
        )


def _followed(path: Path) -> Path:
    """`path`, or the file a symbolic link at `path` points to (which may not exist yet)."""
    if not path.is_symlink():
        return path
    try:
        return path.resolve()
    except (OSError, RuntimeError) as error:  # a loop of links (RuntimeError before Python 3.13)
        raise DatabaseError(path, "a loop of symbolic links", "fix or remove the link") from error


@contextlib.contextmanager
def _existing_session(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = _open(path, read_only=False)
    _checked_or_closed(con, path, verify=True)
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        with interrupts.committing():
            con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT (a full disk) has already ended the transaction
            con.execute("ROLLBACK")
        raise
    finally:
        with contextlib.suppress(duckdb.Error):
            con.close()


@contextlib.contextmanager
def _new_session(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    _remove_stale_twins(path)
    _remove_db_files(tmp)
    try:
        con = duckdb_connect(str(tmp))
    except duckdb.Error as error:  # no such directory, not writable, no space, ...
        _remove_db_files(tmp)  # DuckDB may have created it before failing (0 bytes on a full disk)
        reason = str(error).splitlines()[0].replace(str(tmp), str(path))
        problem, remedy = os_problem(error) or ("", "give an -o path in a writable directory")
        problem = f"cannot create the database: {problem} ({reason})" if problem else f"cannot create it ({reason})"
        raise DatabaseError(path, problem, remedy) from error
    try:
        con.execute("BEGIN TRANSACTION")  # one commit for the whole build: ~70 DDL statements commit in 0.02 s, not 0.5
        create_schema(con)
        yield con
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        con.close()
        with interrupts.committing():
            _move_into_place(tmp, path)
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # after a fatal error (a failed checkpoint) close fails too
            con.close()
        _remove_db_files(tmp)
        raise


def _move_into_place(tmp: Path, path: Path) -> None:
    """Rename tmp to path, unless another ingest created path meanwhile: renaming over it would lose its run."""
    try:
        os.link(tmp, path)
    except FileExistsError as error:
        raise DatabaseError(
            path,
            "another process created this database while this run was being read",
            "run the same ingest again to add the run to it",
        ) from error
    except OSError:  # a filesystem without hard links
        os.replace(tmp, path)
    else:
        tmp.unlink()


def _remove_stale_twins(path: Path) -> None:
    """Remove PATH.tmp-PID files (and their .wal) left by an ingest that was killed (kill -9 skips every cleanup),
    when no process PID runs any more; a twin of a running ingest stays."""
    for twin in path.parent.glob(glob.escape(path.name) + ".tmp-*"):
        pid = twin.name.removeprefix(path.name + ".tmp-").removesuffix(".wal")
        if pid.isdigit() and not process_exists(int(pid)):
            with contextlib.suppress(OSError):
                twin.unlink(missing_ok=True)


def _remove_db_files(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(OSError):  # e.g. a read-only file system, where nothing was written either
            leftover.unlink(missing_ok=True)
