-- @module comm.overlap
-- Compute/communication overlap per rank, as HTA defines it: (comm union ∩ compute union) / comm union.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @param step_from INTEGER NULL: first step to include; NULL with step_to NULL for the whole trace
-- @param step_to INTEGER NULL: last step to include (inclusive)
-- @column run_id -: run (runs.run_id)
-- @column label -: label of the run
-- @column rank -: rank (ranks.rank)
-- @column time_window -: what the figures cover: 'whole trace' (every kernel, segmented or not) or 'steps A-B'
-- @column window_start_ns ns: start of the first kernel counted
-- @column window_end_ns ns: end of the last kernel counted
-- @column window_us us: window_end_ns - window_start_ns
-- @column kernels count: kernels counted (kind = 'kernel'; memcpy and memset are neither comm nor compute)
-- @column comm_us us: length of the union of the comm kernels
-- @column compute_us us: length of the union of the compute kernels
-- @column overlap_us us: length of (comm union ∩ compute union)
-- @column exposed_comm_us us: comm_us - overlap_us: communication the GPU waits for
-- @column overlap_pct pct: 100 * overlap_us / comm_us; NULL when the rank has no comm kernel
-- @example FROM comm_overlap(step_from := 3, step_to := 7)

-- Whole trace: every kernel of the rank, so the figure exists before segmentation and compares with HTA's
-- comp_comm_overlap on the same trace. With steps: only kernels that segmentation put in steps step_from to
-- step_to, measured over those steps together. Comm kernels are those classified comm at ingest
-- (queries/kernel_classes.csv: NCCL/RCCL and custom all-reduce kernels), where HTA counts names with 'nccl'.
-- Segmentation computed comm_breakdown once per rank and per step (kernel_busy, scopes rank and step). The
-- figures of several steps add up when no two of them have kernels running at the same time; the ranks where
-- some do are measured again over the kernels of their chosen steps, as are those of a run never segmented.
CREATE OR REPLACE MACRO comm_overlap(run := NULL, step_from := NULL, step_to := NULL) AS TABLE
WITH
    -- Whether the caller chose steps.
    _choice AS (SELECT step_from IS NOT NULL OR step_to IS NOT NULL AS by_steps),
    -- The figures measured: of each rank's whole trace, or of each chosen step.
    _parts AS (
        SELECT b.*
        FROM kernel_busy AS b, _choice AS c
        WHERE b.run_id IN (SELECT run_id FROM run_select(run := run))
          AND CASE
              WHEN c.by_steps THEN b.scope = 'step' AND b.step >= coalesce(step_from, b.step)
                  AND b.step <= coalesce(step_to, b.step)
              ELSE b.scope = 'rank'
          END
    ),
    -- Ranks with a part that starts before an earlier-starting part of the rank has ended.
    _overlapping AS (
        SELECT DISTINCT run_id, rank
        FROM (
            SELECT
                run_id,
                rank,
                first_start_ns,
                max(last_end_ns) OVER (
                    PARTITION BY run_id, rank ORDER BY first_start_ns, last_end_ns
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
                ) AS reach_ns
            FROM _parts
        )
        WHERE first_start_ns < reach_ns
    ),
    -- Ranks measured again over their kernels: those, and (whole trace) ranks of a run never segmented.
    _recount AS (
        FROM _overlapping
        UNION
        SELECT k.run_id, k.rank
        FROM ranks AS k, _choice AS c
        WHERE NOT c.by_steps
          AND k.run_id IN (SELECT run_id FROM run_select(run := run))
          AND (k.run_id, k.rank) NOT IN (SELECT (run_id, rank) FROM _parts)
    ),
    -- The other ranks: their parts cover disjoint stretches of time, so their figures add up.
    _summed AS (
        SELECT
            run_id,
            rank,
            sum(kernels)::BIGINT AS kernels,
            min(first_start_ns) AS first_start_ns,
            max(last_end_ns) AS last_end_ns,
            sum(comm_ns)::BIGINT AS comm_ns,
            sum(compute_ns)::BIGINT AS compute_ns,
            sum(overlap_ns)::BIGINT AS overlap_ns,
            min(step) AS first_step,
            max(step) AS last_step
        FROM _parts
        WHERE (run_id, rank) NOT IN (SELECT (run_id, rank) FROM _recount)
        GROUP BY run_id, rank
    ),
    -- Their kernels: every kernel, or those of the chosen steps.
    _kernels AS (
        SELECT g.run_id, g.rank, g.step, g.start_ns, g.end_ns, g.category
        FROM gpu_activity AS g, _choice AS c
        WHERE g.kind = 'kernel'
          AND (g.run_id, g.rank) IN (SELECT (run_id, rank) FROM _recount)
          AND (NOT c.by_steps OR (g.step >= coalesce(step_from, g.step) AND g.step <= coalesce(step_to, g.step)))
    ),
    _measured AS (SELECT run_id, rank, start_ns, end_ns, category FROM _kernels),
    _swept AS (
        SELECT b.*, s.first_step, s.last_step
        FROM comm_breakdown(_measured) AS b
        JOIN (SELECT run_id, rank, min(step) AS first_step, max(step) AS last_step FROM _kernels GROUP BY ALL) AS s
            USING (run_id, rank)
    ),
    -- Comm, compute and overlapped time per rank, and the steps they span.
    _times AS (
        SELECT run_id, rank, kernels, first_start_ns, last_end_ns, comm_ns, compute_ns, overlap_ns, first_step,
               last_step
        FROM _summed
        UNION ALL
        SELECT run_id, rank, kernels, first_start_ns, last_end_ns, comm_ns, compute_ns, overlap_ns, first_step,
               last_step
        FROM _swept
    )
SELECT
    t.run_id,
    r.label,
    t.rank,
    CASE
        WHEN NOT c.by_steps THEN 'whole trace'
        WHEN t.first_step = t.last_step THEN 'step ' || t.first_step
        ELSE 'steps ' || t.first_step || '-' || t.last_step
    END AS time_window,
    t.first_start_ns AS window_start_ns,
    t.last_end_ns AS window_end_ns,
    (t.last_end_ns - t.first_start_ns) / 1e3 AS window_us,
    t.kernels,
    t.comm_ns / 1e3 AS comm_us,
    t.compute_ns / 1e3 AS compute_us,
    t.overlap_ns / 1e3 AS overlap_us,
    (t.comm_ns - t.overlap_ns) / 1e3 AS exposed_comm_us,
    _pct(t.overlap_ns, t.comm_ns) AS overlap_pct
FROM _times AS t
JOIN runs AS r USING (run_id)
CROSS JOIN _choice AS c
ORDER BY t.run_id, t.rank;
