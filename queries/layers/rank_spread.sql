-- @module layers.rank_spread
-- How far the ranks spread per layer index: the lowest and highest per-rank median of each figure.
-- @column run_id -: run (runs.run_id)
-- @column phase -: decode, prefill or unknown (steps of different phases are apart, as in layer_summary)
-- @column layer -: layer index (layers.layer)
-- @column ranks count: ranks with steady-state instances of the layer
-- @column span_min_us us: lowest per-rank median span (layer_summary.span_us_median)
-- @column span_max_us us: highest per-rank median span
-- @column busy_min_us us: lowest per-rank median busy time
-- @column busy_max_us us: highest per-rank median busy time
-- @column comm_min_us us: lowest per-rank median communication time
-- @column comm_max_us us: highest per-rank median communication time
-- @column exposed_comm_min_us us: lowest per-rank median exposed communication
-- @column exposed_comm_max_us us: highest per-rank median exposed communication
-- @column widest_ratio -: max / min of the figure whose ranks differ most; NULL with one rank
-- @column widest -: that figure and its ratio, e.g. 'comm_us 2.50x'; NULL with one rank
-- @example FROM layer_rank_spread WHERE ranks > 1

-- A median across ranks hides a slow rank; these columns say how far apart the ranks are, and `widest` names the
-- figure to look at first (`traceview layers --by-rank` then shows every rank: layer_summary).
CREATE OR REPLACE VIEW layer_rank_spread AS
WITH
    -- The per-rank medians of each layer, side by side.
    _range AS (
        SELECT
            run_id,
            phase,
            layer,
            count(*) AS ranks,
            min(span_us_median) AS span_min_us,
            max(span_us_median) AS span_max_us,
            min(busy_us_median) AS busy_min_us,
            max(busy_us_median) AS busy_max_us,
            min(comm_us_median) AS comm_min_us,
            max(comm_us_median) AS comm_max_us,
            min(exposed_comm_us_median) AS exposed_comm_min_us,
            max(exposed_comm_us_median) AS exposed_comm_max_us
        FROM layer_summary
        GROUP BY run_id, phase, layer
    ),
    -- Each figure's max / min ratio (a figure that is zero on some rank and not on another: the max against 0.001;
    -- NULL where it is zero everywhere). On a tie the figure first by name wins.
    _ratios AS (
        SELECT
            *,
            [
                ('busy_us', CASE WHEN busy_max_us > 0 THEN busy_max_us / greatest(busy_min_us, 0.001) END),
                ('comm_us', CASE WHEN comm_max_us > 0 THEN comm_max_us / greatest(comm_min_us, 0.001) END),
                ('exposed_comm_us',
                 CASE WHEN exposed_comm_max_us > 0 THEN exposed_comm_max_us / greatest(exposed_comm_min_us, 0.001) END),
                ('span_us', CASE WHEN span_max_us > 0 THEN span_max_us / greatest(span_min_us, 0.001) END)
            ] AS ratios
        FROM _range
    ),
    -- The figure with the largest ratio (on a tie, the first by name).
    _widest AS (
        SELECT
            *,
            (SELECT r FROM (SELECT unnest(ratios) AS r) WHERE r[2] IS NOT NULL ORDER BY r[2] DESC, r[1] LIMIT 1) AS top
        FROM _ratios
    )
SELECT
    run_id,
    phase,
    layer,
    ranks,
    span_min_us,
    span_max_us,
    busy_min_us,
    busy_max_us,
    comm_min_us,
    comm_max_us,
    exposed_comm_min_us,
    exposed_comm_max_us,
    CASE WHEN ranks > 1 THEN top[2] END AS widest_ratio,
    CASE WHEN ranks > 1 THEN top[1] || ' ' || printf('%.2fx', top[2]) END AS widest
FROM _widest
ORDER BY run_id, phase, layer;
