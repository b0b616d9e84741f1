-- @module layers.metrics
-- Kernels and microseconds of every layer instance: one row per (run, rank, step, layer).
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column step -: step (steps.step)
-- @column layer -: layer index (layers.layer)
-- @column name -: annotation that named the layer, NULL when inferred
-- @column kernels count: GPU kernels (kind = 'kernel') assigned to the layer instance
-- @column span_us us: end of its last kernel minus start of its first kernel
-- @column busy_us us: length of the union of its kernel intervals (time some kernel of the layer runs)
-- @column idle_us us: span_us - busy_us: time inside the span with no kernel of the layer running
-- @column comm_us us: length of the union of its comm kernels
-- @column compute_us us: length of the union of its compute kernels
-- @column overlap_us us: length of (comm union ∩ compute union)
-- @column exposed_comm_us us: comm_us - overlap_us: communication not hidden behind computation
-- @column overlap_pct pct: 100 * overlap_us / comm_us; NULL when the layer has no comm kernel
-- @column fused_comm_us us: length of the union of its fused_comm kernels (a collective fused with computation, e.g. all-reduce + residual add + RMSNorm): its own category, neither hidden nor exposed communication
-- @column method -: how segmentation found the layer (layers.method)
-- @column confidence -: from 0 to 1, segmentation's confidence in the layer (layers.confidence)
-- @example FROM layer_metrics WHERE step = 3 ORDER BY layer

-- Every row of `layers`, with the times of its kernels (zero when it has none). The times are those of
-- comm_breakdown over the layer instance's kernels (kind = 'kernel'; memcpy and memset rows are not kernels),
-- computed once by segmentation into kernel_busy (scope 'layer') rather than at every query.
CREATE OR REPLACE VIEW layer_metrics AS
WITH _times AS (SELECT * FROM kernel_busy WHERE scope = 'layer')
SELECT
    l.run_id,
    l.rank,
    l.step,
    l.layer,
    l.name,
    coalesce(t.kernels, 0) AS kernels,
    coalesce(t.last_end_ns - t.first_start_ns, 0) / 1e3 AS span_us,
    coalesce(t.busy_ns, 0) / 1e3 AS busy_us,
    coalesce(t.last_end_ns - t.first_start_ns - t.busy_ns, 0) / 1e3 AS idle_us,
    coalesce(t.comm_ns, 0) / 1e3 AS comm_us,
    coalesce(t.compute_ns, 0) / 1e3 AS compute_us,
    coalesce(t.overlap_ns, 0) / 1e3 AS overlap_us,
    coalesce(t.comm_ns - t.overlap_ns, 0) / 1e3 AS exposed_comm_us,
    _pct(t.overlap_ns, t.comm_ns) AS overlap_pct,
    coalesce(t.fused_comm_ns, 0) / 1e3 AS fused_comm_us,
    l.method,
    l.confidence
FROM layers AS l
LEFT JOIN _times AS t USING (run_id, rank, step, layer)
ORDER BY l.run_id, l.rank, l.step, l.layer;
