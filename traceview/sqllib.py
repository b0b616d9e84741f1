"""The SQL library: finds, documents, installs and runs the queries in `queries/**/*.sql`.

Reads: the `.sql` files of the package `traceview.queries` (the `queries/` folder). Writes: DuckDB macros and
views, with a COMMENT ON each of them and on each view column, into the connection's database (`install`, when
traceview writes it, so that `duckdb run.db` users have them), and as TEMP objects of every connection that
reads one (`ensure_installed`): traceview never runs the views and macros a database holds, which anyone may
have written. Each file opens with a header:

    -- @module layers.metrics               module name: folder.file
    -- One line that says what it answers.
    -- @param run VARCHAR NULL: meaning      one per macro parameter: name, type, default (- when none)
    -- @column busy_us us: meaning          one per output column: name, unit (- when none)
    -- @example FROM layer_metrics

and defines one public object named after the module (`layers.metrics` -> `layer_metrics`: the folder in the
singular) plus internal helpers whose names start with `_`. Objects without parameters are views; the others
are table macros whose parameters all have defaults, so `run_query` binds user values as SQL parameters and
never formats them into the text.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import duckdb

from .db import damage_error, database_name, defining, first_row, has_rows
from .errors import DatabaseError, UsageError
from .stepsel import format_steps

_PACKAGE = "traceview.queries"
_META_KEY = "sqllib_sha256"
_CREATE = re.compile(r"^CREATE OR REPLACE (MACRO|VIEW) (\w+)", re.MULTILINE)
_PARAM = re.compile(r"^(\w+)\s+(\w+)\s+(.+?):\s*(.*)$")
_COLUMN = re.compile(r"^(\S+)\s+(\S+):\s*(.*)$")
_SINGULAR = {
    "figures": "figure",
    "intervals": "interval",
    "layers": "layer",
    "steps": "step",
    "kernels": "kernel",
    "runs": "run",
}
BIGINT_MAX = 2**63 - 1
_CASTS = {
    "VARCHAR": str,
    "INTEGER": int,
    "BIGINT": int,
    "DOUBLE": float,
}


@dataclass(frozen=True)
class Param:
    """One parameter of a query macro."""

    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Column:
    """One output column of a query: its unit is ns, us, pct, count or - (none)."""

    name: str
    unit: str
    description: str


@dataclass(frozen=True)
class QueryInfo:
    """What a query file defines and documents."""

    name: str
    module: str
    description: str
    params: tuple[Param, ...]
    columns: tuple[Column, ...]
    example: str
    kind: str  # view or macro
    path: str
    sql: str

    @property
    def takes_tables(self) -> bool:
        """True for building blocks (interval macros) whose arguments are tables, not values."""
        return any(p.type == "table" for p in self.params)


def list_queries() -> list[QueryInfo]:
    """Every query of the library, in install order (each after the objects it uses)."""
    return list(_library())


def get_query(name: str, where: str | None = None) -> QueryInfo:
    """The query called `name` (object name such as layer_metrics, or module name such as layers.metrics).

    `where` names the database in the error message."""
    for info in _library():
        if name in (info.name, info.module):
            return info
    known = ", ".join(sorted(q.name for q in _library()))
    raise UsageError(where, f"no query named {name!r}", f"choose one of: {known}")


def library_sha256() -> str:
    """Digest of every query file: tells whether a database holds this version of the library."""
    digest = hashlib.sha256()
    for info in _library():
        digest.update(info.path.encode() + b"\0" + info.sql.encode() + b"\0")
    return digest.hexdigest()


def install(con: duckdb.DuckDBPyConnection, temporary: bool = False) -> None:
    """Create or replace every macro and view of the library, with their comments, in `con`'s database.

    `temporary` creates them as TEMP objects of the connection instead (usable on a read-only database);
    TEMP objects come first on the search path, before the ones stored in the database.
    """
    with contextlib.nullcontext() if temporary else defining(con):
        for info in _library():
            sql = info.sql.replace("CREATE OR REPLACE ", "CREATE OR REPLACE TEMP ") if temporary else info.sql
            try:
                con.execute(sql)
            except duckdb.Error as error:
                raise DatabaseError(
                    info.path, f"cannot install query {info.name} ({error})", "the database lacks a table it needs?"
                ) from error
            if not temporary:
                _comment(con, info)
    if not temporary:
        con.execute("INSERT OR REPLACE INTO traceview_meta VALUES (?, ?)", [_META_KEY, library_sha256()])


def ensure_installed(con: duckdb.DuckDBPyConnection) -> None:
    """Make this version of the library usable on `con` as TEMP objects of the connection (once per connection).

    The views and macros stored in a database are never used: a database may come from anyone, and what it
    stores under the library's names (a view that reads files, or recurses without end) is not this library,
    whatever traceview_meta says. The TEMP objects come first on the search path."""
    last = _library()[-1]
    catalog = "duckdb_views() WHERE view_name" if last.kind == "view" else "duckdb_functions() WHERE function_name"
    if not has_rows(con, f"SELECT 1 FROM {catalog} = '{last.name}' AND database_name = 'temp'"):
        install(con, temporary=True)


def run_query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one query with `params` (name -> value; strings are converted to the parameter's type).

    Returns (column names, rows). Values are bound as SQL parameters; only parameter names known from the
    query's header reach the SQL text.
    """
    where = database_path(con)
    info = get_query(name, where)
    params = dict(params or {})
    if info.takes_tables:
        raise UsageError(
            where,
            f"{info.name} takes tables as arguments and is a building block for SQL",
            f"use it in SQL, e.g. {info.example}",
        )
    known = {p.name: p for p in info.params}
    unknown = sorted(set(params) - set(known))
    if unknown:
        accepted = ", ".join(known) or "none"
        raise UsageError(where, f"{info.name} has no parameter {unknown[0]!r}", f"its parameters: {accepted}")
    ensure_installed(con)
    names = list(params)
    values = [_convert(info, known[k], params[k], where) for k in names]
    if info.kind == "view":
        sql = f"SELECT * FROM {info.name}"
    else:
        args = ", ".join(f"{k} := ?" for k in names)
        sql = f"SELECT * FROM {info.name}({args})"
    try:
        cursor = con.execute(sql, values)
    except duckdb.Error as error:
        failed = DatabaseError(
            where, f"query {info.name} failed ({str(error).splitlines()[0]})", "check the parameters"
        )
        raise (damage_error(error, [Path(where)] if where else None) or failed) from error
    columns = [d[0] for d in cursor.description]
    return columns, cursor.fetchall()


def database_path(con: duckdb.DuckDBPyConnection) -> str | None:
    """The file of the connection's database, for error messages; None in memory."""
    row = first_row(
        con.execute("SELECT path FROM duckdb_databases() WHERE database_name = ?", [database_name(con)]).fetchall()
    )
    return row[0] if row and row[0] else None


def _convert(info: QueryInfo, param: Param, value: Any, where: str | None) -> Any:
    """A user value (often text from the command line) as the Python type of the parameter."""
    if value is None or not isinstance(value, str):
        return value
    if value.upper() == "NULL":
        return None
    cast = _CASTS.get(param.type.upper(), str)
    try:
        converted = cast(value)
    except ValueError as error:
        raise UsageError(
            where,
            f"{info.name}: {param.name}={value!r} is not a valid {param.type}",
            f"give a value of type {param.type}",
        ) from error
    if cast is not str and not 0 <= converted <= BIGINT_MAX:  # also NaN: every comparison with it is false
        raise UsageError(
            where,
            f"{info.name}: {param.name}={value!r} is out of range (every number the library takes is a count, a step "
            "or a time: finite and not negative)",
            f"give a {param.type} from 0 to {BIGINT_MAX:,}",
        )
    return converted


def _comment(con: duckdb.DuckDBPyConnection, info: QueryInfo) -> None:
    """Store the header in the database: on the object, and on each column of a view."""
    if info.kind == "view":
        con.execute(f"COMMENT ON VIEW {info.name} IS {_literal(info.description)}")
        for column in info.columns:
            text = column.description if column.unit == "-" else f"{column.description} ({column.unit})"
            con.execute(f"COMMENT ON COLUMN {info.name}.{column.name} IS {_literal(text)}")
        return
    lines = [info.description]
    lines += [f"param {p.name} {p.type} = {p.default}: {p.description}" for p in info.params]
    lines += [f"column {c.name} ({c.unit}): {c.description}" for c in info.columns]
    lines.append(f"example: {info.example}")
    con.execute(f"COMMENT ON MACRO TABLE {info.name} IS {_literal(chr(10).join(lines))}")


def _literal(text: str) -> str:
    """A SQL string literal of our own header text (comments cannot take bound parameters)."""
    return "'" + text.replace("'", "''") + "'"


@cache
def _library() -> tuple[QueryInfo, ...]:
    infos = [_parse(path, rel) for path, rel in _sql_files(resources.files(_PACKAGE), "")]
    return tuple(_ordered(infos))


def _sql_files(folder: Traversable, prefix: str) -> list[tuple[Traversable, str]]:
    found: list[tuple[Traversable, str]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith(("_", ".")):
            found += _sql_files(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(".sql"):
            found.append((entry, prefix + entry.name))
    return found


def _parse(path: Traversable, rel: str) -> QueryInfo:
    """Read a file's header and the objects it creates; reject a file that breaks the conventions."""
    sql = path.read_text()
    header: list[str] = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        header.append(line[2:].strip())
    where = f"queries/{rel}"
    tags: dict[str, list[str]] = {"module": [], "param": [], "column": [], "example": []}
    text: list[str] = []
    for line in header:
        tag, _, rest = line.partition(" ")
        if tag.startswith("@") and tag[1:] in tags:
            tags[tag[1:]].append(rest.strip())
        elif line:
            text.append(line)
    folder, _, stem = rel.removesuffix(".sql").rpartition("/")
    module = f"{folder.replace('/', '.')}.{stem}"
    name = f"{_SINGULAR.get(folder, folder)}_{stem}"
    if tags["module"] != [module] or not text or len(tags["example"]) != 1 or not tags["column"]:
        raise DatabaseError(where, "bad header", f"open with -- @module {module}, a purpose line, @column and @example")
    created = _CREATE.findall(sql)
    public = [(kind, obj) for kind, obj in created if not obj.startswith("_")]
    if [obj for _, obj in public] != [name]:
        raise DatabaseError(where, f"must define exactly one public object, {name}", "prefix helpers with _")
    return QueryInfo(
        name=name,
        module=module,
        description=" ".join(text),
        params=tuple(_param(where, p) for p in tags["param"]),
        columns=tuple(_column(where, c) for c in tags["column"]),
        example=tags["example"][0],
        kind=public[0][0].lower(),
        path=where,
        sql=sql,
    )


def _param(where: str, line: str) -> Param:
    match = _PARAM.match(line)
    if not match:
        raise DatabaseError(where, f"bad @param line {line!r}", "write: -- @param name TYPE default: meaning")
    return Param(*match.groups())


def _column(where: str, line: str) -> Column:
    match = _COLUMN.match(line)
    if not match:
        raise DatabaseError(where, f"bad @column line {line!r}", "write: -- @column name unit: meaning")
    return Column(*match.groups())


def _ordered(infos: list[QueryInfo]) -> list[QueryInfo]:
    """Files in dependency order: a file comes after every file whose objects its SQL (not comments) names."""
    defines = {obj: info for info in infos for _, obj in _CREATE.findall(info.sql)}
    done: list[QueryInfo] = []
    placed: set[str] = set()
    visiting: set[str] = set()

    def visit(info: QueryInfo) -> None:
        if info.path in placed:
            return
        if info.path in visiting:
            raise DatabaseError(info.path, "queries depend on each other in a cycle", "break the cycle")
        visiting.add(info.path)
        own = {obj for _, obj in _CREATE.findall(info.sql)}
        code = re.sub(r"--[^\n]*", "", info.sql)
        for word in sorted(set(re.findall(r"\b\w+\b", code)) - own):
            if word in defines:
                visit(defines[word])
        visiting.discard(info.path)
        placed.add(info.path)
        done.append(info)

    for info in sorted(infos, key=lambda i: (not i.module.startswith("intervals."), i.module)):
        visit(info)
    return done


def parse_steps(text: str) -> tuple[int, int]:
    """'3-7' -> (3, 7); '5' -> (5, 5). UsageError for anything else."""
    first, sep, last = text.strip().partition("-")
    try:
        pair = (int(first), int(last) if sep else int(first))
    except ValueError:
        pair = (-1, -1)
    if pair[0] < 0 or pair[1] < pair[0]:
        raise UsageError(None, f"bad step range {text!r}", "give FIRST-LAST (e.g. 3-7) or one step (e.g. 5)")
    return pair


def overlap(
    con: duckdb.DuckDBPyConnection, run: str | int | None = None, steps: tuple[int, int] | None = None
) -> list[dict[str, Any]]:
    """Compute/communication overlap per rank (query comm_overlap): one dict per (run, rank).

    Keys: run_id, label, rank, time_window ('whole trace' or 'steps A-B'), window_start_ns, window_end_ns,
    window_us, kernels, comm_us, compute_us, overlap_us, exposed_comm_us, overlap_pct. `steps` (first, last)
    counts only the kernels segmentation put in those steps; None counts every kernel of the trace.
    """
    _check_run(con, run)
    params: dict[str, Any] = {"run": run}
    if steps is not None:
        _check_steps_chosen(con, run, steps)
        params |= {"step_from": steps[0], "step_to": steps[1]}
    columns, rows = run_query(con, "comm_overlap", params)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def overlap_like_hta(con: duckdb.DuckDBPyConnection, run: str | int | None = None) -> list[dict[str, Any]]:
    """Compute/communication overlap per rank as HTA 0.5's get_comm_comp_overlap computes it (query
    comm_overlap_hta: HTA's kernel set, its ^nccl.*Kernel rule and whole microseconds), to compare with HTA."""
    _check_run(con, run)
    columns, rows = run_query(con, "comm_overlap_hta", {"run": run})
    return [dict(zip(columns, row, strict=True)) for row in rows]


def _check_run(con: duckdb.DuckDBPyConnection, run: str | int | None) -> None:
    """A `run` that names no run of the database: a one-line error listing the labels."""
    if run is None:
        return
    ensure_installed(con)
    if not con.execute("FROM run_select(run := ?)", [run]).fetchall():
        labels = ", ".join(r[0] for r in con.execute("SELECT label FROM runs ORDER BY run_id").fetchall())
        raise UsageError(database_path(con), f"no run {run!r} in the database", f"choose one of: {labels or 'none'}")


def _check_steps_chosen(con: duckdb.DuckDBPyConnection, run: str | int | None, steps: tuple[int, int]) -> None:
    """--steps FIRST-LAST must hold a step (steps.step) of the chosen runs: a one-line error naming those they have."""
    ensure_installed(con)
    present = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT step FROM steps WHERE run_id IN (SELECT run_id FROM run_select(run := ?)) ORDER BY step",
            [run],
        ).fetchall()
    ]
    if not any(steps[0] <= step <= steps[1] for step in present):
        chosen = f"{steps[0]}" if steps[0] == steps[1] else f"{steps[0]}-{steps[1]}"
        have = f"the steps are {format_steps(present)}" if present else "the run has no steps (was it segmented?)"
        raise UsageError(database_path(con), f"--steps {chosen} selects no step", f"{have}; pick among them")
