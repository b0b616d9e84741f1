"""What `traceview layers` shows: per-layer figures of one run, read from a segmented database.

Reads: `layer_metrics` (the SQL library's view, installed in every database at ingest: one row per
(run, rank, step, layer)), `steps` and the `segment.*` rows of `ingest_stats`. Writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb


Row = dict[str, Any]

INSTANCE_COLUMNS = (
    "rank",
    "step",
    "layer",
    "name",
    "kernels",
    "span_us",
    "busy_us",
    "comm_us",
    "overlap_us",
    "exposed_comm_us",
    "idle_us",
    "method",
    "confidence",
    "phase",
    "warmup",
)


@dataclass(frozen=True)
class LayerReport:
    """One run's layers: every instance, the median per layer index, totals per step, and how they were found."""

    label: str
    instances: list[Row]
    per_layer: list[Row]
    per_step: list[Row]
    methods: tuple[str, ...]
    notes: tuple[str, ...]


def layer_report(con: duckdb.DuckDBPyConnection, run_id: int, label: str) -> LayerReport:
    """The figures of run `run_id` (medians over steady steps, i.e. not warm-up, of every rank)."""
    instances = _rows(
        con,
        f"""
        SELECT {", ".join("m." + c if c not in ("phase", "warmup") else "s." + c for c in INSTANCE_COLUMNS)}
        FROM layer_metrics m JOIN steps s USING (run_id, rank, step)
        WHERE m.run_id = $run ORDER BY m.rank, m.step, m.layer
        """,
        run_id,
    )
    per_layer = _rows(con, _PER_LAYER, run_id)
    per_step = _rows(con, _PER_STEP, run_id)
    methods = tuple(sorted({r["method"] for r in instances}))
    notes = tuple(
        r[0]
        for r in con.execute(
            "SELECT description FROM ingest_stats WHERE run_id = ? AND name LIKE 'segment.%' AND name <> "
            "'segment.layers' ORDER BY name DESC, description",
            [run_id],
        ).fetchall()
    )
    return LayerReport(label, instances, per_layer, per_step, methods, notes)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, run_id: int) -> list[Row]:
    result = con.execute(sql, {"run": run_id})
    columns = [d[0] for d in result.description or []]
    return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]


# One row per layer index: medians across the steady steps of every rank, rounded as query figures.precision says.
_PER_LAYER = """
    WITH steady AS (
        SELECT m.* FROM layer_metrics m JOIN step_steady s USING (run_id, rank, step) WHERE m.run_id = $run
    )
    SELECT layer, arg_min(name, length(name)) AS name, count(*) AS instances,
           _median_count(kernels) AS kernels, _median_us(span_us) AS span_us, _median_us(busy_us) AS busy_us,
           _median_us(comm_us) AS comm_us, _median_us(exposed_comm_us) AS exposed_comm_us,
           string_agg(DISTINCT method, ', ' ORDER BY method) AS method, round(median(confidence), 3) AS confidence
    FROM steady GROUP BY layer ORDER BY layer
"""

# One row per (rank, step): its layers and their kernels, next to the whole step and, in speculative decoding, the
# drafter's passes, kernels and busy time (its kernels are neither the target's prologue nor its epilogue).
_PER_STEP = """
    WITH per AS (
        SELECT rank, step, count(*) AS layers, sum(kernels) AS layer_kernels, sum(span_us) AS layers_span_us,
               sum(exposed_comm_us) AS exposed_comm_us, string_agg(DISTINCT method, ', ' ORDER BY method) AS method
        FROM layer_metrics WHERE run_id = $run GROUP BY rank, step
    ), bounds AS (
        SELECT rank, step, min(start_ns) AS first_layer, max(end_ns) AS last_layer
        FROM layers WHERE run_id = $run GROUP BY rank, step
    ), kernels AS (
        -- the step's kernels, and those outside its layers: before the first (prologue), after the last (epilogue)
        SELECT g.rank, g.step, count(*) AS kernels,
               count(*) FILTER (g.layer IS NULL AND g.role IS DISTINCT FROM 'draft' AND g.start_ns < b.first_layer)
                   AS before_layers,
               count(*) FILTER (g.layer IS NULL AND g.role IS DISTINCT FROM 'draft' AND g.start_ns >= b.first_layer)
                   AS after_layers
        FROM gpu_activity g LEFT JOIN bounds b USING (rank, step)
        WHERE g.run_id = $run AND g.kind = 'kernel' AND g.step IS NOT NULL GROUP BY g.rank, g.step
    )
    SELECT s.rank, s.step, s.name, s.phase, s.warmup, coalesce(p.layers, 0) AS layers,
           coalesce(k.kernels, 0) AS kernels, coalesce(p.layer_kernels, 0) AS layer_kernels,
           coalesce(k.before_layers, 0) AS before_layers, coalesce(k.after_layers, 0) AS after_layers,
           round((s.end_ns - s.start_ns) / 1e3, 3) AS span_us, round(p.layers_span_us, 3) AS layers_span_us,
           round(p.exposed_comm_us, 3) AS exposed_comm_us, p.method, s.draft_passes, m.draft_kernels,
           round(m.draft_busy_us, 3) AS draft_busy_us
    FROM steps s LEFT JOIN per p USING (rank, step) LEFT JOIN kernels k USING (rank, step)
    LEFT JOIN step_metrics m USING (run_id, rank, step)
    WHERE s.run_id = $run ORDER BY s.rank, s.step
"""
