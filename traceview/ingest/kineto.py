"""PyTorch profiler (Kineto) Chrome-trace JSON -> the schema's tables.

Reads: `.json`, `.json.gz` or `.pt.trace.json(.gz)` files, one per rank. Writes: ranks, gpu_activity,
launches, cpu_ranges, gpu_ranges, threads and ingest_stats rows for one run.

The trace is never held as Python objects. Each file is streamed once (gunzipped if needed) into a
temporary file holding only its `traceEvents` array; the small metadata around the array (before and
after it) is parsed with `json`. DuckDB's JSON reader then reads the array in parallel, keeping only the
fields and categories traceview uses, and SQL moves the rows into the schema.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import duckdb

from ..db import first_row
from ..errors import BadInputError
from . import IngestOptions, LoadedSource, Source, common

CHUNK = 1 << 24
MAX_HEADER = 1 << 28
MAX_EVENT = 1 << 30  # read_json's maximum_object_size
TAIL_WINDOWS = (1 << 20, 1 << 26)

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

RANK_IN_FILE_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class EventArray:
    """A file's traceEvents array extracted to `path`, and the metadata that surrounded it."""

    path: Path
    metadata: dict[str, Any]
    json_bytes: int
    lost_bytes: int


def load(con: duckdb.DuckDBPyConnection, source: Source, run_id: int, options: IngestOptions) -> LoadedSource:
    """Load every file of `source` (one per rank) into run `run_id`."""
    warnings: list[str] = []
    partial = False
    anchors: set[int] = set()
    versions: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="traceview-") as tmp:
        for order, trace_file in enumerate(source.files):
            array = extract_event_array(trace_file, Path(tmp), options)
            rank, rank_from = _rank_of(array.metadata, trace_file, order, len(source.files))
            _read_events(con, array.path, trace_file)
            _check_not_empty(con, trace_file)
            base_ns = _int_or_none(array.metadata.get("baseTimeNanoseconds"), bits=64) or 0
            _insert_rows(con, run_id, rank, base_ns)
            _insert_rank(con, run_id, rank, rank_from, trace_file, array.metadata)
            _record_file_stats(con, run_id, rank, array)
            warnings += _file_warnings(con, trace_file, array)
            partial = partial or array.lost_bytes > 0
            if "baseTimeNanoseconds" in array.metadata:
                anchors.add(base_ns)
            versions.add(_profiler_version(array.metadata))
            array.path.unlink()
    common.link_launches(con, run_id, same_process="rank")
    return LoadedSource(
        profiler_version=", ".join(sorted(versions)),
        clock_anchor_ns=min(anchors) if anchors else None,
        partial=partial,
        warnings=tuple(warnings),
    )


# ---------------------------------------------------------------------------------------------------------
# Streaming the traceEvents array out of the file


def extract_event_array(trace_file: Path, tmp: Path, options: IngestOptions) -> EventArray:
    """Stream `trace_file` (gunzipping it) into tmp/N.json holding only its traceEvents array."""
    out_path = tmp / f"{trace_file.name}.events.json"
    chunks = _decompressed_chunks(trace_file, options)
    header, first = _read_header(trace_file, chunks)
    json_bytes = len(first) + header.offset
    with open(out_path, "wb") as out:
        out.write(first)
        for chunk in chunks:
            out.write(chunk)
            json_bytes += len(chunk)
    trailer, lost = _cut_after_array(out_path, trace_file, header.bare_array, options.salvage)
    return EventArray(out_path, {**header.metadata, **trailer}, json_bytes, lost)


def _decompressed_chunks(trace_file: Path, options: IngestOptions) -> Iterator[bytes]:
    total = trace_file.stat().st_size
    with open(trace_file, "rb") as raw:
        stream: BinaryIO = gzip.GzipFile(fileobj=raw) if raw.read(2) == b"\x1f\x8b" else raw
        raw.seek(0)
        while True:
            try:
                chunk = stream.read(CHUNK)
            except (EOFError, OSError, zlib.error) as error:
                if options.salvage and isinstance(error, EOFError):
                    return
                raise BadInputError(
                    trace_file,
                    f"the gzip data is truncated or corrupt ({error})",
                    "copy the file again, or add --salvage to keep the events before the damage",
                ) from error
            if not chunk:
                return
            if options.progress:
                options.progress(f"reading {trace_file.name}", raw.tell(), total)
            yield chunk


@dataclass(frozen=True)
class _Header:
    metadata: dict[str, Any]
    offset: int
    bare_array: bool


def _read_header(trace_file: Path, chunks: Iterator[bytes]) -> tuple[_Header, bytes]:
    """Find where the traceEvents array starts; return the metadata before it and the bytes from `[` on."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        found = _find_array_start(buffer, trace_file)
        if found is not None:
            header, start = found
            return header, buffer[start:]
        if len(buffer) > MAX_HEADER:
            break
    if not buffer.strip():
        raise BadInputError(trace_file, "the file is empty", "record the trace again; the profiler wrote nothing")
    found = _find_array_start(buffer, trace_file, at_end=True)
    if found is None:
        raise BadInputError(
            trace_file,
            "JSON without a traceEvents array: not a PyTorch profiler / Chrome trace",
            "give the trace file written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)",
        )
    header, start = found
    return header, buffer[start:]


def _find_array_start(buffer: bytes, trace_file: Path, at_end: bool = False) -> tuple[_Header, int] | None:
    stripped = buffer.lstrip()
    if not stripped:
        return None
    first = stripped[:1]
    if first == b"[":
        return _Header({}, 0, True), len(buffer) - len(stripped)
    if first != b"{":
        raise BadInputError(
            trace_file,
            "not JSON (the file does not start with { or [)",
            "give a PyTorch profiler .json or .json.gz trace",
        )
    for match in re.finditer(rb'"traceEvents"\s*:\s*\[', buffer):
        try:
            metadata = json.loads(buffer[: match.start()] + b'"traceEvents": null}')
        except ValueError:
            continue
        metadata.pop("traceEvents", None)
        return _Header(metadata, match.end() - 1, False), match.end() - 1
    if at_end:
        return None
    return None


def _cut_after_array(path: Path, trace_file: Path, bare_array: bool, salvage: bool) -> tuple[dict[str, Any], int]:
    """Truncate `path` right after the array's closing bracket; return the metadata after it and bytes lost."""
    size = path.stat().st_size
    for window in TAIL_WINDOWS:
        start = max(0, size - window)
        with open(path, "rb") as handle:
            handle.seek(start)
            tail = handle.read()
        end = _array_end_in_tail(tail, bare_array)
        if end is not None:
            offset, trailer = end
            with open(path, "r+b") as handle:
                handle.truncate(start + offset + 1)
            return trailer, 0
        if start == 0:
            break
    if salvage:
        return {}, _salvage(path, size)
    raise BadInputError(
        trace_file,
        "the trace is truncated (the traceEvents array never closes)",
        "copy the file again, or add --salvage to keep every complete event before the cut",
    )


def _array_end_in_tail(tail: bytes, bare_array: bool) -> tuple[int, dict[str, Any]] | None:
    """Position of the `]` closing traceEvents within `tail`, and the parsed keys after it.

    The closing bracket follows the last event's `}` (or the opening `[`) and is followed by `,` or `}`
    (the rest of the top-level object). Among such brackets, the earliest whose remainder parses as the
    end of an object is the one: a bracket inside an event leaves unbalanced closers behind it.
    """
    if bare_array:
        stripped = tail.rstrip()
        return (len(stripped) - 1, {}) if stripped.endswith(b"]") else None
    for match in re.finditer(rb"[}\[]\s*\]\s*[,}]", tail):
        bracket = tail.index(b"]", match.start() + 1)
        try:
            trailer = json.loads(b'{"_":0' + tail[bracket + 1 :])
        except ValueError:
            continue
        trailer.pop("_", None)
        return bracket, trailer
    return None


_JSON = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _salvage(path: Path, size: int) -> int:
    """Keep every complete event before the cut (or the damage) and close the array; return the bytes dropped.

    At least 1 when the array never closed: a cut just after an event's brace drops nothing, yet the run is partial.
    """
    keep, closed = _complete_prefix(path)
    with open(path, "r+b") as handle:
        handle.truncate(keep)
        if not closed:
            handle.seek(keep)
            handle.write(b"]")
    return size - keep if closed else max(size - keep, 1)


def _complete_prefix(path: Path) -> tuple[int, bool]:
    """Bytes of the array in `path` up to its last complete event (or its `]`), and whether the array closed.

    The events are decoded one by one from the `[` on, since braces in strings and nested objects make a
    search back from the end unreliable; memory holds one CHUNK of input plus the event being decoded.
    """
    keep, buffer, first = 1, b"", True
    with open(path, "rb") as handle:
        handle.seek(1)
        while data := handle.read(CHUNK):
            buffer += data
            text = buffer.decode("utf-8", "surrogateescape")
            pos = done = 0
            while True:
                pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
                if text[pos : pos + 1] == "]":
                    return keep + len(text[: pos + 1].encode("utf-8", "surrogateescape")), True
                if not first:
                    if text[pos : pos + 1] != ",":
                        break
                    pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
                if text[pos : pos + 1] != "{":
                    break
                try:
                    _, pos = _JSON.raw_decode(text, pos)
                except (ValueError, RecursionError):
                    break
                first, done = False, pos
            used = len(text[:done].encode("utf-8", "surrogateescape"))
            keep, buffer = keep + used, buffer[used:]
            if len(buffer) > MAX_EVENT:
                break
    return keep, False


# ---------------------------------------------------------------------------------------------------------
# Reading the array with DuckDB and moving rows into the schema


def _read_events(con: duckdb.DuckDBPyConnection, array_path: Path, trace_file: Path) -> None:
    """Stage the events traceview keeps as temp table _ev (other categories keep only their category)."""
    kept = list(GPU_KINDS) + list(LAUNCH_CATEGORIES) + list(CPU_RANGE_KINDS) + list(GPU_RANGE_CATEGORIES)
    keep = (
        f"(lower(cat) IN ({', '.join(repr(c) for c in kept)}) AND (lower(cat) <> 'python_function' "
        "OR name LIKE 'nn.Module:%')) OR ph = 'M'"
    )
    arg_columns = ", ".join(f"CASE WHEN keep THEN {sql} END AS {name}" for name, sql in ARG_COLUMNS.items())
    columns = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in EVENT_COLUMNS.items()) + "}"
    try:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _ev AS
            SELECT lower(coalesce(cat, '')) AS cat, ph, CASE WHEN keep THEN name END AS name,
                   CASE WHEN keep THEN pid END AS pid, CASE WHEN keep THEN tid END AS tid,
                   TRY_CAST(ts AS DECIMAL(24, 3)) AS ts, TRY_CAST(dur AS DECIMAL(24, 3)) AS dur, {arg_columns}, keep
            FROM (
                SELECT *, coalesce({keep}, FALSE) AS keep
                FROM read_json(?, format = 'array', columns = {columns}, maximum_object_size = 1073741824)
            )
            """,
            [str(array_path)],
        )
    except (duckdb.InvalidInputException, duckdb.ConversionException) as error:
        raise BadInputError(
            trace_file,
            f"malformed trace JSON ({_first_line(error)})",
            "the file is damaged; record or copy it again (--salvage keeps events before a cut)",
        ) from error


def _first_line(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text.replace(str(Path(tempfile.gettempdir())), "").strip()[:200]


def _check_not_empty(con: duckdb.DuckDBPyConnection, trace_file: Path) -> None:
    if con.execute("SELECT count(*) FROM _ev").fetchall()[0][0] == 0:
        raise BadInputError(trace_file, "the trace holds no events", "profile a region that runs some work")


def _insert_rows(con: duckdb.DuckDBPyConnection, run_id: int, rank: int, base_ns: int) -> None:
    params = {"run": run_id, "rank": rank}
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _x AS
        SELECT *, TRY_CAST(round(ts * 1000) + $base AS BIGINT) AS start_ns,
               TRY_CAST(round(ts * 1000) + $base + greatest(round(coalesce(dur, 0) * 1000), 0) AS BIGINT) AS end_ns
        FROM _ev WHERE keep AND ph = 'X' AND ts IS NOT NULL
        """,
        {"base": base_ns},
    )
    _drop_out_of_range(con, run_id, rank)
    gpu_kinds = "CASE cat " + " ".join(f"WHEN '{c}' THEN '{k}'" for c, k in GPU_KINDS.items()) + " END"
    common.short_names_table(con, f"SELECT name FROM _x WHERE cat IN ({_sql_list(GPU_KINDS)})")
    con.execute(
        f"""
        INSERT INTO gpu_activity (run_id, rank, activity_id, kind, device_id, stream_id, start_ns, end_ns, name,
                                  short_name, category, comm_op, correlation_id, graph_id, graph_node_id, grid,
                                  block, bytes)
        SELECT $run, $rank,
               (SELECT coalesce(max(activity_id), 0) FROM gpu_activity WHERE run_id = $run)
                 + row_number() OVER (ORDER BY start_ns, end_ns),
               {gpu_kinds} AS kind,
               coalesce(device, TRY_CAST(pid AS BIGINT)), coalesce(stream, TRY_CAST(tid AS BIGINT)),
               start_ns, end_ns, coalesce(x.name, ''), coalesce(s.short_name, ''),
               CASE WHEN {gpu_kinds} <> 'kernel' THEN {gpu_kinds}
                    WHEN collective IS NOT NULL THEN 'comm' ELSE 'compute' END,
               {_COMM_OP_FROM_COLLECTIVE},
               correlation, graph_id, graph_node_id,
               grid, block, bytes
        FROM _x x LEFT JOIN _short_names s USING (name)
        WHERE cat IN ({_sql_list(GPU_KINDS)})
        """,
        params,
    )
    con.execute(
        f"""
        INSERT INTO launches (run_id, rank, launch_id, pid, tid, start_ns, end_ns, name, api, correlation_id)
        SELECT $run, $rank,
               (SELECT coalesce(max(launch_id), 0) FROM launches WHERE run_id = $run)
                 + row_number() OVER (ORDER BY start_ns, end_ns),
               TRY_CAST(pid AS BIGINT), TRY_CAST(tid AS BIGINT), start_ns, end_ns,
               regexp_replace(coalesce(name, ''), '_v\\d+$', ''),
               CASE WHEN cat LIKE '%driver' OR regexp_matches(coalesce(name, ''), '^cu[A-Z]') THEN 'driver'
                    ELSE 'runtime' END,
               correlation
        FROM _x WHERE cat IN ({_sql_list(LAUNCH_CATEGORIES)})
        """,
        params,
    )
    range_kind = "CASE cat " + " ".join(f"WHEN '{c}' THEN '{k}'" for c, k in CPU_RANGE_KINDS.items()) + " END"
    con.execute(
        f"""
        INSERT INTO cpu_ranges (run_id, rank, range_id, pid, tid, start_ns, end_ns, closed, name, kind, depth)
        SELECT $run, $rank,
               (SELECT coalesce(max(range_id), 0) FROM cpu_ranges WHERE run_id = $run)
                 + row_number() OVER (ORDER BY start_ns, end_ns DESC),
               TRY_CAST(pid AS BIGINT), TRY_CAST(tid AS BIGINT), start_ns, end_ns, TRUE, coalesce(name, ''),
               CASE WHEN name LIKE 'ProfilerStep#%' THEN 'step' ELSE {range_kind} END, 0
        FROM _x WHERE cat IN ({_sql_list(CPU_RANGE_KINDS)})
        """,
        params,
    )
    con.execute(
        f"""
        INSERT INTO gpu_ranges (run_id, rank, range_id, device_id, stream_id, start_ns, end_ns, name)
        SELECT $run, $rank,
               (SELECT coalesce(max(range_id), 0) FROM gpu_ranges WHERE run_id = $run)
                 + row_number() OVER (ORDER BY start_ns, end_ns DESC),
               coalesce(device, TRY_CAST(pid AS BIGINT)), coalesce(stream, TRY_CAST(tid AS BIGINT)),
               start_ns, end_ns, coalesce(name, '')
        FROM _x WHERE cat IN ({_sql_list(GPU_RANGE_CATEGORIES)})
        """,
        params,
    )
    con.execute(
        """
        INSERT INTO threads (run_id, rank, pid, tid, process_name, thread_name)
        SELECT $run, $rank, TRY_CAST(pid AS BIGINT) AS p,
               CASE WHEN name = 'thread_name' THEN TRY_CAST(tid AS BIGINT) END,
               max(arg_name) FILTER (name = 'process_name'), max(arg_name) FILTER (name = 'thread_name')
        FROM _ev WHERE ph = 'M' AND name IN ('process_name', 'thread_name') AND TRY_CAST(pid AS BIGINT) IS NOT NULL
        GROUP BY ALL
        """,
        params,
    )


def _drop_out_of_range(con: duckdb.DuckDBPyConnection, run_id: int, rank: int) -> None:
    """Drop (and count) events of _x whose start or end in ns does not fit a BIGINT, such as ts 1e20."""
    n = con.execute("SELECT count(*) FROM _x WHERE start_ns IS NULL OR end_ns IS NULL").fetchall()[0][0]
    if n:
        con.execute("DELETE FROM _x WHERE start_ns IS NULL OR end_ns IS NULL")
        common.add_stat(
            con,
            run_id,
            rank,
            "time_out_of_range",
            "data_loss",
            n,
            "events whose start or end in ns overflows (dropped)",
        )


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


def _insert_rank(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    rank: int,
    rank_from: str,
    trace_file: Path,
    metadata: dict[str, Any],
) -> None:
    if first_row(con.execute("SELECT 1 FROM ranks WHERE run_id = ? AND rank = ?", [run_id, rank]).fetchall()):
        raise BadInputError(
            trace_file,
            f"rank {rank} appears in two files of the same run",
            "ingest the files as separate runs",
        )
    device_names = {
        _int_or_none(d.get("id")): d.get("name") for d in metadata.get("deviceProperties") or [] if isinstance(d, dict)
    }
    busiest = first_row(
        con.execute(
            """SELECT device_id FROM gpu_activity WHERE run_id = ? AND rank = ? AND kind = 'kernel'
           GROUP BY device_id ORDER BY count(*) DESC LIMIT 1""",
            [run_id, rank],
        ).fetchall()
    )
    device_id = busiest[0] if busiest else None
    pid = first_row(
        con.execute(
            "SELECT pid FROM launches WHERE run_id = ? AND rank = ? GROUP BY pid ORDER BY count(*) DESC LIMIT 1",
            [run_id, rank],
        ).fetchall()
    )
    info = metadata.get("distributedInfo") if isinstance(metadata.get("distributedInfo"), dict) else {}
    con.execute(
        "INSERT INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            run_id,
            rank,
            str(trace_file),
            rank_from,
            pid[0] if pid else None,
            metadata.get("host_name") or metadata.get("hostname"),
            device_id,
            device_names.get(device_id),
            _int_or_none(info.get("world_size")),
        ],
    )


def _rank_of(metadata: dict[str, Any], trace_file: Path, order: int, files: int) -> tuple[int, str]:
    info = metadata.get("distributedInfo")
    rank = _int_or_none(info.get("rank")) if isinstance(info, dict) else None
    if rank is not None:
        return rank, "distributed_info"
    match = RANK_IN_FILE_NAME.search(trace_file.name)
    if match and _int_or_none(match.group(1)) is not None:
        return int(match.group(1)), "file_name"
    return (order, "file_order") if files > 1 else (0, "default")


def _record_file_stats(con: duckdb.DuckDBPyConnection, run_id: int, rank: int, array: EventArray) -> None:
    rows = con.execute(
        """SELECT cat, count(*) AS n, count(*) FILTER (keep) AS kept,
                  count(*) FILTER (keep AND ph = 'X' AND dur < 0) AS negative,
                  count(*) FILTER (keep AND ph = 'X' AND ts IS NULL) AS no_ts
           FROM _ev GROUP BY cat ORDER BY cat"""
    ).fetchall()
    total = sum(r[1] for r in rows)
    common.add_stat(con, run_id, rank, "events", "info", total, "events in the traceEvents array")
    common.add_stat(con, run_id, rank, "json_bytes", "info", array.json_bytes, "bytes of JSON read (uncompressed)")
    for cat, n, kept, negative, no_ts in rows:
        if n - kept:
            common.add_stat(
                con,
                run_id,
                rank,
                f"skipped_category.{cat or '(none)'}",
                "info",
                n - kept,
                "events of a category traceview does not use",
            )
        if negative:
            common.add_stat(
                con,
                run_id,
                rank,
                f"negative_duration.{cat}",
                "data_loss",
                negative,
                "events with a negative duration (kept with duration 0)",
            )
        if no_ts:
            common.add_stat(
                con,
                run_id,
                rank,
                f"missing_timestamp.{cat}",
                "data_loss",
                no_ts,
                "events without a usable ts (dropped)",
            )
    if array.lost_bytes:
        common.add_stat(
            con,
            run_id,
            rank,
            "salvaged_bytes_lost",
            "data_loss",
            array.lost_bytes,
            "bytes after the last complete event of a cut-off trace (--salvage)",
        )


def _file_warnings(con: duckdb.DuckDBPyConnection, trace_file: Path, array: EventArray) -> list[str]:
    warnings = []
    if con.execute("SELECT count(*) FROM _ev WHERE cat IN ('kernel') AND ph = 'X'").fetchall()[0][0] == 0:
        warnings.append(f"{trace_file.name}: CPU-only trace (no GPU kernels)")
    if array.lost_bytes:
        warnings.append(f"{trace_file.name}: cut-off trace salvaged, {array.lost_bytes} bytes lost")
    return warnings


def _profiler_version(metadata: dict[str, Any]) -> str:
    parts = [f"kineto schema {metadata.get('schemaVersion', '?')}"]
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version"):
        if key in metadata:
            parts.append(f"{key} {metadata[key]}")
    return " ".join(parts)


def _int_or_none(value: Any, bits: int = 32) -> int | None:
    """`value` as an integer that fits a signed `bits`-bit column; None when missing, not a number or too big."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None
