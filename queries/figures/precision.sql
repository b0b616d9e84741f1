-- @module figures.precision
-- The precision of every figure the library returns, rounded here once so that every consumer (the terminal, CSV, JSON, Parquet read by Spark) shows the same digits.
-- @column unit -: the unit named at the end of a column's name (us, pct) or count
-- @column decimals count: decimals kept
-- @column rule -: how a value is rounded, so that another engine can round it alike
-- @example FROM figure_precision

-- A time is a whole number of nanoseconds: in microseconds, 3 decimals. A median of times is taken on whole
-- nanoseconds (each value rounded to a whole ns first, exact in a DOUBLE), so that a median of two ends in exactly
-- .5 ns, then rounded half away from zero: DuckDB's round of a DOUBLE and Spark's round (HALF_UP) agree on an
-- exact half, where rounding the microseconds (155.0545 is 155.05449999... in binary) would not.
CREATE OR REPLACE MACRO _median_us(us) AS round(median(round(us * 1000))) / 1000;

-- A time in nanoseconds that may hold a fraction (a mean, an interpolated quantile), as microseconds to a whole ns.
CREATE OR REPLACE MACRO _us(ns) AS round(ns) / 1000;

-- The largest minus the smallest of microsecond figures, to a whole ns (their difference as DOUBLEs may not be).
CREATE OR REPLACE MACRO _spread_us(us) AS round((max(us) - min(us)) * 1000) / 1000;

-- The median of a count is the lower median: a count some instance has (a whole number, as Spark's
-- percentile_disc(0.5) gives), not the mean of the two middle counts.
CREATE OR REPLACE MACRO _median_count(n) AS quantile_disc(n, 0.5);

-- A share in percent, to 2 decimals: the ratio scaled to hundredths of a percent first and rounded half away from
-- zero (NULL when the whole is 0).
CREATE OR REPLACE MACRO _pct(part, whole) AS round(10000.0 * part / nullif(whole, 0)) / 100;

-- The rules above, one row per unit.
CREATE OR REPLACE VIEW figure_precision AS
SELECT *
FROM (
    VALUES
        ('us', 3, 'a whole ns; medians and means taken on whole ns, then rounded half away from zero'),
        ('pct', 2, '10000 x part / whole rounded half away from zero, then / 100'),
        ('count', 0, 'a median of counts is the lower median (percentile_disc 0.5)')
) AS t (unit, decimals, rule);
