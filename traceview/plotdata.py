"""The data behind each picture: SQL over one database, returned as typed rows for plot.py to draw.

Reads: `runs`, `ranks`, `steps`, `layers`, `gpu_activity`, and the SQL library's `layer_metrics` view and
`interval_union` macro. Writes nothing. Queries here that other stages could use (exposed-communication
intervals, per-layer medians) are written as clearly named functions so that they can move into `queries/`.

Times handed to plot.py are µs since the start of the picture's window (the step, or the first chosen layer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import duckdb

from . import sqllib
from .diff import RunRef
from .errors import DatabaseError, UsageError
from .stepsel import format_steps, steps_phrase

Row = dict[str, Any]
# Phases in the order comparisons prefer them (as in diff.py): decode steps are the steady state of inference.
PHASE_PREFERENCE = ("decode", "unknown", "prefill")


@dataclass(frozen=True)
class StepInfo:
    """One step of one rank, as segmentation recorded it."""

    step: int
    name: str | None
    phase: str
    warmup: bool
    start_ns: int
    end_ns: int
    method: str


@dataclass(frozen=True)
class Lane:
    """One GPU stream of the rank: a row of the timeline."""

    device_id: int | None
    stream_id: int | None

    @property
    def label(self) -> str:
        device = "?" if self.device_id is None else self.device_id
        stream = "?" if self.stream_id is None else self.stream_id
        return f"GPU {device} · stream {stream}"


@dataclass(frozen=True)
class Activity:
    """A kernel, memcpy or memset drawn as one rectangle."""

    lane: int
    start_us: float
    dur_us: float
    category: str
    name: str
    layer: int | None


@dataclass(frozen=True)
class LayerSpan:
    """One layer instance inside the window."""

    layer: int
    name: str | None
    start_us: float
    end_us: float
    method: str
    confidence: float


@dataclass(frozen=True)
class TimelineData:
    """Everything the timeline of one step (or of some layers of it) shows."""

    run: str
    rank: int
    step: StepInfo
    window_start_ns: int
    window_end_ns: int
    lanes: list[Lane]
    activities: list[Activity]
    layers: list[LayerSpan]
    exposed_comm: list[tuple[float, float]]

    @property
    def window_us(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e3


@dataclass(frozen=True)
class LayerBreakdown:
    """Where the time of one layer index goes, as medians across the chosen steps and ranks (µs).

    compute_only + overlapped_comm + exposed_comm + idle is the layer span of one instance (wall-clock time).
    """

    layer: int
    instances: int
    kernels: float
    span_us: float
    compute_only_us: float
    overlapped_comm_us: float
    exposed_comm_us: float
    idle_us: float
    method: str
    confidence: float


def parse_layer_range(text: str | None) -> tuple[int, int] | None:
    """`3-5` -> (3, 5); `4` -> (4, 4); None -> None."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not match:
        raise UsageError(
            None, f"--layers {text!r} is not a layer range", "write it as FIRST-LAST, e.g. 3-5, or one index"
        )
    first, last = int(match.group(1)), int(match.group(2) or match.group(1))
    if last < first:
        raise UsageError(None, f"--layers {text!r} ends before it starts", f"write {last}-{first}")
    return first, last


def _rows(result: duckdb.DuckDBPyConnection) -> list[Row]:
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, r, strict=True)) for r in result.fetchall()]


def choose_rank(ref: RunRef, rank: int | None) -> int:
    """`rank` when the run has it, else the lowest rank of the run."""
    ranks = [
        r[0] for r in ref.con.execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [ref.run_id]).fetchall()
    ]
    if not ranks:
        raise DatabaseError(ref.label, "the run has no ranks", "ingest the trace again")
    if rank is None:
        return ranks[0]
    if rank not in ranks:
        raise UsageError(ref.label, f"no rank {rank} in the run", "pick one of: " + ", ".join(map(str, ranks)))
    return rank


def steady_phase(ref: RunRef) -> str | None:
    """The phase whose steady-state steps (step_steady) pictures summarize (decode first), None without steps."""
    rows = ref.con.execute("SELECT DISTINCT phase FROM step_steady WHERE run_id = ?", [ref.run_id]).fetchall()
    phases = {r[0] for r in rows}
    return next((p for p in PHASE_PREFERENCE if p in phases), None)


def choose_step(ref: RunRef, rank: int, step: int | None) -> StepInfo:
    """Step `step` of `rank`, or by default a representative one: the median by span of its steady-state steps of
    the preferred phase (the lower middle one of an even count, the earlier step on a tie), so that neither a
    warm-up step nor an outlier (a step that is mostly one long kernel) is drawn. When every step is warm-up, the
    median of all steps."""
    rows = ref.con.execute(
        """
        WITH
            -- The candidate steps: the one asked for, else those of the preferred kind (steady, preferred phase).
            _candidates AS (
                SELECT step, name, phase, warmup, start_ns, end_ns, method,
                       -- 0 for the preferred kind of step (not warm-up, the steady phase), then worse
                       dense_rank() OVER (ORDER BY warmup, (phase = $phase) DESC) AS preference
                FROM steps
                WHERE run_id = $run AND rank = $rank AND ($step IS NULL OR step = $step)
            )
        SELECT step, name, phase, warmup, start_ns, end_ns, method FROM _candidates
        WHERE preference = 1
        ORDER BY end_ns - start_ns, step
        """,
        {"run": ref.run_id, "rank": rank, "step": step, "phase": steady_phase(ref) or ""},
    ).fetchall()
    if rows:
        return StepInfo(*rows[(len(rows) - 1) // 2])
    if step is None:
        raise _no_steps(ref)
    raise _no_such_step(ref, step, rank)


def _no_steps(ref: RunRef) -> DatabaseError:
    """Why a run has no step to draw: a trace without GPU work (ingesting it again changes nothing), or a run that
    was never segmented."""
    kernels = ref.con.execute("SELECT count(*) FROM gpu_activity WHERE run_id = ?", [ref.run_id]).fetchall()[0][0]
    if not kernels:
        return DatabaseError(
            ref.label,
            "the trace holds no GPU activity (a CPU-only trace), so it has no steps to draw",
            "profile with CUDA activities (torch.profiler ProfilerActivity.CUDA, or nsys --trace=cuda)",
        )
    return DatabaseError(ref.label, "the run has no steps (it was not segmented)", "run `traceview segment` on it")


def _no_such_step(ref: RunRef, step: int, rank: int | None) -> UsageError:
    """The one-line error for a --step that selects nothing, naming the steps (steps.step) there are."""
    present = [
        r[0]
        for r in ref.con.execute(
            "SELECT DISTINCT step FROM steps WHERE run_id = ? AND (? IS NULL OR rank = ?) ORDER BY step",
            [ref.run_id, rank, rank],
        ).fetchall()
    ]
    where = f" on rank {rank}" if rank is not None else ""
    return UsageError(ref.label, f"--step {step} selects no step{where}", f"its steps are {format_steps(present)}")


def timeline(
    ref: RunRef, rank: int | None = None, step: int | None = None, layers: tuple[int, int] | None = None
) -> TimelineData:
    """The activities, layers and exposed communication of one step of one rank (or of layers `layers` of it)."""
    sqllib.ensure_installed(ref.con)
    rank = choose_rank(ref, rank)
    info = choose_step(ref, rank, step)
    spans = layer_spans(ref, rank, info.step, layers)
    if layers is not None and not spans:
        raise UsageError(
            ref.label, f"step {info.step} has no layer {layers[0]}-{layers[1]}", "run `traceview layers` to list them"
        )
    lo, hi = _window(info, spans, zoom=layers is not None)
    rows = step_activities(ref, rank, info.step, lo, hi)
    lanes = sorted({(r["device_id"], r["stream_id"]) for r in rows}, key=lambda k: (k[0] is None, k[0] or 0, k[1] or 0))
    lane_index = {key: i for i, key in enumerate(lanes)}
    activities = [
        Activity(
            lane=lane_index[(r["device_id"], r["stream_id"])],
            start_us=(r["start_ns"] - lo) / 1e3,
            dur_us=(r["end_ns"] - r["start_ns"]) / 1e3,
            category=r["category"],
            name=r["short_name"],
            layer=r["layer"],
        )
        for r in rows
    ]
    exposed = [((a - lo) / 1e3, (b - lo) / 1e3) for a, b in exposed_comm_intervals(ref, rank, info.step, lo, hi)]
    return TimelineData(
        run=ref.label,
        rank=rank,
        step=info,
        window_start_ns=lo,
        window_end_ns=hi,
        lanes=[Lane(d, s) for d, s in lanes],
        activities=activities,
        layers=[
            LayerSpan(
                s["layer"],
                s["name"],
                (s["start_ns"] - lo) / 1e3,
                (s["end_ns"] - lo) / 1e3,
                s["method"],
                s["confidence"],
            )
            for s in spans
        ],
        exposed_comm=exposed,
    )


LAYERS_SHARE_TO_ZOOM = 0.5  # by default, a step whose layers take less of it than this is drawn from L_first to L_last


def _window(info: StepInfo, spans: list[Row], zoom: bool) -> tuple[int, int]:
    """The time window (ns) to draw: the layers `spans` when asked (`zoom`) or when they fill less than
    LAYERS_SHARE_TO_ZOOM of the step (a step that is mostly one long kernel before them shows no layer), else the
    step."""
    if not spans:
        return info.start_ns, info.end_ns
    lo, hi = min(s["start_ns"] for s in spans), max(s["end_ns"] for s in spans)
    if zoom or hi - lo < LAYERS_SHARE_TO_ZOOM * (info.end_ns - info.start_ns):
        return lo, hi
    return info.start_ns, info.end_ns


def layer_spans(ref: RunRef, rank: int, step: int, layers: tuple[int, int] | None) -> list[Row]:
    """The layer instances of one step of one rank (only indices in `layers` when given), in time order."""
    first, last = layers if layers is not None else (None, None)
    return _rows(
        ref.con.execute(
            """
            SELECT layer, name, start_ns, end_ns, method, confidence FROM layers
            WHERE run_id = $run AND rank = $rank AND step = $step
              AND ($first IS NULL OR layer BETWEEN $first AND $last)
            ORDER BY start_ns, layer
            """,
            {"run": ref.run_id, "rank": rank, "step": step, "first": first, "last": last},
        )
    )


def step_activities(ref: RunRef, rank: int, step: int, lo: int, hi: int) -> list[Row]:
    """GPU activities (kernels, memcpy, memset) that segmentation put in `step` and that overlap [lo, hi]."""
    return _rows(
        ref.con.execute(
            """
            SELECT device_id, stream_id, start_ns, end_ns, category, short_name, layer FROM gpu_activity
            WHERE run_id = $run AND rank = $rank AND step = $step AND end_ns >= $lo AND start_ns <= $hi
            ORDER BY device_id, stream_id, start_ns, activity_id
            """,
            {"run": ref.run_id, "rank": rank, "step": step, "lo": lo, "hi": hi},
        )
    )


def exposed_comm_intervals(ref: RunRef, rank: int, step: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Time (ns) when a comm kernel of the step runs on the rank and no compute kernel does, within [lo, hi].

    The difference (comm union) minus (compute union): merge each set with interval_union, emit +1/-1 at the
    starts/ends of each set separately, and keep the pieces between consecutive events where the comm count is 1
    and the compute count is 0. Its total equals layer_metrics' exposed_comm_us summed over the window.
    """
    rows = ref.con.execute(
        """
        WITH
            -- The step's kernels on this rank, clipped to the window.
            _kernels AS (
                SELECT category, greatest(start_ns, $lo) AS start_ns, least(end_ns, $hi) AS end_ns
                FROM gpu_activity
                WHERE run_id = $run AND rank = $rank AND step = $step AND kind = 'kernel'
                  AND category IN ('comm', 'compute') AND end_ns > $lo AND start_ns < $hi
            ),
            -- Each category's kernels merged into disjoint intervals.
            _merged AS (FROM interval_union(_kernels)),
            -- +1/-1 events, counted separately for comm (dc) and compute (dk).
            _events AS (
                SELECT start_ns AS t, (category = 'comm')::INT AS dc, (category = 'compute')::INT AS dk FROM _merged
                UNION ALL
                SELECT end_ns, -(category = 'comm')::INT, -(category = 'compute')::INT FROM _merged
            ),
            -- Open comm and compute intervals after each event, and the time of the next event.
            _depth AS (
                SELECT t, sum(dc) OVER w AS comm_open, sum(dk) OVER w AS compute_open, lead(t) OVER w AS next_t
                FROM _events
                WINDOW w AS (ORDER BY t, dc + dk ROWS UNBOUNDED PRECEDING)
            )
        SELECT t AS start_ns, next_t AS end_ns FROM _depth
        WHERE comm_open > 0 AND compute_open = 0 AND next_t > t
        ORDER BY t
        """,
        {"run": ref.run_id, "rank": rank, "step": step, "lo": lo, "hi": hi},
    ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


def layer_breakdown(
    ref: RunRef, rank: int | None = None, step: int | None = None, layers: tuple[int, int] | None = None
) -> tuple[list[LayerBreakdown], str]:
    """Per layer index, the medians of layer_metrics across steady-state steps and ranks; and which steps those are.

    Steady state: steps that are not warm-up, of the preferred phase (decode first). `step` and `rank` narrow it.
    """
    sqllib.ensure_installed(ref.con)
    phase = steady_phase(ref) if step is None else None
    first, last = layers if layers is not None else (None, None)
    rows = ref.con.execute(
        """
        WITH
            -- The layer instances to summarize: one step, or the steady steps (step_steady) of the phase.
            _chosen AS (
                SELECT m.* FROM layer_metrics m JOIN steps s USING (run_id, rank, step)
                WHERE m.run_id = $run
                  AND ($rank IS NULL OR m.rank = $rank)
                  AND (CASE WHEN $step IS NOT NULL THEN m.step = $step
                            ELSE s.phase = coalesce($phase, s.phase) AND EXISTS (
                                SELECT 1 FROM step_steady t
                                WHERE t.run_id = m.run_id AND t.rank = m.rank AND t.step = m.step
                            ) END)
                  AND ($first IS NULL OR m.layer BETWEEN $first AND $last)
            )
        SELECT
            layer,
            count(*) AS instances,
            median(kernels) AS kernels,
            median(span_us) AS span_us,
            -- compute time with no comm under it
            median(compute_us - overlap_us) AS compute_only_us,
            median(overlap_us) AS overlapped_comm_us,
            median(exposed_comm_us) AS exposed_comm_us,
            median(idle_us) AS idle_us,
            mode(method) AS method,
            min(confidence) AS confidence
        FROM _chosen
        GROUP BY layer
        ORDER BY layer
        """,
        {"run": ref.run_id, "rank": rank, "step": step, "phase": phase, "first": first, "last": last},
    ).fetchall()
    if step is not None and not rows and not _has_step(ref, step, rank):
        raise _no_such_step(ref, step, rank)
    scope = f"step {step}" if step is not None else steps_phrase(phase)
    return [LayerBreakdown(*r) for r in rows], scope


def _has_step(ref: RunRef, step: int, rank: int | None) -> bool:
    rows = ref.con.execute(
        "SELECT 1 FROM steps WHERE run_id = ? AND step = ? AND (? IS NULL OR rank = ?) LIMIT 1",
        [ref.run_id, step, rank, rank],
    ).fetchall()
    return bool(rows)


def step_table(ref: RunRef) -> list[Row]:
    """step_metrics rows of the run, for the report: one per (rank, step)."""
    sqllib.ensure_installed(ref.con)
    return _rows(
        ref.con.execute(
            """
            SELECT rank, step, name, phase, warmup, layers, kernels, span_us, busy_us, idle_us, comm_us,
                   exposed_comm_us, method
            FROM step_metrics WHERE run_id = ? ORDER BY rank, step
            """,
            [ref.run_id],
        )
    )
