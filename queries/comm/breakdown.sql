-- @module comm.breakdown
-- Busy, communication, compute and overlapped GPU time of a set of kernels, per partition (HTA's measure).
-- @param tbl table -: a table or CTE with columns start_ns, end_ns, category and at least one partition column; rows are the kernels to measure
-- @column * -: the partition columns of tbl
-- @column kernels count: number of rows (kernels) in the partition
-- @column first_start_ns ns: start of the earliest kernel
-- @column last_end_ns ns: end of the latest kernel
-- @column busy_ns ns: length of the union of all its kernels
-- @column comm_ns ns: length of the union of its comm kernels
-- @column compute_ns ns: length of the union of its compute kernels
-- @column overlap_ns ns: length of (comm union ∩ compute union): communication hidden behind computation
-- @example WITH k AS (SELECT rank, start_ns, end_ns, category FROM gpu_activity WHERE kind = 'kernel') FROM comm_breakdown(k)

-- Defined as Holistic Trace Analysis defines compute/communication overlap: the union of the communication
-- kernels intersected with the union of the compute kernels; rows of any other category (memcpy, memset)
-- count towards busy_ns only. The four lengths equal interval_length of each set and of interval_intersect
-- of the comm and compute sets (tests/test_sql_queries.py checks this), computed in one sweep instead of six:
-- emit +1 at each start and -1 at each end, counted apart for all kernels, comm kernels and compute kernels,
-- and sort the events of a partition by time. Between two consecutive events the running counts say which
-- kernels are open: the stretch is busy when any is, comm when a comm kernel is, compute when a compute kernel
-- is, and overlapped when both a comm and a compute kernel are.
CREATE OR REPLACE MACRO comm_breakdown(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, with each kernel's interval and category.
    _keyed AS (
        SELECT
            struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns, category))) AS _key,
            start_ns,
            end_ns,
            CASE WHEN category = 'comm' THEN 1 ELSE 0 END AS is_comm,
            CASE WHEN category = 'compute' THEN 1 ELSE 0 END AS is_compute
        FROM query_table(tbl)
    ),
    -- One event per boundary: +1 at a start, -1 at an end, for all kernels and for each class.
    _events AS (
        SELECT _key, start_ns AS t, 1 AS d_all, is_comm AS d_comm, is_compute AS d_compute FROM _keyed
        UNION ALL
        SELECT _key, end_ns AS t, -1 AS d_all, -is_comm AS d_comm, -is_compute AS d_compute FROM _keyed
    ),
    -- Kernels open after each event, per class, and the time until the next event.
    _open AS (
        SELECT
            _key,
            t,
            d_all,
            sum(d_all) OVER w AS n_all,
            sum(d_comm) OVER w AS n_comm,
            sum(d_compute) OVER w AS n_compute,
            lead(t) OVER w - t AS stretch_ns
        FROM _events
        WINDOW w AS (PARTITION BY _key ORDER BY t, d_all DESC ROWS UNBOUNDED PRECEDING)
    ),
    -- Count and extent of the kernels, and the lengths of the stretches per class of open kernels.
    _lengths AS (
        SELECT
            _key,
            count(*) FILTER (d_all = 1) AS kernels,
            min(t) AS first_start_ns,
            max(t) AS last_end_ns,
            coalesce(sum(stretch_ns) FILTER (n_all > 0), 0)::BIGINT AS busy_ns,
            coalesce(sum(stretch_ns) FILTER (n_comm > 0), 0)::BIGINT AS comm_ns,
            coalesce(sum(stretch_ns) FILTER (n_compute > 0), 0)::BIGINT AS compute_ns,
            coalesce(sum(stretch_ns) FILTER (n_comm > 0 AND n_compute > 0), 0)::BIGINT AS overlap_ns
        FROM _open
        GROUP BY _key
    )
SELECT
    unnest(_key),
    kernels,
    first_start_ns,
    last_end_ns,
    busy_ns,
    comm_ns,
    compute_ns,
    overlap_ns
FROM _lengths;
