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
-- count towards busy_ns only. Every figure is computed by the interval macros (intervals/).
CREATE OR REPLACE MACRO comm_breakdown(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, with each kernel's interval and category.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns, category))) AS _key, start_ns, end_ns, category
        FROM query_table(tbl)
    ),
    -- All kernels, the communication kernels and the compute kernels.
    _all AS (SELECT _key, start_ns, end_ns FROM _keyed),
    _comm AS (SELECT _key, start_ns, end_ns FROM _keyed WHERE category = 'comm'),
    _compute AS (SELECT _key, start_ns, end_ns FROM _keyed WHERE category = 'compute'),
    -- Count and extent of the kernels of each partition.
    _extent AS (
        SELECT _key, count(*) AS kernels, min(start_ns) AS first_start_ns, max(end_ns) AS last_end_ns
        FROM _keyed
        GROUP BY _key
    ),
    -- Union lengths, and the length of the intersection of the comm and compute unions.
    _busy AS (FROM interval_length(_all)),
    _comm_length AS (FROM interval_length(_comm)),
    _compute_length AS (FROM interval_length(_compute)),
    _overlap AS (
        SELECT _key, sum(end_ns - start_ns)::BIGINT AS length_ns
        FROM interval_intersect(_comm, _compute)
        GROUP BY _key
    )
SELECT
    unnest(e._key),
    e.kernels,
    e.first_start_ns,
    e.last_end_ns,
    coalesce(b.length_ns, 0) AS busy_ns,
    coalesce(c.length_ns, 0) AS comm_ns,
    coalesce(k.length_ns, 0) AS compute_ns,
    coalesce(o.length_ns, 0) AS overlap_ns
FROM _extent AS e
LEFT JOIN _busy AS b ON b._key = e._key
LEFT JOIN _comm_length AS c ON c._key = e._key
LEFT JOIN _compute_length AS k ON k._key = e._key
LEFT JOIN _overlap AS o ON o._key = e._key;
