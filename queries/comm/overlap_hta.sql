-- @module comm.overlap_hta
-- Compute/communication overlap per rank computed the way HTA 0.5's get_comm_comp_overlap computes it.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @column run_id -: run (runs.run_id)
-- @column label -: label of the run
-- @column rank -: rank (ranks.rank)
-- @column time_window -: what the figures cover: 'before the last ProfilerStep' (HTA's default), else 'whole trace'
-- @column kernels count: GPU kernels, copies and sets counted
-- @column comm_us us: length of the union of the kernels named ^nccl.*Kernel
-- @column compute_us us: length of the union of HTA's compute kernels (see below)
-- @column overlap_us us: length of (comm union ∩ compute union)
-- @column exposed_comm_us us: comm_us - overlap_us
-- @column overlap_pct pct: 100 * overlap_us / comm_us; NULL when the rank has no comm kernel
-- @example FROM comm_overlap_hta(run := 'nccl_data')

-- For comparing with HTA's figure on the same trace; comm_overlap is traceview's own. Two choices differ:
-- 1. Which GPU work counts. With two or more ProfilerStep#N names in the trace, HTA keeps only the work launched
--    (correlation id of a CPU call) before the start of the rank's last ProfilerStep: it drops the last step, and
--    any kernel whose launch is not in the trace. comm_overlap counts every kernel of the rank.
-- 2. Which kernels are communication. HTA: names matching ^nccl.*Kernel; compute: every other kernel whose name
--    has no Memcpy, does not start with Memset or dma, and has no Sync. comm_overlap uses the category of
--    queries/kernel_classes.csv (also RCCL, custom all-reduce, NVSHMEM, ...) and counts every other kernel as
--    compute.
-- 3. Time resolution. HTA reads times as whole microseconds: a start rounded up, an end rounded down (a kernel
--    [10.2, 13.9] µs becomes [11, 13]); so here, and in the launch-before-last-step test. comm_overlap keeps
--    nanoseconds.
CREATE OR REPLACE MACRO comm_overlap_hta(run := NULL) AS TABLE
WITH
    _runs AS (SELECT run_id, label FROM run_select(run := run)),
    -- Runs where HTA drops the last step: those with two or more distinct ProfilerStep names.
    _stepped AS (
        SELECT run_id
        FROM cpu_ranges
        WHERE run_id IN (SELECT run_id FROM _runs) AND name LIKE 'ProfilerStep%'
        GROUP BY run_id
        HAVING count(DISTINCT name) >= 2
    ),
    -- The start of each rank's last ProfilerStep.
    _last_step AS (
        SELECT run_id, rank, max(start_ns) AS last_start_ns
        FROM cpu_ranges
        WHERE run_id IN (SELECT run_id FROM _stepped) AND name LIKE 'ProfilerStep%'
        GROUP BY run_id, rank
    ),
    -- The GPU work HTA counts, classified by HTA's name rules.
    _work AS (
        SELECT
            g.run_id,
            g.rank,
            (g.start_ns + 999) // 1000 * 1000 AS start_ns,  -- whole µs, in integers: a double cannot hold epoch ns
            g.end_ns // 1000 * 1000 AS end_ns,
            CASE
                WHEN regexp_matches(g.name, '^nccl.*Kernel') THEN 'comm'
                WHEN regexp_matches(g.name, '^(Memcpy|Memset|dma)') THEN 'memory'
                WHEN regexp_matches(g.name, '^(.*Memcpy|Memset|.*Sync)') THEN 'other'
                ELSE 'compute'
            END AS category
        FROM gpu_activity AS g
        LEFT JOIN launches AS l ON l.run_id = g.run_id AND l.launch_id = g.launch_id
        LEFT JOIN _last_step AS s ON s.run_id = g.run_id AND s.rank = g.rank
        WHERE g.run_id IN (SELECT run_id FROM _runs)
          AND (g.run_id NOT IN (SELECT run_id FROM _stepped) OR (l.start_ns + 999) // 1000 < (s.last_start_ns + 999) // 1000)
    )
SELECT
    b.run_id,
    r.label,
    b.rank,
    CASE WHEN b.run_id IN (SELECT run_id FROM _stepped) THEN 'before the last ProfilerStep' ELSE 'whole trace' END
        AS time_window,
    b.kernels,
    b.comm_ns / 1e3 AS comm_us,
    b.compute_ns / 1e3 AS compute_us,
    b.overlap_ns / 1e3 AS overlap_us,
    (b.comm_ns - b.overlap_ns) / 1e3 AS exposed_comm_us,
    _pct(b.overlap_ns, b.comm_ns) AS overlap_pct
FROM comm_breakdown(_work) AS b
JOIN _runs AS r USING (run_id)
ORDER BY b.run_id, b.rank;
