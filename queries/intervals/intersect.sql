-- @module intervals.intersect
-- Intersects two interval sets partition by partition: the time covered by both a and b.
-- @param a table -: a table or CTE with columns start_ns, end_ns and partition columns (intervals may overlap)
-- @param b table -: the same columns as a, in the same order
-- @column * -: the partition columns, unchanged
-- @column start_ns ns: start of a piece of time covered by both sets
-- @column end_ns ns: end of that piece (pieces of one partition are disjoint)
-- @example WITH c AS (SELECT rank, start_ns, end_ns FROM gpu_activity WHERE category = 'comm'), k AS (SELECT rank, start_ns, end_ns FROM gpu_activity WHERE category = 'compute') FROM interval_intersect(c, k)

-- Algorithm: merge each set first (interval_union), so within one set nothing overlaps. Then emit +1 at each
-- start and -1 at each end of both sets and sort by time (starts before ends at equal times). The running sum
-- is now 2 exactly where a piece of a and a piece of b are both open; each event whose sum is 2 opens a piece
-- that lasts until the next event of the partition. Zero-length pieces are dropped.
CREATE OR REPLACE MACRO interval_intersect(a, b) AS TABLE
WITH
    -- Both sets merged, one after the other.
    _both AS (
        FROM interval_union(a)
        UNION ALL
        FROM interval_union(b)
    ),
    -- The partition columns packed into one struct key.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM _both
    ),
    -- One event per boundary: +1 at a start, -1 at an end.
    _events AS (
        SELECT _key, start_ns AS t, 1 AS delta FROM _keyed
        UNION ALL
        SELECT _key, end_ns AS t, -1 AS delta FROM _keyed
    ),
    -- Number of sets covering the time after each event, and the time of the next event.
    _depth AS (
        SELECT
            _key,
            t,
            sum(delta) OVER w AS depth,
            lead(t) OVER w AS next_t
        FROM _events
        WINDOW w AS (PARTITION BY _key ORDER BY t, delta DESC ROWS UNBOUNDED PRECEDING)
    )
SELECT unnest(_key), t AS start_ns, next_t AS end_ns
FROM _depth
WHERE depth = 2 AND next_t > t;
