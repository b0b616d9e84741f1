-- @module steps.steady
-- The steps that figures across steps use: every step not marked warm-up (all steps of a rank when every one is).
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column step -: step index (steps.step)
-- @column phase -: decode, prefill or unknown (steps.phase)
-- @column warmup -: true only when the rank has nothing but warm-up steps
-- @example SELECT phase, count(*) FROM step_steady GROUP BY phase

-- Warm-up steps (first iterations, compilation, autotuning) would skew medians, so they are left out; a rank
-- whose steps are all warm-up keeps them all rather than vanish from every summary.
CREATE OR REPLACE VIEW step_steady AS
WITH _ranks_with_steady AS (
    SELECT DISTINCT run_id, rank FROM steps WHERE NOT warmup
)
SELECT s.run_id, s.rank, s.step, s.phase, s.warmup
FROM steps AS s
LEFT JOIN _ranks_with_steady AS r USING (run_id, rank)
WHERE NOT s.warmup OR r.rank IS NULL;
