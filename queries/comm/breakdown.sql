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
-- of the comm and compute sets (tests/test_sql_queries.py checks this), computed in one sort instead of six:
-- order the kernels of a partition by start; as in interval_length, each kernel adds to the union of a class
-- the part of it beyond the latest end of the earlier kernels of that class. The overlap is what the comm and
-- compute unions count twice: comm + compute - the union of the kernels of either class.
CREATE OR REPLACE MACRO comm_breakdown(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, with each kernel's interval and class.
    _keyed AS (
        SELECT
            struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns, category))) AS _key,
            start_ns,
            end_ns,
            coalesce(category = 'comm', false) AS is_comm,
            coalesce(category = 'compute', false) AS is_compute
        FROM query_table(tbl)
    ),
    -- The latest end among the earlier kernels: all, comm, compute, and comm or compute ones.
    _reach AS (
        SELECT
            _key,
            start_ns,
            end_ns,
            is_comm,
            is_compute,
            max(end_ns) OVER w AS all_ns,
            max(end_ns) FILTER (is_comm) OVER w AS comm_ns,
            max(end_ns) FILTER (is_compute) OVER w AS compute_ns,
            max(end_ns) FILTER (is_comm OR is_compute) OVER w AS either_ns
        FROM _keyed
        WINDOW w AS (PARTITION BY _key ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ),
    -- What each kernel adds to the union of each class it belongs to (0 for a class it is not in).
    _added AS (
        SELECT
            _key,
            start_ns,
            end_ns,
            greatest(end_ns - greatest(start_ns, coalesce(all_ns, start_ns)), 0) AS all_ns,
            CASE WHEN is_comm THEN greatest(end_ns - greatest(start_ns, coalesce(comm_ns, start_ns)), 0) END
                AS comm_ns,
            CASE WHEN is_compute THEN greatest(end_ns - greatest(start_ns, coalesce(compute_ns, start_ns)), 0) END
                AS compute_ns,
            CASE
                WHEN is_comm OR is_compute THEN greatest(end_ns - greatest(start_ns, coalesce(either_ns, start_ns)), 0)
            END AS either_ns
        FROM _reach
    ),
    -- Count and extent of the kernels, and the union lengths per class.
    _lengths AS (
        SELECT
            _key,
            count(*) AS kernels,
            least(min(start_ns), min(end_ns)) AS first_start_ns,
            greatest(max(start_ns), max(end_ns)) AS last_end_ns,
            sum(all_ns)::BIGINT AS busy_ns,
            coalesce(sum(comm_ns), 0)::BIGINT AS comm_ns,
            coalesce(sum(compute_ns), 0)::BIGINT AS compute_ns,
            coalesce(sum(either_ns), 0)::BIGINT AS either_ns
        FROM _added
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
    comm_ns + compute_ns - either_ns AS overlap_ns
FROM _lengths;
