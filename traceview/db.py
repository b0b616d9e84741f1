"""Opening traceview databases: read-only connections for queries, and atomic write sessions for ingest.

Reads: `schema.sql`. Writes: the database file. A new database is built beside its final path and renamed
into place only when ingest succeeded; an existing database is changed inside one transaction. Either way
an interrupted or failed ingest leaves what was there before.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from . import interrupts
from .errors import DatabaseError, is_text, os_problem
from .scratch import Owned, scratch_directory, sweep
from .version import SCHEMA_VERSION

# What every connection allows. A database may come from anyone (attached to a bug report, a CI baseline), and
# DuckDB stores views, macros, defaults and generated columns in it: nothing stored may read files or the
# environment, download or load an extension (also: opening a file DuckDB takes for SQLite would fetch
# sqlite_scanner from the internet), or change these settings. What traceview uses is built in.
CONNECT_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# The settings that may change once the configuration is locked, none of which reaches out: the progress bar, set
# per connection (DuckDB draws it on stdout, in the middle of a command's data), and those ingest changes for one
# statement (kineto.py).
CHANGEABLE = ["enable_progress_bar", "memory_limit", "preserve_insertion_order", "threads"]

MIN_MEMORY_BUDGET = 1 << 30  # below this, a small trace's ingest would spill for nothing
RAM_SHARE = 0.8  # DuckDB's own default limit: 80% of physical memory
AS_SHARE = 0.25  # under an address-space limit (ulimit -v), DuckDB's share of what is left of it
# sha256 of the CREATE TABLE statements DuckDB keeps for schema.sql's tables, as _tables_digest writes them. Every
# command checks a database's tables against it (3 ms) instead of building schema.sql in memory (0.12 s);
# tests/test_startup.py checks it against schema.sql.
SCHEMA_TABLES_SHA256 = "440558f1f3a142a51105d81657b14959ba28b92bcce07f37ebf35de1ecfd5c5f"


@dataclass(frozen=True)
class Access:
    """What DuckDB may read besides the database (files, and directories with everything under them), and the
    options it takes only at start (temp_directory, threads)."""

    readable: tuple[Path, ...] = ()
    settings: dict[str, str | int] = field(default_factory=dict)


def duckdb_connect(
    path: str = ":memory:", read_only: bool = False, access: Access | None = None
) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, locked down: DuckDB may open no file but the database and what `access` allows, loads and
    downloads no extension, resolves a name to DuckDB's own function before a macro stored in the database, and
    refuses any later change to these settings (lock_configuration; CHANGEABLE excepted).

    A second connection to a database this process has open shares the first one's settings (DuckDB keeps one
    instance per file, and refuses another configuration)."""
    access = access or Access()
    config = CONNECT_CONFIG | {"allowed_configs": CHANGEABLE} | access.settings
    con = duckdb.connect(path, read_only=read_only, config=config)
    try:
        con.execute("SET search_path = ?", [_builtins_first(con)])  # the connection's own, as is the progress bar
        con.execute("SET enable_progress_bar = false")
        if not con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
            files = [str(p) for p in access.readable if not p.is_dir()]
            directories = [os.path.join(p, "") for p in access.readable if p.is_dir()]
            con.execute("SET allowed_paths = ?", [files])
            con.execute("SET allowed_directories = ?", [directories])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _builtins_first(con: duckdb.DuckDBPyConnection) -> str:
    """The search path that puts DuckDB's own functions (the system catalog) before the database's schema: a macro
    stored in the database under a built-in's name (round, hash, lower) is then never called in its place. The
    connection's TEMP objects (the SQL library, sqllib.ensure_installed) still come first."""
    return "system.main," + _main_schema(con)


def _main_schema(con: duckdb.DuckDBPyConnection) -> str:
    return _quoted(database_name(con)) + ".main"


def database_name(con: duckdb.DuckDBPyConnection) -> str:
    """The name of the database `con` opened, the first one attached (current_database() names the system catalog,
    first on traceview's search path). Qualified: duckdb_connect asks it before it has set that search path."""
    return con.execute(
        "SELECT database_name FROM system.main.duckdb_databases() WHERE NOT internal ORDER BY database_oid LIMIT 1"
    ).fetchall()[0][0]


@contextlib.contextmanager
def defining(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Put traceview's own CREATE statements into the database: DuckDB creates an unqualified object in the first
    schema of the search path, which duckdb_connect made the system catalog's. Inside the block, the database's
    main schema is the only one; run only statements that define objects (they bind stored code, never run it)."""
    before = con.execute("SELECT current_setting('search_path')").fetchall()[0][0]
    con.execute("SET search_path = ?", [_main_schema(con)])
    try:
        yield
    finally:
        # After a failed statement in a transaction DuckDB refuses even this, until the rollback that follows.
        with contextlib.suppress(duckdb.Error):
            con.execute("SET search_path = ?", [before])


def first_row(rows: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """The first of `rows` (from fetchall), or None: DuckDB wants every result read to its end."""
    return rows[0] if rows else None


def has_rows(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> bool:
    """Whether `query` (SQL, with `params`) returns a row; DuckDB stops at the first."""
    return bool(con.execute(f"SELECT EXISTS ({query})", params).fetchall()[0][0])


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


def connect(path: str | Path, read_only: bool = True, readable: Sequence[Path] = ()) -> duckdb.DuckDBPyConnection:
    """Open an existing traceview database (read-only by default) after checking its schema version, with the SQL
    library as TEMP objects (sqllib.ensure_installed). DuckDB may open `readable` (files, and directories with
    everything under them) besides the database."""
    path = Path(path)
    if not path.is_file():
        raise DatabaseError(path, "no such database", "create it with `traceview ingest TRACE -o " + str(path) + "`")
    con = _open(path, read_only, Access(tuple(readable)))
    _checked_or_closed(con, path)
    from . import sqllib  # sqllib reads databases through this module

    try:
        sqllib.ensure_installed(con)
    except BaseException:
        con.close()
        raise
    return con


def _open(path: Path, read_only: bool, access: Access | None = None) -> duckdb.DuckDBPyConnection:
    _check_name(path)
    try:
        con = duckdb_connect(str(path), read_only, access)
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
    """Refuse databases that traceview did not write, that come from another schema version, or whose tables are
    not schema.sql's exactly (changed by hand): a missing table or column would make every command fail halfway
    with DuckDB's error, and a default, generated column, constraint or index added to a table is code that runs
    when the table is read or written. Tables of other names may be there: traceview never reads them."""
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
    present = _tables(con)
    if _tables_digest(present) == SCHEMA_TABLES_SHA256:
        return
    expected = _schema_tables()
    missing = sorted(_columns(expected) - _columns(present))
    if missing:
        table, column, kind = missing[0]
        what = f"column {table}.{column} {kind}" if table in present else f"table {table}"
        raise DatabaseError(
            path,
            f"the database lacks {what} of schema version {SCHEMA_VERSION} (changed by hand?)",
            "ingest the trace again into a new -o file",
        )
    changed = sorted(name for name, definition in expected.items() if present[name] != definition)
    if changed:
        raise DatabaseError(
            path,
            f"table {changed[0]} is not as schema version {SCHEMA_VERSION} defines it (a default, generated column, "
            "constraint or index added by hand?)",
            "ingest the trace again into a new -o file",
        )


def schema_table_names() -> list[str]:
    """The tables schema.sql creates, read from its text (building it takes 0.12 s)."""
    return re.findall(r"^CREATE TABLE IF NOT EXISTS (\w+)", schema_sql(), re.MULTILINE)


@cache
def _schema_tables() -> dict[str, Definition]:
    """_tables of a database holding only schema.sql's tables."""
    with duckdb_connect() as con:
        create_schema(con)
        return _tables(con)


@dataclass(frozen=True)
class Definition:
    """A table as DuckDB keeps it: its CREATE TABLE statement, the CREATE INDEX statements on it, its columns."""

    sql: str
    indexes: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # (name, type)


def _tables(con: duckdb.DuckDBPyConnection) -> dict[str, Definition]:
    """Every table of the database's main schema (the one traceview reads), by name."""
    where = "database_name = $db AND schema_name = 'main'"
    params = {"db": database_name(con)}
    tables = con.execute(f"SELECT table_name, sql FROM duckdb_tables() WHERE {where}", params).fetchall()
    indexes = con.execute(f"SELECT table_name, sql FROM duckdb_indexes() WHERE {where} ORDER BY sql", params).fetchall()
    columns = con.execute(
        f"SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE {where} ORDER BY column_index", params
    ).fetchall()
    return {
        name: Definition(
            sql,
            tuple(i for t, i in indexes if t == name),
            tuple((column, kind) for t, column, kind in columns if t == name),
        )
        for name, sql in tables
    }


def _tables_digest(tables: dict[str, Definition]) -> str:
    """sha256 of the tables' definitions, sorted by name: the same for the same tables."""
    digest = hashlib.sha256()
    for name, definition in sorted(tables.items()):
        digest.update("\0".join((name, definition.sql, *definition.indexes, "")).encode())
    return digest.hexdigest()


def _columns(tables: dict[str, Definition]) -> set[tuple[str, str, str]]:
    return {(name, column, kind) for name, definition in tables.items() for column, kind in definition.columns}


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
    for table in schema_table_names():  # checked by check_schema_version; other tables are never read
        con.execute(f"SELECT bit_xor(hash(COLUMNS(*))) FROM {table}").fetchall()


def damage_error(error: BaseException, paths: list[Path] | None = None) -> DatabaseError | None:
    """The one-line error for a damaged database file (`paths`, by default those this process opened), when
    `error` is DuckDB finding damage, or values no ingest writes (times near the ends of BIGINT, which overflow the
    arithmetic of the queries: a database changed by hand); else None."""
    if not isinstance(error, duckdb.Error):
        return None
    where = " or ".join(dict.fromkeys(str(p) for p in (paths if paths is not None else _OPENED))) or None
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if any(sign in str(error) for sign in _DAMAGE_SIGNS):
        return DatabaseError(
            where,
            f"the database file is damaged ({detail})",
            "ingest the traces again into a new -o file (a disk or copy error damaged this one)",
        )
    if isinstance(error, duckdb.OutOfRangeException | duckdb.ConversionException):
        return DatabaseError(
            where,
            f"the database holds values no ingest writes ({detail})",
            "it was changed by hand or damaged: ingest the traces again into a new -o file",
        )
    return None


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table of schema.sql (idempotent) and record the schema version."""
    with defining(con):
        con.execute(schema_sql())
    con.execute("INSERT OR REPLACE INTO traceview_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


@contextlib.contextmanager
def write_session(
    path: str | Path, memory_limit: int | None = None, readable: Sequence[Path] = (), threads: int | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose changes all land, or none do.

    New database: built in `PATH.tmp-RANDOM` (owned: see scratch.Owned), renamed over PATH on success, deleted on
    failure.
    Existing database: one transaction, committed on success and rolled back on failure (DuckDB's WAL
    keeps the previous state if the process is killed). Every view and macro it stored is dropped first (see
    _drop_stored_code): the caller installs the SQL library again (sqllib.install).
    DuckDB may read `readable` (the traces) and the system's temporary directory (ingest's scratch directories:
    pipes, copies, part databases). With `memory_limit` (bytes; see memory_budget), DuckDB's memory is capped;
    it spills beyond the cap to a temporary directory that outlives the connection. DuckDB runs `threads` threads
    (default: one per core, ingest_access).
    """
    if memory_limit is None:
        with _write_session(Path(path), ingest_access(readable, threads=threads)) as con:
            yield con
        return
    with (
        scratch_directory("spill") as spill,
        _write_session(Path(path), ingest_access(readable, spill, threads)) as con,
    ):
        con.execute(f"SET memory_limit = '{int(memory_limit)}B'")  # after the schema: it may be too small even for that
        yield con


def ingest_access(traces: Sequence[Path], spill: str | None = None, threads: int | None = None) -> Access:
    """What an ingest's connection may read: the traces and the system's temporary directory (ingest's scratch
    directories: pipes, copies, part databases); where it spills, how many threads it runs (by default one per core
    this process may run on, see usable_cores)."""
    settings = {"temp_directory": spill, "threads": threads or _restricted_cores()}
    return Access((*traces, Path(tempfile.gettempdir())), {k: v for k, v in settings.items() if v is not None})


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's cpuset), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _restricted_cores() -> int | None:
    """usable_cores when fewer than the machine has, else None: DuckDB then picks its own count (it reads the cores
    and a container's CPU quota, not the affinity: under `taskset -c 0-3` on 16 cores it ran 16 threads on 4)."""
    cores = usable_cores()
    return cores if cores < (os.cpu_count() or cores) else None


def memory_budget(data_bytes: int) -> int:
    """DuckDB's memory cap, in bytes, for writing `data_bytes`: that much, at least 1 GiB (below that a small
    trace would spill for nothing), at most DuckDB's own default (80% of RAM).

    A 1 GB Kineto trace peaks at ~1.3 GB of RSS with the cap, 1.7-1.8 GB without, for ~1 s more system time
    (the spill) and the same wall time. Only
    what DuckDB can spill (its tables, sorts, joins) is bounded; Python's own memory is not. A statement that
    cannot spill enough fails with duckdb.OutOfMemoryException (api.ingest then ingests again without a cap).
    """
    return int(min(max(MIN_MEMORY_BUDGET, data_bytes), machine_share(), _address_space_left() * AS_SHARE))


def machine_share() -> int:
    """DuckDB's own default memory limit: RAM_SHARE of the machine's physical memory, in bytes."""
    return int(RAM_SHARE * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _address_space_left() -> float:
    """Bytes of address space this process may still map under its limit (`ulimit -v`), or infinity. Under a
    limit, DuckDB's cap must leave room for what it allocates outside its buffers (and the threads' stacks): past
    the limit, an allocation in one of its threads fails with bad_alloc and aborts the process, where one under its
    cap fails with a worded error."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return math.inf
    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return max(soft - mapped, 0)


@contextlib.contextmanager
def _write_session(path: Path, access: Access) -> Iterator[duckdb.DuckDBPyConnection]:
    """_existing_session or _new_session; an OS failure on the way (no space, read-only, ...) becomes one
    DatabaseError, after the database was left as it was. A symbolic link is followed: its target is written."""
    path = _followed(path)
    _check_name(path)
    if "?" in str(path.absolute()):  # DuckDB cuts a path at '?' to name the WAL file: the commit would fail
        raise DatabaseError(
            path, "DuckDB cannot write a database whose path holds '?'", "write it elsewhere, then move it there"
        )
    try:
        with _existing_session(path, access) if path.exists() else _new_session(path, access) as con:
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
def _existing_session(path: Path, access: Access) -> Iterator[duckdb.DuckDBPyConnection]:
    con = _open(path, False, access)
    _checked_or_closed(con, path, verify=True)
    con.execute("BEGIN TRANSACTION")
    try:
        _drop_stored_code(con, path)
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
def _new_session(path: Path, access: Access) -> Iterator[duckdb.DuckDBPyConnection]:
    twin = f"{path.name}.tmp-"
    sweep(path.parent, twin, _remove_db_files)  # twins of ingests that were killed (kill -9 skips every cleanup)
    owned = Owned(path.parent, twin)
    try:
        with _built(path, owned.path, access) as con:
            yield con
    finally:
        owned.release(_remove_db_files)


@contextlib.contextmanager
def _built(path: Path, tmp: Path, access: Access) -> Iterator[duckdb.DuckDBPyConnection]:
    """A new database built at `tmp`, moved to `path` when the block ends; removed on any failure."""
    try:
        con = duckdb_connect(str(tmp), False, access)
    except duckdb.OutOfMemoryException:
        _remove_db_files(tmp)
        raise  # api.ingest words it
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
        checkpoint(con)
        con.close()
        with interrupts.committing():
            _move_into_place(tmp, path)
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # after a fatal error (a failed checkpoint) close fails too
            con.close()
        _remove_db_files(tmp)
        raise


def _drop_stored_code(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Drop every view and macro stored in the database's main schema. They are never run (traceview's own SQL
    reads tables, DuckDB's functions and the library as TEMP objects), but whoever opens the database with DuckDB
    would run them: a database traceview wrote holds the library it installs and nothing else. A macro that a
    table of another name uses (in a default, generated column or constraint) cannot be dropped: refused."""
    where = {"db": database_name(con)}
    views = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE database_name = $db AND schema_name = 'main' AND NOT internal",
        where,
    ).fetchall()
    macros = con.execute(
        """SELECT DISTINCT function_name, function_type = 'table_macro' FROM duckdb_functions()
           WHERE database_name = $db AND schema_name = 'main' AND function_type IN ('macro', 'table_macro')""",
        where,
    ).fetchall()
    drops = [f"DROP VIEW {_quoted(name)}" for (name,) in views]
    drops += [f"DROP MACRO {'TABLE ' if table else ''}{_quoted(name)}" for name, table in macros]
    with defining(con):
        for drop in drops:
            try:
                con.execute(drop)
            except duckdb.DependencyException as error:
                raise DatabaseError(
                    path,
                    f"a table that traceview does not know uses a macro stored in the database ({drop.split()[-1]})",
                    "drop that table, or ingest into a new -o file",
                ) from error


def checkpoint(con: duckdb.DuckDBPyConnection) -> None:
    """Write the database's WAL into its file (a plain CHECKPOINT names the first catalog of the search path)."""
    con.execute(f"CHECKPOINT {_quoted(database_name(con))}")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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


def _remove_db_files(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(OSError):  # e.g. a read-only file system, where nothing was written either
            leftover.unlink(missing_ok=True)
