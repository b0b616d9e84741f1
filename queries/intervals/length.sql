-- @module intervals.length
-- Total time covered by the intervals of each partition, counting overlapping time once.
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one partition column
-- @column * -: the partition columns of tbl
-- @column length_ns ns: length of the union of the partition's intervals
-- @example WITH k AS (SELECT rank, start_ns, end_ns FROM gpu_activity WHERE kind = 'kernel') FROM interval_length(k)

-- The length of interval_union's merged intervals, found in one sort: order the intervals of a partition by
-- start; each adds the part of it that lies beyond the latest end of the intervals before it (nothing when it
-- ends before that end).
CREATE OR REPLACE MACRO interval_length(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, so any set of columns can partition.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM query_table(tbl)
    ),
    -- Each interval's time not covered by the intervals that sort before it.
    _added AS (
        SELECT
            _key,
            greatest(end_ns - greatest(start_ns, coalesce(max(end_ns) OVER (
                PARTITION BY _key ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ), start_ns)), 0) AS added_ns
        FROM _keyed
    )
SELECT unnest(_key), sum(added_ns)::BIGINT AS length_ns
FROM _added
GROUP BY _key;
