-- @module runs.select
-- The runs that a `run` argument names: by label or by run id; every run when it is NULL.
-- @param run VARCHAR NULL: run label or run id (as text or number); NULL for every run
-- @column run_id -: key of the run (runs.run_id)
-- @column label -: label of the run
-- @example FROM run_select(run := 'baseline')

-- Every query that takes `run` filters through this macro, so a label and an id both work everywhere.
CREATE OR REPLACE MACRO run_select(run := NULL) AS TABLE
SELECT run_id, label
FROM runs
WHERE run IS NULL OR label = CAST(run AS VARCHAR) OR CAST(run_id AS VARCHAR) = CAST(run AS VARCHAR);
