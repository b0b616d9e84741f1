-- @module layers.launch_overhead
-- Launch overhead per layer: time from the CPU launch call's start to the kernel's start on the GPU.
-- @param run VARCHAR NULL: run label or id; NULL for every run
-- @column run_id -: run (runs.run_id)
-- @column rank -: rank (ranks.rank)
-- @column layer -: layer index
-- @column kernels count: kernels of the layer in steady steps that are linked to their launch call
-- @column unlinked count: kernels of the layer in steady steps without a launch call (gpu_activity.launch_id NULL)
-- @column delay_us_median us: median of (kernel start on the GPU - launch call start on the CPU)
-- @column delay_us_p90 us: 90th percentile of that delay
-- @column delay_us_max us: largest delay
-- @column delay_us_mean us: mean delay
-- @example FROM layer_launch_overhead() ORDER BY delay_us_median DESC

-- The delay covers the launch call itself, the driver and the wait in the stream's queue behind earlier work,
-- so a large value means the CPU ran ahead (good), a small one that the GPU waits for the CPU. Kernels of a CUDA
-- graph share one cudaGraphLaunch: their delay runs from that call.
CREATE OR REPLACE MACRO layer_launch_overhead(run := NULL) AS TABLE
WITH
    -- Kernels of layers in steady steps of the chosen runs, with the start of their launch call.
    _kernels AS (
        SELECT g.run_id, g.rank, g.layer, g.start_ns - c.start_ns AS delay_ns
        FROM gpu_activity AS g
        JOIN step_steady AS s USING (run_id, rank, step)
        LEFT JOIN launches AS c ON c.run_id = g.run_id AND c.launch_id = g.launch_id
        WHERE g.kind = 'kernel' AND g.layer IS NOT NULL
          AND g.run_id IN (SELECT run_id FROM run_select(run := run))
    )
SELECT
    run_id,
    rank,
    layer,
    count(delay_ns) AS kernels,
    count(*) - count(delay_ns) AS unlinked,
    _us(median(delay_ns)) AS delay_us_median,
    _us(quantile_cont(delay_ns, 0.9)) AS delay_us_p90,
    max(delay_ns) / 1e3 AS delay_us_max,
    _us(avg(delay_ns)) AS delay_us_mean
FROM _kernels
GROUP BY run_id, rank, layer
ORDER BY run_id, rank, layer;
