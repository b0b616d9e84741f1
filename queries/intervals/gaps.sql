-- @module intervals.gaps
-- The gaps between intervals within each partition: time after one merged interval and before the next.
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one partition column
-- @column * -: the partition columns of tbl
-- @column start_ns ns: start of the gap (end of the merged interval before it)
-- @column end_ns ns: end of the gap (start of the merged interval after it)
-- @example WITH k AS (SELECT rank, step, start_ns, end_ns FROM gpu_activity WHERE kind = 'kernel') FROM interval_gaps(k)

-- Merge the intervals (interval_union); each merged interval but the last opens a gap that the next one closes.
-- Time before the first and after the last interval of a partition is not a gap.
CREATE OR REPLACE MACRO interval_gaps(tbl) AS TABLE
WITH
    -- The merged intervals with the partition packed into one struct key.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM interval_union(tbl)
    ),
    -- Each merged interval with the start of the next one.
    _next AS (
        SELECT _key, end_ns, lead(start_ns) OVER (PARTITION BY _key ORDER BY start_ns) AS next_start_ns
        FROM _keyed
    )
SELECT unnest(_key), end_ns AS start_ns, next_start_ns AS end_ns
FROM _next
WHERE next_start_ns IS NOT NULL;
