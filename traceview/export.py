"""Chrome-trace JSON of one run, for the Perfetto UI (ui.perfetto.dev) or chrome://tracing.

Reads: `runs`, `ranks`, `steps`, `layers`, `gpu_activity` and the SQL library's `layer_metrics` view.
Writes: one JSON file (gzip-compressed when its name ends in .gz), through a temporary file renamed into place.

Layout: one process per rank (pid = rank + 1). Its first track (tid 1) holds the steps, the second (tid 2) the
layer instances, then one track per GPU stream (tid 10, 11, ... in order of device and stream) with its
kernels, memcpys and memsets, then one track per CPU thread (tid 1000000, ... in order of pid and tid) with its
launch calls and annotations (CPU ranges other than ATen operators); thread_sort_index metadata keeps that order
in the UI. A flow arrow leads from each launch call to the GPU work it launched, so that the UI shows why the GPU
waited. Times are µs since the run's first event (runs.trace_start_ns, written to otherData.clock_zero_ns).

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
from .scratch import replacing
from .version import __version__

STEPS_TID, LAYERS_TID, FIRST_STREAM_TID, FIRST_CPU_TID = 1, 2, 10, 1_000_000
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
    cpu_events: int
    flows: int
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

# CPU thread tracks: one per (rank, pid, tid) that made a launch call or holds an annotation, after the streams.
_CPU_TRACKS = f"""
    SELECT rank, pid, tid, {FIRST_CPU_TID} - 1 + dense_rank() OVER (PARTITION BY rank ORDER BY pid, tid) AS cpu_tid
    FROM (
        SELECT DISTINCT rank, pid, tid FROM launches WHERE run_id = $run AND ($rank IS NULL OR rank = $rank)
        UNION
        SELECT DISTINCT rank, pid, tid FROM cpu_ranges
        WHERE run_id = $run AND ($rank IS NULL OR rank = $rank) AND kind <> 'op'
    )
"""

# Metadata events: process names and order, thread names and order.
_METADATA = f"""
WITH
    _tracks AS ({_TRACKS}),
    _cpu_tracks AS ({_CPU_TRACKS}),
    _ranks AS (
        SELECT rank, device_id, device_name FROM ranks WHERE run_id = $run AND ($rank IS NULL OR rank = $rank)
    ),
    _threads AS (
        SELECT rank, {STEPS_TID} AS tid, 'steps' AS name FROM _ranks
        UNION ALL SELECT rank, {LAYERS_TID}, 'layers' FROM _ranks
        UNION ALL SELECT rank, tid, format('GPU {{}} · stream {{}}', coalesce(device_id::VARCHAR, '?'),
                                           coalesce(stream_id::VARCHAR, '?')) FROM _tracks
        -- `CPU 682 · thread 682 (python3)`: Kineto's thread names already say `thread N`; others get it
        UNION ALL SELECT c.rank, c.cpu_tid, format('CPU {{}} · {{}}', coalesce(c.pid::VARCHAR, '?'), CASE
            WHEN n.thread_name LIKE 'thread %' THEN n.thread_name
            WHEN n.thread_name IS NOT NULL
                THEN format('thread {{}} ({{}})', coalesce(c.tid::VARCHAR, '?'), n.thread_name)
            ELSE 'thread ' || coalesce(c.tid::VARCHAR, '?') END)
        FROM _cpu_tracks c
        LEFT JOIN (SELECT rank, pid, tid, max(thread_name) AS thread_name FROM threads
                   WHERE run_id = $run AND tid IS NOT NULL GROUP BY ALL) n
               ON n.rank = c.rank AND n.pid IS NOT DISTINCT FROM c.pid AND n.tid IS NOT DISTINCT FROM c.tid
    )
SELECT event FROM (  -- in a fixed order: process names, process order, thread names, thread order
    SELECT 1 AS part, rank, 0 AS tid,
           json_object('ph', 'M', 'pid', rank + 1, 'name', 'process_name',
                       'args', json_object('name', 'rank ' || rank || coalesce(' · ' || device_name, ''))) AS event
    FROM _ranks
    UNION ALL
    SELECT 2, rank, 0,
           json_object('ph', 'M', 'pid', rank + 1, 'name', 'process_sort_index',
                       'args', json_object('sort_index', rank))
    FROM _ranks
    UNION ALL
    SELECT 3, rank, tid,
           json_object('ph', 'M', 'pid', rank + 1, 'tid', tid, 'name', 'thread_name', 'args', json_object('name', name))
    FROM _threads
    UNION ALL
    SELECT 4, rank, tid,
           json_object('ph', 'M', 'pid', rank + 1, 'tid', tid, 'name', 'thread_sort_index',
                       'args', json_object('sort_index', tid))
    FROM _threads
)
ORDER BY part, rank, tid
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


# CPU work: launch calls (with a flow start to the GPU work each launched) and annotations, on their thread's track.
# Read in slices of launch_id / range_id (which follow start time).
_LAUNCHES = f"""
WITH _cpu_tracks AS ({_CPU_TRACKS})
SELECT json_object('ph', 'X', 'pid', l.rank + 1, 'tid', c.cpu_tid, 'cat', 'launch', 'name', l.name,
                   'ts', round((l.start_ns - $t0) / 1e3, 3), 'dur', round((l.end_ns - l.start_ns) / 1e3, 3),
                   'args', json_object('api', l.api, 'correlation', l.correlation_id))
FROM launches l
JOIN _cpu_tracks c ON c.rank = l.rank AND c.pid IS NOT DISTINCT FROM l.pid AND c.tid IS NOT DISTINCT FROM l.tid
WHERE l.run_id = $run AND ($rank IS NULL OR l.rank = $rank) AND l.launch_id >= $lo AND l.launch_id < $hi
ORDER BY l.start_ns, l.launch_id
"""

_ANNOTATIONS = f"""
WITH _cpu_tracks AS ({_CPU_TRACKS})
SELECT json_object('ph', 'X', 'pid', r.rank + 1, 'tid', c.cpu_tid, 'cat', r.kind, 'name', r.name,
                   'ts', round((r.start_ns - $t0) / 1e3, 3), 'dur', round((r.end_ns - r.start_ns) / 1e3, 3),
                   'args', json_merge_patch('{{}}', json_object('domain', r.domain, 'depth', r.depth)))
FROM cpu_ranges r
JOIN _cpu_tracks c ON c.rank = r.rank AND c.pid IS NOT DISTINCT FROM r.pid AND c.tid IS NOT DISTINCT FROM r.tid
WHERE r.run_id = $run AND ($rank IS NULL OR r.rank = $rank) AND r.kind <> 'op'
  AND r.range_id >= $lo AND r.range_id < $hi
ORDER BY r.start_ns, r.range_id
"""

# Flow arrows (Chrome trace flow events, id = the GPU work's activity_id): a start ("s") on the launch call's
# track at its start, an end ("f", bound to the enclosing slice) on the stream's track at the work's start.
_FLOWS = f"""
WITH _tracks AS ({_TRACKS}), _cpu_tracks AS ({_CPU_TRACKS})
SELECT unnest([
    json_object('ph', 's', 'id', g.activity_id, 'pid', l.rank + 1, 'tid', c.cpu_tid, 'cat', 'launch',
                'name', 'launch', 'ts', round((l.start_ns - $t0) / 1e3, 3)),
    json_object('ph', 'f', 'bp', 'e', 'id', g.activity_id, 'pid', g.rank + 1, 'tid', t.tid, 'cat', 'launch',
                'name', 'launch', 'ts', round((g.start_ns - $t0) / 1e3, 3))
])
FROM gpu_activity g
JOIN launches l ON l.run_id = g.run_id AND l.launch_id = g.launch_id
JOIN _cpu_tracks c ON c.rank = l.rank AND c.pid IS NOT DISTINCT FROM l.pid AND c.tid IS NOT DISTINCT FROM l.tid
JOIN _tracks t ON t.rank = g.rank AND t.device_id IS NOT DISTINCT FROM g.device_id
              AND t.stream_id IS NOT DISTINCT FROM g.stream_id
WHERE g.run_id = $run AND ($rank IS NULL OR g.rank = $rank) AND g.activity_id >= $lo AND g.activity_id < $hi
ORDER BY g.start_ns, g.activity_id
"""


# (what it counts as, query, table and key whose slices it is read in), in the order they are written.
_SLICED = (
    ("activities", _ACTIVITIES, "gpu_activity", "activity_id"),
    ("cpu_events", _LAUNCHES, "launches", "launch_id"),
    ("cpu_events", _ANNOTATIONS, "cpu_ranges", "range_id"),
    ("flows", _FLOWS, "gpu_activity", "activity_id"),
)


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
    counts = {"metadata": 0, "segments": 0, "activities": 0, "cpu_events": 0, "flows": 0}
    with replacing(path) as tmp, _open(tmp, path) as out:
        out.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
        first = True
        queries = [("metadata", _METADATA, params), ("segments", _SEGMENTS, params)]
        for part, sql, table, key in _SLICED:
            queries += [(part, sql, {**params, **bounds}) for bounds in _slices(ref, table, key)]
        for part, sql, values in queries:
            for batch in _batches(ref, sql, values):
                out.write(("" if first else ",\n") + ",\n".join(batch))
                first = False
                counts[part] += len(batch)
        out.write("\n]}\n")
    return ExportStats(
        path=str(path),
        run=ref.label,
        ranks=_count(ref, "ranks", rank),
        steps=_count(ref, "steps", rank),
        layers=_count(ref, "layers", rank),
        activities=counts["activities"],
        cpu_events=counts["cpu_events"],
        flows=counts["flows"] // 2,
        events=sum(counts.values()),
        bytes=path.stat().st_size,
    )


def _open(path: Path, named: Path) -> IO[str]:
    """`path` open for writing text, gzip-compressed when the file it becomes (`named`) ends in .gz."""
    if named.name.endswith(".gz"):
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=6)
    return path.open("w", encoding="utf-8")


def _slices(ref: RunRef, table: str, key: str) -> list[dict[str, int]]:
    """[lo, hi) ranges of `key` (the table's id, which follows start time) of SLICE_IDS ids each, covering the run."""
    row = first_row(
        ref.con.execute(f"SELECT min({key}), max({key}) FROM {table} WHERE run_id = ?", [ref.run_id]).fetchall()
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
