"""Nsight Systems (nsys) -> the schema's tables.

Reads: SQLite exports (`nsys export --type sqlite`; tested from export schema 3.0, nsys 2022.4, through 3.20, nsys
2025.3, to 3.25, nsys 2026.2), Parquet export directories (`--type parquetdir`) and `.nsys-rep` / `.qdrep` reports,
which the user's own nsys exports to SQLite first (nsys_export.py opens all of them; nsys_graph.py reads CUDA graph
node events). Writes: ranks, gpu_activity, launches, cpu_ranges, threads, graph_nodes and ingest_stats rows for one
run.

Rows never become Python objects: each source query runs inside SQLite (through ADBC) and streams Arrow record
batches into DuckDB temp tables, where SQL moves them into the schema. Names are looked up in StringIds inside the
query, so only the strings the schema needs leave the export. The profiled processes' environment, which exports keep
in META_DATA_CAPTURE, TARGET_INFO_SYSTEM_ENV and StringIds, is never read; the one exception is the Hostname row of
TARGET_INFO_SYSTEM_ENV, read only when the user asks for host names (--keep-host, IngestOptions.keep_host).

Versions differ, and each difference is read from the export itself: the metadata table is EXPORT_META_DATA in 2022.4
and META_DATA_EXPORT later; CUDA graph node events moved from CUDA_GRAPH_EVENTS to CUDA_GRAPH_NODE_EVENTS, the old name
now holding whole graphs (told apart by their columns); the enum table ENUM_CUDA_KRENEL_LAUNCH_TYPE became
ENUM_CUDA_KERNEL_LAUNCH_TYPE (no enum table is read: the few values needed are fixed below); lazy exports omit every
empty table, and older ones lack columns (graphId, ...), read as NULL. Time: exports with
TARGET_INFO_SESSION_START_TIME.systemClockNs keep the target's clock (unless --time-normalize); older ones (2022.4,
2025.3) count from the session start, which the data confirms (see _session_clock). A range still open at the end
has `end` NULL, or (2022.4) the session end.

Ranks: one per (process, GPU) with GPU work, plus one per process that has only API calls or NVTX ranges. Correlation
ids are unique only within a process, so launches are linked to GPU work on (pid, correlation id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ..db import execute_with, first_row, has_rows
from ..scratch import scratch_directory
from . import IngestOptions, LoadedSource, Source, common, nesting
from .nsys_export import (
    DRIVER,
    EXPORT_META,
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    RUNTIME,
    Export,
    open_export,
    prefetching,
    rows,
    stage,
    string_id,
    string_value,
)
from .nsys_graph import insert_graph_nodes, record_graph_stats, stage_graph_nodes

READ_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX, "StringIds", "ThreadNames", "PROCESSES")

# ENUM_NSYS_EVENT_TYPE ids (the same from 2022.4 to 2026.2).
NVTX_RANGE_TYPES = {59: "NvtxPushPopRange", 60: "NvtxStartEndRange", 70: "NvtxtPushPopRange", 71: "NvtxtStartEndRange"}
NVTX_MARK_TYPES = {34: "NvtxMark", 65: "NvtxtMark"}
NVTX_DOMAIN_CREATE = 75
NVTX_OTHER_TYPES = {33: "NvtxCategory", 39: "NvtxThread", 75: "NvtxDomainCreate", 76: "NvtxDomainDestroy"}
NVTX_RANGES = ", ".join(map(str, NVTX_RANGE_TYPES))  # as SQL lists
NVTX_KEPT = ", ".join(map(str, (*NVTX_RANGE_TYPES, *NVTX_MARK_TYPES, NVTX_DOMAIN_CREATE)))
TIME_LIMIT = 1 << 62  # ns, about 146 years: beyond it a value is not a timestamp
STAGED_FROM = {"_ngpu": "gpu_work", "_nlaunch": "api_calls", "_nnvtx": "nvtx", "_nnode": "graph_nodes"}
DRIVER_EVENT_CLASS = 1  # ENUM_NSYS_EVENT_CLASS TRACE_PROCESS_EVENT_CUDA_DRIVER
# ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND ids, spelled as the PyTorch profiler names copies ("Memcpy HtoD
# (Pageable -> Device)"), so that names agree between backends. nsys numbers memory kinds unlike CUPTI.
MEMCPY_KINDS = ["Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"]
MEMCPY_KINDS += ["UVM HtoD", "UVM DtoH", "UVM DtoD"]
MEMORY_KINDS = ["Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static", "Unknown"]


# ---------------------------------------------------------------------------------------------------------
# Entry point


def load(con: duckdb.DuckDBPyConnection, source: Source, run_id: int, options: IngestOptions) -> LoadedSource:
    """Load every export or report of `source` into run `run_id` (one file per node, or one for all)."""
    versions: list[str] = []
    warnings: list[str] = []
    first_anchor: int | None = None
    scope = "pid" if len(source.files) == 1 else "rank"
    with scratch_directory("nsys") as tmp:
        for order, path in enumerate(source.files):
            with open_export(con, path, Path(tmp), options) as export:
                session = _read_session(export, options.keep_host)
                if order == 0:
                    first_anchor = session.anchor_ns
                shift = 0
                if order > 0 and first_anchor is not None and session.anchor_ns is not None:
                    shift = _timestamp(session.anchor_ns - first_anchor) or 0
                elif order > 0:
                    warnings.append(f"{path.name}: no session start time; its clock is not aligned with the others")
                _load_export(con, export, session, Placement(run_id, shift, scope), options, Path(tmp))
                versions.append(session.version_text)
                warnings += session.warnings
    common.count_shared_correlations(con, run_id, scope)
    return LoadedSource(
        profiler_version="; ".join(dict.fromkeys(versions)),
        clock_anchor_ns=first_anchor,
        warnings=tuple(warnings),
        # Nesting is computed while inserting; a window (--time-window, --steps) deletes ranges after that, and
        # common.finish_run then nests what is left, as before.
        ranges_nested=options.time_window is None and not options.steps,
    )


@dataclass(frozen=True)
class Placement:
    """Where one export's rows go: the run, the shift onto the first export's clock, and the scope of correlation
    ids (`pid` for one export; `rank` for several, whose processes may share ids; ranks never span exports)."""

    run_id: int
    shift: int
    scope: str


# ---------------------------------------------------------------------------------------------------------
# Session facts: version, clock anchor, end of the session


@dataclass(frozen=True)
class Session:
    """What the export says about itself and its clock."""

    version_text: str
    schema_version: str | None
    anchor_ns: int | None
    end_ns: int | None
    hostname: str | None
    warnings: tuple[str, ...]


def _read_session(export: Export, keep_host: bool) -> Session:
    meta_table = next((t for t in EXPORT_META if export.has(t)), None)
    wanted = ["EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION"]
    wanted += ["EXPORT_PARAM_TIME_NORMALIZE", "EXPORT_PARAM_TIME_SHIFT"]
    meta: dict[str, str] = {}
    if meta_table:
        names = ", ".join(f"'{w}'" for w in wanted)
        sql = f"SELECT name, value FROM {meta_table} WHERE name IN ({names})"
        meta = {str(n): str(v) for n, v in rows(export, sql)}
    product, schema = meta.get("EXPORT_PRODUCT_VERSION"), meta.get("EXPORT_SCHEMA_VERSION")
    version_text = f"nsys {product or 'unknown version'}, SQLite export schema {schema or 'unknown'}"
    warnings = []
    if meta.get("EXPORT_PARAM_TIME_SHIFT", "0") not in ("0", ""):
        warnings.append(f"{export.shown.name}: the export was time-shifted; clock_anchor_ns may be off")
    start_ns, end = _session_clock(export, meta.get("EXPORT_PARAM_TIME_NORMALIZE") == "true")
    anchor = None
    if export.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs") and start_ns is not None:
        row = first_row(rows(export, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME"))
        anchor = _timestamp(row[0] - start_ns) if row and isinstance(row[0], int) else None
    hostname = None
    if keep_host and export.has("TARGET_INFO_SYSTEM_ENV", "name"):
        sql = "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1"
        row = first_row(rows(export, sql))
        hostname = str(row[0]) if row and row[0] else None
    return Session(version_text, schema, anchor, end, hostname, tuple(warnings))


def _session_clock(export: Export, normalise_flag: bool) -> tuple[int | None, int | None]:
    """(session start, session end) on the export's clock: the start is 0 when the clock counts from it.

    Exports with TARGET_INFO_SESSION_START_TIME.systemClockNs keep the target's clock unless --time-normalize was
    given; the session runs from ANALYSIS_DETAILS.startTime to stopTime. Older ones (2022.4, 2025.3) count from the
    session start, which their data shows: no event starts after the session's duration.
    """
    row = None
    if export.has("ANALYSIS_DETAILS", "stopTime"):
        row = first_row(rows(export, "SELECT max(startTime), max(stopTime), max(duration) FROM ANALYSIS_DETAILS"))
    start, stop, duration = (_timestamp(v) for v in row) if row else (None, None, None)
    if normalise_flag:
        return 0, duration
    if export.has("TARGET_INFO_SESSION_START_TIME", "systemClockNs"):
        clock = first_row(rows(export, "SELECT systemClockNs FROM TARGET_INFO_SESSION_START_TIME"))
        return (_timestamp(clock[0]) if clock else start), stop
    tables = [t for t in (KERNEL, RUNTIME, NVTX) if export.has(t)]
    latest = [first_row(rows(export, f"SELECT max(start) FROM {t}")) for t in tables]
    last = max((_timestamp(r[0]) or 0 for r in latest if r), default=0)
    if duration is None or last <= duration + 1_000_000_000:
        return 0, duration
    return start, stop


def _timestamp(value: Any) -> int | None:
    """An integer time within ±2^62 ns, else None."""
    return value if isinstance(value, int) and -TIME_LIMIT <= value <= TIME_LIMIT else None


# ---------------------------------------------------------------------------------------------------------
# Staging: SQLite queries streamed into DuckDB temp tables


# Staged columns: i BIGINT, n INTEGER (the schema's device and grid sizes: a larger value is no size, and becomes NULL),
# t text. Names stay StringIds ids (name_id) until _stage_strings reads each one once.
LAUNCH_COLUMNS = {"global_tid": "i", "start_ns": "i", "end_ns": "i", "name_id": "i", "event_class": "i"}
LAUNCH_COLUMNS |= {"correlation_id": "i"}
GPU_COLUMNS = {"global_pid": "i", "device_id": "n", "stream_id": "i", "start_ns": "i", "end_ns": "i"}
GPU_COLUMNS |= {"correlation_id": "i", "kind": "t", "name_id": "i", "graph_id": "i", "graph_node_id": "i"}
GPU_COLUMNS |= dict.fromkeys(["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"], "n")
GPU_COLUMNS |= dict.fromkeys(["bytes", "copy_kind", "src_kind", "dst_kind"], "i")


NVTX_COLUMNS = {"global_tid": "i", "start_ns": "i", "end_ns": "i", "event_type": "i", "text": "t", "domain_id": "i"}


def _stage_gpu(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    stage(con, export, "_ngpu", _gpu_parts(export), GPU_COLUMNS)


def _gpu_parts(export: Export) -> list[str]:
    """_ngpu's rows: kernels (named by their demangled name, else their short name), memory copies and memory sets."""
    parts = []
    common_cols = 'x.globalPid, x.deviceId, x.streamId, x.start, x."end", x.correlationId'
    if export.has(KERNEL):
        name = f"coalesce({string_id(export, 'x.demangledName')}, {string_id(export, 'x.shortName')})"
        dims = ", ".join(f"x.{d}" for d in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))
        parts.append(
            f"{common_cols}, 'kernel', {name}, {export.col(KERNEL, 'x', 'graphId')}, "
            f"{export.col(KERNEL, 'x', 'graphNodeId')}, {dims}, NULL, NULL, NULL, NULL FROM {KERNEL} x"
        )
    if export.has(MEMCPY):
        parts.append(
            f"{common_cols}, 'memcpy', NULL, NULL, {export.col(MEMCPY, 'x', 'graphNodeId')}, "
            f"NULL, NULL, NULL, NULL, NULL, NULL, x.bytes, x.copyKind, {export.col(MEMCPY, 'x', 'srcKind')}, "
            f"{export.col(MEMCPY, 'x', 'dstKind')} FROM {MEMCPY} x"
        )
    if export.has(MEMSET):
        parts.append(
            f"{common_cols}, 'memset', NULL, NULL, {export.col(MEMSET, 'x', 'graphNodeId')}, "
            f"NULL, NULL, NULL, NULL, NULL, NULL, x.bytes, NULL, {export.col(MEMSET, 'x', 'memKind')}, NULL "
            f"FROM {MEMSET} x"
        )
    return parts


def _stage_launches(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    stage(con, export, "_nlaunch", _launch_parts(export), LAUNCH_COLUMNS)


def _launch_parts(export: Export) -> list[str]:
    """_nlaunch's rows: CUDA runtime and driver API calls (one table since 2022.4; a DRIVER table when present)."""
    return [
        f'x.globalTid, x.start, x."end", {string_id(export, "x.nameId")}, x.eventClass, x.correlationId FROM {table} x'
        for table in (RUNTIME, DRIVER)
        if export.has(table, "nameId")
    ]


def _stage_strings(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    """_nstr(id, value): the names of kernels and API calls, each read once (ids from the staged rows)."""
    ids = con.execute(
        """SELECT name_id FROM _ngpu WHERE name_id IS NOT NULL
           UNION SELECT name_id FROM _nlaunch WHERE name_id IS NOT NULL ORDER BY 1"""
    ).fetchall()
    values = ", ".join(f"({int(i)})" for (i,) in ids)  # BIGINTs read back from DuckDB, not text from the file
    value = "(SELECT value FROM StringIds WHERE id = j.id AND value IS NOT NULL)"
    parts = [f"j.id, {value} FROM (WITH ids(id) AS (VALUES {values}) SELECT id FROM ids) j"] if ids else []
    stage(con, export, "_nstr", parts, {"id": "i", "value": "t"})


def _stage_nvtx(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    stage(con, export, "_nnvtx", _nvtx_parts(export), NVTX_COLUMNS)


def _nvtx_parts(export: Export) -> list[str]:
    """_nnvtx's rows: NVTX events; text is the message or its registered string (for ranges, marks and domain names
    only). Every event is read, so that _keep_nvtx_events counts the types without a second pass over the table."""
    if not export.has(NVTX):
        return []
    text = string_value(export, export.col(NVTX, "x", "textId"), "NULL")
    return [
        f'x.globalTid, x.start, x."end", x.eventType, '
        f"CASE WHEN x.eventType IN ({NVTX_KEPT}) THEN coalesce(x.text, {text}) END, "
        f"{export.col(NVTX, 'x', 'domainId')} FROM {NVTX} x"
    ]


def _stage_names(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    """_nthread and _nprocess: thread and process names."""
    threads = []
    if export.has("ThreadNames", "nameId"):
        threads.append(f"x.globalTid, {string_value(export, 'x.nameId', 'NULL')} FROM ThreadNames x")
    stage(con, export, "_nthread", threads, {"global_tid": "i", "name": "t"})
    processes = ["globalPid, name FROM PROCESSES"] if export.has("PROCESSES", "globalPid") else []
    stage(con, export, "_nprocess", processes, {"global_pid": "i", "name": "t"})


def _device_names(export: Export) -> dict[int, str]:
    """CUDA device id -> GPU name, from TARGET_INFO_CUDA_DEVICE + TARGET_INFO_GPU (new) or TARGET_INFO_GPU (old)."""
    if export.has("TARGET_INFO_CUDA_DEVICE", "cudaId") and export.has("TARGET_INFO_GPU", "name"):
        sql = "SELECT c.cudaId, g.name FROM TARGET_INFO_CUDA_DEVICE c JOIN TARGET_INFO_GPU g ON g.id = c.gpuId"
    elif export.has("TARGET_INFO_GPU", "name"):
        sql = f"SELECT coalesce({export.col('TARGET_INFO_GPU', 'g', 'cuDevice')}, g.id), g.name FROM TARGET_INFO_GPU g"
    else:
        return {}
    names: dict[int, str] = {}
    for device, name in rows(export, sql):
        if isinstance(device, int) and name:  # a device id of another type (text, real) names no device
            names.setdefault(device, str(name))
    return names


# ---------------------------------------------------------------------------------------------------------
# Moving staged rows into the schema


def _load_export(
    con: duckdb.DuckDBPyConnection,
    export: Export,
    session: Session,
    place: Placement,
    options: IngestOptions,
    tmp: Path,
) -> None:
    stages = (_stage_gpu, _stage_launches, _stage_strings, _stage_nvtx, _stage_names, stage_graph_nodes)
    large = {"_ngpu": (_gpu_parts(export), GPU_COLUMNS), "_nlaunch": (_launch_parts(export), LAUNCH_COLUMNS)}
    large["_nnvtx"] = (_nvtx_parts(export), NVTX_COLUMNS)
    with prefetching(export, large, tmp):
        for done, read in enumerate(stages):
            if options.progress:
                options.progress(f"reading {export.shown.name}", done, len(stages))
            read(con, export)
    nvtx_types = _keep_nvtx_events(con)
    dropped = _drop_unusable_times(con)
    _record_repairs(con, place.run_id)
    _close_open_ranges(con, session)
    ranks = _assign_ranks(con, place.run_id)
    params = {"run": place.run_id, "shift": place.shift}
    _insert_launches(con, params)
    _insert_gpu_activity(con, params, place.scope, options.comm_patterns)
    _insert_cpu_ranges(con, params)
    _insert_threads(con, params)
    insert_graph_nodes(con, params)
    devices = _device_names(export)
    run_id = place.run_id
    rank_from = "default" if len(ranks) == 1 and first_row(_count(con, "ranks", run_id)) == (0,) else "process_order"
    for rank, pid, device in ranks:
        con.execute(
            "INSERT INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)",
            [run_id, rank, str(export.shown), rank_from, pid, session.hostname, device, devices.get(device)],
        )
    _record_stats(con, export, session, run_id, nvtx_types)
    for table, n in dropped.items():
        if n:
            description = "rows whose time is missing, not a number or beyond ±2^62 ns (dropped)"
            common.add_stat(con, run_id, None, f"time_out_of_range.{table}", "data_loss", n, description)


def _keep_nvtx_events(con: duckdb.DuckDBPyConnection) -> dict[int, int]:
    """Count the staged NVTX events per eventType (-1: NULL or not an integer), then keep only ranges, marks and
    domain names in _nnvtx (a DELETE: nothing is copied)."""
    types = con.execute("SELECT coalesce(event_type, -1), count(*) FROM _nnvtx GROUP BY ALL").fetchall()
    con.execute(f"DELETE FROM _nnvtx WHERE event_type IS NULL OR event_type NOT IN ({NVTX_KEPT})")
    return dict(types)


def _drop_unusable_times(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Drop staged rows without a usable start (or, for GPU work and API calls, end); an NVTX end out of range
    becomes NULL (never closed). Times stay within ±2^62 ns, so that differences of two fit in a BIGINT."""
    dropped = {}
    staged = {"_ngpu": ("start_ns", "end_ns"), "_nlaunch": ("start_ns", "end_ns"), "_nnvtx": ("start_ns",)}
    staged["_nnode"] = ("start_ns", "graph_node_id")
    for table, required in staged.items():
        bad = " OR ".join(f"coalesce(NOT {c} BETWEEN -{TIME_LIMIT} AND {TIME_LIMIT}, TRUE)" for c in required)
        dropped[STAGED_FROM[table]] = con.execute(f"SELECT count(*) FROM {table} WHERE {bad}").fetchall()[0][0]
        con.execute(f"DELETE FROM {table} WHERE {bad}")
    con.execute(f"UPDATE _nnvtx SET end_ns = NULL WHERE NOT end_ns BETWEEN -{TIME_LIMIT} AND {TIME_LIMIT}")
    return dropped


# Values the inserts change, counted on the staged rows first: (name, staged table, condition, what becomes of them).
REPAIRS = (
    (
        "kernels_without_name",
        "_ngpu",
        "kind = 'kernel' AND {unnamed}",
        "kernels whose name id is NULL, missing from StringIds or NULL there: stored with the name ''",
    ),
    (
        "api_calls_without_name",
        "_nlaunch",
        "{unnamed}",
        "CUDA API calls whose name id is NULL, missing from StringIds or NULL there: stored with the name ''",
    ),
    (
        "nvtx_ranges_without_text",
        "_nnvtx",
        f"text IS NULL AND event_type IN ({NVTX_RANGES})",
        "NVTX ranges whose text (or registered string) is missing: stored with the name ''",
    ),
    (
        "end_before_start.gpu_work",
        "_ngpu",
        "end_ns < start_ns",
        "GPU work whose end precedes its start: stored ending at its start (duration 0)",
    ),
    (
        "end_before_start.api_calls",
        "_nlaunch",
        "end_ns < start_ns",
        "CUDA API calls whose end precedes their start: stored ending at their start (duration 0)",
    ),
    (
        "end_before_start.nvtx",
        "_nnvtx",
        f"end_ns < start_ns AND event_type IN ({NVTX_RANGES})",
        "NVTX ranges whose end precedes their start: stored ending at their start (duration 0)",
    ),
)


def _record_repairs(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Count, in ingest_stats, the staged values that the inserts will change (see REPAIRS); zero counts are not
    recorded."""
    unnamed = "NOT EXISTS (SELECT 1 FROM _nstr s WHERE s.id = name_id AND s.value IS NOT NULL)"
    for name, table, condition, description in REPAIRS:
        sql = f"SELECT count(*) FROM {table} WHERE {condition.format(unnamed=unnamed)}"
        found = con.execute(sql).fetchall()[0][0]
        if found:
            common.add_stat(con, run_id, None, name, "data_loss", found, description)


def _count(con: duckdb.DuckDBPyConnection, table: str, run_id: int) -> list[tuple[Any, ...]]:
    return con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchall()


def _close_open_ranges(con: duckdb.DuckDBPyConnection, session: Session) -> None:
    """View _nnvtx_closed: _nnvtx with `open` (never closed: no end, or at the session end in old exports) and the
    end kept, that of the trace's last event for an open range. A view, so that the events are not copied."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _nclock AS
        WITH s AS (SELECT coalesce($session_end, 9223372036854775807) AS session_end)
        SELECT s.session_end,
               -- the last start or end of GPU work, API calls and closed NVTX events
               (SELECT greatest(max(start_ns), max(end_ns)) FROM (
                   SELECT start_ns, end_ns FROM _ngpu UNION ALL SELECT start_ns, end_ns FROM _nlaunch
                   UNION ALL SELECT start_ns, CASE WHEN end_ns < s.session_end THEN end_ns END FROM _nnvtx
               )) AS last_ns
        FROM s
        """,
        {"session_end": session.end_ns},
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP VIEW _nnvtx_closed AS
        SELECT n.rowid AS row, n.* EXCLUDE (end_ns), n.end_ns IS NULL OR n.end_ns >= c.session_end AS open,
               CASE WHEN (n.end_ns IS NULL OR n.end_ns >= c.session_end) AND n.event_type IN ({NVTX_RANGES})
                    THEN c.last_ns ELSE n.end_ns END AS end_ns
        FROM _nnvtx n CROSS JOIN _nclock c
        """
    )


def _assign_ranks(con: duckdb.DuckDBPyConnection, run_id: int) -> list[tuple[int, int | None, int | None]]:
    """_nrank(pid, device_id, rank): one rank per (process, GPU), then per process with only CPU-side events."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _nrank AS
        WITH gpu AS (
            SELECT DISTINCT (global_pid >> 24) & 16777215 AS pid, device_id FROM _ngpu
        ), cpu_only AS (
            SELECT DISTINCT (global_tid >> 24) & 16777215 AS pid, NULL::BIGINT AS device_id FROM (
                SELECT global_tid FROM _nlaunch UNION ALL SELECT global_tid FROM _nnvtx WHERE event_type <> $domain
            ) c
            WHERE NOT EXISTS (SELECT 1 FROM gpu WHERE gpu.pid IS NOT DISTINCT FROM (c.global_tid >> 24) & 16777215)
        )
        SELECT pid, device_id,
               (SELECT coalesce(max(rank) + 1, 0) FROM ranks WHERE run_id = $run)
                 + row_number() OVER (ORDER BY device_id NULLS LAST, pid) - 1 AS rank
        FROM (SELECT * FROM gpu UNION ALL SELECT * FROM cpu_only)
        """,
        {"run": run_id, "domain": NVTX_DOMAIN_CREATE},
    )
    con.execute("CREATE OR REPLACE TEMP TABLE _nproc AS SELECT pid, min(rank) AS rank FROM _nrank GROUP BY pid")
    return [(r[2], r[0], r[1]) for r in con.execute("SELECT pid, device_id, rank FROM _nrank ORDER BY rank").fetchall()]


def _insert_launches(con: duckdb.DuckDBPyConnection, params: dict[str, int]) -> None:
    """Each call goes to the rank of the GPU work it launched, else to its process's first rank. When no process has
    two ranks (GPUs), that is the process's rank whatever the call launched, and the GPU work is not looked up (its
    grouping and join cost 1 CPU-s for the 3 M calls of the 1 GB nsys bench export)."""
    by_work = has_rows(con, "SELECT pid FROM _nrank GROUP BY pid HAVING count(*) > 1")
    con.execute(
        f"""
        INSERT INTO launches (run_id, rank, launch_id, pid, tid, start_ns, end_ns, name, api, correlation_id)
        WITH names AS (  -- each API name once: without its version suffix (cudaLaunchKernel_v7000)
            SELECT id, regexp_replace(value, '_v\\d+$', '') AS api_name FROM _nstr
        ), calls AS (
            SELECT l.*, o.n, (l.global_tid >> 24) & 16777215 AS pid, l.global_tid & 16777215 AS tid,
                   coalesce(n.api_name, '') AS api_name, coalesce(regexp_matches(n.api_name, '^cu[A-Z]'), FALSE) AS cu
            FROM _nlaunch l
            JOIN ({common.numbered("_nlaunch", "start_ns, end_ns, global_tid")}) o ON o.row = l.rowid
            LEFT JOIN names n ON n.id = l.name_id
        ){_WORK_RANK if by_work else ""}
        SELECT $run, {"coalesce(w.rank, p.rank)" if by_work else "p.rank"},
               (SELECT coalesce(max(launch_id), 0) FROM launches WHERE run_id = $run) + c.n,
               c.pid, c.tid, c.start_ns + $shift, greatest(c.end_ns, c.start_ns) + $shift, c.api_name,
               CASE WHEN c.event_class = {DRIVER_EVENT_CLASS} OR c.cu THEN 'driver' ELSE 'runtime' END,
               c.correlation_id
        FROM calls c
        JOIN _nproc p ON p.pid IS NOT DISTINCT FROM c.pid
        {_WORK_RANK_JOIN if by_work else ""}
        """,
        params,
    )


# _insert_launches' CTE of the rank of each (process, correlation id) of GPU work, and its join with the calls.
_WORK_RANK = """, work_rank AS (
            SELECT g.pid, g.correlation_id, min(r.rank) AS rank
            FROM (SELECT (global_pid >> 24) & 16777215 AS pid, device_id, correlation_id FROM _ngpu) g
            JOIN _nrank r ON r.pid IS NOT DISTINCT FROM g.pid AND r.device_id IS NOT DISTINCT FROM g.device_id
            WHERE g.correlation_id IS NOT NULL
            GROUP BY ALL
        )"""
_WORK_RANK_JOIN = "LEFT JOIN work_rank w ON w.pid IS NOT DISTINCT FROM c.pid AND w.correlation_id = c.correlation_id"


# The name of a memory copy or set, from its kinds (staged _ngpu columns); NULL for a kernel.
COPY_NAME = f"""
    CASE kind
      WHEN 'memcpy' THEN 'Memcpy ' || coalesce({MEMCPY_KINDS}[copy_kind + 1], 'Unknown') || ' ('
                         || coalesce({MEMORY_KINDS}[coalesce(src_kind, 7) + 1], 'Unknown') || ' -> '
                         || coalesce({MEMORY_KINDS}[coalesce(dst_kind, 7) + 1], 'Unknown') || ')'
      WHEN 'memset' THEN 'Memset (' || coalesce({MEMORY_KINDS}[coalesce(src_kind, 7) + 1], 'Unknown') || ')'
    END"""


def _insert_gpu_activity(
    con: duckdb.DuckDBPyConnection, params: dict[str, int], scope: str, comm_patterns: tuple[str, ...]
) -> None:
    """GPU work with its short name, its class (queries/kernel_classes.csv) and its launch call (the first call of
    the same correlation id in the same `scope`), all joined in while inserting: no UPDATE pass afterwards."""
    kernel_names = "SELECT value AS name FROM _nstr UNION ALL SELECT ''"  # '': a kernel without a name
    copy_names = f"SELECT DISTINCT {COPY_NAME} AS name FROM _ngpu WHERE kind <> 'kernel'"
    common.short_names_table(con, f"{kernel_names} UNION ALL {copy_names}")
    common.kernel_class_table(con, kernel_names, comm_patterns)
    con.execute(
        f"""
        INSERT INTO gpu_activity (run_id, rank, activity_id, kind, device_id, stream_id, start_ns, end_ns, name,
                                  short_name, category, comm_op, pid, correlation_id, launch_id, graph_id,
                                  graph_node_id, grid, block, bytes)
        WITH names AS (  -- each kernel name once (NULL: none), with its short name and class
            SELECT n.id, n.name, s.short_name, c.category, c.comm_op
            FROM (SELECT id, value AS name FROM _nstr UNION ALL SELECT NULL, '') n
            LEFT JOIN _short_names s ON s.name = n.name
            LEFT JOIN _name_class c ON c.name = n.name
        ), links AS (  -- the first launch call of each correlation id, among this export's calls
            SELECT {scope} AS scope, correlation_id, min(launch_id) AS launch_id, arg_min(pid, launch_id) AS pid
            FROM launches
            WHERE run_id = $run AND rank IN (SELECT rank FROM _nrank) AND correlation_id IS NOT NULL
            GROUP BY ALL
        ), keys AS (  -- narrow: each row's place in time order, rank and launch call, joined back to it by rowid
            SELECT o.row, o.n, w.rank, w.pid, l.launch_id, l.pid AS launch_pid
            FROM ({common.numbered("_ngpu", "start_ns, end_ns, device_id, stream_id")}) o
            JOIN (SELECT g.rowid AS row, (g.global_pid >> 24) & 16777215 AS pid, g.correlation_id, r.rank
                  FROM _ngpu g
                  JOIN _nrank r ON r.pid IS NOT DISTINCT FROM (g.global_pid >> 24) & 16777215
                               AND r.device_id IS NOT DISTINCT FROM g.device_id) w ON w.row = o.row
            LEFT JOIN links l ON l.scope = w.{scope} AND l.correlation_id = w.correlation_id
        ), work AS (
            SELECT g.*, k.n, k.rank, k.pid, k.launch_id, k.launch_pid, {COPY_NAME} AS copy_name
            FROM _ngpu g JOIN keys k ON k.row = g.rowid
        )
        SELECT $run, g.rank,
               (SELECT coalesce(max(activity_id), 0) FROM gpu_activity WHERE run_id = $run) + g.n,
               g.kind, g.device_id, g.stream_id, g.start_ns + $shift, greatest(g.end_ns, g.start_ns) + $shift,
               coalesce(g.copy_name, k.name, ''), coalesce(m.short_name, k.short_name, g.copy_name, k.name, ''),
               CASE WHEN g.kind = 'kernel' THEN coalesce(k.category, 'compute') ELSE g.kind END, k.comm_op,
               coalesce(g.pid, g.launch_pid), g.correlation_id, g.launch_id, g.graph_id, g.graph_node_id,
               CASE WHEN g.kind = 'kernel' THEN [g.grid_x, g.grid_y, g.grid_z]::INTEGER[] END,
               CASE WHEN g.kind = 'kernel' THEN [g.block_x, g.block_y, g.block_z]::INTEGER[] END,
               g.bytes
        FROM work g
        LEFT JOIN names k ON g.kind = 'kernel' AND k.id IS NOT DISTINCT FROM g.name_id
        LEFT JOIN _short_names m ON m.name = g.copy_name
        """,
        params,
    )


def _insert_cpu_ranges(con: duckdb.DuckDBPyConnection, params: dict[str, int]) -> None:
    """NVTX ranges (kind nvtx) and marks (kind mark), with their nesting on their thread (ingest/nesting.py); domain is
    the domain's name, NULL for the default domain.

    Each range's place n in time order (longer first; domain creations are numbered too) and its nesting are found
    on narrow columns (no names; a thread is one key, (pid << 24) | tid); the insert pairs them with the wide rows by
    position (POSITIONAL JOIN: _nested_ranges returns them in _nnvtx's order). Joining on the rowid instead built a
    hash table of the wide rows: 6.4 M ranges of the 1 GB bench export, DuckDB 2.0, 1 GiB cap, 2 cores: the insert
    ~9.5 -> 6.9 CPU-s (see also bench/README.md)."""
    has_domains = has_rows(con, f"SELECT 1 FROM _nnvtx WHERE event_type = {NVTX_DOMAIN_CREATE}")
    # Without domain creations, the join with domains (empty) still costs a pass over the wide rows.
    domain_name = "coalesce(d.name, 'domain_' || e.domain_id)" if has_domains else "'domain_' || e.domain_id"
    pid = "(e.global_tid >> 24) & 16777215"
    domain_join = f"LEFT JOIN domains d ON d.pid = {pid} AND d.domain_id = e.domain_id" if has_domains else ""
    # The first range_id as a parameter: a CROSS JOIN with it made DuckDB materialize the 6.4 M wide rows (1.6 s).
    base = con.execute("SELECT coalesce(max(range_id), 0) FROM cpu_ranges WHERE run_id = ?", [params["run"]])
    params = params | {"base": base.fetchall()[0][0]}
    execute_with(
        con,
        "_nnested",
        _nested_ranges(con),
        f"""
        INSERT INTO cpu_ranges (run_id, rank, range_id, pid, tid, start_ns, end_ns, closed, name, kind, domain,
                                depth, parent_id)
        WITH domains AS (
            SELECT (global_tid >> 24) & 16777215 AS pid, domain_id, arg_min(text, start_ns) AS name
            FROM _nnvtx WHERE event_type = {NVTX_DOMAIN_CREATE} GROUP BY ALL
        )
        SELECT $run, f.rank, $base + f.n, {pid}, e.global_tid & 16777215, e.start_ns + $shift,
               {_RANGE_END} + $shift, f.is_mark OR NOT e.open, coalesce(e.text, ''),
               CASE WHEN f.is_mark THEN 'mark' ELSE 'nvtx' END,
               CASE WHEN coalesce(e.domain_id, 0) <> 0 THEN {domain_name} END,
               f.depth, $base + f.parent_n
        FROM _nnvtx_closed e
        POSITIONAL JOIN _nnested f
        {domain_join}
        WHERE f.kept
        """,
        params,
    )


# A staged NVTX event's end: a mark's is its start; a range that ends before it starts ends at its start.
_RANGE_END = (
    f"CASE WHEN e.event_type IN ({', '.join(map(str, NVTX_MARK_TYPES))}) THEN e.start_ns "
    "ELSE greatest(e.end_ns, e.start_ns) END"
)


def _nested_ranges(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """(kept, rank, n, is_mark, depth, parent_n), one row per staged NVTX event in _nnvtx's order: kept for the ranges
    and marks of a ranked process, with their rank, their place in time order and their nesting among the ranges of
    their thread (marks: depth 0, no parent).

    One sort, in time order: n is the place in it (every staged event is numbered, domain creations and events of
    processes without a rank too); a stable sort by thread of the kept rows then gives each thread's ranges by start,
    longer first (the order of n; a range's end, if before its start, is its start: the order is the same). A
    window for n and a second sort by thread took 4.5 CPU-s for the 6.4 M ranges of the 1 GB bench export."""
    marks = ", ".join(map(str, NVTX_MARK_TYPES))
    data = con.execute(
        f"""
        SELECT e.row, (((e.global_tid >> 24) & 16777215) << 24) | (e.global_tid & 16777215) AS thread,
               e.event_type IN ({marks}) AS is_mark, e.start_ns, {_RANGE_END} AS end_ns, p.rank,
               e.event_type <> {NVTX_DOMAIN_CREATE} AND p.rank IS NOT NULL AS kept
        FROM _nnvtx_closed e LEFT JOIN _nproc p ON p.pid IS NOT DISTINCT FROM (e.global_tid >> 24) & 16777215
        ORDER BY e.start_ns, e.end_ns DESC, e.global_tid, e.row
        """
    ).fetchnumpy()
    kept = np.flatnonzero(np.asarray(data["kept"], dtype=bool))
    thread = np.ma.asarray(data["thread"])[kept]
    no_thread = np.ma.getmaskarray(thread)  # NULL (no global_tid): one thread, after the others
    order = kept[np.lexsort((np.where(no_thread, 0, np.ma.getdata(thread)), no_thread))]  # stable
    n = order + 1
    is_mark = np.asarray(data["is_mark"], dtype=bool)[order]
    depth = np.zeros(len(n), dtype=np.int32)
    parent_n = np.zeros(len(n), dtype=np.int64)
    ranges = ~is_mark
    heads = nesting.thread_heads([np.ma.asarray(data["thread"])[order][ranges]], int(ranges.sum()))
    start, end = np.asarray(data["start_ns"])[order], np.asarray(data["end_ns"])[order]
    found, parent = nesting.nest(heads, start[ranges], end[ranges])
    depth[ranges] = found
    parent_n[ranges] = np.where(parent >= 0, n[ranges][np.maximum(parent, 0)], 0)
    place = _staged_places(np.asarray(data["row"], dtype=np.int64))[order]
    rank = np.ma.getdata(data["rank"])[order]
    return _in_staged_order(place, len(data["row"]), rank=rank, n=n, is_mark=is_mark, depth=depth, parent_n=parent_n)


def _staged_places(rows: np.ndarray) -> np.ndarray:
    """The place of each of `rows` (the rowids of every staged event, deletions leave gaps) in _nnvtx's own order.
    (Rows of a table created in the open transaction count from about 2^55: offsets from the first.)"""
    offsets = rows - rows.min() if len(rows) else rows
    present = np.zeros(int(offsets.max(initial=-1)) + 1, dtype=bool)
    present[offsets] = True
    return (np.cumsum(present) - 1)[offsets]


def _in_staged_order(place: np.ndarray, count: int, **columns: np.ndarray) -> pa.Table:
    """`kept` and `columns`, one row per staged event in _nnvtx's order: the values of the kept events at `place`,
    zero for the others (parent_n: NULL, as at depth 0)."""
    kept = np.zeros(count, dtype=bool)
    kept[place] = True
    table = {"kept": kept}
    for name, values in columns.items():
        spread = np.zeros(count, dtype=values.dtype)
        spread[place] = values
        table[name] = spread
    table["parent_n"] = pa.array(table["parent_n"], mask=~kept | (table["depth"] == 0))
    return pa.table(table)


def _insert_threads(con: duckdb.DuckDBPyConnection, params: dict[str, int]) -> None:
    """One row per ranked process (tid NULL) and one per named thread of it."""
    con.execute(
        """
        INSERT INTO threads (run_id, rank, pid, tid, process_name, thread_name)
        WITH processes AS (
            SELECT (global_pid >> 24) & 16777215 AS pid, any_value(name) AS name FROM _nprocess GROUP BY ALL
        )
        SELECT $run, p.rank, p.pid, NULL, pr.name, NULL
        FROM _nproc p LEFT JOIN processes pr ON pr.pid = p.pid WHERE p.pid IS NOT NULL
        UNION ALL
        SELECT $run, p.rank, p.pid, t.global_tid & 16777215, pr.name, any_value(t.name)
        FROM _nthread t
        JOIN _nproc p ON p.pid = (t.global_tid >> 24) & 16777215
        LEFT JOIN processes pr ON pr.pid = p.pid
        GROUP BY ALL
        """,
        {"run": params["run"]},
    )


# ---------------------------------------------------------------------------------------------------------
# Counters


def _record_stats(
    con: duckdb.DuckDBPyConnection, export: Export, session: Session, run_id: int, nvtx_types: dict[int, int]
) -> None:
    def stat(name: str, severity: str, value: float, description: str) -> None:
        common.add_stat(con, run_id, None, name, severity, value, description)

    if session.schema_version:
        parts = [int(p) for p in re.findall(r"\d+", session.schema_version)[:2]] + [0, 0]
        stat("export_schema_version", "info", parts[0] + parts[1] / 100, f"{session.version_text} (major + minor/100)")
    gpu = dict(con.execute("SELECT kind, count(*) FROM _ngpu GROUP BY kind").fetchall())
    counts = {
        KERNEL: gpu.get("kernel", 0),
        MEMCPY: gpu.get("memcpy", 0),
        MEMSET: gpu.get("memset", 0),
        RUNTIME: con.execute("SELECT count(*) FROM _nlaunch").fetchall()[0][0],
    }
    counts[NVTX] = sum(nvtx_types.values())
    for table, n in counts.items():
        if export.has(table):
            stat(f"rows.{table}", "info", n, f"rows read from the export's {table} table")
    stat("events", "info", sum(counts.values()), "rows read from the export's GPU, API and NVTX tables")
    for table in READ_TABLES:
        if not export.has(table):
            stat(f"absent_table.{table}", "info", 1, "table absent from the export (lazy exports omit empty tables)")
    kept = {*NVTX_RANGE_TYPES, *NVTX_MARK_TYPES}
    for event_type, n in sorted(nvtx_types.items()):
        if event_type not in kept:
            name = f"skipped_nvtx.{NVTX_OTHER_TYPES.get(event_type, event_type)}"
            stat(name, "info", n, "NVTX events that are not ranges or marks (names, domains)")
    open_ranges = con.execute(
        f"SELECT count(*) FROM _nnvtx_closed WHERE open AND event_type IN ({NVTX_RANGES})"
    ).fetchall()[0][0]
    stat(
        "nvtx_ranges_never_closed",
        "data_loss" if open_ranges else "info",
        open_ranges,
        "NVTX ranges still open when the trace ended (end set to the trace end, closed = FALSE)",
    )
    unnamed = con.execute(
        "SELECT count(DISTINCT domain) FROM cpu_ranges WHERE run_id = ? AND domain LIKE 'domain\\_%' ESCAPE '\\'",
        [run_id],
    ).fetchall()[0][0]
    if unnamed:
        stat("nvtx_domains_without_name", "info", unnamed, "NVTX domains whose creation event is not in the trace")
    record_graph_stats(export, stat)
    if counts[KERNEL] == 0:
        stat("warning", "data_loss", 1, f"{export.shown.name}: CPU-only trace (no GPU kernels)")
