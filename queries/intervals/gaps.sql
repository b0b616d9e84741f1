-- @module intervals.gaps
-- The gaps between intervals within each partition: time after one merged interval and before the next.
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one partition column
-- @column * -: the partition columns of tbl
-- @column start_ns ns: start of the gap (end of the merged interval before it)
-- @column end_ns ns: end of the gap (start of the merged interval after it)
-- @example WITH k AS (SELECT rank, step, start_ns, end_ns FROM gpu_activity WHERE kind = 'kernel') FROM interval_gaps(k)

-- The gaps of interval_union's merged intervals, found in one sort: order the intervals of a partition by start;
-- the running maximum of the ends up to an interval is how far the merged interval in progress reaches, and
-- when the next interval starts after that reach, the time between them is a gap. Touching intervals leave no
-- gap; time before the first and after the last interval of a partition is not a gap.
CREATE OR REPLACE MACRO interval_gaps(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, so any set of columns can partition.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM query_table(tbl)
    ),
    -- The latest end up to each interval and the start of the interval after it.
    _reach AS (
        SELECT
            _key,
            max(end_ns) OVER w AS reach_ns,
            lead(start_ns) OVER w AS next_start_ns
        FROM _keyed
        WINDOW w AS (PARTITION BY _key ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING)
    )
SELECT unnest(_key), reach_ns AS start_ns, next_start_ns AS end_ns
FROM _reach
WHERE next_start_ns > reach_ns;
