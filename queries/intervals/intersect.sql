-- @module intervals.intersect
-- Intersects two interval sets partition by partition: the time covered by both a and b.
-- @param a table -: a table or CTE with columns start_ns, end_ns and partition columns (intervals may overlap)
-- @param b table -: the same columns as a, in the same order
-- @column * -: the partition columns, unchanged
-- @column start_ns ns: start of a piece of time covered by both sets
-- @column end_ns ns: end of that piece (pieces of one partition are disjoint)
-- @example WITH c AS (SELECT rank, start_ns, end_ns FROM gpu_activity WHERE category = 'comm'), k AS (SELECT rank, start_ns, end_ns FROM gpu_activity WHERE category = 'compute') FROM interval_intersect(c, k)

-- Algorithm (one sort of both sets together, then interval_union of the pieces): order the intervals of a
-- partition of both sets by start. The latest end among the other set's intervals that sort before an interval
-- belongs to one that started no later and so covers the time from this interval's start up to that end; the
-- interval is covered by both sets from its start to the earlier of its own end and that end. Every instant
-- covered by both sets lies in such a piece: the piece of whichever of the two covering intervals sorts later.
-- The pieces overlap where either set overlaps itself, so they are merged (interval_union); zero-length pieces
-- are dropped.
CREATE OR REPLACE MACRO interval_intersect(a, b) AS TABLE
WITH
    -- Both sets, one after the other, each interval marked with its set.
    _both AS (
        SELECT *, false AS _in_b FROM query_table(a)
        UNION ALL
        SELECT *, true AS _in_b FROM query_table(b)
    ),
    -- The partition columns packed into one struct key.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns, _in_b))) AS _key, start_ns, end_ns, _in_b
        FROM _both
    ),
    -- The latest end among the other set's intervals that sort before each interval.
    _other AS (
        SELECT
            _key,
            start_ns,
            end_ns,
            CASE WHEN _in_b THEN max(end_ns) FILTER (NOT _in_b) OVER w ELSE max(end_ns) FILTER (_in_b) OVER w END
                AS other_reach_ns
        FROM _keyed
        WINDOW w AS (PARTITION BY _key ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ),
    -- The part of each interval that the other set covers, where it is not empty.
    _pieces AS (
        SELECT unnest(_key), start_ns, least(end_ns, other_reach_ns) AS end_ns
        FROM _other
        WHERE other_reach_ns > start_ns AND end_ns > start_ns
    )
FROM interval_union(_pieces);
