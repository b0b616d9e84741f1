"""CUDA graphs in Nsight Systems exports: node events into `graph_nodes`, and whole-graph replays counted.

Reads: CUDA_GRAPH_NODE_EVENTS (CUDA_GRAPH_EVENTS in old exports, told apart by its graphNodeId column) and
CUPTI_ACTIVITY_KIND_GRAPH_TRACE. Writes: graph_nodes (created here when an export has node events: an optional table
that segment/graph.py uses when present) and ingest_stats. Called by nsys.py with its staged tables (_nproc).
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from .nsys_export import GRAPH_TRACE, Export, rows, stage, string_value


def stage_graph_nodes(con: duckdb.DuckDBPyConnection, export: Export) -> None:
    """_nnode: CUDA graph node creations and clones (CUDA_GRAPH_NODE_EVENTS; CUDA_GRAPH_EVENTS in 2022.4)."""
    table = graph_node_table(export)
    parts = []
    if table:
        parts.append(
            f"x.globalTid, x.start, x.graphNodeId, {export.col(table, 'x', 'originalGraphNodeId')}, "
            f"{string_value(export, export.col(table, 'x', 'nameId'), 'NULL')} FROM {table} x"
        )
    columns = {"global_tid": "i", "start_ns": "i", "graph_node_id": "i", "original_graph_node_id": "i", "name": "t"}
    stage(con, export, "_nnode", parts, columns)


def graph_node_table(export: Export) -> str | None:
    """Node events are in CUDA_GRAPH_NODE_EVENTS, or in CUDA_GRAPH_EVENTS in old exports (which then has
    graphNodeId; in new ones CUDA_GRAPH_EVENTS holds whole graphs)."""
    names = ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")
    return next((t for t in names if export.has(t, "graphNodeId") and export.has(t, "start")), None)


def insert_graph_nodes(con: duckdb.DuckDBPyConnection, params: dict[str, int]) -> None:
    """graph_nodes rows from the export's node events (none when it has none)."""
    con.execute(
        """
        INSERT INTO graph_nodes
        WITH nodes AS (  -- one row per node: nsys records a cloned node's creation and its cloning apart
            SELECT (global_tid >> 24) & 16777215 AS pid, graph_node_id, min(start_ns) AS start_ns,
                   arg_min(global_tid & 16777215, start_ns) AS tid, arg_min(name, start_ns) AS name,
                   max(original_graph_node_id) AS original_graph_node_id
            FROM _nnode GROUP BY ALL
        ), work AS (
            SELECT pid, graph_node_id, min(rank) AS rank FROM gpu_activity
            WHERE run_id = $run AND graph_node_id IS NOT NULL GROUP BY ALL
        )
        SELECT $run, coalesce(w.rank, p.rank), n.graph_node_id, n.original_graph_node_id, n.pid, n.tid,
               n.start_ns + $shift, coalesce(regexp_replace(n.name, '_v\\d+$', ''), '')
        FROM nodes n
        JOIN _nproc p ON p.pid = n.pid
        LEFT JOIN work w ON w.pid = n.pid AND w.graph_node_id = n.graph_node_id
        """,
        params,
    )


def record_graph_stats(export: Export, stat: Callable[[str, str, float, str], None]) -> None:
    """CUDA graph node events (CUDA_GRAPH_NODE_EVENTS; CUDA_GRAPH_EVENTS before) and whole-graph replays."""
    node_table = graph_node_table(export)
    if node_table:
        n = rows(export, f"SELECT count(*) FROM {node_table}")[0][0]
        stat("graph_node_events", "info", n, f"CUDA graph node creations and clones ({node_table})")
    replays = 0
    if export.has(GRAPH_TRACE):
        replays = rows(export, f"SELECT count(*) FROM {GRAPH_TRACE}")[0][0]
    if replays:
        stat("graph_replays_without_kernels", "data_loss", replays, "CUDA graph replays traced as whole graphs")
        stat(
            "warning",
            "data_loss",
            1,
            f"{export.shown.name}: {replays} CUDA graph replays were traced as whole graphs, without their kernels; "
            "record with nsys profile --cuda-graph-trace=node",
        )
