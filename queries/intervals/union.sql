-- @module intervals.union
-- Merges overlapping or touching intervals within each partition into disjoint intervals (their union).
-- @param tbl table -: a table or CTE with columns start_ns, end_ns and at least one other column; every other column is the partition key
-- @column * -: the partition columns of tbl, unchanged
-- @column start_ns ns: start of a merged interval
-- @column end_ns ns: end of a merged interval (intervals of one partition are disjoint and do not touch)
-- @example WITH k AS (SELECT rank, start_ns, end_ns FROM gpu_activity) FROM interval_union(k)

-- Algorithm (one sort of every interval, one of the last interval of each merged one): order the intervals of a
-- partition by start. The running maximum of the ends up to an interval is how far the merged interval in
-- progress reaches; when the next interval starts after that reach, the merged interval ends there (this
-- interval "closes" it) and the next one starts at that next start. So each closing interval gives a merged
-- interval's end (its reach), and the closing interval before it gives its start (that one's next start; the
-- partition's first start for the first). This is the "+1 at each start, -1 at each end" count of open
-- intervals (see interval_intersect) read differently: the count drops to 0 exactly where the running maximum
-- of the ends lies before the next start. Only the closing intervals are sorted a second time.
CREATE OR REPLACE MACRO interval_union(tbl) AS TABLE
WITH
    -- The partition columns packed into one struct key, so any set of columns can partition.
    _keyed AS (
        SELECT struct_pack(*COLUMNS(* EXCLUDE (start_ns, end_ns))) AS _key, start_ns, end_ns
        FROM query_table(tbl)
    ),
    -- The latest end up to each interval, the start of the interval after it and the partition's first start.
    _reach AS (
        SELECT
            _key,
            max(end_ns) OVER w AS reach_ns,
            lead(start_ns) OVER w AS next_start_ns,
            first_value(start_ns) OVER w AS first_start_ns
        FROM _keyed
        WINDOW w AS (PARTITION BY _key ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING)
    ),
    -- The intervals that close a merged interval (nothing after them starts before their reach), each with
    -- the start after the closing interval before it.
    _closing AS (
        SELECT
            _key,
            reach_ns,
            first_start_ns,
            lag(next_start_ns) OVER (PARTITION BY _key ORDER BY reach_ns) AS opened_ns
        FROM _reach
        WHERE next_start_ns IS NULL OR next_start_ns > reach_ns
    )
SELECT unnest(_key), coalesce(opened_ns, first_start_ns) AS start_ns, reach_ns AS end_ns
FROM _closing;
