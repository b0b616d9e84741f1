-- @module layers.idle_gaps
-- The idle gaps inside each layer instance: stretches with no kernel of the layer running, between its kernels.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @param min_us DOUBLE 0: leave out gaps shorter than this many microseconds
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column step -: step (steps.step)
-- @column layer -: layer index
-- @column start_ns ns: start of the gap (end of the kernels before it)
-- @column end_ns ns: end of the gap (start of the next kernel)
-- @column gap_us us: end_ns - start_ns
-- @example FROM layer_idle_gaps(min_us := 5) ORDER BY gap_us DESC LIMIT 10

-- Gaps between the merged kernel intervals of each layer instance (interval_gaps), of at least min_us.
CREATE OR REPLACE MACRO layer_idle_gaps(run := NULL, min_us := 0) AS TABLE
WITH
    -- Kernels of each layer instance of the chosen runs.
    _kernels AS (
        SELECT run_id, rank, step, layer, start_ns, end_ns
        FROM gpu_activity
        WHERE kind = 'kernel' AND step IS NOT NULL AND layer IS NOT NULL
          AND run_id IN (SELECT run_id FROM run_select(run := run))
    ),
    -- Gaps between the merged kernel intervals of each instance.
    _gaps AS (FROM interval_gaps(_kernels))
SELECT run_id, rank, step, layer, start_ns, end_ns, (end_ns - start_ns) / 1e3 AS gap_us
FROM _gaps
WHERE (end_ns - start_ns) / 1e3 >= min_us
ORDER BY run_id, rank, step, layer, start_ns;
