"""Chrome-trace JSON of one run, for the Perfetto UI (ui.perfetto.dev) or chrome://tracing.

Reads: `runs`, `ranks`, `steps`, `layers`, `gpu_activity` and the SQL library's `layer_metrics` view.
Writes: one JSON file (gzip-compressed when its name ends in .gz), through a temporary file renamed into place.

Layout: one process per rank (pid = rank + 1). Its first track (tid 1) holds the steps, the second (tid 2) the
layer instances, then one track per GPU stream (tid 10, 11, ... in order of device and stream) with its
kernels, memcpys and memsets; thread_sort_index metadata keeps that order in the UI. Times are µs since the
run's first event (runs.trace_start_ns, written to otherData.clock_zero_ns).

Events are built as JSON text by DuckDB (NULL arguments left out) and written batch by batch, so memory stays
flat for millions of kernels.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import sqllib
from .db import first_row
from .diff import RunRef
from .version import __version__

STEPS_TID, LAYERS_TID, FIRST_STREAM_TID = 1, 2, 10
BATCH_ROWS = 50_000  # rows fetched from DuckDB at a time
SLICE_IDS = 500_000  # activity ids per sorted slice of GPU work


@dataclass(frozen=True)
class ExportStats:
    """What `traceview export` wrote."""

    path: str
    run: str
    ranks: int
    steps: int
    layers: int
    activities: int
    events: int
    bytes: int


# Stream tracks: one per (rank, device, stream) with its thread id.
_TRACKS = """
    SELECT rank, device_id, stream_id,
           FIRST_STREAM_TID - 1 + dense_rank() OVER (PARTITION BY rank ORDER BY device_id, stream_id) AS tid
    FROM (
        SELECT DISTINCT rank, device_id, stream_id FROM gpu_activity
        WHERE run_id = $run AND ($rank IS NULL OR rank = $rank)
    )
""".replace("FIRST_STREAM_TID", str(FIRST_STREAM_TID))

# Metadata events: process names and order, thread names and order.
_METADATA = f"""
WITH
    _tracks AS ({_TRACKS}),
    _ranks AS (
        SELECT rank, device_id, device_name FROM ranks WHERE run_id = $run AND ($rank IS NULL OR rank = $rank)
    ),
    _threads AS (
        SELECT rank, {STEPS_TID} AS tid, 'steps' AS name FROM _ranks
        UNION ALL SELECT rank, {LAYERS_TID}, 'layers' FROM _ranks
        UNION ALL SELECT rank, tid, format('GPU {{}} · stream {{}}', coalesce(device_id::VARCHAR, '?'),
                                           coalesce(stream_id::VARCHAR, '?')) FROM _tracks
    )
SELECT json_object('ph', 'M', 'pid', rank + 1, 'name', 'process_name',
                   'args', json_object('name', 'rank ' || rank || coalesce(' · ' || device_name, '')))
FROM _ranks
UNION ALL
SELECT json_object('ph', 'M', 'pid', rank + 1, 'name', 'process_sort_index', 'args', json_object('sort_index', rank))
FROM _ranks
UNION ALL
SELECT json_object('ph', 'M', 'pid', rank + 1, 'tid', tid, 'name', 'thread_name', 'args', json_object('name', name))
FROM _threads
UNION ALL
SELECT json_object('ph', 'M', 'pid', rank + 1, 'tid', tid, 'name', 'thread_sort_index',
                   'args', json_object('sort_index', tid))
FROM _threads
"""

# Steps and layer instances: one complete ("X") event each on the rank's steps / layers track.
_SEGMENTS = f"""
SELECT json_object('ph', 'X', 'pid', rank + 1, 'tid', {STEPS_TID}, 'cat', 'step',
                   'name', coalesce(name, 'step ' || step),
                   'ts', round((start_ns - $t0) / 1e3, 3), 'dur', round((end_ns - start_ns) / 1e3, 3),
                   'args', json_object('step', step, 'phase', phase, 'warmup', warmup, 'method', method))
FROM steps WHERE run_id = $run AND ($rank IS NULL OR rank = $rank)
UNION ALL
SELECT json_object('ph', 'X', 'pid', l.rank + 1, 'tid', {LAYERS_TID}, 'cat', 'layer',
                   'name', 'L' || l.layer || coalesce(' ' || l.name, ''),
                   'ts', round((l.start_ns - $t0) / 1e3, 3), 'dur', round((l.end_ns - l.start_ns) / 1e3, 3),
                   'args', json_object('layer', l.layer, 'step', l.step, 'method', l.method,
                                       'confidence', l.confidence, 'kernels', l.kernels,
                                       'busy_us', m.busy_us, 'comm_us', m.comm_us,
                                       'exposed_comm_us', m.exposed_comm_us, 'idle_us', m.idle_us))
FROM layers l LEFT JOIN layer_metrics m USING (run_id, rank, step, layer)
WHERE l.run_id = $run AND ($rank IS NULL OR l.rank = $rank)
"""

# GPU work: one complete event per kernel, memcpy and memset, on its stream's track, in time order. Read in
# slices of activity_id (which follows start time), so that sorting never holds more than one slice.
_ACTIVITIES = f"""
WITH _tracks AS ({_TRACKS})
SELECT json_object('ph', 'X', 'pid', g.rank + 1, 'tid', t.tid, 'cat', g.category, 'name', g.short_name,
                   'ts', round((g.start_ns - $t0) / 1e3, 3), 'dur', round((g.end_ns - g.start_ns) / 1e3, 3),
                   'args', json_merge_patch('{{}}', json_object(
                       'name', g.name, 'kind', g.kind, 'category', g.category, 'step', g.step,
                       'layer', g.layer, 'comm_op', g.comm_op, 'correlation', g.correlation_id,
                       'grid', g.grid, 'block', g.block, 'bytes', g.bytes)))
FROM gpu_activity g
JOIN _tracks t ON t.rank = g.rank AND t.device_id IS NOT DISTINCT FROM g.device_id
              AND t.stream_id IS NOT DISTINCT FROM g.stream_id
WHERE g.run_id = $run AND ($rank IS NULL OR g.rank = $rank) AND g.activity_id >= $lo AND g.activity_id < $hi
ORDER BY g.start_ns, g.activity_id
"""


def write_chrome_trace(ref: RunRef, path: str | Path, rank: int | None = None) -> ExportStats:
    """Write run `ref` (only `rank` when given) as Chrome-trace JSON to `path`."""
    sqllib.ensure_installed(ref.con)
    path = Path(path)
    row = first_row(
        ref.con.execute("SELECT coalesce(trace_start_ns, 0) FROM runs WHERE run_id = ?", [ref.run_id]).fetchall()
    )
    t0 = int(row[0]) if row else 0
    params = {"run": ref.run_id, "rank": rank, "t0": t0}
    header = {
        "displayTimeUnit": "ns",
        "otherData": {"traceview_version": __version__, "run": ref.label, "clock_zero_ns": t0},
    }
    tmp = path.with_name(f".{path.name}.tmp")
    counts = {"metadata": 0, "segments": 0, "activities": 0}
    try:
        with _open(tmp) as out:
            out.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
            first = True
            queries = [("metadata", _METADATA, params), ("segments", _SEGMENTS, params)]
            queries += [("activities", _ACTIVITIES, {**params, **bounds}) for bounds in _slices(ref)]
            for part, sql, values in queries:
                for batch in _batches(ref, sql, values):
                    out.write(("" if first else ",\n") + ",\n".join(batch))
                    first = False
                    counts[part] += len(batch)
            out.write("\n]}\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportStats(
        path=str(path),
        run=ref.label,
        ranks=_count(ref, "ranks", rank),
        steps=_count(ref, "steps", rank),
        layers=_count(ref, "layers", rank),
        activities=counts["activities"],
        events=sum(counts.values()),
        bytes=path.stat().st_size,
    )


def _open(path: Path) -> IO[str]:
    if path.name.removesuffix(".tmp").endswith(".gz"):
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=6)
    return path.open("w", encoding="utf-8")


def _slices(ref: RunRef) -> list[dict[str, int]]:
    """[lo, hi) ranges of activity_id of SLICE_IDS ids each, covering the run."""
    row = first_row(
        ref.con.execute(
            "SELECT min(activity_id), max(activity_id) FROM gpu_activity WHERE run_id = ?", [ref.run_id]
        ).fetchall()
    )
    if row is None or row[0] is None:
        return []
    first, last = int(row[0]), int(row[1])
    return [{"lo": lo, "hi": lo + SLICE_IDS} for lo in range(first, last + 1, SLICE_IDS)]


def _batches(ref: RunRef, sql: str, params: dict[str, Any]) -> Any:
    """The first column of `sql`'s rows as text, BATCH_ROWS at a time (read to the end)."""
    used = {k: v for k, v in params.items() if f"${k}" in sql}
    reader = ref.con.sql(sql, params=used).to_arrow_reader(BATCH_ROWS)
    for batch in reader:
        yield [str(v) for v in batch.column(0).to_pylist()]


def _count(ref: RunRef, table: str, rank: int | None) -> int:
    row = first_row(
        ref.con.execute(
            f"SELECT count(*) FROM {table} WHERE run_id = $run AND ($rank IS NULL OR rank = $rank)",
            {"run": ref.run_id, "rank": rank},
        ).fetchall()
    )
    return int(row[0]) if row else 0
