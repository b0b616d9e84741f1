-- @module steps.idle
-- GPU idle between kernels in each step: idle time, number and length of the gaps between kernels.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @param min_us DOUBLE 0: gaps shorter than this many microseconds are not counted in gaps and gaps_us
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column step -: step index (steps.step)
-- @column warmup -: true for warm-up steps
-- @column kernels count: kernels (kind = 'kernel') assigned to the step
-- @column span_us us: end of its last kernel minus start of its first kernel
-- @column busy_us us: length of the union of its kernel intervals
-- @column idle_us us: span_us - busy_us: no kernel of the step running (memcpy and memset do not count as busy)
-- @column idle_pct pct: 100 * idle_us / span_us
-- @column gaps count: gaps between kernels of at least min_us
-- @column gaps_us us: summed length of those gaps
-- @column longest_gap_us us: the longest gap
-- @example FROM step_idle(min_us := 10) WHERE NOT warmup

-- Idle time of each step is the sum of the gaps between its merged kernels (interval_gaps): the union of the
-- kernels fills the span but for those gaps, so busy = span - idle. Segmentation computes both once: the
-- step's kernels in kernel_busy and its gaps in kernel_gaps (scope 'step').
CREATE OR REPLACE MACRO step_idle(run := NULL, min_us := 0) AS TABLE
WITH
    -- Count and extent of the kernels of each step of the chosen runs.
    _extent AS (
        SELECT run_id, rank, step, kernels, last_end_ns - first_start_ns AS span_ns
        FROM kernel_busy
        WHERE scope = 'step' AND run_id IN (SELECT run_id FROM run_select(run := run))
    ),
    -- Gaps between the merged kernel intervals, summarized per step.
    _gaps AS (
        SELECT
            run_id,
            rank,
            step,
            sum(end_ns - start_ns) AS idle_ns,
            count(*) FILTER ((end_ns - start_ns) / 1e3 >= min_us) AS gaps,
            coalesce(sum(end_ns - start_ns) FILTER ((end_ns - start_ns) / 1e3 >= min_us), 0) AS gaps_ns,
            max(end_ns - start_ns) AS longest_ns
        FROM kernel_gaps
        WHERE scope = 'step' AND run_id IN (SELECT run_id FROM run_select(run := run))
        GROUP BY ALL
    )
SELECT
    s.run_id,
    s.rank,
    s.step,
    s.warmup,
    e.kernels,
    e.span_ns / 1e3 AS span_us,
    (e.span_ns - coalesce(g.idle_ns, 0)) / 1e3 AS busy_us,
    coalesce(g.idle_ns, 0) / 1e3 AS idle_us,
    _pct(coalesce(g.idle_ns, 0), e.span_ns) AS idle_pct,
    coalesce(g.gaps, 0) AS gaps,
    coalesce(g.gaps_ns, 0) / 1e3 AS gaps_us,
    coalesce(g.longest_ns, 0) / 1e3 AS longest_gap_us
FROM steps AS s
JOIN _extent AS e USING (run_id, rank, step)
LEFT JOIN _gaps AS g USING (run_id, rank, step)
ORDER BY s.run_id, s.rank, s.step;
