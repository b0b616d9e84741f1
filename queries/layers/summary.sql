-- @module layers.summary
-- Each layer across steady steps: median kernels and microseconds per (run, rank, phase, layer).
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column phase -: decode, prefill or unknown: steps of different phases are summarized apart
-- @column layer -: layer index
-- @column steps count: steady steps in which the layer occurs (step_steady)
-- @column kernels_median count: median over those steps of the kernels of the layer instance (the lower median: a count some instance has)
-- @column kernels_min count: fewest kernels in one instance
-- @column kernels_max count: most kernels in one instance
-- @column span_us_median us: median span (first kernel start to last kernel end)
-- @column busy_us_median us: median busy time (union of the layer's kernels)
-- @column idle_us_median us: median idle time inside the span (span - busy)
-- @column comm_us_median us: median communication time (union of comm kernels)
-- @column overlap_us_median us: median communication time hidden behind computation
-- @column exposed_comm_us_median us: median communication time not hidden (comm - overlap)
-- @example FROM layer_summary WHERE phase = 'decode' ORDER BY layer

-- Medians of layer_metrics over the steady steps of each phase, rounded as figure_precision says.
CREATE OR REPLACE VIEW layer_summary AS
SELECT
    m.run_id,
    m.rank,
    s.phase,
    m.layer,
    count(*) AS steps,
    _median_count(m.kernels) AS kernels_median,
    min(m.kernels) AS kernels_min,
    max(m.kernels) AS kernels_max,
    _median_us(m.span_us) AS span_us_median,
    _median_us(m.busy_us) AS busy_us_median,
    _median_us(m.idle_us) AS idle_us_median,
    _median_us(m.comm_us) AS comm_us_median,
    _median_us(m.overlap_us) AS overlap_us_median,
    _median_us(m.exposed_comm_us) AS exposed_comm_us_median
FROM layer_metrics AS m
JOIN step_steady AS s USING (run_id, rank, step)
GROUP BY m.run_id, m.rank, s.phase, m.layer
ORDER BY m.run_id, m.rank, s.phase, m.layer;
