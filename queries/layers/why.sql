-- @module layers.why
-- Why each layer got faster or slower from run A to run B: the change of its mean span split into causes that add up.
-- @param run_a VARCHAR NULL: run A, label or id; NULL for the first run
-- @param run_b VARCHAR NULL: run B, label or id; NULL for the second run
-- @param phase VARCHAR NULL: compare only steps of this phase (decode, prefill, unknown); NULL for every phase
-- @column layer -: layer index present in both runs
-- @column instances_a count: instances of the layer in A's steps that are not warm-up
-- @column instances_b count: the same in B
-- @column span_a_us us: mean span of the layer in A (first kernel start to last kernel end)
-- @column span_b_us us: mean span of the layer in B
-- @column span_delta_us us: span_b_us - span_a_us; the sum of the cause columns (idle_gaps_us to exposed_comm_us)
-- @column busy_delta_us us: the change of the mean busy time: span_delta_us - idle_gaps_us
-- @column idle_gaps_us us: change of the GPU idle time inside the layer (the sum of the five gap columns)
-- @column same_kernels_us us: change of the time the kernels found in both runs own (faster, slower, more or less hidden)
-- @column kernels_removed_us us: minus the time kernels only in A owned there (fused-away kernels among them)
-- @column kernels_added_us us: the time kernels only in B own (fused kernels among them)
-- @column exposed_comm_us us: change of the communication time no computation hides
-- @column host_bound_us us: part of idle_gaps_us: gaps before the launch call of the kernel that ends them began
-- @column launch_bound_us us: part of idle_gaps_us: gaps while that launch call ran
-- @column queued_us us: part of idle_gaps_us: gaps after that launch call had returned
-- @column in_graph_us us: part of idle_gaps_us: gaps between kernels of one launch call (a CUDA-graph replay)
-- @column unclassified_us us: part of idle_gaps_us: gaps before kernels without a launch call in the trace
-- @column residual_us us: span_delta_us minus the sum of the causes; 0 (the test suite checks it on every sample pair)
-- @example FROM layer_why(run_a := 'eager', run_b := 'graph', phase := 'decode') ORDER BY layer

-- The accounting of layer_kernel_time (every instant of a layer instance is one kernel's own time or one gap), as
-- the mean over each run's instances (means add up), B minus A. A kernel is lined up by its identity and its
-- occurrence in the instance (the third `add` of the layer): those found in both runs are the same kernels, the
-- others removed or added. `traceview diff` (and its --format json `why` list) gives the same figures from the same
-- rows, but lines kernels up by an alignment (traceview/align.py) that also tells fused and replaced kernels apart:
-- its kernels_fused and kernels_replaced are here in kernels_removed_us and kernels_added_us, and a kernel whose
-- count differs between the runs may be paired otherwise.
CREATE OR REPLACE MACRO layer_why(run_a := NULL, run_b := NULL, phase := NULL) AS TABLE
WITH
    -- The two runs: the first and second of the database unless named.
    _runs AS (
        SELECT
            (SELECT min(run_id) FROM run_select(run := run_a)) AS a,
            CASE
                WHEN run_b IS NULL THEN (SELECT run_id FROM runs ORDER BY run_id LIMIT 1 OFFSET 1)
                ELSE (SELECT min(run_id) FROM run_select(run := run_b))
            END AS b
    ),
    -- The kernels of their layer instances in steps that are not warm-up, each with its side and occurrence.
    _kernels AS (
        SELECT
            CASE WHEN k.run_id = r.a THEN 'a' ELSE 'b' END AS side,
            k.*,
            row_number() OVER (PARTITION BY k.run_id, k.rank, k.step, k.layer, k.identity ORDER BY k.position) AS occurrence
        FROM layer_kernel_time() AS k
        JOIN _runs AS r ON k.run_id IN (r.a, r.b)
        JOIN steps AS s USING (run_id, rank, step)
        WHERE NOT s.warmup AND (phase IS NULL OR s.phase = phase)
    ),
    -- The kernel keys (layer, identity, occurrence) found in both runs.
    _shared AS (
        SELECT layer, identity, occurrence FROM _kernels GROUP BY ALL HAVING count(DISTINCT side) = 2
    ),
    -- Each kernel's cause.
    _caused AS (
        SELECT
            k.*,
            CASE
                WHEN k.category = 'comm' THEN 'exposed_comm'
                WHEN s.identity IS NOT NULL THEN 'same_kernels'
                WHEN k.side = 'a' THEN 'kernels_removed'
                ELSE 'kernels_added'
            END AS cause
        FROM _kernels AS k
        LEFT JOIN _shared AS s USING (layer, identity, occurrence)
    ),
    -- Per side and layer: instances, span and the totals of every cause (ns).
    _instances AS (
        SELECT side, layer, count(*) AS instances, sum(span_ns) AS span_ns
        FROM (SELECT side, layer, max(end_ns) - min(start_ns) AS span_ns FROM _kernels GROUP BY side, layer, rank, step)
        GROUP BY ALL
    ),
    _totals AS (
        SELECT
            side,
            layer,
            sum(gap_ns) AS idle_gaps,
            sum(own_ns) FILTER (cause = 'same_kernels') AS same_kernels,
            sum(own_ns) FILTER (cause = 'kernels_removed') AS kernels_removed,
            sum(own_ns) FILTER (cause = 'kernels_added') AS kernels_added,
            sum(own_ns) FILTER (cause = 'exposed_comm') AS exposed_comm,
            sum(host_bound_ns) AS host_bound,
            sum(launch_bound_ns) AS launch_bound,
            sum(queued_ns) AS queued,
            sum(in_graph_ns) AS in_graph,
            sum(unclassified_ns) AS unclassified
        FROM _caused
        GROUP BY ALL
    ),
    -- Per side and layer: the means per instance, µs.
    _means AS (
        SELECT
            side,
            layer,
            i.instances,
            i.span_ns / i.instances / 1e3 AS span,
            COLUMNS(t.* EXCLUDE (side, layer)) ::DOUBLE / i.instances / 1e3
        FROM _totals AS t
        JOIN _instances AS i USING (side, layer)
    ),
    -- B minus A, per layer both runs have.
    _deltas AS (
        SELECT
            a.layer,
            a.instances AS instances_a,
            b.instances AS instances_b,
            a.span AS span_a_us,
            b.span AS span_b_us,
            b.span - a.span AS span_delta_us,
            coalesce(b.idle_gaps, 0) - coalesce(a.idle_gaps, 0) AS idle_gaps_us,
            coalesce(b.same_kernels, 0) - coalesce(a.same_kernels, 0) AS same_kernels_us,
            -coalesce(a.kernels_removed, 0) AS kernels_removed_us,
            coalesce(b.kernels_added, 0) AS kernels_added_us,
            coalesce(b.exposed_comm, 0) - coalesce(a.exposed_comm, 0) AS exposed_comm_us,
            coalesce(b.host_bound, 0) - coalesce(a.host_bound, 0) AS host_bound_us,
            coalesce(b.launch_bound, 0) - coalesce(a.launch_bound, 0) AS launch_bound_us,
            coalesce(b.queued, 0) - coalesce(a.queued, 0) AS queued_us,
            coalesce(b.in_graph, 0) - coalesce(a.in_graph, 0) AS in_graph_us,
            coalesce(b.unclassified, 0) - coalesce(a.unclassified, 0) AS unclassified_us
        FROM _means AS a
        JOIN _means AS b ON a.side = 'a' AND b.side = 'b' AND a.layer = b.layer
    )
SELECT
    layer,
    instances_a,
    instances_b,
    span_a_us,
    span_b_us,
    span_delta_us,
    span_delta_us - idle_gaps_us AS busy_delta_us,
    idle_gaps_us,
    same_kernels_us,
    kernels_removed_us,
    kernels_added_us,
    exposed_comm_us,
    host_bound_us,
    launch_bound_us,
    queued_us,
    in_graph_us,
    unclassified_us,
    span_delta_us - (idle_gaps_us + same_kernels_us + kernels_removed_us + kernels_added_us + exposed_comm_us)
        AS residual_us
FROM _deltas
ORDER BY layer;
