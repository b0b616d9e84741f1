"""segment_run: steps first, then the layers of each step by one method (see traceview.segment), written
with the busy/gap figures and what makes the result uncertain.

Reads and writes what traceview.segment says; the package holds the options and result types, so the CLI
reads them without loading numpy and pandas.
"""

from __future__ import annotations

import collections
import itertools
import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from ..db import execute_with, has_rows
from . import (
    Method,
    SegmentOptions,
    SegmentResult,
    annotation,
    busy,
    family,
    graph,
    passes,
    period,
    side_streams,
    spec,
    steps,
)

INDUCTOR_INDEX = r"^(triton_[a-z]+_fused_.*)_\d+$"
INDUCTOR_NUMBER = r"^triton_[a-z]+_fused_.*_(\d+)$"  # Inductor numbers the kernels of a compiled graph from 0
# a norm kernel's name (layer_norm, rms_norm, RMSNorm), or an Inductor reduction that fuses an RMSNorm (mean, rsqrt)
NORM_NAME = re.compile(r"norm(?!al)|^triton_(?:per|red)_fused_\w*_mean_\w*_rsqrt", re.IGNORECASE)
CAST_NAME = re.compile(r"copy_kernel|_to_copy")  # a dtype cast's kernel (direct_copy_kernel_cuda, Inductor's _to_copy)
SQUARE_NAME = re.compile(r"pow_tensor_scalar")  # an eager RMSNorm's x.pow(2), when a mean reduce follows it
MEAN_NAME = re.compile(r"MeanOps")  # the mean reduce of that variance
ADD_NAME = re.compile(r"CUDAFunctor_add<")  # an eager residual add (ATen's elementwise add)
COVERAGE_TO_TRUST = 0.5  # share of a step's kernels a method must place for auto to choose it
NEAR_EDGE_SHARE = 0.5  # of the layer-long stretch before the first layer that layers run, for a layer left out there
LOW_CONFIDENCE = 0.8  # an inferred layer instance matching its unit less than this is reported


@dataclass(frozen=True)
class _LayerOutcome:
    """What the layer stage has to report: steps it could not split, annotation ranges it did not trust, steps
    that hold a speculative drafter."""

    failed: int
    enclosing: int
    drafted: int = 0
    apart: int = 0  # kernels on another stream that their inferred layer did not launch (side_streams)


def segment_run(con: duckdb.DuckDBPyConnection, run_id: int, options: SegmentOptions | None = None) -> SegmentResult:
    """Find steps and layers of run `run_id` and write them (inside the caller's transaction)."""
    options = options or SegmentOptions()
    _reset(con, run_id)
    _stage(con, run_id)
    found_steps = steps.find_steps(con, run_id, options.step_pattern)
    _stage_steps(con)
    drafted = spec.find_drafts(con, run_id)
    _mark_drafts(con)
    outcome = _layers(con, run_id, options, drafted)
    _write(con, run_id)
    busy.record(con, run_id)
    result = _result(con, run_id, found_steps, outcome, options)
    _record(con, run_id, result)
    return result


def _reset(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    con.execute("DELETE FROM steps WHERE run_id = ?", [run_id])
    con.execute("DELETE FROM layers WHERE run_id = ?", [run_id])
    con.execute("DELETE FROM ingest_stats WHERE run_id = ? AND name LIKE 'segment.%'", [run_id])
    con.execute(
        """UPDATE gpu_activity SET step = NULL, layer = NULL, role = NULL, draft_pass = NULL
           WHERE run_id = ? AND (step IS NOT NULL OR layer IS NOT NULL OR role IS NOT NULL)""",
        [run_id],
    )


def _stage(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Temp table `_seg_a`: the run's GPU activity with its launch call, an integer code per name (Triton
    kernels that torch.compile numbers per call site, `triton_poi_fused_add_12`, without the number), and that
    number (`inductor_number`, -1 for other kernels)."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _seg_a AS
        SELECT g.rank, g.activity_id, g.kind, g.device_id, g.stream_id, g.start_ns, g.end_ns,
               {_code_sql("g")} AS code,
               coalesce(TRY_CAST(regexp_extract(g.name, $inductor_number, 1) AS INTEGER), -1) AS inductor_number,
               g.correlation_id, g.graph_id, g.graph_node_id,
               g.launch_id, l.pid AS l_pid, l.tid AS l_tid, l.start_ns AS l_start, l.name AS l_name
        FROM gpu_activity g LEFT JOIN launches l ON l.run_id = g.run_id AND l.launch_id = g.launch_id
        WHERE g.run_id = $run
        """,
        {"run": run_id, "inductor": INDUCTOR_INDEX, "inductor_number": INDUCTOR_NUMBER},
    )


def _stage_steps(con: duckdb.DuckDBPyConnection) -> None:
    """Temp table `_seg_k`: the activities that fell in a step, with the step."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_k AS
        SELECT a.*, o.step FROM _seg_a a JOIN _seg_step_of o USING (activity_id)
        """
    )


def _mark_drafts(con: duckdb.DuckDBPyConnection) -> None:
    """`_seg_k` with the drafter's pass of each activity (NULL for the target's and every activity of a step
    without a drafter): the layers are the target's, found among the other activities. Without a drafter the
    column is added, all NULL, without copying `_seg_k` (1.1 CPU-s for the 3 M activities of the 1 GB nsys bench
    export)."""
    if not has_rows(con, "SELECT 1 FROM _seg_draft_of"):
        kind = con.execute(
            "SELECT data_type FROM duckdb_columns() WHERE database_name = 'temp' AND table_name = '_seg_draft_of' "
            "AND column_name = 'draft_pass'"
        ).fetchall()[0][0]
        con.execute(f"ALTER TABLE _seg_k ADD COLUMN draft_pass {kind}")
        return
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_k AS
        SELECT k.*, d.draft_pass FROM _seg_k k LEFT JOIN _seg_draft_of d USING (activity_id)
        """
    )


def _layers(con: duckdb.DuckDBPyConnection, run_id: int, options: SegmentOptions, drafted: int) -> _LayerOutcome:
    """Fill `_seg_layer_of(activity_id, layer, method, confidence, name, rank, step, kind, start_ns, end_ns)`: the
    activity's columns of `_seg_k` come along, so that writing the layers joins nothing more. The drafter's
    activities are in no layer."""
    con.execute("DROP TABLE IF EXISTS _seg_cpu_events")
    named = annotation.layer_names_table(con, run_id, options.layer_pattern)
    enclosing = annotation.timelines(con, run_id) if named else 0
    if named and options.method in (Method.auto, Method.annotation):
        annotation.assign(con)
        if drafted:
            _target_layers_from_zero(con)
    else:
        con.execute("CREATE OR REPLACE TEMP TABLE _seg_ann (activity_id BIGINT, layer INTEGER, name VARCHAR)")
    if options.method in (Method.auto, Method.graph):
        graph.assign(con, run_id)
    else:
        con.execute("CREATE OR REPLACE TEMP TABLE _seg_graph (activity_id BIGINT, layer INTEGER, name VARCHAR)")
    _choose_methods(con, options.method)
    _period_layers(con, run_id, options.layers)
    failed = _fall_back(con, options.method)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _seg_layer_of AS
        SELECT a.activity_id, a.layer, 'annotation' AS method, 1.0 AS confidence, a.name, {_ACTIVITY}
        FROM _seg_ann a JOIN _seg_k k USING (activity_id) JOIN _seg_choice c USING (rank, step)
        WHERE c.method = 'annotation' AND k.draft_pass IS NULL
        UNION ALL
        SELECT g.activity_id, g.layer, 'graph', 1.0, g.name, {_ACTIVITY}
        FROM _seg_graph g JOIN _seg_k k USING (activity_id) JOIN _seg_choice c USING (rank, step)
        WHERE c.method = 'graph' AND k.draft_pass IS NULL
        UNION ALL
        SELECT p.activity_id, p.layer, 'period', p.confidence, NULL, {_ACTIVITY}
        FROM _seg_period p JOIN _seg_k k USING (activity_id) JOIN _seg_choice c USING (rank, step)
        WHERE c.method = 'period' AND k.draft_pass IS NULL
        """
    )
    return _LayerOutcome(failed, enclosing, drafted, side_streams.set_apart(con))


def _target_layers_from_zero(con: duckdb.DuckDBPyConnection) -> None:
    """In a run with a drafter, the annotated layers that hold the target's kernels numbered from 0 in their order:
    the drafter's own layer list (`draft.layers.N`) took the first indices if it ran first (annotation.py numbers
    each list after the one before), and its kernels are in no layer."""
    con.execute(
        """
        UPDATE _seg_ann a SET layer = r.layer
        FROM (
            SELECT layer AS old, (dense_rank() OVER (ORDER BY layer) - 1)::INTEGER AS layer
            FROM (SELECT DISTINCT a.layer FROM _seg_ann a JOIN _seg_k k USING (activity_id) WHERE k.draft_pass IS NULL)
        ) r
        WHERE a.layer = r.old
        """
    )


# The columns of `_seg_k` (alias k) that _seg_layer_of carries for _write.
_ACTIVITY = "k.rank, k.step, k.kind, k.start_ns, k.end_ns"


def _choose_methods(con: duckdb.DuckDBPyConnection, method: Method) -> None:
    """Temp table `_seg_choice(rank, step, method, by_annotation)`: the layer method of each step."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_choice AS
        WITH per_step AS (
            SELECT k.rank, k.step, count(*) AS kernels,
                   count(a.activity_id) AS by_annotation, count(g.activity_id) AS by_graph
            FROM _seg_k k
            LEFT JOIN _seg_ann a USING (activity_id) LEFT JOIN _seg_graph g USING (activity_id)
            WHERE k.kind = 'kernel' AND k.draft_pass IS NULL
            GROUP BY ALL
        )
        SELECT rank, step, coalesce($forced,
            CASE WHEN by_annotation >= $trust * kernels THEN 'annotation'
                 WHEN by_graph >= $trust * kernels THEN 'graph'
                 ELSE 'period' END) AS method,
            by_annotation
        FROM per_step
        """,
        {"forced": None if method is Method.auto else method.value, "trust": COVERAGE_TO_TRUST},
    )


def _fall_back(con: duckdb.DuckDBPyConnection, method: Method) -> int:
    """Steps where period found nothing: annotation (if it placed any kernel, under auto), else no layers."""
    if method is Method.auto:
        con.execute(
            """
            UPDATE _seg_choice c SET method = 'annotation'
            WHERE method = 'period' AND by_annotation > 0
              AND NOT EXISTS (SELECT 1 FROM _seg_period_steps p WHERE p.rank = c.rank AND p.step = c.step)
            """
        )
    return con.execute(
        """
        SELECT count(*) FROM _seg_choice c
        WHERE method = 'period'
          AND NOT EXISTS (SELECT 1 FROM _seg_period_steps p WHERE p.rank = c.rank AND p.step = c.step)
        """
    ).fetchall()[0][0]


def _period_layers(con: duckdb.DuckDBPyConnection, run_id: int, expected: int | None) -> None:
    """Temp table `_seg_period(activity_id, layer, confidence)` for the steps whose method is period.

    The repeating unit is searched among the kernels of each step's main stream (the stream with most
    kernels), in execution order; identical steps are solved once. Kernels of other streams, memory copies
    and sets join the layer in whose window (from its first kernel to the next layer's first kernel) they
    start; the main stream's kernels between two layers are placed by `_windows`.
    """
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_main AS
        WITH k AS (
            SELECT k.* FROM _seg_k k JOIN _seg_choice c USING (rank, step)
            WHERE c.method = 'period' AND k.draft_pass IS NULL
        ), streams AS (
            SELECT rank, step, stream_id, count(*) AS n FROM k WHERE kind = 'kernel' GROUP BY ALL
        )
        SELECT rank, step, arg_max(stream_id, n) AS stream_id FROM streams GROUP BY ALL
        """
    )
    data = con.execute(
        """
        SELECT k.rank, k.step, k.activity_id, k.code, k.inductor_number,
               (k.rank, k.step) IN (SELECT (rank, step) FROM _seg_k WHERE draft_pass IS NOT NULL) AS verify
        FROM _seg_k k JOIN _seg_main m
             ON k.rank = m.rank AND k.step = m.step AND k.stream_id IS NOT DISTINCT FROM m.stream_id
        WHERE k.kind = 'kernel' AND k.draft_pass IS NULL
        ORDER BY k.rank, k.step, k.start_ns, k.activity_id
        """
    ).fetchnumpy()
    names = kernel_names(con, run_id)
    frame, solved = _solve_steps(data, kernel_families(names), NormKernels.of(names), expected)
    execute_with(
        con, "_seg_period_frame", frame, "CREATE OR REPLACE TEMP TABLE _seg_period AS SELECT * FROM _seg_period_frame"
    )
    execute_with(
        con,
        "_seg_solved_frame",
        solved,
        "CREATE OR REPLACE TEMP TABLE _seg_period_steps AS SELECT * FROM _seg_solved_frame",
    )
    con.execute(
        """
        INSERT INTO _seg_period
        WITH windows AS (
            SELECT k.rank, k.step, p.layer, min(k.start_ns) AS lo, max(k.end_ns) AS hi, any_value(p.confidence) AS conf
            FROM _seg_period p JOIN _seg_k k USING (activity_id) GROUP BY ALL
        ), until AS (
            SELECT *, coalesce(lead(lo) OVER (PARTITION BY rank, step ORDER BY lo), hi) AS until FROM windows
        )
        SELECT k.activity_id, w.layer, w.conf
        FROM (SELECT k.* FROM _seg_k k LEFT JOIN _seg_main m
                ON k.rank = m.rank AND k.step = m.step AND k.stream_id IS NOT DISTINCT FROM m.stream_id
              WHERE k.activity_id NOT IN (SELECT activity_id FROM _seg_period) AND k.draft_pass IS NULL
                AND (k.rank, k.step) IN (SELECT (rank, step) FROM _seg_period_steps)
                AND NOT (k.kind = 'kernel' AND m.rank IS NOT NULL)) k
        ASOF JOIN until w ON k.rank = w.rank AND k.step = w.step AND k.start_ns >= w.lo
        WHERE k.start_ns < w.until
        """
    )


def _code_sql(alias: str) -> str:
    """The integer code of an activity's name (`alias`.kind, `alias`.name): Inductor's call-site number dropped."""
    return f"(hash({alias}.kind || ':' || regexp_replace({alias}.name, $inductor, '\\1')) >> 1)::BIGINT"


def kernel_names(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[int, str]:
    """Code -> one name of every kernel of the run (the codes of names that differ by Inductor's number only are
    one)."""
    rows = con.execute(
        f"""SELECT {_code_sql("k")}, any_value(k.name)
            FROM (SELECT DISTINCT kind, name FROM gpu_activity WHERE run_id = $run AND kind = 'kernel') k
            GROUP BY ALL""",
        {"run": run_id, "inductor": INDUCTOR_INDEX},
    ).fetchall()
    return {code: name or "" for code, name in rows}


def kernel_families(names: dict[int, str]) -> dict[int, int]:
    """Code -> family id of every kernel name (segment/family.py)."""
    ids: dict[str, int] = {}
    return {code: ids.setdefault(family.kernel_family(name), len(ids)) for code, name in names.items()}


def codes_named(names: dict[int, str], pattern: re.Pattern[str]) -> set[int]:
    """Codes of the kernels whose name `pattern` finds (NORM_NAME, CAST_NAME, ...)."""
    return {code for code, name in names.items() if pattern.search(name)}


@dataclass(frozen=True)
class NormKernels:
    """The codes of the kernels whose names tell where a norm is: named norm kernels (layer_norm, rms_norm), and an
    eager RMSNorm (its square, `pow_tensor_scalar`, right before its mean reduce; an eager LayerNorm's mean and
    subtraction before that) where a residual add comes just before it or before the casts it opens with (the norm
    of a layer's input or of its channel mixer, not a QK norm after a projection nor a gated norm inside a mixer);
    and the dtype casts a norm may open with
    (period.norm_openings)."""

    norms: set[int]
    squares: set[int]
    means: set[int]
    adds: set[int]
    casts: set[int]

    @classmethod
    def of(cls, names: dict[int, str]) -> NormKernels:
        patterns = (NORM_NAME, SQUARE_NAME, MEAN_NAME, ADD_NAME, CAST_NAME)
        return cls(*(codes_named(names, pattern) for pattern in patterns))

    def openings(self, codes: np.ndarray) -> np.ndarray:
        """Per kernel of `codes` (one step's), whether a norm opens there."""
        casts = np.isin(codes, list(self.casts))
        named = period.norm_openings(codes, np.isin(codes, list(self.norms)), casts)
        means, adds = np.isin(codes, list(self.means)), np.isin(codes, list(self.adds))
        square = np.flatnonzero(np.isin(codes[:-1], list(self.squares)) & means[1:])
        centred = (square >= 2) & means[np.maximum(square - 2, 0)] & adds[np.maximum(square - 1, 0)]
        at = square - 2 * centred  # an eager LayerNorm's variance comes after its mean and the subtraction
        opening = at - period.casts_before(at, casts)
        residual = (opening > 0) & adds[np.maximum(opening - 1, 0)]
        residual[:1] = True  # the stack's first input norm comes after the embedding, not an add
        eager = np.zeros(len(codes), dtype=bool)
        eager[at[residual]] = True
        return named | period.norm_openings(codes, eager, casts)


def families_of(codes: np.ndarray, families: dict[int, int]) -> np.ndarray:
    """The family id of each kernel of a code sequence (looked up once per distinct code)."""
    distinct, inverse = np.unique(codes, return_inverse=True)
    return np.array([families.get(int(c), -1) for c in distinct], dtype=np.int64)[inverse.reshape(-1)]


def _solve_steps(
    data: dict[str, np.ndarray], families: dict[int, int], norms: NormKernels, expected: int | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run period.find_layers on each step's code sequence (once per distinct sequence), toward `expected` layers
    per forward pass when the user gave the count; a step that holds a drafter is the target's verify pass
    (period.verify_pass). When the layers of some step are its compiled graphs (layers compiled one by one), so are
    those of the steps whose found layers were out of phase with theirs (a step cut into its prologue)."""
    rank, step = np.asarray(data["rank"]), np.asarray(data["step"])
    ids, codes = np.asarray(data["activity_id"], dtype=np.int64), np.asarray(data["code"], dtype=np.int64)
    verify, numbers = np.asarray(data["verify"], dtype=bool), np.asarray(data["inductor_number"], dtype=np.int64)
    family_ids = families_of(codes, families)
    change = np.flatnonzero((np.diff(rank) != 0) | (np.diff(step) != 0)) + 1
    edges = np.concatenate(([0], change, [len(ids)])) if len(ids) else np.array([0])
    layer = np.full(len(ids), -1, dtype=np.int64)
    confidence = np.zeros(len(ids))
    steps = [(lo, hi, period.graph_openings(numbers[lo:hi])) for lo, hi in itertools.pairwise(edges)]
    numbered = numbers >= 0
    adds, casts = np.isin(codes, list(norms.adds)), np.isin(codes, list(norms.casts))

    def solve(lo: int, hi: int, opens: np.ndarray, graphs: bool) -> period.PeriodFit | None:
        fit = period.find_layers(
            codes[lo:hi],
            families=family_ids[lo:hi],
            expected=expected,
            opens=opens,
            graphs=graphs,
            whole_pass=True,
            numbered=numbered[lo:hi],
        )
        eager = fit is not None and not fit.graphs  # layers that are compiled graphs keep the graphs' boundaries
        norm_opens = norms.openings(codes[lo:hi]) if eager else np.zeros(hi - lo, dtype=bool)
        closing_casts = casts[lo:hi] & ~norm_opens  # a cast that opens a norm opens the next layer
        fit = period.with_residual_adds_closing(codes[lo:hi], fit, adds[lo:hi], closing_casts) if eager else fit
        normed = period.at_norms(codes[lo:hi], fit, norm_opens) if eager else fit
        # layers moved to their norms: a unit of several kinds found out of phase now splits where its layers meet
        fit = normed if normed is fit else period.split_alternating(period.dense(codes[lo:hi]), normed)
        fit = fit if fit is None or fit.graphs else period.with_gaps_as_layers(codes[lo:hi], fit)
        fit = period.with_known_cuts(codes[lo:hi], fit)
        fit = period.with_blocks_before_their_layers(codes[lo:hi], fit)
        fit = period.without_kernels_between(codes[lo:hi], period.with_doubled_opening(codes[lo:hi], fit))
        fit = period.with_first_layer_whole(codes[lo:hi], period.with_edge_copies(codes[lo:hi], fit))
        fit = period.with_closing_block(codes[lo:hi], fit)
        fit = period.as_single_mixer_blocks(codes[lo:hi], fit, norm_opens, adds[lo:hi]) if eager else fit
        return period.verify_pass(codes[lo:hi], fit, spec.MIN_VERIFY_LAYERS) if verify[lo] else fit

    cache: dict[bytes, period.PeriodFit | None] = {}
    keys = [
        codes[lo:hi].tobytes() + opens.tobytes() + numbered[lo:hi].tobytes() + bytes(verify[lo : lo + 1])
        for lo, hi, opens in steps
    ]
    for key, (lo, hi, opens) in zip(keys, steps, strict=True):
        if key not in cache:
            cache[key] = solve(lo, hi, opens, graphs=False)
    if any(fit is not None and fit.graphs for fit in cache.values()):
        for key, (lo, hi, opens) in zip(keys, steps, strict=True):
            if opens.any() and not (cache[key] is not None and cache[key].graphs):
                cache[key] = solve(lo, hi, opens, graphs=True)
    fits = _in_phase_with_other_steps(codes, rank, steps, [cache[key] for key in keys])
    solved: list[tuple[int, int, int]] = []
    for fit, (lo, _, _) in zip(fits, steps, strict=True):
        if fit is None:
            continue
        solved.append((int(rank[lo]), int(step[lo]), fit.period))
        for index, (span, end) in enumerate(_windows(fit.layers)):  # one iteration per layer
            layer[lo + span.start : lo + end] = index
            confidence[lo + span.start : lo + end] = span.confidence
    keep = layer >= 0
    frame = pd.DataFrame({"activity_id": ids[keep], "layer": layer[keep], "confidence": confidence[keep]})
    solved_frame = pd.DataFrame(solved, columns=["rank", "step", "period"]).astype("int64")
    return frame, solved_frame


def _in_phase_with_other_steps(
    codes: np.ndarray,
    rank: np.ndarray,
    steps: list[tuple[int, int, np.ndarray]],
    fits: list[period.PeriodFit | None],
) -> list[period.PeriodFit | None]:
    """Each step's fit, its layers moved to open as most of its rank's layers open where none of them opens with the
    kernel most of them open with (period.in_phase_with); compiled graphs open where their graphs do and stay. The
    usual opening and closing (period.usual_edge) are made only for a rank with such a step: most traces have none."""
    layers: dict[int, list[np.ndarray]] = {}
    for fit, (lo, _, _) in zip(fits, steps, strict=True):
        if fit is not None and not fit.graphs:
            layers.setdefault(int(rank[lo]), []).extend(codes[lo + s.start : lo + s.end] for s in fit.layers)
    usual_first = {r: collections.Counter(int(k[0]) for k in kinds).most_common(1)[0][0] for r, kinds in layers.items()}
    edges: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    moved = []
    for fit, (lo, hi, _) in zip(fits, steps, strict=True):
        r = int(rank[lo])
        if fit is None or fit.graphs or any(codes[lo + s.start] == usual_first[r] for s in fit.layers):
            moved.append(fit)
            continue
        if r not in edges:
            edges[r] = (period.usual_edge(layers[r], last=False), period.usual_edge(layers[r], last=True))
        moved.append(period.in_phase_with(codes[lo:hi], fit, *edges[r]))
    return moved


def _windows(layers: tuple[period.LayerSpan, ...]) -> list[tuple[period.LayerSpan, int]]:
    """Each layer and where its kernels end: at the next layer's start when the kernels between them are
    period.EXTENDED_BY or more (a part of the layer its unit left out), else at its own end (the model's own work
    between two layer calls, fewer kernels: RWKV halving its hidden state), which stays in no layer."""
    ends = [
        following.start if following.start - span.end >= period.EXTENDED_BY else span.end
        for span, following in itertools.pairwise(layers)
    ]
    return list(zip(layers, [*ends, layers[-1].end] if layers else [], strict=True))


def _write(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """steps and layers rows, and the step/layer columns of gpu_activity (a layer needs at least one kernel)."""
    params = {"run": run_id}
    con.execute(
        """
        DELETE FROM _seg_layer_of
        WHERE (rank, step, layer) NOT IN (SELECT DISTINCT (rank, step, layer) FROM _seg_layer_of WHERE kind = 'kernel')
        """
    )
    # One UPDATE for both columns: every activity in a layer is in a step (_seg_layer_of comes from _seg_k). With
    # one UPDATE each (and the role's run without a drafter), _write took 1.7 CPU-s for the 3 M kernels of the 1 GB
    # nsys bench export, 1.35 now.
    con.execute(
        """UPDATE gpu_activity g SET step = o.step, layer = l.layer
           FROM _seg_step_of o LEFT JOIN _seg_layer_of l USING (activity_id)
           WHERE g.run_id = $run AND g.activity_id = o.activity_id""",
        params,
    )
    if has_rows(con, "SELECT 1 FROM _seg_k WHERE draft_pass IS NOT NULL"):
        con.execute(
            """UPDATE gpu_activity g SET role = CASE WHEN k.draft_pass IS NULL THEN 'target' ELSE 'draft' END,
                                          draft_pass = k.draft_pass
               FROM _seg_k k
               WHERE g.run_id = $run AND g.activity_id = k.activity_id""",
            params,
        )
    con.execute(
        """
        INSERT INTO steps
        WITH spans AS (SELECT rank, step, min(start_ns) AS lo, max(end_ns) AS hi FROM _seg_k GROUP BY ALL)
        SELECT $run, s.rank, s.step, s.name, coalesce(p.lo, s.cpu_start), coalesce(p.hi, s.cpu_end), s.phase,
               s.warmup, s.method,
               CASE WHEN EXISTS (SELECT 1 FROM _seg_draft_of) THEN coalesce(d.passes, 0) END
        FROM _seg_steps s LEFT JOIN spans p USING (rank, step)
        LEFT JOIN (SELECT rank, step, count(DISTINCT draft_pass) AS passes FROM _seg_k
                   WHERE draft_pass IS NOT NULL GROUP BY ALL) d USING (rank, step)
        WHERE coalesce(p.lo, s.cpu_start) IS NOT NULL
        """,
        params,
    )
    con.execute(
        """
        INSERT INTO layers
        SELECT $run, rank, step, layer, arg_min(name, length(name)), min(start_ns), max(end_ns),
               count(*) FILTER (kind = 'kernel'), any_value(method), round(min(confidence), 4)
        FROM _seg_layer_of
        GROUP BY rank, step, layer
        """,
        params,
    )


def _result(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    found: steps.StepOutcome,
    outcome: _LayerOutcome,
    options: SegmentOptions,
) -> SegmentResult:
    layers, per_step, methods, confidence = con.execute(
        """
        SELECT count(*), (SELECT median(n) FROM (SELECT count(*) AS n FROM layers WHERE run_id = $run
                                                  GROUP BY rank, step)),
               list(DISTINCT method ORDER BY method), median(confidence)
        FROM layers WHERE run_id = $run
        """,
        {"run": run_id},
    ).fetchall()[0]
    notes = [_steps_note(con, run_id, found)]
    if "passes" in found.methods and outcome.drafted:
        notes.append("no step annotation: each step is one verify pass of the target and the drafter's passes by it")
    elif "passes" in found.methods:
        notes.append("no step annotation: each step is one forward pass, a run of layers found in the kernel sequence")
    if layers:
        how = ", ".join(methods)
        inferred = " (inferred from the repeating kernel sequence)" if "period" in methods else ""
        notes.append(f"layers found by {how}{inferred}: {per_step:g} per step, median confidence {confidence:.2f}")
    if not layers and not outcome.failed and found.steps:
        notes.append(f"no layers found{_why_no_layers(con, options.method)}")
    if options.layers:
        notes.append(f"{options.layers} layers per forward pass expected ({options.layers_from})")
    if outcome.drafted:
        notes.append(_draft_note(con, run_id, outcome.drafted))
    outside = _kernels_outside_steps(con, run_id)
    if outside and _fewer_than_a_layer(con, run_id, outside):
        notes.append(_outside_steps(con, run_id, outside))
    if outcome.apart:
        notes.append(
            f"{outcome.apart} kernel(s) on another stream overlapped a layer replayed from a CUDA graph but were "
            "launched apart from it: in no layer (README: Kernels on other streams)"
        )
    return SegmentResult(
        run_id=run_id,
        steps=found.steps,
        step_methods=found.methods,
        layers=layers,
        layers_per_step=float(per_step) if per_step is not None else None,
        methods=tuple(methods or ()),
        confidence=float(confidence) if confidence is not None else None,
        notes=tuple(notes),
        warnings=tuple([*_nested_steps(found), *_doubts(con, run_id, outcome), *_against_hint(con, run_id, options)]),
    )


def _draft_note(con: duckdb.DuckDBPyConnection, run_id: int, drafted: int) -> str:
    """What the steps of speculative decoding hold: the drafter's passes per step, beside the target's layers."""
    low, median, high = con.execute(
        "SELECT min(draft_passes), median(draft_passes), max(draft_passes) FROM steps WHERE run_id = ?", [run_id]
    ).fetchall()[0]
    spread = f"{median:g}" if low == high else f"{median:g} (from {low} to {high})"
    return (
        f"speculative decoding: {drafted} steps hold a drafter's forward passes before or after the target's "
        f"verify, {spread} per step; the layers are the target's, the drafter's kernels are role 'draft'"
    )


def _steps_note(con: duckdb.DuckDBPyConnection, run_id: int, found: steps.StepOutcome) -> str:
    """`N steps found by annotation (ProfilerStep#N)`. A step range found by its name is an annotation whichever
    rule matched it (ProfilerStep#N; a step-like name such as nsys's decode_step_N; --step-pattern), as in
    `steps.method`, shown by its name's shape, so that the same kind of range reads alike from every profiler; and
    when no name says decode or prefill, that the phase is unknown for that reason (the nsys sample says
    decode_step_N, its Kineto twin only ProfilerStep#N)."""
    if not found.steps:
        return _why_no_steps(con)
    named = con.execute(
        r"""SELECT regexp_replace(min(name), '\d+', 'N', 'g'), bool_and(phase = 'unknown') FROM steps
            WHERE run_id = ? AND method = 'annotation' HAVING count(*) > 0""",
        [run_id],
    ).fetchall()
    shape = f"annotation ({named[0][0]})" if named else "annotation"
    how = ", ".join(shape if method == "annotation" else method for method in found.methods)
    unknown = bool(named) and named[0][1]
    return f"{found.steps} steps found by {how}" + (
        "; phase unknown: their names say neither decode nor prefill" if unknown else ""
    )


def _nested_steps(found: steps.StepOutcome) -> list[str]:
    """One line when step ranges that hold several step ranges were set aside: the ranges inside are the steps."""
    if not found.holders:
        return []
    return [
        f"{len(found.holders)} step range(s) hold several step ranges each ({found.holders[0]}): not steps; the "
        "ranges inside them are"
    ]


def _why_no_steps(con: duckdb.DuckDBPyConnection) -> str:
    if not has_rows(con, "SELECT 1 FROM _seg_a WHERE kind = 'kernel'"):
        return "no steps found: the trace holds no GPU kernels"
    return "no steps found: no step range (ProfilerStep#N, an engine's, or --step-pattern) and no forward pass"


def _why_no_layers(con: duckdb.DuckDBPyConnection, method: Method) -> str:
    """`: the reason`, when the method the user forced found nothing."""
    if method is Method.graph:
        return f": {graph.why_none(con)}"
    if method is Method.annotation:
        return ": no kernel ran inside a layer range (model.layers.N, or --layer-pattern)"
    return ""


def _against_hint(con: duckdb.DuckDBPyConnection, run_id: int, options: SegmentOptions) -> list[str]:
    """A line when the user's layer count per forward pass and the layers found per step disagree."""
    if not options.layers:
        return []
    counts = con.execute("SELECT count(*) FROM layers WHERE run_id = ? GROUP BY rank, step", [run_id]).fetchall()
    off = sorted({n for (n,) in counts if n % options.layers})
    expected = f"{options.layers} layers per forward pass expected ({options.layers_from})"
    glued = _passes_back_to_back(con, run_id, options.layers) if counts and not off else 0
    if glued:
        return [
            f"{expected}, but {glued} step(s) hold several passes' layers back to back, with nothing between the "
            "passes: the glue between forward passes (LM head, sampling, embedding) is inside a layer there, so "
            "those steps are likely several steps (annotate the steps, or check the count)"
        ]
    if counts and not off:
        return []
    found = ", ".join(map(str, off)) if counts else "none"
    return [
        f"{expected}, but steps hold {found}: the layer boundaries could not be made to agree (annotate the layers "
        "with traceview.capture, or check the count)"
    ]


def _passes_back_to_back(con: duckdb.DuckDBPyConnection, run_id: int, layers: int) -> int:
    """The steps that hold more than `layers` layers (several forward passes) without a kernel outside them
    between their first layer and their last."""
    return con.execute(
        """
        WITH several AS (SELECT rank, step, min(start_ns) AS lo, max(start_ns) AS hi FROM layers
                         WHERE run_id = $run GROUP BY ALL HAVING count(*) > $layers)
        SELECT count(*) FROM several s
        WHERE NOT EXISTS (SELECT 1 FROM gpu_activity g
                          WHERE g.run_id = $run AND g.kind = 'kernel' AND g.rank = s.rank AND g.step = s.step
                            AND g.layer IS NULL AND g.start_ns > s.lo AND g.start_ns < s.hi)
        """,
        {"run": run_id, "layers": layers},
    ).fetchall()[0][0]


def _doubts(con: duckdb.DuckDBPyConnection, run_id: int, outcome: _LayerOutcome) -> list[str]:
    """What makes the segmentation uncertain, one line each (the CLI prints them as warnings)."""
    outside_steps, varying, low, late = con.execute(
        """
        SELECT (SELECT count(*) FROM gpu_activity WHERE run_id = $run AND kind = 'kernel' AND step IS NULL),
               (SELECT string_agg(n || ' layers in ' || steps || ' step(s)', ', ' ORDER BY steps DESC, n)
                FROM (SELECT n, count(*) AS steps FROM (SELECT count(*) AS n FROM layers WHERE run_id = $run
                      GROUP BY rank, step) GROUP BY n)
                HAVING count(*) > 1),
               (SELECT count(*) FROM layers WHERE run_id = $run AND method = 'period' AND confidence < $low),
               (SELECT count(*) FROM _seg_a WHERE start_ns - l_start > $delay)
        """,
        {"run": run_id, "low": LOW_CONFIDENCE, "delay": steps.MAX_LAUNCH_DELAY_NS},
    ).fetchall()[0]
    doubts = []
    if outcome.failed:
        doubts.append(f"no repeating kernel structure in {outcome.failed} step(s): no layers written for them")
    if outcome.enclosing:
        doubts.append(
            f"{outcome.enclosing} layer range(s) ignored: they enclose other layers' ranges (a range left open?)"
        )
    if varying:
        doubts.append(f"steps differ in their number of layers: {varying}")
    if low:
        doubts.append(f"{low} inferred layer instance(s) match the repeating unit poorly (< {LOW_CONFIDENCE})")
    if outside_steps and not _fewer_than_a_layer(con, run_id, outside_steps):
        doubts.append(_outside_steps(con, run_id, outside_steps))
    if late:
        doubts.append(
            f"{late} GPU activities started more than {steps.MAX_LAUNCH_DELAY_NS // 10**9} s after their launch call "
            "(a clock jump or damaged times?): left out of every step and layer"
        )
    return doubts + _steps_ending_inside_a_layer(con, run_id) + _several_passes(con, run_id) + _structure_doubts(con)


def _steps_ending_inside_a_layer(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    """A line when some steps end inside an inferred layer: a forward pass ends with its final norm and LM head
    (and a decode step with the sampling) after its last layer, so a layer that holds a step's last kernel holds
    them too (whole forward passes found as layers, or layers found out of phase)."""
    (count,) = con.execute(
        """
        SELECT count(*) FROM (
            SELECT arg_max(g.layer IS NOT NULL, (g.start_ns, g.correlation_id)) AS inside FROM gpu_activity g
            WHERE g.run_id = $run AND g.kind = 'kernel' AND g.step IS NOT NULL
              AND (g.rank, g.step) IN (SELECT (rank, step) FROM layers WHERE run_id = $run AND method = 'period')
            GROUP BY g.rank, g.step)
        WHERE inside
        """,
        {"run": run_id},
    ).fetchall()[0]
    if not count:
        return []
    return [
        f"in {count} step(s) the last kernel is inside an inferred layer: a forward pass ends with its final norm "
        "and LM head after its last layer, so that layer likely holds them, or whole forward passes (give "
        "--layers N, or annotate the layers with traceview.capture)"
    ]


def _several_passes(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    """A line when some inferred steps hold the glue between two forward passes inside a layer: of the kernels a
    step runs before its first layer and after its last (the embedding, the final norm, LM head and sampling),
    those fewer than a quarter of its layers run (passes.RARE_IN_LAYERS) are the glue's, and a layer that runs half
    of them or more (at least two), the step's first kernel among them, holds the end of one pass and the start of
    the next (a block that some layers run beside their own, such as Zamba's shared attention computing positions
    again, runs some of the kernels around the layers, not what opens a pass: the previous token's sampling, the
    embedding)."""
    (count,) = con.execute(
        """
        WITH lk AS (SELECT k.rank, k.step, k.code, k.start_ns, l.layer
                    FROM _seg_k k LEFT JOIN _seg_layer_of l USING (activity_id)
                    WHERE k.kind = 'kernel' AND (k.rank, k.step) IN (
                        SELECT (rank, step) FROM steps WHERE run_id = $run AND method IN ('passes', 'whole')
                                                             AND coalesce(draft_passes, 0) = 0)),
        bounds AS (SELECT rank, step, min(start_ns) AS lo, max(start_ns) AS hi, count(DISTINCT layer) AS layers
                   FROM lk WHERE layer IS NOT NULL GROUP BY ALL),
        ran AS (SELECT rank, step, code, count(DISTINCT layer) AS layers FROM lk WHERE layer IS NOT NULL GROUP BY ALL),
        glue AS (SELECT DISTINCT lk.rank, lk.step, lk.code
                 FROM lk JOIN bounds b USING (rank, step) LEFT JOIN ran r USING (rank, step, code)
                 WHERE (lk.start_ns < b.lo OR lk.start_ns > b.hi) AND coalesce(r.layers, 0) < $rare * b.layers),
        kinds AS (SELECT rank, step, count(*) AS n FROM glue GROUP BY ALL),
        opening AS (SELECT rank, step, arg_min(code, start_ns) AS first FROM lk GROUP BY ALL),
        holding AS (SELECT lk.rank, lk.step, lk.layer, count(DISTINCT lk.code) AS held,
                           bool_or(lk.code = o.first) AS opens
                    FROM lk JOIN glue USING (rank, step, code) JOIN opening o USING (rank, step)
                    WHERE lk.layer IS NOT NULL GROUP BY ALL)
        SELECT count(DISTINCT (rank, step)) FROM holding JOIN kinds USING (rank, step)
        WHERE opens AND held >= greatest(2, n / 2)
        """,
        {"run": run_id, "rare": passes.RARE_IN_LAYERS},
    ).fetchall()[0]
    if not count:
        return []
    return [
        f"{count} step(s) hold layers that run most of what the step runs only before its first layer and after its "
        "last (the embedding, the LM head, the sampling): such a step likely holds several forward passes, the "
        "glue between them inside a layer (give --layers N, or annotate the steps)"
    ]


def _kernels_outside_steps(con: duckdb.DuckDBPyConnection, run_id: int) -> int:
    return con.execute(
        "SELECT count(*) FROM gpu_activity WHERE run_id = ? AND kind = 'kernel' AND step IS NULL", [run_id]
    ).fetchall()[0][0]


def _fewer_than_a_layer(con: duckdb.DuckDBPyConnection, run_id: int, count: int) -> bool:
    """Whether `count` kernels are fewer than the layers' median: kernels outside every step that could not be a
    layer left out (a stray copy or sampling kernel between CUDA graph replays) are a note, not a warning."""
    median = con.execute("SELECT median(kernels) FROM layers WHERE run_id = ?", [run_id]).fetchall()[0][0]
    return median is not None and count < median


def _outside_steps(con: duckdb.DuckDBPyConnection, run_id: int, count: int) -> str:
    """`N kernel(s) outside every step (B before the first, M between steps, A after the last)`, against the steps
    of each kernel's rank: kernels between steps (inside a step range that was not taken as a step, such as an
    outer ProfilerStep around the steps of a second profiler) are not said to lie before or after them all."""
    before, between, after = con.execute(
        """
        SELECT count(*) FILTER (g.start_ns < b.first_ns), count(*) FILTER (g.start_ns BETWEEN b.first_ns AND b.last_ns),
               count(*) FILTER (g.start_ns > b.last_ns)
        FROM gpu_activity g
        JOIN (SELECT rank, min(start_ns) AS first_ns, max(end_ns) AS last_ns FROM steps
              WHERE run_id = $run GROUP BY rank) b USING (rank)
        WHERE g.run_id = $run AND g.kind = 'kernel' AND g.step IS NULL
        """,
        {"run": run_id},
    ).fetchall()[0]
    between_steps = "between steps, in a step range not taken as a step (it overlaps an earlier one or holds others)"
    places = (before, "before the first"), (between, between_steps), (after, "after the last")
    places += ((count - before - between - after, "on a rank without steps"),)
    return f"{count} kernel(s) outside every step ({', '.join(f'{n} {where}' for n, where in places if n)})"


def _structure_doubts(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Inferred layers that look like more than one layer (`period.holds_repeat`) or like another layer and a block
    beside it (`period.extends_another`), and steps whose kernels before their first layer or after their last are
    half a layer's or more and nearly all of kinds the layers run, or whose kernels before the first layer are a
    layer's or more and the layer-long stretch just before it at least half of such kinds (NEAR_EDGE_SHARE: a layer
    of another kind left out, beside the embedding's kernels), or half a layer's or more and the half-layer stretch
    just before it nearly all of such kinds (a half of the first layer left out: layers found a half out of phase,
    as sandwich norms make them, one norm before each mixer and one after)."""
    layers = con.execute(
        """
        SELECT DISTINCT list(k.code ORDER BY k.start_ns, k.activity_id)
        FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)
        WHERE l.method = 'period' AND l.kind = 'kernel' GROUP BY l.rank, l.step, l.layer
        """
    ).fetchall()
    doubts = []
    if sum(period.holds_repeat(np.asarray(codes)) for (codes,) in layers):
        doubts.append(
            "some inferred layers hold a block that opens or closes them twice: they may be two layers each "
            "(give --layers N, or annotate the layers with traceview.capture)"
        )
    if period.extends_another([np.asarray(codes, dtype=np.int64) for (codes,) in layers]):
        doubts.append(
            "some inferred layers are other inferred layers with a block of kernels before or after them: that "
            "block may be a layer of its own or part of the next layer (give --layers N, or annotate the layers "
            "with traceview.capture)"
        )
    edges = con.execute(
        """
        WITH typical AS (SELECT median(n) AS n FROM (SELECT count(*) AS n FROM _seg_layer_of
                          WHERE method = 'period' AND kind = 'kernel' GROUP BY rank, step, layer)),
        known AS (SELECT DISTINCT k.code FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)),
        bounds AS (SELECT rank, step, min(start_ns) AS lo, max(start_ns) AS hi FROM _seg_layer_of
                   WHERE method = 'period' GROUP BY ALL),
        edge AS (  -- kernels outside the layers' span, numbered from the nearest layer
            SELECT k.rank, k.step, k.start_ns < b.lo AS before, (k.code IN (SELECT code FROM known))::INTEGER AS known,
                   row_number() OVER (PARTITION BY k.rank, k.step, k.start_ns < b.lo
                                      ORDER BY CASE WHEN k.start_ns < b.lo THEN b.lo - k.start_ns
                                                    ELSE k.start_ns - b.hi END) AS away
            FROM _seg_k k JOIN bounds b USING (rank, step)
            WHERE k.kind = 'kernel' AND (k.start_ns < b.lo OR k.start_ns > b.hi)
        ),
        outside AS (
            SELECT rank, step, before, count(*) AS n, avg(known) AS known_share,
                   avg(known) FILTER (away <= (SELECT n FROM typical)) AS near_share,
                   avg(known) FILTER (away <= (SELECT n FROM typical) / 2) AS half_share
            FROM edge GROUP BY ALL
        ),
        beside AS (SELECT rank, step, sum(n) AS n FROM outside GROUP BY ALL)  -- both sides of the layers
        SELECT count(DISTINCT (rank, step)) FILTER ((outside.n >= 0.5 * typical.n AND known_share >= $share)
                                                     OR (before AND outside.n >= typical.n AND near_share >= $near)
                                                     OR (before AND outside.n >= 0.5 * typical.n
                                                         AND half_share >= $share)),
               (SELECT count(*) FROM beside, typical WHERE beside.n >= $far * typical.n)
        FROM outside, typical
        """,
        {"share": period.ACCEPT_EDGE, "near": NEAR_EDGE_SHARE, "far": passes.FAR_LAYERS},
    ).fetchall()[0]
    left_out, far = edges
    if left_out:
        doubts.append(
            f"in {left_out} step(s) the kernels before the first layer or after the last are as many as a layer's "
            "and run much of what layers run: a layer may be left out there (give --layers N)"
        )
    if far:
        doubts.append(
            f"in {far} step(s) the kernels before the first layer and after the last are {passes.FAR_LAYERS} layers' "
            "worth or more: the layers found are likely a loop inside a layer (a per-token scan), not layers (give "
            "--layers N, or annotate the layers with traceview.capture)"
        )
    if cut := _cut_windows(con):
        doubts.append(
            f"on {cut} rank(s) the trace starts and ends with kernels its inferred layers run: the capture window "
            "likely cuts forward passes in two, so its steps and layer numbers can be wrong (capture whole steps: "
            "torch.profiler's schedule, nsys --capture-range=cudaProfilerApi; or give --layers N)"
        )
    if shifted := _out_of_phase(con):
        doubts.append(
            f"in {shifted} step(s) no inferred layer opens with the kernel most layers open with, though the step runs "
            "it inside its layers: the layers of those steps are likely out of phase, each holding the end of the one "
            "before (give --layers N, or annotate the layers with traceview.capture)"
        )
    if doubled := _doubled_openings(con):
        doubts.append(
            f"in {doubled} step(s) the first layer opens with the same kernel twice (as two norms back to back): "
            "the first was taken as the layer's own (RWKV's embedding norm in block 0); if it is the model's norm of "
            "the embedding, it belongs before the layers (annotate the layers with traceview.capture)"
        )
    return doubts


def _cut_windows(con: duckdb.DuckDBPyConnection) -> int:
    """Ranks whose first three kernels and last three kernels both run, in that order, inside an inferred layer: a
    forward pass opens with the embedding and ends with the LM head (and a decode step with the sampling), so a trace
    that starts and ends with layers' kernels was captured from inside one pass to inside another. Three kernels in
    a row, not one: an embedding's gather or an LM head's GEMM alone is also a kernel some layers run (MoE routing,
    projections)."""
    return con.execute(
        """
        WITH k AS (
            SELECT k.rank, k.code, l.step, l.layer,
                   row_number() OVER (PARTITION BY k.rank ORDER BY k.start_ns, k.activity_id) AS i,
                   count(*) OVER (PARTITION BY k.rank) AS n
            FROM _seg_k k LEFT JOIN _seg_layer_of l ON l.activity_id = k.activity_id AND l.method = 'period'
            WHERE k.kind = 'kernel'
        ), runs AS (  -- every three kernels in a row, and whether one inferred layer instance runs all three
            SELECT rank, i, n, (code, lead(code, 1) OVER w, lead(code, 2) OVER w) AS three,
                   layer IS NOT NULL AND lead(layer, 2) OVER w IS NOT DISTINCT FROM layer
                   AND lead(step, 2) OVER w IS NOT DISTINCT FROM step AS in_layer
            FROM k WINDOW w AS (PARTITION BY rank ORDER BY i)
        ), inside AS (SELECT DISTINCT rank, three FROM runs WHERE in_layer)
        SELECT count(*) FROM (
            SELECT rank FROM runs WHERE n >= 6 AND (i = 1 OR i = n - 2) AND (rank, three) IN (SELECT * FROM inside)
            GROUP BY rank HAVING count(*) = 2
        )
        """
    ).fetchall()[0][0]


def _out_of_phase(con: duckdb.DuckDBPyConnection) -> int:
    """Steps none of whose inferred layers opens with the kernel that most of their rank's layers open with (their
    input norm's first), though their layers run it, and whose layers open with a kernel that the other steps'
    layers run inside: the step's layers were cut elsewhere (a step whose attention kernel changed with the cache's
    length, its layers found from the repeating unit out of phase). A step whose layers open with a kernel no other
    step runs opens them with another variant of the usual one (the first decode step's GEMMs), in phase; so does a
    step whose every layer opens with the kernel Inductor numbers 0 in its compiled graph, where the graph opens (a
    later call may run another of its kernels first: then the usual opening)."""
    return con.execute(
        """
        WITH openings AS (
            SELECT l.rank, l.step, l.layer, arg_min(k.code, (k.start_ns, k.activity_id)) AS code,
                   arg_min(k.inductor_number, (k.start_ns, k.activity_id)) AS number
            FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)
            WHERE l.method = 'period' AND l.kind = 'kernel' GROUP BY ALL
        ), usual AS (SELECT rank, mode(code) AS code FROM openings GROUP BY rank),
        elsewhere AS (  -- the steps none of whose layers opens with the usual kernel, and what they open with
            SELECT o.rank, o.step, mode(o.code) AS code FROM openings o JOIN usual u USING (rank)
            GROUP BY o.rank, o.step HAVING NOT bool_or(o.code = u.code) AND NOT bool_and(o.number = 0)
        ), ran AS (
            SELECT DISTINCT k.rank, k.step, k.code FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)
            WHERE l.method = 'period' AND l.kind = 'kernel'
        )
        SELECT count(*) FROM elsewhere e JOIN usual u USING (rank)
        WHERE (e.rank, e.step, u.code) IN (SELECT (rank, step, code) FROM ran)
          AND EXISTS (SELECT 1 FROM ran r WHERE r.rank = e.rank AND r.code = e.code
                      AND (r.rank, r.step) NOT IN (SELECT (rank, step) FROM elsewhere))
        """
    ).fetchall()[0][0]


def _doubled_openings(con: duckdb.DuckDBPyConnection) -> int:
    """Steps whose first inferred layer opens with the step's kernel right before it on its stream, or with the same
    kernel twice where the second layer opens with it once (a norm of the embedding inside the first layer, RWKV's,
    or the model's own before it: the trace cannot tell; period.with_doubled_opening takes it into the layer)."""
    return con.execute(
        """
        WITH first AS (  -- each step's first inferred kernel: its first layer's opening
            SELECT l.rank, l.step, arg_min(k.code, k.start_ns) AS code, arg_min(k.stream_id, k.start_ns) AS stream_id,
                   min(k.start_ns) AS start_ns
            FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)
            WHERE l.method = 'period' AND l.kind = 'kernel' GROUP BY l.rank, l.step
        ), before AS (  -- the steps whose kernel right before it on its stream is the same
            SELECT f.rank, f.step
            FROM first f JOIN _seg_k k ON k.rank = f.rank AND k.step = f.step
                 AND k.stream_id IS NOT DISTINCT FROM f.stream_id AND k.start_ns < f.start_ns
            WHERE k.kind = 'kernel' GROUP BY f.rank, f.step, f.code HAVING arg_max(k.code, k.start_ns) = f.code
        ), heads AS (  -- the first two kernels of the first two layers
            SELECT rank, step, layer, list(code ORDER BY start_ns)[1:2] AS head
            FROM (SELECT l.rank, l.step, l.layer, k.code, k.start_ns,
                         row_number() OVER (PARTITION BY l.rank, l.step, l.layer ORDER BY k.start_ns) AS i
                  FROM _seg_layer_of l JOIN _seg_k k USING (activity_id)
                  WHERE l.method = 'period' AND l.kind = 'kernel' AND l.layer <= 1)
            WHERE i <= 2 GROUP BY ALL
        ), twice AS (  -- the steps whose first layer opens with a kernel twice that the second opens with once
            SELECT a.rank, a.step FROM heads a JOIN heads b ON a.rank = b.rank AND a.step = b.step
            WHERE a.layer = 0 AND b.layer = 1 AND a.head[1] = a.head[2] AND b.head[1] = a.head[1]
                  AND b.head[2] <> b.head[1]
        )
        SELECT count(*) FROM (SELECT * FROM before UNION SELECT * FROM twice)
        """
    ).fetchall()[0][0]


def _record(con: duckdb.DuckDBPyConnection, run_id: int, result: SegmentResult) -> None:
    """Keep what segmentation found in ingest_stats (segment.steps, segment.layers, segment.note, and
    segment.warning for what makes it uncertain)."""
    rows = [
        ("segment.steps", "info", result.steps, result.notes[0]),
        ("segment.layers", "info", result.layers, "layer instances found, by " + (", ".join(result.methods) or "none")),
        *[("segment.note", "info", 0, note) for note in result.notes[1:]],
        *[("segment.warning", "warning", 0, doubt) for doubt in result.warnings],
    ]
    for name, severity, value, description in rows:
        con.execute(
            "INSERT INTO ingest_stats VALUES (?, NULL, ?, ?, ?, ?)", [run_id, name, severity, value, description]
        )
