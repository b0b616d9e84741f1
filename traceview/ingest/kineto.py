"""PyTorch profiler (Kineto) Chrome-trace JSON -> the schema's tables.

Reads: `.json`, `.json.gz` or `.pt.trace.json(.gz)` files, one per rank. Writes: ranks, gpu_activity,
launches, cpu_ranges, gpu_ranges, threads and ingest_stats rows for one run.

The trace is never held as Python objects. Each file is streamed once (gunzipped if needed, with
python-isal) through named pipes into DuckDB's JSON reader (ingest/jsonstream.py: the array is cut at event
boundaries so that DuckDB parses the pipes in parallel, and nothing is copied to disk); the small metadata
around the array (before and after it) is parsed with `json`. The reader stages every event with typed
columns in one temp table (`_ev`), and one INSERT per table moves the rows into the schema, with launch
links, kernel classes and range nesting computed on the way in (no UPDATE passes).

Files that the fast path cannot read (a value of an unexpected type, a damaged or cut-off file, another
JSON layout that does not parse) go through the original path: the array is copied to a temp file and
read with every value as raw JSON, cast with TRY_CAST; truncation and --salvage are handled there.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ..db import first_row
from ..errors import BadInputError
from ..scratch import scratch_directory
from . import IngestOptions, LoadedSource, RetryCarefully, Source, common, jsonstream, kineto_batch, nesting
from .kineto_array import MAX_EVENT, array_end, extract_event_array, read_header
from .kineto_batch import Batch

FAST_MAX_EVENT = 1 << 24  # the fast path's (DuckDB's default): its read buffers grow with it; larger -> careful path

# Kineto categories (current and legacy spellings, compared lower-case) and the table each feeds.
GPU_KINDS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
LAUNCH_CATEGORIES = ("cuda_runtime", "runtime", "cuda_driver", "hip_runtime", "hip_driver")
CPU_RANGE_KINDS = {
    "user_annotation": "annotation",
    "cpu_op": "op",
    "operator": "op",
    "python_function": "module",
}
GPU_RANGE_CATEGORIES = ("gpu_user_annotation",)

EVENT_COLUMNS = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    "ts": "JSON",
    "dur": "JSON",
    # args fields are read as raw JSON and cast with TRY_CAST while staging, so one odd value (a string where
    # a number is expected, as Triton's "grid": "grid(100,)") cannot fail the whole file.
    "args": 'STRUCT(correlation JSON, device JSON, stream JSON, grid JSON, block JSON, "bytes" JSON, '
    '"Collective name" JSON, "graph id" JSON, "graph node id" JSON, "name" JSON)',
}

# Typed columns staged from args (NULL for events traceview does not keep).
ARG_COLUMNS = {
    "correlation": "TRY_CAST(args.correlation AS BIGINT)",
    "device": "TRY_CAST(args.device AS BIGINT)",
    "stream": "TRY_CAST(args.stream AS BIGINT)",
    "grid": "TRY_CAST(args.grid AS INTEGER[])",
    "block": "TRY_CAST(args.block AS INTEGER[])",
    "bytes": 'TRY_CAST(args."bytes" AS BIGINT)',
    "collective": "args.\"Collective name\" ->> '$'",
    "graph_id": 'TRY_CAST(args."graph id" AS BIGINT)',
    "graph_node_id": 'TRY_CAST(args."graph node id" AS BIGINT)',
    "arg_name": "args.name ->> '$'",
}

# The fast path reads values with their own types; a value of another type fails the read and the file is
# read again through the robust path above. Times are read exactly from their text as DECIMAL(38, 18): up to
# 18 fraction digits need no rounding while parsing (DECIMAL(24, 3) cost 3.85 µs per value with the 16-17
# fraction digits of a re-serialised float, 28x the 3-digit case; (38, 18) costs the same for both).
FAST_EVENT_COLUMNS = {
    **EVENT_COLUMNS,
    "ts": "DECIMAL(38, 18)",
    "dur": "DECIMAL(38, 18)",
    "args": 'STRUCT(correlation BIGINT, device BIGINT, stream BIGINT, grid INTEGER[], block INTEGER[], "bytes" BIGINT, '
    '"Collective name" VARCHAR, "graph id" BIGINT, "graph node id" BIGINT, "name" VARCHAR)',
}
# ts and dur on the careful path, unless one of them is no number (_read_events): exact, as on the fast path
EXACT_TIMES = {"ts": FAST_EVENT_COLUMNS["ts"], "dur": FAST_EVENT_COLUMNS["dur"]}
FAST_ARG_COLUMNS = {
    "correlation": "args.correlation",
    "device": "args.device",
    "stream": "args.stream",
    "grid": "args.grid",
    "block": "args.block",
    "bytes": 'args."bytes"',
    "collective": 'args."Collective name"',
    "graph_id": 'args."graph id"',
    "graph_node_id": 'args."graph node id"',
    "arg_name": "args.name",
}
RANK_IN_FILE_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Staged:
    """What staging one file into temp table _ev found besides the events."""

    metadata: dict[str, Any]
    json_bytes: int
    lost_bytes: int
    streamed: bool


@dataclass(frozen=True)
class StagedFile:
    """One file whose events are in temp table _ev (column `file`), and what its metadata says."""

    file: int
    path: Path
    rank: int
    rank_from: str
    metadata: dict[str, Any]
    json_bytes: int
    lost_bytes: int

    @property
    def base_ns(self) -> int:
        """The trace's clock origin in ns (baseTimeNanoseconds), 0 when it has none."""
        return _int_or_none(self.metadata.get("baseTimeNanoseconds"), bits=64) or 0


@dataclass(frozen=True)
class FileResult:
    """What loading one file found besides its rows: the run-level facts it contributes."""

    rank: int
    warnings: tuple[str, ...]
    partial: bool
    clock_anchor_ns: int | None
    profiler_version: str


def load(con: duckdb.DuckDBPyConnection, source: Source, run_id: int, options: IngestOptions) -> LoadedSource:
    """Load every file of `source` (one per rank) into run `run_id`; in parallel processes with --jobs.

    Consecutive small files are read together, in one DuckDB read per batch (kineto_batch.py): a run of
    thousands of per-rank files costs a few statements per batch, not per file.
    """
    if options.jobs > 1 and len(source.files) > 1:
        from . import parallel

        results = parallel.load_files(con, source, run_id, options)
    else:
        results = load_in_turn(con, kineto_batch.batches(source.files, options), len(source.files), run_id, options)
    common.count_shared_correlations(con, run_id, same_process="rank")
    return merge_results(results)


def load_in_turn(
    con: duckdb.DuckDBPyConnection, batches: Iterable[Batch], files: int, run_id: int, options: IngestOptions
) -> list[FileResult]:
    """Load `batches` (of the run's `files`) one after the other into run `run_id`: a batch of one file alone."""
    results: list[FileResult] = []
    for batch in batches:
        if len(batch) == 1:
            order, trace_file = batch[0]
            results.append(load_file(con, trace_file, order, files, run_id, options))
        else:
            results.extend(_load_batch(con, batch, files, run_id, options))
    return results


def merge_results(results: list[FileResult]) -> LoadedSource:
    """The run's facts from its files' facts."""
    anchors = [r.clock_anchor_ns for r in results if r.clock_anchor_ns is not None]
    return LoadedSource(
        profiler_version=", ".join(sorted({r.profiler_version for r in results})),
        clock_anchor_ns=min(anchors) if anchors else None,
        partial=any(r.partial for r in results),
        warnings=tuple(w for r in results for w in r.warnings),
        ranges_nested=True,
    )


def load_file(
    con: duckdb.DuckDBPyConnection, trace_file: Path, order: int, files: int, run_id: int, options: IngestOptions
) -> FileResult:
    """Load one file (one rank) into run `run_id`: stage, insert, record its rank and counters."""
    staged = stage_events(con, trace_file, options)
    metadata = _metadata(staged.metadata, options)
    rank, rank_from = _rank_of(metadata, trace_file, order, files)
    one = StagedFile(0, trace_file, rank, rank_from, metadata, staged.json_bytes, staged.lost_bytes)
    return _insert_files(con, run_id, [one], options.comm_patterns)[0]


def _load_batch(
    con: duckdb.DuckDBPyConnection, batch: list[tuple[int, Path]], files: int, run_id: int, options: IngestOptions
) -> list[FileResult]:
    """Load several small files at once: one read of their events, then one insert per table for all of them."""
    try:
        found = kineto_batch.stage(
            con,
            [path for _, path in batch],
            FAST_EVENT_COLUMNS,
            lambda source, params: _stage(con, source, params, FAST_ARG_COLUMNS, FAST_EVENT_COLUMNS["ts"]),
        )
    except duckdb.OutOfMemoryException:
        raise
    except (duckdb.Error, UnicodeDecodeError) as error:
        raise RetryCarefully(kineto_batch.one_by_one(batch)) from error
    if found is None:
        raise RetryCarefully(kineto_batch.one_by_one(batch))
    staged = []
    for index, ((order, path), (raw, json_bytes)) in enumerate(zip(batch, found, strict=True)):
        metadata = _metadata(raw, options)
        rank, rank_from = _rank_of(metadata, path, order, files)
        staged.append(StagedFile(index, path, rank, rank_from, metadata, json_bytes, 0))
    return _insert_files(con, run_id, staged, options.comm_patterns)


def _insert_files(
    con: duckdb.DuckDBPyConnection, run_id: int, files: list[StagedFile], comm_patterns: tuple[str, ...]
) -> list[FileResult]:
    """Move the events of `files`, staged in _ev, into run `run_id`; record their ranks and counters."""
    _check_ranks(con, run_id, files)
    _check_not_empty(con, files)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _files AS SELECT unnest(?::INTEGER[]) AS file, unnest(?::INTEGER[]) AS rank, "
        "unnest(?::BIGINT[]) AS base_ns",
        [[f.file for f in files], [f.rank for f in files], [f.base_ns for f in files]],
    )
    _insert_rows(con, run_id, comm_patterns)
    _insert_ranks(con, run_id, files)
    kernels = _record_file_stats(con, run_id, files)
    con.execute("DROP TABLE IF EXISTS _ev")
    return [
        FileResult(
            rank=f.rank,
            warnings=tuple(_file_warnings(f, kernels.get(f.file, 0))),
            partial=f.lost_bytes > 0,
            clock_anchor_ns=f.base_ns if "baseTimeNanoseconds" in f.metadata else None,
            profiler_version=_profiler_version(f.metadata),
        )
        for f in files
    ]


def stage_events(con: duckdb.DuckDBPyConnection, trace_file: Path, options: IngestOptions) -> Staged:
    """Read one file's events into temp table _ev: the streamed fast path, else the temp-file path.

    When DuckDB itself fails on the fast path (a value of another type, JSON that does not parse) the
    transaction the caller holds is aborted, so RetryCarefully goes up to the caller (api.ingest rolls back
    and starts over with this file in options.careful); a failure before DuckDB (gzip error, no closing
    bracket) falls back here and now.
    """
    if hasattr(os, "mkfifo") and trace_file not in options.careful:
        try:
            return _stage_streamed(con, trace_file, options)
        except duckdb.OutOfMemoryException:
            raise  # not the file's fault: api.ingest lifts the memory cap
        except (duckdb.Error, UnicodeDecodeError) as error:  # DuckDB's message may quote a cut UTF-8 character
            raise RetryCarefully(trace_file) from error
        except (jsonstream.StreamFailed, *jsonstream.gzip_errors()):
            pass  # read it again the careful way, which also words the error, if any
    with scratch_directory("copy") as tmp:
        array = extract_event_array(trace_file, Path(tmp), options)
        _read_events(con, array.path, trace_file, exact_times=trace_file not in options.raw_times)
        return Staged(array.metadata, array.json_bytes, array.lost_bytes, streamed=False)


def _stage_streamed(con: duckdb.DuckDBPyConnection, trace_file: Path, options: IngestOptions) -> Staged:
    chunks = jsonstream.CountedChunks(jsonstream.decompressed_chunks(trace_file, options.progress))
    header, first = read_header(trace_file, chunks)
    plain = not jsonstream.is_gzip(trace_file)
    lanes = _lanes(con)
    pipes = jsonstream.EventPipes(
        first,
        chunks,
        lanes,
        lambda rest, after_element: array_end(rest, header.bare_array, after_element),
        jsonstream.expected_size(trace_file),
        jsonstream.json_limit(trace_file, options.max_expansion),
        jsonstream.FileBody(trace_file, chunks.read, options.progress) if plain else None,
    )
    with pipes as paths:
        try:
            source = _read_json(FAST_EVENT_COLUMNS, FAST_MAX_EVENT)
            with _reading_pipes(con, lanes):
                _stage(con, source, [[str(p) for p in paths]], FAST_ARG_COLUMNS, FAST_EVENT_COLUMNS["ts"])
        except BaseException:
            pipes.cancel()
            raise
        pipes.finish()
    return Staged({**header.metadata, **pipes.trailer}, header.offset + pipes.json_bytes, 0, streamed=True)


@contextlib.contextmanager
def _reading_pipes(con: duckdb.DuckDBPyConnection, lanes: int) -> Iterator[None]:
    """Settings for the read of the pipes, restored after it.

    Rows in any order: a thread need not wait for the pipe before its own to be read (realistic 1 GB, same CPU:
    6.4-6.7 -> 5.9-6.5 s wall on a quiet machine, 11.2 -> 8.8 s with the other core busy). Nothing reads _ev in its
    row order (every insert numbers rows by their columns; the pipes' rows came in no fixed order anyway).
    No more threads than lanes: each thread holds a 32 MiB buffer for the pipe it reads, fed or not, so that with
    DuckDB's one thread per core the read ran out of the 1 GiB cap of a 1 GB trace at 16 threads (1GB: 2.09 GB peak
    RSS, staged twice, the second time without the cap) and 64 threads (3.1 GB), where it fits at 16 or fewer.
    """
    threads = _threads(con)
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET threads = {min(threads, lanes)}")
    try:
        yield
    finally:
        for restore in ("RESET preserve_insertion_order", f"SET threads = {threads}"):
            with contextlib.suppress(duckdb.Error):  # a failed read aborted the transaction: the caller starts over
                con.execute(restore)


def _threads(con: duckdb.DuckDBPyConnection) -> int:
    """DuckDB's worker threads."""
    row = first_row(con.execute("SELECT current_setting('threads')").fetchall())
    return max(1, int(row[0]) if row else 1)


def _lanes(con: duckdb.DuckDBPyConnection) -> int:
    """Pipes fed at once: one per DuckDB thread (it parses one file per thread), at most MAX_LANES."""
    return min(_threads(con), jsonstream.MAX_LANES)


# ---------------------------------------------------------------------------------------------------------
# Reading the array with DuckDB and moving rows into the schema


def _read_events(con: duckdb.DuckDBPyConnection, array_path: Path, trace_file: Path, exact_times: bool) -> None:
    """Stage the array in `array_path` as _ev, every value read as raw JSON and cast with TRY_CAST, but ts and dur,
    with `exact_times`, as DECIMAL: exact from their text, as on the fast path (raw JSON holds a number as a double,
    which from 9.9e12 µs on is not the text: 9911282807059.433 -> ...059.434; epoch µs lost up to 0.2 µs). When
    that read fails (a ts that is no number, or damage) RetryCarefully has the file read again with raw times,
    which also words the error, if any.

    Lifts the ingest's memory cap (db.write_session): read_json reserves twice its maximum_object_size
    (MAX_EVENT) up front, which the cap would refuse; the pages it does not fill cost nothing.
    """
    con.execute("RESET memory_limit")
    try:
        source = _read_json(EVENT_COLUMNS | (EXACT_TIMES if exact_times else {}), MAX_EVENT)
        decimal = EXACT_TIMES["ts"] if exact_times else "DECIMAL(24, 3)"
        _stage(con, source, [[str(array_path)]], ARG_COLUMNS, decimal, robust=True)
    except (duckdb.InvalidInputException, duckdb.ConversionException, UnicodeDecodeError) as error:
        if exact_times:
            raise RetryCarefully(trace_file, raw_times=True) from error
        raise BadInputError(
            trace_file,
            f"malformed trace JSON ({_first_line(error)})",
            "the file is damaged; record or copy it again (--salvage keeps events before a cut)",
        ) from error


def _read_json(columns: dict[str, str], biggest: int) -> str:
    """SQL: the events of the JSON array files given as the query's parameter, typed by `columns`, as file 0."""
    spec = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in columns.items()) + "}"
    return f"SELECT 0 AS file, * FROM read_json(?, format = 'array', columns = {spec}, maximum_object_size = {biggest})"


def _stage(
    con: duckdb.DuckDBPyConnection,
    source: str,
    params: list[Any],
    args: dict[str, str],
    decimal: str,
    robust: bool = False,
) -> None:
    """Create temp table _ev from `source` (SQL giving file, cat, ph, name, pid, tid, ts, dur, args per event):
    one row per event, typed, with `tbl` telling which table it feeds and `file` which staged file it is from.

    tbl: 1 gpu_activity, 2 launches, 3 cpu_ranges, 4 gpu_ranges, 0 none; `keep` adds metadata events.
    Times are converted once here to ns relative to the trace's base (start_rel, end_rel; NULL where they
    overflow), only for complete events that feed a table. Events of other categories keep their category
    and phase (for the counters) and NULL names. `robust`: ts, dur and args are raw JSON, cast to `decimal`
    and their types with TRY_CAST (the careful path); else they come typed.
    """
    if robust:
        ts, dur = f"TRY_CAST(ts AS {decimal})", f"TRY_CAST(dur AS {decimal})"
        arg_columns = ", ".join(f"CASE WHEN keep THEN {sql} END AS {name}" for name, sql in args.items())
    else:
        ts, dur = "ts", "dur"
        arg_columns = ", ".join(f"{sql} AS {name}" for name, sql in args.items())
    tables = " ".join(
        f"WHEN cat IN ({_sql_list(cats)}) THEN {code}"
        for code, cats in ((1, GPU_KINDS), (2, LAUNCH_CATEGORIES), (4, GPU_RANGE_CATEGORIES))
    )
    cpu = _sql_list(c for c in CPU_RANGE_KINDS if c != "python_function")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _ev AS
        SELECT file, cat, tbl, keep, ph, CASE WHEN keep THEN name END AS name,
               CASE WHEN keep THEN TRY_CAST(pid AS BIGINT) END AS pid,
               CASE WHEN keep THEN TRY_CAST(tid AS BIGINT) END AS tid,
               t AS start_rel,
               CASE WHEN dur IS NULL OR dur <= 0 THEN t
                    WHEN d IS NULL OR t > 9223372036854775807 - d THEN NULL
                    ELSE t + d END AS end_rel,
               ts IS NULL AS no_ts, coalesce(dur < 0, FALSE) AS neg_dur,
               {arg_columns}
        FROM (
            SELECT *, CASE WHEN tbl > 0 AND ph = 'X' THEN {_ns("ts", decimal)} END AS t,
                   CASE WHEN tbl > 0 AND ph = 'X' AND dur > 0 THEN {_ns("dur", decimal)} END AS d
            FROM (
                SELECT *, tbl > 0 OR coalesce(ph = 'M', FALSE) AS keep
                FROM (
                    SELECT *, CASE {tables} WHEN cat IN ({cpu}) THEN 3
                                   WHEN cat = 'python_function' AND name LIKE 'nn.Module:%' THEN 3 ELSE 0 END AS tbl
                    FROM (
                        SELECT file, lower(coalesce(cat, '')) AS cat, ph, name, pid, tid, {ts} AS ts, {dur} AS dur, args
                        FROM ({source})
                    )
                )
            )
        )
        """,
        params,
    )


def _ns(us: str, decimal: str) -> str:
    """SQL: the DECIMAL column `us` (µs) as integer ns, rounded half away from zero; NULL when it overflows BIGINT.

    Multiplying by a DECIMAL(4, 0) keeps DuckDB's fast decimal path: `TRY_CAST(us * 1000 AS BIGINT)` (an
    INTEGER factor) cost 278 ns per value, this 6 ns. The guard keeps the product within DECIMAL(38); `decimal`
    is the column's type.
    """
    bound = f"CAST(1e17 AS {decimal})"  # the column's type: compared with a DOUBLE, every value was cast to DOUBLE
    return f"CASE WHEN abs({us}) < {bound} THEN TRY_CAST({us} * CAST(1000 AS DECIMAL(4, 0)) AS BIGINT) END"


# SQL: the event's start and end in ns fit a BIGINT once its file's base_ns (table _files) is added.
_VALID_TIMES = """start_rel IS NOT NULL AND end_rel IS NOT NULL AND CASE WHEN base_ns >= 0
    THEN end_rel <= 9223372036854775807 - base_ns ELSE start_rel >= -9223372036854775807 - 1 - base_ns END"""


def _first_line(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text.replace(str(Path(tempfile.gettempdir())), "").strip()[:200]


def _check_not_empty(con: duckdb.DuckDBPyConnection, files: list[StagedFile]) -> None:
    counted = dict(con.execute("SELECT file, count(*) FROM _ev GROUP BY file").fetchall())
    for staged in files:
        if not counted.get(staged.file):
            raise BadInputError(staged.path, "the trace holds no events", "profile a region that runs some work")


def _check_ranks(con: duckdb.DuckDBPyConnection, run_id: int, files: list[StagedFile]) -> None:
    """Each rank once per run: among `files` and the files loaded before them."""
    seen = {r[0] for r in con.execute("SELECT rank FROM ranks WHERE run_id = ?", [run_id]).fetchall()}
    for staged in files:
        if staged.rank in seen:
            raise BadInputError(
                staged.path,
                f"rank {staged.rank} appears in two files of the same run",
                "ingest the files as separate runs",
            )
        seen.add(staged.rank)


def _insert_rows(con: duckdb.DuckDBPyConnection, run_id: int, comm_patterns: tuple[str, ...]) -> None:
    """Move the kept events of _ev into the schema's tables, launches first so that GPU work can link to them.

    Keys are numbered in file order, then by time within a file, as if the files were loaded one by one.
    """
    params = {"run": run_id}
    # The complete events with their times in ns on the trace's clock (those that overflow are left out
    # and counted in _record_file_stats).
    con.execute(
        f"""
        CREATE OR REPLACE TEMP VIEW _x AS
        SELECT _ev.rowid AS ev, * EXCLUDE (start_rel, end_rel),
               rank, start_rel + base_ns AS start_ns, end_rel + base_ns AS end_ns
        FROM _ev JOIN _files USING (file) WHERE tbl > 0 AND ph = 'X' AND {_VALID_TIMES}
        """
    )
    con.execute(
        """
        INSERT INTO launches (run_id, rank, launch_id, pid, tid, start_ns, end_ns, name, api, correlation_id)
        SELECT $run, rank,
               (SELECT coalesce(max(launch_id), 0) FROM launches WHERE run_id = $run)
                 + row_number() OVER (ORDER BY file, start_ns, end_ns, correlation, pid, tid, name),
               pid, tid, start_ns, end_ns,
               CASE WHEN contains(name, '_v') THEN regexp_replace(name, '_v\\d+$', '') ELSE coalesce(name, '') END,
               CASE WHEN cat LIKE '%driver' OR regexp_matches(coalesce(name, ''), '^cu[A-Z]') THEN 'driver'
                    ELSE 'runtime' END,
               correlation
        FROM _x WHERE tbl = 2
        """,
        params,
    )
    _insert_gpu_activity(con, run_id, comm_patterns)
    _insert_cpu_ranges(con, run_id)
    con.execute(
        """
        INSERT INTO gpu_ranges (run_id, rank, range_id, device_id, stream_id, start_ns, end_ns, name)
        SELECT $run, rank,
               (SELECT coalesce(max(range_id), 0) FROM gpu_ranges WHERE run_id = $run)
                 + row_number() OVER (ORDER BY file, start_ns, end_ns DESC, device, stream, pid, tid, name),
               TRY_CAST(coalesce(device, pid) AS INTEGER), coalesce(stream, tid), start_ns, end_ns, coalesce(name, '')
        FROM _x WHERE tbl = 4
        """,
        params,
    )
    con.execute(
        """
        INSERT INTO threads (run_id, rank, pid, tid, process_name, thread_name)
        SELECT $run, rank, pid, CASE WHEN name = 'thread_name' THEN tid END,
               max(arg_name) FILTER (name = 'process_name'), max(arg_name) FILTER (name = 'thread_name')
        FROM _ev JOIN _files USING (file) WHERE ph = 'M' AND name IN ('process_name', 'thread_name') AND pid IS NOT NULL
        GROUP BY ALL
        """,
        params,
    )


def _insert_gpu_activity(con: duckdb.DuckDBPyConnection, run_id: int, comm_patterns: tuple[str, ...]) -> None:
    """Kernels, copies and sets, with their short name, class (ingest/common.py) and launch call. Their keys are
    numbered on the narrow sort key alone into temp table _num (common.numbered) and joined back, the rows inserted
    in key order: a window over these wide rows (names, grids, blocks) sorted all of them (1 GB, 2 cores: the insert
    took 1.55 s, now 1.28 with the numbering; launches and CPU ranges, narrower, gained nothing that way)."""
    common.short_names_table(con, "SELECT DISTINCT name FROM _ev WHERE tbl = 1 AND ph = 'X'")
    common.kernel_class_table(
        con, "SELECT DISTINCT name FROM _ev WHERE tbl = 1 AND ph = 'X' AND cat = 'kernel'", comm_patterns
    )
    common.launch_table(
        con, f"SELECT * FROM launches WHERE run_id = {int(run_id)} AND rank IN (SELECT rank FROM _files)", scope="rank"
    )
    gpu_kinds = "CASE cat " + " ".join(f"WHEN '{c}' THEN '{k}'" for c, k in GPU_KINDS.items()) + " END"
    order = "file, start_ns, end_ns, device, stream, correlation, name"
    con.execute(f"CREATE OR REPLACE TEMP TABLE _num AS {common.numbered('_x WHERE tbl = 1', order, row='ev')}")
    con.execute(
        f"""
        INSERT INTO gpu_activity (run_id, rank, activity_id, kind, device_id, stream_id, start_ns, end_ns, name,
                                  short_name, category, comm_op, pid, correlation_id, launch_id, graph_id,
                                  graph_node_id, grid, block, bytes)
        SELECT $run, x.rank, (SELECT coalesce(max(activity_id), 0) FROM gpu_activity WHERE run_id = $run) + n,
               kind, TRY_CAST(coalesce(device, x.pid) AS INTEGER), coalesce(stream, tid),
               start_ns, end_ns, coalesce(x.name, ''), coalesce(s.short_name, ''),
               CASE WHEN kind <> 'kernel' THEN kind WHEN collective IS NOT NULL THEN 'comm'
                    ELSE coalesce(c.category, 'compute') END,
               CASE WHEN kind = 'kernel' AND collective IS NULL AND c.name IS NOT NULL THEN c.comm_op
                    ELSE {_COMM_OP_FROM_COLLECTIVE} END,
               l.pid, correlation, l.launch_id, graph_id, graph_node_id, grid, block, bytes
        FROM (SELECT _x.*, _num.n, {gpu_kinds} AS kind FROM _x JOIN _num ON _num.row = _x.ev WHERE _x.tbl = 1) x
        LEFT JOIN _short_names s ON s.name = x.name
        LEFT JOIN _name_class c ON c.name = x.name
        LEFT JOIN _launch_by_corr l ON l.rank = x.rank AND l.correlation_id = x.correlation
        ORDER BY n
        """,
        {"run": run_id},
    )
    con.execute("DROP TABLE _num")


def _insert_cpu_ranges(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """CPU ranges with their nesting on their thread (ingest/nesting.py), computed before they are inserted."""
    range_kind = "CASE cat " + " ".join(f"WHEN '{c}' THEN '{k}'" for c, k in CPU_RANGE_KINDS.items()) + " END"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _r AS
        SELECT (SELECT coalesce(max(range_id), 0) FROM cpu_ranges WHERE run_id = $run)
                 + row_number() OVER (ORDER BY file, start_ns, end_ns DESC, pid, tid, name) AS range_id,
               rank, pid, tid, start_ns, end_ns, coalesce(name, '') AS name,
               CASE WHEN name LIKE 'ProfilerStep#%' THEN 'step' ELSE {range_kind} END AS kind
        FROM _x WHERE tbl = 3
        """,
        {"run": run_id},
    )
    nesting.range_nesting_table(con, "_r")
    con.execute(
        """
        INSERT INTO cpu_ranges (run_id, rank, range_id, pid, tid, start_ns, end_ns, closed, name, kind, depth,
                                parent_id)
        SELECT $run, r.rank, r.range_id, r.pid, r.tid, r.start_ns, r.end_ns, TRUE, r.name, r.kind,
               coalesce(p.depth, 0), CASE WHEN p.depth > 0 THEN p.parent_id END
        FROM _r r LEFT JOIN _range_parent p USING (range_id)
        """,
        {"run": run_id},
    )
    con.execute("DROP TABLE _r")


_COMM_OP_FROM_COLLECTIVE = """
    CASE WHEN collective IS NULL THEN NULL
         WHEN regexp_matches(lower(collective), 'all_?reduce') THEN 'all_reduce'
         WHEN regexp_matches(lower(collective), 'all_?gather') THEN 'all_gather'
         WHEN regexp_matches(lower(collective), 'reduce_?scatter') THEN 'reduce_scatter'
         WHEN regexp_matches(lower(collective), 'all_?to_?all') THEN 'all_to_all'
         WHEN regexp_matches(lower(collective), 'send|recv') THEN 'send_recv'
         WHEN regexp_matches(lower(collective), 'broadcast') THEN 'broadcast'
         WHEN regexp_matches(lower(collective), 'reduce') THEN 'reduce'
         ELSE 'other' END"""


def _sql_list(values: Any) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _insert_ranks(con: duckdb.DuckDBPyConnection, run_id: int, files: list[StagedFile]) -> None:
    """One ranks row per file: its rank, the device that ran most of its kernels and the process of most launches."""
    busiest = dict(
        con.execute(
            """SELECT rank, arg_max(device_id, n) FROM (
                   SELECT rank, device_id, count(*) AS n FROM gpu_activity
                   WHERE run_id = ? AND kind = 'kernel' AND rank IN (SELECT rank FROM _files) GROUP BY ALL)
               GROUP BY rank""",
            [run_id],
        ).fetchall()
    )
    launching = dict(
        con.execute(
            """SELECT rank, arg_max(pid, n) FROM (
                   SELECT rank, pid, count(*) AS n FROM launches
                   WHERE run_id = ? AND rank IN (SELECT rank FROM _files) GROUP BY ALL)
               GROUP BY rank""",
            [run_id],
        ).fetchall()
    )
    rows = []
    for staged in files:
        metadata = staged.metadata
        device_names = {
            _int_or_none(d.get("id")): d.get("name")
            for d in _list(metadata.get("deviceProperties"))
            if isinstance(d, dict)
        }
        device_id = busiest.get(staged.rank)
        info = metadata.get("distributedInfo") if isinstance(metadata.get("distributedInfo"), dict) else {}
        rows.append(
            [
                run_id,
                staged.rank,
                str(staged.path),
                staged.rank_from,
                launching.get(staged.rank),
                _str_or_none(metadata.get("host_name") or metadata.get("hostname")),
                device_id,
                _str_or_none(_device_name(device_names, device_id)),
                _int_or_none(info.get("world_size")),
            ]
        )
    con.executemany("INSERT INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _device_name(names: dict[int | None, Any], device_id: int | None) -> Any:
    """The name deviceProperties gives the rank's device; else, when it names one kind of device only, that name
    (a ROCm trace lists its visible device as id 0 while its kernels carry the machine's index, e.g. 9)."""
    if device_id in names:
        return names[device_id]
    kinds = set(names.values())
    return kinds.pop() if len(kinds) == 1 else None


def _rank_of(metadata: dict[str, Any], trace_file: Path, order: int, files: int) -> tuple[int, str]:
    info = metadata.get("distributedInfo")
    rank = _int_or_none(info.get("rank")) if isinstance(info, dict) else None
    if rank is not None:
        return rank, "distributed_info"
    match = RANK_IN_FILE_NAME.search(trace_file.name)
    if match and _int_or_none(match.group(1)) is not None:
        return int(match.group(1)), "file_name"
    return (order, "file_order") if files > 1 else (0, "default")


def _record_file_stats(con: duckdb.DuckDBPyConnection, run_id: int, files: list[StagedFile]) -> dict[int, int]:
    """Counters of what each file held and what was skipped or lost; returns its number of kernels by file."""
    rows = con.execute(
        f"""SELECT file, cat, count(*) AS n, count(*) FILTER (keep) AS kept,
                  count(*) FILTER (keep AND ph = 'X' AND neg_dur) AS negative,
                  count(*) FILTER (keep AND ph = 'X' AND no_ts) AS no_ts,
                  count(*) FILTER (tbl > 0 AND ph = 'X' AND NOT no_ts AND NOT ({_VALID_TIMES})) AS out_of_range,
                  count(*) FILTER (ph = 'X') AS complete,
                  count(*) FILTER (tbl > 0 AND coalesce(ph, '') NOT IN ('X', 'M')) AS other_phase
           FROM _ev JOIN _files USING (file) GROUP BY file, cat ORDER BY file, cat"""
    ).fetchall()
    stats = []
    for staged in files:
        counts = [r[1:] for r in rows if r[0] == staged.file]
        stats.extend((run_id, staged.rank, *stat) for stat in _file_stats(staged, counts))
    common.add_stats(con, stats)
    return {r[0]: r[7] for r in rows if r[1] == "kernel"}


def _file_stats(staged: StagedFile, rows: list[tuple[Any, ...]]) -> list[tuple[str, str, int, str]]:
    """(name, severity, value, description) of one file's counters, from its rows of counts per category."""
    stats = [
        ("events", "info", sum(r[1] for r in rows), "events in the traceEvents array"),
        ("json_bytes", "info", staged.json_bytes, "bytes of JSON read (uncompressed)"),
    ]
    out_of_range = sum(r[5] for r in rows)
    if out_of_range:
        stats.append(
            ("time_out_of_range", "data_loss", out_of_range, "events whose start or end in ns overflows (dropped)")
        )
    for cat, n, kept, negative, no_ts, _, _, other_phase in rows:
        if other_phase:
            stats.append(
                (
                    f"skipped_phase.{cat}",
                    "data_loss",
                    other_phase,
                    "events of a category traceview reads but not complete events (ph X): B/E ranges, instants "
                    "(not read)",
                )
            )
        if n - kept:
            stats.append(
                (f"skipped_category.{cat or '(none)'}", "info", n - kept, "events of a category traceview does not use")
            )
        if negative:
            stats.append(
                (
                    f"negative_duration.{cat}",
                    "data_loss",
                    negative,
                    "events with a negative duration (kept with duration 0)",
                )
            )
        if no_ts:
            stats.append((f"missing_timestamp.{cat}", "data_loss", no_ts, "events without a usable ts (dropped)"))
    if staged.lost_bytes:
        stats.append(
            (
                "salvaged_bytes_lost",
                "data_loss",
                staged.lost_bytes,
                "bytes after the last complete event of a cut-off trace (--salvage)",
            )
        )
    return stats


def _file_warnings(staged: StagedFile, kernels: int) -> list[str]:
    warnings = []
    if kernels == 0:
        warnings.append(f"{staged.path.name}: CPU-only trace (no GPU kernels)")
    if staged.lost_bytes:
        warnings.append(f"{staged.path.name}: cut-off trace salvaged, {staged.lost_bytes} bytes lost")
    return warnings


def _profiler_version(metadata: dict[str, Any]) -> str:
    parts = [f"kineto schema {metadata.get('schemaVersion', '?')}"]
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version"):
        if key in metadata:
            parts.append(f"{key} {metadata[key]}")
    return " ".join(parts)


METADATA_DEPTH = 32  # traceview reads metadata two levels deep; deeper values are dropped, not recursed into


def _metadata(raw: dict[str, Any], options: IngestOptions) -> dict[str, Any]:
    """A file's top-level metadata as the reader uses it: valid text (_valid_text), and without the host name
    unless the user asks for it (--keep-host): the machine's name identifies it."""
    metadata = _valid_text(raw)
    if options.keep_host:
        return metadata
    return {key: value for key, value in metadata.items() if key not in ("host_name", "hostname")}


def _valid_text(value: Any, depth: int = METADATA_DEPTH) -> Any:
    """`value` with every string valid UTF-8: a lone surrogate (a `\\ud800` escape, or invalid bytes read with
    surrogateescape) becomes U+FFFD, so that the metadata can go to DuckDB. Containers nested deeper than `depth`
    become None."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict | list) and depth <= 0:
        return None
    if isinstance(value, dict):
        return {_valid_text(k): _valid_text(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_text(v, depth - 1) for v in value]
    return value


def _str_or_none(value: Any) -> str | None:
    """`value` when it is a string (a host or device name given as a number, list or object is no name)."""
    return value if isinstance(value, str) else None


def _list(value: Any) -> list[Any]:
    """`value` when it is a list, else [] (metadata of another type is no list of anything)."""
    return value if isinstance(value, list) else []


def _int_or_none(value: Any, bits: int = 32) -> int | None:
    """`value` as an integer that fits a signed `bits`-bit column; None when missing, not a number or too big."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None
