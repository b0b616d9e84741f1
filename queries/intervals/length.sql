-- @module intervals.length
-- Total time covered by the intervals of each partition, counting overlapping time once.
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one partition column
-- @column * -: the partition columns of tbl
-- @column length_ns ns: length of the union of the partition's intervals
-- @example WITH k AS (SELECT rank, start_ns, end_ns FROM gpu_activity WHERE kind = 'kernel') FROM interval_length(k)

-- The sum of the lengths of the merged intervals (interval_union), which do not overlap.
CREATE OR REPLACE MACRO interval_length(tbl) AS TABLE
SELECT COLUMNS(* EXCLUDE (start_ns, end_ns)), sum(end_ns - start_ns)::BIGINT AS length_ns
FROM interval_union(tbl)
GROUP BY ALL;
