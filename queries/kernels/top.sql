-- @module kernels.top
-- The GPU work that takes the most time: kernels (and memcpy/memset) by name, with their category, per run.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @param n INTEGER 20: how many names to keep per run
-- @column run_id -: run (runs.run_id)
-- @column position count: 1 for the name with the most time in its run
-- @column short_name -: gpu_activity.short_name: the name with its template arguments, no namespaces or parameter list
-- @column kind -: kernel, memcpy or memset
-- @column category -: compute, comm, memcpy or memset
-- @column ranks count: ranks on which it ran
-- @column calls count: how many times it ran, over every rank
-- @column total_us us: summed duration, over every rank
-- @column mean_us us: mean duration of one call
-- @column share_pct pct: 100 * total_us / summed duration of all GPU work of the run (durations, not union)
-- @example FROM kernel_top(n := 10)

-- Durations summed per name over every rank; the n names with the most time per run.
CREATE OR REPLACE MACRO kernel_top(run := NULL, n := 20) AS TABLE
WITH
    -- GPU work of the chosen runs, grouped by name.
    _by_name AS (
        SELECT
            run_id,
            short_name,
            kind,
            category,
            count(DISTINCT rank) AS ranks,
            count(*) AS calls,
            sum(end_ns - start_ns) AS duration_ns
        FROM gpu_activity
        WHERE run_id IN (SELECT run_id FROM run_select(run := run))
        GROUP BY ALL
    ),
    -- Rank of each name within its run, and the run's total.
    _ranked AS (
        SELECT
            *,
            row_number() OVER (PARTITION BY run_id ORDER BY duration_ns DESC, short_name) AS position,
            sum(duration_ns) OVER (PARTITION BY run_id) AS run_ns
        FROM _by_name
    )
SELECT
    run_id,
    position,
    short_name,
    kind,
    category,
    ranks,
    calls,
    duration_ns / 1e3 AS total_us,
    _us(duration_ns / calls) AS mean_us,
    _pct(duration_ns, run_ns) AS share_pct
FROM _ranked
WHERE position <= n
ORDER BY run_id, position;
