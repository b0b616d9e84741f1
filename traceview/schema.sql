-- traceview's database schema: one layout for every profiler backend (PyTorch profiler / Kineto JSON and
-- Nsight Systems). Ingest writes these tables; segmentation fills `steps`, `layers` and the step/layer
-- columns of `gpu_activity`; queries/ reads them. All times are BIGINT nanoseconds on the trace's own
-- absolute clock (Kineto: Unix epoch; nsys: the session clock, anchored by `runs.clock_anchor_ns`).
-- Every key carries `run_id` (and `rank` where it applies) so one database can hold many runs and ranks.
-- The four big tables (gpu_activity, launches, cpu_ranges, gpu_ranges) declare no PRIMARY KEY: their ids are
-- unique by construction (numbered by ingest) and checked by the tests; the indexes cost ~20% of insert
-- time (1.3 M cpu_ranges rows: 0.61 -> 0.32 CPU-s without) and sped up nothing (queries join by hash).

CREATE TABLE IF NOT EXISTS traceview_meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);
COMMENT ON TABLE traceview_meta IS 'Facts about the database itself, such as the schema version that wrote it.';
COMMENT ON COLUMN traceview_meta.key IS 'Name of the fact, e.g. schema_version.';
COMMENT ON COLUMN traceview_meta.value IS 'Its value, as text.';

CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY,
    label VARCHAR NOT NULL UNIQUE,
    backend VARCHAR NOT NULL,
    source_path VARCHAR NOT NULL,
    source_sha256 VARCHAR NOT NULL,
    source_bytes BIGINT NOT NULL,
    traceview_version VARCHAR NOT NULL,
    ingested_at TIMESTAMP NOT NULL,
    profiler_version VARCHAR,
    device_names VARCHAR[],
    trace_start_ns BIGINT,
    trace_end_ns BIGINT,
    clock_anchor_ns BIGINT,
    partial BOOLEAN NOT NULL DEFAULT FALSE
);
COMMENT ON TABLE runs IS 'One row per ingested trace (one file, or one directory of per-rank files).';
COMMENT ON COLUMN runs.run_id IS 'Key of the run, referenced by every other table.';
COMMENT ON COLUMN runs.label IS 'Name given with --label, else the file or directory name; unique in the database.';
COMMENT ON COLUMN runs.backend IS 'Which reader produced the rows: kineto or nsys.';
COMMENT ON COLUMN runs.source_path IS 'Absolute path of the file or directory that was ingested.';
COMMENT ON COLUMN runs.source_sha256 IS 'SHA-256 of the file (of the sorted per-file digests for a directory); makes ingest idempotent.';
COMMENT ON COLUMN runs.source_bytes IS 'Size of the source on disk, in bytes (compressed size for .gz).';
COMMENT ON COLUMN runs.traceview_version IS 'Version of traceview that wrote the run.';
COMMENT ON COLUMN runs.ingested_at IS 'When the run was ingested (UTC).';
COMMENT ON COLUMN runs.profiler_version IS 'Version of the profiler or exporter that wrote the trace, when it says.';
COMMENT ON COLUMN runs.device_names IS 'Distinct GPU names seen in the trace, e.g. [NVIDIA H200].';
COMMENT ON COLUMN runs.trace_start_ns IS 'Earliest start of any event in the run, ns.';
COMMENT ON COLUMN runs.trace_end_ns IS 'Latest end of any event in the run, ns.';
COMMENT ON COLUMN runs.clock_anchor_ns IS 'Absolute time (Unix epoch ns) of the trace clock zero, when known; lines up reports of several ranks or nodes.';
COMMENT ON COLUMN runs.partial IS 'True when the source was cut short and only part of it was kept (--salvage).';

CREATE TABLE IF NOT EXISTS ranks (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    source_file VARCHAR NOT NULL,
    rank_from VARCHAR NOT NULL,
    pid BIGINT,
    hostname VARCHAR,
    device_id INTEGER,
    device_name VARCHAR,
    world_size INTEGER,
    PRIMARY KEY (run_id, rank)
);
COMMENT ON TABLE ranks IS 'One row per rank of a run: which file or process it came from and how its rank was decided.';
COMMENT ON COLUMN ranks.run_id IS 'Run the rank belongs to (runs.run_id).';
COMMENT ON COLUMN ranks.rank IS 'Rank number: distributedInfo.rank, else a number in the file name, else the order of processes/GPUs.';
COMMENT ON COLUMN ranks.source_file IS 'File the rank was read from.';
COMMENT ON COLUMN ranks.rank_from IS 'How the rank number was found: distributed_info, file_name, process_order or default.';
COMMENT ON COLUMN ranks.pid IS 'Host process id of the rank, when known.';
COMMENT ON COLUMN ranks.hostname IS 'Host the rank ran on, when the trace says and ingest was given --keep-host (NULL otherwise: a host name identifies the machine).';
COMMENT ON COLUMN ranks.device_id IS 'GPU index used by the rank (the device with most kernels).';
COMMENT ON COLUMN ranks.device_name IS 'Name of that GPU, e.g. NVIDIA H200.';
COMMENT ON COLUMN ranks.world_size IS 'Number of ranks in the job, when the trace says.';

CREATE TABLE IF NOT EXISTS gpu_activity (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    activity_id BIGINT NOT NULL,
    kind VARCHAR NOT NULL,
    device_id INTEGER,
    stream_id BIGINT,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    name VARCHAR NOT NULL,
    short_name VARCHAR NOT NULL,
    category VARCHAR NOT NULL,
    comm_op VARCHAR,
    pid BIGINT,
    correlation_id BIGINT,
    launch_id BIGINT,
    graph_id BIGINT,
    graph_node_id BIGINT,
    grid INTEGER[],
    block INTEGER[],
    bytes BIGINT,
    step INTEGER,
    layer INTEGER,
    role VARCHAR,
    draft_pass INTEGER
);
COMMENT ON TABLE gpu_activity IS 'Work executed on a GPU: kernels, memory copies and memory sets, one row each.';
COMMENT ON COLUMN gpu_activity.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN gpu_activity.rank IS 'Rank that executed it (ranks.rank).';
COMMENT ON COLUMN gpu_activity.activity_id IS 'Key within the run (unique with run_id), in order of start time.';
COMMENT ON COLUMN gpu_activity.kind IS 'kernel, memcpy or memset.';
COMMENT ON COLUMN gpu_activity.device_id IS 'GPU index on its host.';
COMMENT ON COLUMN gpu_activity.stream_id IS 'CUDA/HIP stream id.';
COMMENT ON COLUMN gpu_activity.start_ns IS 'Start on the GPU, ns.';
COMMENT ON COLUMN gpu_activity.end_ns IS 'End on the GPU, ns (end_ns >= start_ns).';
COMMENT ON COLUMN gpu_activity.name IS 'Full (demangled) name, e.g. void at::native::vectorized_elementwise_kernel<...>.';
COMMENT ON COLUMN gpu_activity.short_name IS 'The kernel''s identity across backends: its own name with the template arguments that select it, no namespaces, return type or parameter list (a name left mangled is demangled first), e.g. vectorized_elementwise_kernel<4, FillFunctor<float>, array<char*, 1ul>>; the same for Kineto and nsys (ingest/kernel_names.py). For copies and sets: the kind, e.g. HtoD.';
COMMENT ON COLUMN gpu_activity.category IS 'compute, comm, fused_comm (a collective fused with computation in one kernel: all-reduce with residual add and RMSNorm, GEMM with reduce-scatter), memcpy or memset (from queries/kernel_classes.csv; comm also from collective args).';
COMMENT ON COLUMN gpu_activity.comm_op IS 'For comm: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast, ... else NULL.';
COMMENT ON COLUMN gpu_activity.pid IS 'Host process that launched it, when known.';
COMMENT ON COLUMN gpu_activity.correlation_id IS 'Profiler correlation id shared with the launching API call (unique within a process).';
COMMENT ON COLUMN gpu_activity.launch_id IS 'The launching API call (launches.launch_id), resolved at ingest; NULL when the trace lacks it.';
COMMENT ON COLUMN gpu_activity.graph_id IS 'CUDA graph id when the work ran as part of a graph replay.';
COMMENT ON COLUMN gpu_activity.graph_node_id IS 'CUDA graph node id (nsys --cuda-graph-trace=node), else NULL.';
COMMENT ON COLUMN gpu_activity.grid IS 'Kernel grid size [x, y, z].';
COMMENT ON COLUMN gpu_activity.block IS 'Kernel block size [x, y, z].';
COMMENT ON COLUMN gpu_activity.bytes IS 'Bytes moved or set, for memcpy and memset.';
COMMENT ON COLUMN gpu_activity.step IS 'Step (steps.step) the work belongs to; NULL before segmentation or outside every step.';
COMMENT ON COLUMN gpu_activity.layer IS 'Transformer layer index (layers.layer); NULL outside layers (prologue, epilogue) or before segmentation.';
COMMENT ON COLUMN gpu_activity.role IS 'In a step of a run with a speculative drafter: draft (a kernel of the drafter''s forward passes, in no layer) or target (the other kernels of the step: the verify pass, its layers and the host''s glue; all of a step without drafts); NULL in a run without a drafter and outside every step.';
COMMENT ON COLUMN gpu_activity.draft_pass IS 'For role draft: the drafter''s forward pass within the step, from 0 (one proposed token each); else NULL.';

CREATE TABLE IF NOT EXISTS launches (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    launch_id BIGINT NOT NULL,
    pid BIGINT,
    tid BIGINT,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    name VARCHAR NOT NULL,
    api VARCHAR NOT NULL,
    correlation_id BIGINT
);
COMMENT ON TABLE launches IS 'CPU-side runtime and driver API calls that put work on a GPU or synchronize with it (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, cudaMemcpyAsync, hipLaunchKernel, ...).';
COMMENT ON COLUMN launches.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN launches.rank IS 'Rank of the calling process (ranks.rank).';
COMMENT ON COLUMN launches.launch_id IS 'Key within the run (unique with run_id), in order of start time.';
COMMENT ON COLUMN launches.pid IS 'Calling process id.';
COMMENT ON COLUMN launches.tid IS 'Calling thread id.';
COMMENT ON COLUMN launches.start_ns IS 'Start of the API call, ns.';
COMMENT ON COLUMN launches.end_ns IS 'End of the API call, ns.';
COMMENT ON COLUMN launches.name IS 'API function name without version suffix, e.g. cudaLaunchKernel, cuLaunchKernelEx.';
COMMENT ON COLUMN launches.api IS 'runtime (CUDA/HIP runtime API) or driver (CUDA driver API).';
COMMENT ON COLUMN launches.correlation_id IS 'Correlation id shared with the GPU work it launched.';

CREATE TABLE IF NOT EXISTS graph_nodes (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    graph_node_id BIGINT NOT NULL,
    original_graph_node_id BIGINT,
    pid BIGINT,
    tid BIGINT,
    created_ns BIGINT NOT NULL,
    name VARCHAR NOT NULL
);
COMMENT ON TABLE graph_nodes IS 'CUDA graph nodes, one row each, as created: captured, added, or cloned when a graph was instantiated (nsys --cuda-graph-trace=node, CUDA_GRAPH_NODE_EVENTS). Leads a replayed kernel to its maker.';
COMMENT ON COLUMN graph_nodes.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN graph_nodes.rank IS 'Rank whose GPU work carries the node id, else the first rank of the process.';
COMMENT ON COLUMN graph_nodes.graph_node_id IS 'Node id, as in gpu_activity.graph_node_id.';
COMMENT ON COLUMN graph_nodes.original_graph_node_id IS 'For a clone, the node it was cloned from, else NULL.';
COMMENT ON COLUMN graph_nodes.pid IS 'Process that created the node.';
COMMENT ON COLUMN graph_nodes.tid IS 'Thread that created the node.';
COMMENT ON COLUMN graph_nodes.created_ns IS 'When it was created, ns (in a capture: within the ranges open then).';
COMMENT ON COLUMN graph_nodes.name IS 'API call that created the node, e.g. cudaLaunchKernel, cudaGraphInstantiate.';

CREATE TABLE IF NOT EXISTS cpu_ranges (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    range_id BIGINT NOT NULL,
    pid BIGINT,
    tid BIGINT,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    closed BOOLEAN NOT NULL,
    name VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    domain VARCHAR,
    depth INTEGER NOT NULL,
    parent_id BIGINT
);
COMMENT ON TABLE cpu_ranges IS 'CPU-side annotated ranges: record_function/user annotations, ProfilerStep#N, nn.Module scopes, ATen operators and NVTX ranges and marks.';
COMMENT ON COLUMN cpu_ranges.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN cpu_ranges.rank IS 'Rank of the process (ranks.rank).';
COMMENT ON COLUMN cpu_ranges.range_id IS 'Key within the run (unique with run_id).';
COMMENT ON COLUMN cpu_ranges.pid IS 'Process id.';
COMMENT ON COLUMN cpu_ranges.tid IS 'Thread id.';
COMMENT ON COLUMN cpu_ranges.start_ns IS 'Start, ns.';
COMMENT ON COLUMN cpu_ranges.end_ns IS 'End, ns; for a range never closed, the end of the trace (see closed); equal to start_ns for a mark.';
COMMENT ON COLUMN cpu_ranges.closed IS 'False when the range was still open when the trace ended.';
COMMENT ON COLUMN cpu_ranges.name IS 'Annotation text, e.g. model.layers.7 or ProfilerStep#12.';
COMMENT ON COLUMN cpu_ranges.kind IS 'annotation (record_function, user_annotation), step (ProfilerStep#N), module (nn.Module scope), op (ATen operator), nvtx (NVTX range) or mark (instant).';
COMMENT ON COLUMN cpu_ranges.domain IS 'NVTX domain name, when not the default domain.';
COMMENT ON COLUMN cpu_ranges.depth IS 'Nesting depth among the ranges of the same thread, 0 for the outermost.';
COMMENT ON COLUMN cpu_ranges.parent_id IS 'range_id of the innermost enclosing range on the same thread, NULL at depth 0.';

CREATE TABLE IF NOT EXISTS gpu_ranges (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    range_id BIGINT NOT NULL,
    device_id INTEGER,
    stream_id BIGINT,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    name VARCHAR NOT NULL
);
COMMENT ON TABLE gpu_ranges IS 'GPU-side annotations (Kineto gpu_user_annotation): the time span of a CPU annotation projected on a stream.';
COMMENT ON COLUMN gpu_ranges.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN gpu_ranges.rank IS 'Rank (ranks.rank).';
COMMENT ON COLUMN gpu_ranges.range_id IS 'Key within the run (unique with run_id).';
COMMENT ON COLUMN gpu_ranges.device_id IS 'GPU index.';
COMMENT ON COLUMN gpu_ranges.stream_id IS 'Stream the annotation covers.';
COMMENT ON COLUMN gpu_ranges.start_ns IS 'Start on the GPU, ns.';
COMMENT ON COLUMN gpu_ranges.end_ns IS 'End on the GPU, ns.';
COMMENT ON COLUMN gpu_ranges.name IS 'Annotation text.';

CREATE TABLE IF NOT EXISTS threads (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    pid BIGINT NOT NULL,
    tid BIGINT,
    process_name VARCHAR,
    thread_name VARCHAR
);
COMMENT ON TABLE threads IS 'Names of processes and threads, as the profiler recorded them.';
COMMENT ON COLUMN threads.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN threads.rank IS 'Rank (ranks.rank).';
COMMENT ON COLUMN threads.pid IS 'Process id.';
COMMENT ON COLUMN threads.tid IS 'Thread id, NULL for a row that names only the process.';
COMMENT ON COLUMN threads.process_name IS 'Process name.';
COMMENT ON COLUMN threads.thread_name IS 'Thread name.';

CREATE TABLE IF NOT EXISTS steps (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step INTEGER NOT NULL,
    name VARCHAR,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    phase VARCHAR NOT NULL,
    warmup BOOLEAN NOT NULL,
    method VARCHAR NOT NULL,
    draft_passes INTEGER,
    PRIMARY KEY (run_id, rank, step)
);
COMMENT ON TABLE steps IS 'Steps (one model iteration, e.g. one decode token) found by segmentation, per rank.';
COMMENT ON COLUMN steps.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN steps.rank IS 'Rank (ranks.rank).';
COMMENT ON COLUMN steps.step IS 'Step number within the rank, increasing in time: the trace''s own number where its annotations carry one (ProfilerStep#7 is 7, decode_step_3 is 3), else from 0.';
COMMENT ON COLUMN steps.name IS 'Annotation that delimited the step (e.g. ProfilerStep#5), NULL when inferred.';
COMMENT ON COLUMN steps.start_ns IS 'Start of the step on the GPU (first kernel), ns.';
COMMENT ON COLUMN steps.end_ns IS 'End of the step on the GPU (last kernel end), ns.';
COMMENT ON COLUMN steps.phase IS 'decode, prefill or unknown, when the annotation says so.';
COMMENT ON COLUMN steps.warmup IS 'True for warm-up steps, which comparisons skip.';
COMMENT ON COLUMN steps.method IS 'How the step was found, in the words of layers.method: annotation (a range in the trace named as a step: ProfilerStep#N, --step-pattern, or a step-like name such as decode_step_3; steps.name says which; the innermost such ranges are the steps), engine (a serving engine''s step range: vLLM, SGLang, TensorRT-LLM), passes (no step annotation: one forward pass, a run of layers, per step) or whole (the whole trace as one step).';
COMMENT ON COLUMN steps.draft_passes IS 'Speculative decoding: the drafter''s forward passes in the step (the tokens it proposed for this verify), NULL when the run shows no drafter. Its kernels have gpu_activity.role = draft; its layers are not the step''s layers.';

CREATE TABLE IF NOT EXISTS layers (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step INTEGER NOT NULL,
    layer INTEGER NOT NULL,
    name VARCHAR,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    kernels INTEGER NOT NULL,
    method VARCHAR NOT NULL,
    confidence DOUBLE NOT NULL,
    PRIMARY KEY (run_id, rank, step, layer)
);
COMMENT ON TABLE layers IS 'Transformer layer instances found by segmentation: one row per (run, rank, step, layer index).';
COMMENT ON COLUMN layers.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN layers.rank IS 'Rank (ranks.rank).';
COMMENT ON COLUMN layers.step IS 'Step (steps.step).';
COMMENT ON COLUMN layers.layer IS 'Layer index, from the annotation (model.layers.7 -> 7) or in order of time when inferred.';
COMMENT ON COLUMN layers.name IS 'Annotation that named the layer, NULL when inferred.';
COMMENT ON COLUMN layers.start_ns IS 'Start of its first kernel on the GPU, ns.';
COMMENT ON COLUMN layers.end_ns IS 'End of its last kernel on the GPU, ns.';
COMMENT ON COLUMN layers.kernels IS 'Number of GPU kernels assigned to the layer instance.';
COMMENT ON COLUMN layers.method IS 'How the layer was found: annotation (a range in the trace named as a layer, CPU or GPU: model.layers.N or --layer-pattern), graph (CUDA graph node ids mapped to capture-time ranges) or period (repeating kernel sequence).';
COMMENT ON COLUMN layers.confidence IS 'From 0 to 1: 1 for annotations; for period, the share of the layer kernels that match the repeating unit.';

CREATE TABLE IF NOT EXISTS ingest_stats (
    run_id INTEGER NOT NULL,
    rank INTEGER,
    name VARCHAR NOT NULL,
    severity VARCHAR NOT NULL,
    value DOUBLE NOT NULL,
    description VARCHAR NOT NULL
);
COMMENT ON TABLE ingest_stats IS 'What ingest read, kept, skipped and why, as counters (like Perfetto''s stats table).';
COMMENT ON COLUMN ingest_stats.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN ingest_stats.rank IS 'Rank the counter is about, NULL for the whole run.';
COMMENT ON COLUMN ingest_stats.name IS 'Counter name, e.g. kernels, kernels_without_launch, skipped_category.python_function.';
COMMENT ON COLUMN ingest_stats.severity IS 'info (a count), data_loss (something in the trace could not be used) or error.';
COMMENT ON COLUMN ingest_stats.value IS 'The count, or a percentage for names ending in _pct.';
COMMENT ON COLUMN ingest_stats.description IS 'What the counter means, in words.';

-- Precomputed by segmentation (traceview/segment/busy.py) so that the SQL library's interval queries scan
-- instead of sorting every kernel interval: written with steps and layers, replaced when they are.

CREATE TABLE IF NOT EXISTS kernel_busy (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    scope VARCHAR NOT NULL,
    step INTEGER,
    layer INTEGER,
    kernels BIGINT NOT NULL,
    first_start_ns BIGINT NOT NULL,
    last_end_ns BIGINT NOT NULL,
    busy_ns BIGINT NOT NULL,
    comm_ns BIGINT NOT NULL,
    compute_ns BIGINT NOT NULL,
    overlap_ns BIGINT NOT NULL,
    fused_comm_ns BIGINT NOT NULL
);
COMMENT ON TABLE kernel_busy IS 'GPU time of the kernels (kind = kernel) of each rank (every kernel), step and layer instance: what comm_breakdown gives for them. Written by segmentation; read by layer_metrics, step_metrics, step_idle and comm_overlap.';
COMMENT ON COLUMN kernel_busy.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN kernel_busy.rank IS 'Rank (ranks.rank).';
COMMENT ON COLUMN kernel_busy.scope IS 'rank (every kernel of the rank, segmented or not), step (the kernels of one step), layer (the kernels of one layer instance) or draft (the drafter''s kernels of one step of speculative decoding).';
COMMENT ON COLUMN kernel_busy.step IS 'Step (steps.step) for scopes step, layer and draft, else NULL.';
COMMENT ON COLUMN kernel_busy.layer IS 'Layer index (layers.layer) for scope layer, else NULL.';
COMMENT ON COLUMN kernel_busy.kernels IS 'Number of kernels in the scope instance.';
COMMENT ON COLUMN kernel_busy.first_start_ns IS 'Start of its earliest kernel, ns.';
COMMENT ON COLUMN kernel_busy.last_end_ns IS 'End of its latest kernel, ns.';
COMMENT ON COLUMN kernel_busy.busy_ns IS 'Length of the union of its kernel intervals, ns.';
COMMENT ON COLUMN kernel_busy.comm_ns IS 'Length of the union of its comm kernels, ns.';
COMMENT ON COLUMN kernel_busy.compute_ns IS 'Length of the union of its compute kernels, ns.';
COMMENT ON COLUMN kernel_busy.overlap_ns IS 'Length of (comm union ∩ compute union): communication hidden behind computation, ns.';
COMMENT ON COLUMN kernel_busy.fused_comm_ns IS 'Length of the union of its fused_comm kernels (a collective fused with computation in one kernel), ns: neither comm nor compute, so in neither overlap_ns nor exposed communication.';

CREATE TABLE IF NOT EXISTS kernel_gaps (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    scope VARCHAR NOT NULL,
    step INTEGER NOT NULL,
    layer INTEGER,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL
);
COMMENT ON TABLE kernel_gaps IS 'Idle gaps between the merged kernels (kind = kernel) of each step and layer instance: what interval_gaps gives for them. Written by segmentation; read by step_idle and layer_idle_gaps.';
COMMENT ON COLUMN kernel_gaps.run_id IS 'Run (runs.run_id).';
COMMENT ON COLUMN kernel_gaps.rank IS 'Rank (ranks.rank).';
COMMENT ON COLUMN kernel_gaps.scope IS 'step (a gap between the kernels of a step) or layer (between the kernels of a layer instance).';
COMMENT ON COLUMN kernel_gaps.step IS 'Step (steps.step).';
COMMENT ON COLUMN kernel_gaps.layer IS 'Layer index (layers.layer) for scope layer, else NULL.';
COMMENT ON COLUMN kernel_gaps.start_ns IS 'Start of the gap: the latest end of the kernels before it, ns.';
COMMENT ON COLUMN kernel_gaps.end_ns IS 'End of the gap: the start of the next kernel, ns.';
