-- @module layers.ranks
-- Per layer index and rank: medians across the rank's steady steps (what `traceview layers --by-rank` shows).
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column layer -: layer index (layers.layer)
-- @column instances count: steady-state instances of the layer on the rank (step_steady)
-- @column kernels count: median kernels per instance
-- @column span_us us: median span (first kernel start to last kernel end)
-- @column busy_us us: median busy time (union of the layer's kernels)
-- @column comm_us us: median communication time (union of its comm kernels)
-- @column exposed_comm_us us: median communication not hidden behind computation
-- @example FROM layer_ranks WHERE layer = 3 ORDER BY rank

-- The medians `traceview layers` takes across steps and ranks, taken across steps only, so that a rank that
-- waits longer in its collectives (or runs a different share of the work) shows as itself.
CREATE OR REPLACE VIEW layer_ranks AS
SELECT
    m.run_id,
    m.rank,
    m.layer,
    count(*) AS instances,
    median(m.kernels) AS kernels,
    median(m.span_us) AS span_us,
    median(m.busy_us) AS busy_us,
    median(m.comm_us) AS comm_us,
    median(m.exposed_comm_us) AS exposed_comm_us
FROM layer_metrics AS m
JOIN step_steady AS s USING (run_id, rank, step)
GROUP BY m.run_id, m.rank, m.layer
ORDER BY m.run_id, m.layer, m.rank;
