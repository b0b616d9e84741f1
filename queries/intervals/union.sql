-- @module intervals.union
-- Merges overlapping or touching intervals within each partition into disjoint intervals (their union).
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one other column; every other column is the partition key
-- @column * -: the partition columns of tbl, unchanged
-- @column start_ns ns: start of a merged interval
-- @column end_ns ns: end of a merged interval (intervals of one partition are disjoint and do not touch)
-- @example WITH k AS (SELECT rank, start_ns, end_ns FROM gpu_activity) FROM interval_union(k)

-- Algorithm: emit +1 at each start and -1 at each end, and sort the events of a partition by time (at equal
-- times starts before ends, so touching intervals merge). The running sum is the number of intervals open
-- after each event. A merged interval (an "island") opens at a +1 that lifts the sum from 0 to 1 and closes at
-- the -1 that brings it back to 0; numbering the openings with a second running sum gives each event its
-- island, and the island spans min(time) to max(time) of its events.
CREATE OR REPLACE MACRO interval_union(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, so any set of columns can partition.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM query_table(tbl)
    ),
    -- One event per boundary: +1 at a start, -1 at an end.
    _events AS (
        SELECT _key, start_ns AS t, 1 AS delta FROM _keyed
        UNION ALL
        SELECT _key, end_ns AS t, -1 AS delta FROM _keyed
    ),
    -- Number of intervals open after each event.
    _depth AS (
        SELECT
            _key,
            t,
            delta,
            sum(delta) OVER (PARTITION BY _key ORDER BY t, delta DESC ROWS UNBOUNDED PRECEDING) AS depth
        FROM _events
    ),
    -- Island number: how many 0 -> 1 openings happened up to this event.
    _islands AS (
        SELECT
            _key,
            t,
            sum(CASE WHEN delta = 1 AND depth = 1 THEN 1 ELSE 0 END)
                OVER (PARTITION BY _key ORDER BY t, delta DESC, depth ROWS UNBOUNDED PRECEDING) AS island
        FROM _depth
    )
SELECT unnest(_key), min(t) AS start_ns, max(t) AS end_ns
FROM _islands
GROUP BY _key, island;
