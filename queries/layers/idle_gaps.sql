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

-- Gaps between the merged kernel intervals of each layer instance (interval_gaps over its kernels, kind =
-- 'kernel'), computed once by segmentation into kernel_gaps (scope 'layer'); those of at least min_us.
CREATE OR REPLACE MACRO layer_idle_gaps(run := NULL, min_us := 0) AS TABLE
SELECT run_id, rank, step, layer, start_ns, end_ns, (end_ns - start_ns) / 1e3 AS gap_us
FROM kernel_gaps
WHERE scope = 'layer'
  AND run_id IN (SELECT run_id FROM run_select(run := run))
  AND (end_ns - start_ns) / 1e3 >= min_us
ORDER BY run_id, rank, step, layer, start_ns;
