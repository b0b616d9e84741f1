-- @module layers.kernels
-- The kernels of each layer by name: calls per step and time, over steady steps, per (run, rank, layer).
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column layer -: layer index
-- @column short_name -: gpu_activity.short_name: the name with its template arguments, no namespaces or parameter list
-- @column category -: compute or comm
-- @column steps count: steady steps in which the layer occurs
-- @column calls count: launches of this kernel in the layer, over those steps
-- @column calls_per_step count: calls / steps
-- @column total_us us: summed duration of the calls
-- @column mean_us us: mean duration of one call
-- @column share_pct pct: 100 * total_us / summed duration of every kernel of the layer (durations, not union)
-- @example FROM layer_kernels(run := 'baseline') WHERE layer = 0

-- Kernel calls of each name in each layer, over the steady steps (step_steady) of the chosen runs.
CREATE OR REPLACE MACRO layer_kernels(run := NULL) AS TABLE
WITH
    -- Kernels of layers in steady steps of the chosen runs.
    _kernels AS (
        SELECT g.run_id, g.rank, g.layer, g.short_name, g.category, g.end_ns - g.start_ns AS duration_ns
        FROM gpu_activity AS g
        JOIN step_steady AS s USING (run_id, rank, step)
        WHERE g.kind = 'kernel' AND g.layer IS NOT NULL
          AND g.run_id IN (SELECT run_id FROM run_select(run := run))
    ),
    -- Steady steps in which each layer occurs, and its summed kernel time.
    _layers AS (
        SELECT l.run_id, l.rank, l.layer, count(*) AS steps
        FROM layers AS l
        JOIN step_steady AS s USING (run_id, rank, step)
        GROUP BY ALL
    ),
    _layer_time AS (
        SELECT run_id, rank, layer, sum(duration_ns) AS duration_ns FROM _kernels GROUP BY ALL
    ),
    -- One row per kernel name (and category) within a layer.
    _by_name AS (
        SELECT run_id, rank, layer, short_name, category, count(*) AS calls, sum(duration_ns) AS duration_ns
        FROM _kernels
        GROUP BY ALL
    )
SELECT
    n.run_id,
    n.rank,
    n.layer,
    n.short_name,
    n.category,
    l.steps,
    n.calls,
    n.calls / l.steps AS calls_per_step,
    n.duration_ns / 1e3 AS total_us,
    _us(n.duration_ns / n.calls) AS mean_us,
    _pct(n.duration_ns, t.duration_ns) AS share_pct
FROM _by_name AS n
JOIN _layers AS l USING (run_id, rank, layer)
JOIN _layer_time AS t USING (run_id, rank, layer)
ORDER BY n.run_id, n.rank, n.layer, n.duration_ns DESC, n.short_name;
