"""Kernels on another stream than their layer's, found in a layer by time alone, that the layer did not launch.

Reads: `_seg_layer_of` (the layer of each activity) and `_seg_k` (each activity's stream and launch call). Writes:
`_seg_layer_of`, without those kernels (they are in no layer; segmentation counts them in a note).

The rule (README, "Kernels on other streams"): a kernel belongs to the layer that launched it. Layers found by
annotation take a kernel by its launch call's range, and graph layers by the graph's node, so they follow it
already. Layers inferred from the kernel sequence (`period`) take every kernel between a layer's first and last in
time, on any stream. Where a layer's kernels on its own stream (the one most of them run on) all come from one CUDA
graph replay, a kernel on another stream that another launch call started was not launched by the layer: the SGLang
decode trace's `neg_kernel`, started by its own hipLaunchKernel 1.8 ms after the step's hipGraphLaunch, ran on a
second stream while layer 5 did, and made that layer 16 kernels instead of 15. It is set apart. A layer launched
kernel by kernel (eager) keeps the time order, as its launches interleave with its kernels (a collective on a
communication stream is the layer's).
"""

from __future__ import annotations

import duckdb

SET_APART = """
    WITH
        -- The kernels of inferred layers, with their stream and launch call.
        kernels AS (
            SELECT l.activity_id, l.rank, l.step, l.layer, k.stream_id, k.launch_id, k.l_name
            FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)
            WHERE l.method = 'period' AND l.kind = 'kernel'
        ),
        -- Each layer's own stream: the one most of its kernels run on.
        own AS (SELECT rank, step, layer, mode(stream_id) AS stream_id FROM kernels GROUP BY ALL),
        -- Layers whose kernels on their own stream all come from one graph launch: that launch.
        replayed AS (
            SELECT k.rank, k.step, k.layer, any_value(k.launch_id) AS launch_id
            FROM kernels k JOIN own o USING (rank, step, layer, stream_id)
            GROUP BY ALL
            HAVING count(DISTINCT k.launch_id) = 1 AND count(k.launch_id) = count(*)
               AND bool_and(k.l_name ILIKE '%GraphLaunch%')
        )
    SELECT k.activity_id
    FROM kernels k JOIN own o USING (rank, step, layer) JOIN replayed r USING (rank, step, layer)
    WHERE k.stream_id IS DISTINCT FROM o.stream_id AND k.launch_id IS DISTINCT FROM r.launch_id
"""


def set_apart(con: duckdb.DuckDBPyConnection) -> int:
    """Take out of their layers the kernels that a graph-replayed inferred layer did not launch; how many."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _seg_apart AS {SET_APART}")
    con.execute("DELETE FROM _seg_layer_of WHERE activity_id IN (SELECT activity_id FROM _seg_apart)")
    return int(con.execute("SELECT count(*) FROM _seg_apart").fetchall()[0][0])
