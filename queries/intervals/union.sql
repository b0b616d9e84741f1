-- @module intervals.union
-- Merges overlapping or touching intervals within each partition into disjoint intervals (their union).
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one other column; every other column is the partition key
-- @column * -: the partition columns of tbl, unchanged
-- @column start_ns ns: start of a merged interval
-- @column end_ns ns: end of a merged interval (intervals of one partition are disjoint and do not touch)
-- @example WITH k AS (SELECT rank, start_ns, end_ns FROM gpu_activity) FROM interval_union(k)

-- Algorithm (one sort): order the intervals of a partition by start. An interval opens a new merged interval
-- (an "island") when it starts after every earlier interval has ended, i.e. after the running maximum of the
-- earlier ends; otherwise it overlaps or touches the island in progress. Numbering the openings with a running
-- sum gives each interval its island, which spans min(start) to max(end) of its intervals. This is the
-- "+1 at each start, -1 at each end" count of open intervals (see interval_intersect) read differently: the
-- count drops to 0 exactly where the running maximum of the ends lies before the next start.
CREATE OR REPLACE MACRO interval_union(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, so any set of columns can partition.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM query_table(tbl)
    ),
    -- The latest end among the intervals that sort before each one.
    _reach AS (
        SELECT
            _key,
            start_ns,
            end_ns,
            max(end_ns) OVER (
                PARTITION BY _key ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ) AS reach_ns
        FROM _keyed
    ),
    -- Island number: how many intervals up to this one started after everything before them had ended.
    _islands AS (
        SELECT
            _key,
            start_ns,
            end_ns,
            sum(CASE WHEN reach_ns IS NULL OR start_ns > reach_ns THEN 1 ELSE 0 END)
                OVER (PARTITION BY _key ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
        FROM _reach
    )
SELECT unnest(_key), min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM _islands
GROUP BY _key, island;
