-- @module layers.kernel_time
-- Where the time of each layer instance goes, kernel by kernel: the busy time a kernel owns and the idle gap it closes.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column step -: step (steps.step)
-- @column layer -: layer index (layers.layer)
-- @column position count: place of the kernel in the layer instance, 1 for the first (by start, then end, then id)
-- @column activity_id -: the kernel (gpu_activity.activity_id)
-- @column identity -: what lines kernels up across runs: the short name, with the number that ends a generated kernel's name folded to # (torch.compile numbers its kernels in order of creation)
-- @column short_name -: the kernel's short name (gpu_activity.short_name)
-- @column category -: compute or comm (gpu_activity.category)
-- @column start_ns ns: start on the GPU (gpu_activity.start_ns)
-- @column end_ns ns: end on the GPU (gpu_activity.end_ns)
-- @column duration_ns ns: end_ns - start_ns
-- @column own_ns ns: the part of the instance's busy time this kernel owns: a kernel that is not comm owns what no earlier non-comm kernel covers; a comm kernel owns what no compute kernel and no earlier comm kernel covers (its exposed time)
-- @column gap_ns ns: the idle time the kernel closes: from the latest end of the earlier kernels of the instance to its start (0 for the first kernel, or one that starts under another)
-- @column host_bound_ns ns: part of gap_ns before the kernel's launch call began (the host was busy elsewhere: Python, the framework)
-- @column launch_bound_ns ns: part of gap_ns while its launch call ran
-- @column queued_ns ns: part of gap_ns after its launch call had returned (a dependency, or the GPU's dispatch)
-- @column in_graph_ns ns: gap_ns when the kernel and the one before it came from one launch call (one CUDA-graph replay): no CPU call to blame
-- @column unclassified_ns ns: gap_ns when the trace holds no launch call for the kernel
-- @example SELECT layer, sum(own_ns) / 1e3 AS busy_us, sum(gap_ns) / 1e3 AS idle_us FROM layer_kernel_time() WHERE step = 3 GROUP BY layer

-- Each instant of a layer instance's span goes to exactly one bucket, so the figures add up: for every instance,
-- sum(own_ns) = layer_metrics.busy_us and sum(gap_ns) = layer_metrics.idle_us (in ns), and the two make its span.
-- Algorithm: order the kernels of the instance by start. The latest end among the earlier kernels (the reach) is
-- where the union of those kernels stops, and the part of it after this kernel's start is one piece: every earlier
-- kernel started before it. So a kernel closes the gap from the reach to its start, and owns the part of it beyond
-- the reach of the earlier kernels of its own class (non-comm kernels own the compute union, each instant going to
-- the earliest kernel running). A comm kernel's part beyond the earlier comm kernels' reach is then cut by the
-- merged compute intervals (interval_union): what is left is communication no computation hides.
CREATE OR REPLACE MACRO layer_kernel_time(run := NULL) AS TABLE
WITH
    -- The kernels (kind = 'kernel') of every layer instance of the chosen runs, with their launch call.
    _kernels AS (
        SELECT
            g.run_id, g.rank, g.step, g.layer, g.activity_id, g.short_name, g.category, g.start_ns, g.end_ns,
            g.launch_id, c.start_ns AS call_start_ns, c.end_ns AS call_end_ns,
            coalesce(g.category = 'comm', false) AS is_comm
        FROM gpu_activity AS g
        LEFT JOIN launches AS c ON c.run_id = g.run_id AND c.launch_id = g.launch_id
        WHERE g.kind = 'kernel' AND g.step IS NOT NULL AND g.layer IS NOT NULL
          AND g.run_id IN (SELECT run_id FROM run_select(run := run))
    ),
    -- The reach of the earlier kernels (all of them, and those of the kernel's own class) and the launch call of
    -- the kernel before it.
    _reach AS (
        SELECT
            *,
            row_number() OVER w_order AS position,
            max(end_ns) OVER w_all AS reach_all_ns,
            max(end_ns) OVER w_class AS reach_class_ns,
            lag(launch_id) OVER w_order AS previous_launch_id
        FROM _kernels
        WINDOW
            w_order AS (PARTITION BY run_id, rank, step, layer ORDER BY start_ns, end_ns, activity_id),
            w_all AS (
                PARTITION BY run_id, rank, step, layer ORDER BY start_ns, end_ns, activity_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ),
            w_class AS (
                PARTITION BY run_id, rank, step, layer, is_comm ORDER BY start_ns, end_ns, activity_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            )
    ),
    -- The part of each kernel beyond the reach of the earlier kernels of its class, and the gap it closes.
    _pieces AS (
        SELECT
            *,
            greatest(start_ns, coalesce(reach_class_ns, start_ns)) AS own_start_ns,
            greatest(end_ns, coalesce(reach_class_ns, start_ns)) AS own_end_ns,
            greatest(start_ns - coalesce(reach_all_ns, start_ns), 0) AS gap_ns
        FROM _reach
    ),
    -- The compute union of every instance, to cut the comm kernels' pieces with.
    _compute AS (
        SELECT run_id, rank, step, layer, start_ns, end_ns FROM _kernels WHERE NOT is_comm
    ),
    _compute_union AS (FROM interval_union(_compute)),
    -- How much of each comm kernel's piece the compute union covers.
    _hidden AS (
        SELECT
            p.run_id,
            p.activity_id,
            sum(least(p.own_end_ns, u.end_ns) - greatest(p.own_start_ns, u.start_ns)) AS hidden_ns
        FROM _pieces AS p
        JOIN _compute_union AS u
          ON u.run_id = p.run_id AND u.rank = p.rank AND u.step = p.step AND u.layer = p.layer
         AND u.start_ns < p.own_end_ns AND u.end_ns > p.own_start_ns
        WHERE p.is_comm
        GROUP BY p.run_id, p.activity_id
    ),
    -- The gap's launch context: one launch call for this kernel and the one before it (a graph replay), the
    -- launch call's times, or none.
    _classified AS (
        SELECT
            p.*,
            p.own_end_ns - p.own_start_ns - coalesce(h.hidden_ns, 0) AS own_ns,
            p.launch_id IS NOT NULL AND p.launch_id = p.previous_launch_id AS in_graph,
            p.call_start_ns IS NULL AS unlinked,
            p.start_ns - p.gap_ns AS gap_start_ns
        FROM _pieces AS p
        LEFT JOIN _hidden AS h ON h.run_id = p.run_id AND h.activity_id = p.activity_id
    )
SELECT
    run_id,
    rank,
    step,
    layer,
    position,
    activity_id,
    regexp_replace(short_name, '_\d+$', '_#') AS identity,
    short_name,
    category,
    start_ns,
    end_ns,
    end_ns - start_ns AS duration_ns,
    own_ns,
    gap_ns,
    CASE WHEN in_graph OR unlinked THEN 0
         ELSE greatest(least(start_ns, call_start_ns) - gap_start_ns, 0) END AS host_bound_ns,
    CASE WHEN in_graph OR unlinked THEN 0
         ELSE greatest(least(start_ns, call_end_ns) - greatest(gap_start_ns, call_start_ns), 0) END AS launch_bound_ns,
    CASE WHEN in_graph OR unlinked THEN 0
         ELSE greatest(start_ns - greatest(gap_start_ns, call_end_ns), 0) END AS queued_ns,
    CASE WHEN in_graph THEN gap_ns ELSE 0 END AS in_graph_ns,
    CASE WHEN unlinked AND NOT in_graph THEN gap_ns ELSE 0 END AS unclassified_ns
FROM _classified
ORDER BY run_id, rank, step, layer, position;
