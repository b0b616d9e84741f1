"""Layers of CUDA-graph replays, from what was recorded while the graph was captured.

Reads: launches, the staged activity table `_seg_a` and the layer-range timeline `_seg_cpu_events` (see
annotations.py). Writes temp table `_seg_graph(activity_id, layer, name)`.

NVTX and record_function do not fire when a graph is replayed, but they do while it is captured. Two ways
back from a replayed kernel to the ranges open at its capture:
1. Graph node ids (nsys --cuda-graph-trace=node): the `graph_nodes` table (run_id, rank,
   graph_node_id, original_graph_node_id, pid, tid, created_ns: one row per node creation or clone, from
   nsys CUDA_GRAPH_NODE_EVENTS), a kernel's node - or the captured node it was cloned from - was created at
   `created_ns` on thread (pid, tid): it takes the innermost layer range open there and then.
2. Capture-time launches (any backend): every kernel launch made during stream capture is a launch call
   with no GPU work of its own (its correlation id never shows on the GPU), made inside the layer ranges of
   that moment. One capture is the run of such launches on one thread; one replay is the set of activities
   sharing a cudaGraphLaunch. The i-th activity of a replay (in order of GPU start) is the node created by
   the i-th launch of the capture with as many launches, the latest one before the replay.
"""

from __future__ import annotations

import duckdb

from ..db import has_rows

LAUNCH_CALL = r"(?i)launchkernel|launchcooperativekernel|memcpy.*async|memset.*async"
GRAPH_LAUNCH = r"(?i)graphlaunch"


def assign(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Fill `_seg_graph` (empty when the trace holds no capture-time launches inside layer ranges)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _seg_graph (activity_id BIGINT, layer INTEGER, name VARCHAR)")
    has_events = _has_table(con, "_seg_cpu_events")
    if not has_events:
        return
    _by_nodes(con, run_id)
    _replays(con)
    if not has_rows(con, "SELECT 1 FROM _seg_replays"):
        return  # no graph replayed: the captures need not be found (0.5-3.6 CPU-s at 3-12 M events)
    _captures(con, run_id)
    con.execute(
        """
        INSERT INTO _seg_graph
        WITH matched AS (
            SELECT r.replay, c.capture
            FROM _seg_replays r ASOF JOIN _seg_capture_sizes c
              ON r.rank = c.rank AND r.size = c.size AND r.launch_start > c.capture_end
        )
        SELECT r.activity_id, c.layer, c.label
        FROM _seg_replay_nodes r JOIN matched m USING (replay)
        JOIN _seg_capture_nodes c ON c.capture = m.capture AND c.position = r.position
        WHERE c.layer IS NOT NULL AND r.activity_id NOT IN (SELECT activity_id FROM _seg_graph)
        """
    )


def why_none(con: duckdb.DuckDBPyConnection) -> str:
    """Why `assign` placed no kernel in a layer, in words (after it ran)."""
    if not _has_table(con, "_seg_cpu_events"):
        return "the trace has no layer ranges (model.layers.N, or --layer-pattern) to carry into graph replays"
    if not _has_table(con, "_seg_replays") or not has_rows(con, "SELECT 1 FROM _seg_replays"):
        return "no CUDA graph was replayed (no cudaGraphLaunch with GPU work)"
    return "no kernel launch was recorded in a layer range while the replayed graphs were captured (profile capture)"


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [name]).fetchall()[0][0])


def _by_nodes(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Kernels with a graph node id: the layer range open on the creating thread when the node (or the
    captured node it was cloned from) was created."""
    con.execute(
        """
        INSERT INTO _seg_graph
        WITH node AS (
            SELECT n.rank, n.graph_node_id, coalesce(o.pid, n.pid) AS pid, coalesce(o.tid, n.tid) AS tid,
                   coalesce(o.created_ns, n.created_ns) AS created_ns
            FROM graph_nodes n
            LEFT JOIN graph_nodes o ON o.run_id = n.run_id AND o.graph_node_id = n.original_graph_node_id
            WHERE n.run_id = $run
        ), kernel AS (
            SELECT a.activity_id, n.rank, n.pid, n.tid, n.created_ns
            FROM _seg_a a JOIN node n ON a.rank = n.rank AND a.graph_node_id = n.graph_node_id
        )
        SELECT k.activity_id, e.layer, e.label
        FROM kernel k ASOF JOIN _seg_cpu_events e
          ON k.rank = e.rank AND k.pid IS NOT DISTINCT FROM e.lane_a AND k.tid IS NOT DISTINCT FROM e.lane_b
         AND k.created_ns >= e.t
        WHERE e.layer IS NOT NULL
        """,
        {"run": run_id},
    )


def _captures(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """`_seg_capture_nodes(capture, position, layer, label)` and `_seg_capture_sizes`: launches without GPU
    work, grouped into runs per thread, each with the innermost layer range open at its call."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_capture_nodes AS
        WITH calls AS (
            -- launch calls only: other API calls made during capture (cudaStreamIsCapturing, calls Kineto
            -- names INVALID, ...) must not split a capture
            SELECT l.rank, l.pid, l.tid, l.launch_id, l.start_ns,
                   NOT EXISTS (
                       SELECT 1 FROM gpu_activity g WHERE g.run_id = $run AND g.launch_id = l.launch_id
                   ) AS orphan
            FROM launches l WHERE l.run_id = $run AND regexp_matches(l.name, $launch)
        ), runs AS (
            -- only the threads with orphan calls: the window over every launch call of the 1 GB bench export,
            -- which has none, took 2.7 CPU-s (and the other threads' runs are never read)
            SELECT *, sum(CASE WHEN orphan THEN 0 ELSE 1 END) OVER (
                       PARTITION BY rank, pid, tid ORDER BY start_ns, launch_id ROWS UNBOUNDED PRECEDING) AS run_no
            FROM calls c
            WHERE EXISTS (
                SELECT 1 FROM calls o
                WHERE o.orphan AND o.rank = c.rank AND o.pid IS NOT DISTINCT FROM c.pid
                  AND o.tid IS NOT DISTINCT FROM c.tid
            )
        ), orphans AS (
            SELECT rank, pid, tid, launch_id, start_ns,
                   dense_rank() OVER (ORDER BY rank, pid, tid, run_no) AS capture,
                   row_number() OVER (PARTITION BY rank, pid, tid, run_no ORDER BY start_ns, launch_id) - 1
                       AS position
            FROM runs WHERE orphan
        )
        SELECT o.rank, o.capture, o.position, o.start_ns, e.layer, e.label
        FROM orphans o
        ASOF LEFT JOIN _seg_cpu_events e
          ON o.rank = e.rank AND o.pid IS NOT DISTINCT FROM e.lane_a AND o.tid IS NOT DISTINCT FROM e.lane_b
         AND o.start_ns >= e.t
        """,
        {"run": run_id, "launch": LAUNCH_CALL},
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_capture_sizes AS
        SELECT rank, capture, count(*) AS size, max(start_ns) AS capture_end
        FROM _seg_capture_nodes GROUP BY rank, capture HAVING count(layer) > 0
        """
    )


def _replays(con: duckdb.DuckDBPyConnection) -> None:
    """`_seg_replay_nodes(replay, position, activity_id)` and `_seg_replays(replay, rank, size, launch_start)`."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_replay_nodes AS
        SELECT launch_id AS replay, activity_id,
               row_number() OVER (PARTITION BY launch_id ORDER BY start_ns, activity_id) - 1 AS position
        FROM _seg_a WHERE regexp_matches(l_name, $graph)
        """,
        {"graph": GRAPH_LAUNCH},
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_replays AS
        SELECT n.replay, any_value(a.rank) AS rank, count(*) AS size, any_value(a.l_start) AS launch_start
        FROM _seg_replay_nodes n JOIN _seg_a a USING (activity_id) GROUP BY n.replay
        """
    )
