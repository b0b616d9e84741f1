-- @module steps.metrics
-- Kernels and microseconds of every step: one row per (run, rank, step).
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column step -: step index (steps.step)
-- @column name -: annotation that delimited the step, NULL when inferred
-- @column phase -: decode, prefill or unknown (steps.phase)
-- @column warmup -: true for warm-up steps (steps.warmup)
-- @column layers count: layer instances found in the step
-- @column kernels count: GPU kernels (kind = 'kernel') assigned to the step, inside layers or not
-- @column span_us us: end of its last kernel minus start of its first kernel
-- @column busy_us us: length of the union of its kernel intervals
-- @column idle_us us: span_us - busy_us: time inside the span with no kernel of the step running
-- @column comm_us us: length of the union of its comm kernels
-- @column compute_us us: length of the union of its compute kernels
-- @column overlap_us us: length of (comm union ∩ compute union)
-- @column exposed_comm_us us: comm_us - overlap_us
-- @column overlap_pct pct: 100 * overlap_us / comm_us; NULL when the step has no comm kernel
-- @column fused_comm_us us: length of the union of its fused_comm kernels (collective and computation in one kernel)
-- @column draft_passes count: forward passes of a speculative drafter in the step (the tokens it proposed); NULL without a drafter
-- @column draft_kernels count: the drafter's kernels in the step (0 without a drafter); they are in no layer
-- @column draft_busy_us us: length of the union of the drafter's kernel intervals in the step: its cost per step
-- @column method -: how segmentation found the step (steps.method)
-- @example FROM step_metrics WHERE NOT warmup

-- Every row of `steps`, with the times of its kernels (zero when it has none) and its number of layers. The
-- times are those of comm_breakdown over the step's kernels, computed once by segmentation into kernel_busy
-- (scope 'step'; the drafter's kernels of a speculative step: scope 'draft').
CREATE OR REPLACE VIEW step_metrics AS
WITH
    _times AS (SELECT * FROM kernel_busy WHERE scope = 'step'),
    _drafts AS (SELECT * FROM kernel_busy WHERE scope = 'draft'),
    _layer_counts AS (SELECT run_id, rank, step, count(*) AS layers FROM layers GROUP BY ALL)
SELECT
    s.run_id,
    s.rank,
    s.step,
    s.name,
    s.phase,
    s.warmup,
    coalesce(c.layers, 0) AS layers,
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
    s.draft_passes,
    coalesce(d.kernels, 0) AS draft_kernels,
    coalesce(d.busy_ns, 0) / 1e3 AS draft_busy_us,
    s.method
FROM steps AS s
LEFT JOIN _times AS t USING (run_id, rank, step)
LEFT JOIN _drafts AS d USING (run_id, rank, step)
LEFT JOIN _layer_counts AS c USING (run_id, rank, step)
ORDER BY s.run_id, s.rank, s.step;
