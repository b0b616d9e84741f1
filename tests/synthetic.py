"""Small synthetic traceview databases for tests: rows written straight into the schema, answers known.

    con = synthetic.database()                       # schema + SQL library, one run (run_id 1, 'synthetic')
    synthetic.add_kernels(con, [
        Kernel(0, 10, step=0, layer=0),              # times in ns
        Kernel(5, 20, category="comm", step=0, layer=0),
    ])
    synthetic.segment(con)                           # steps and layers rows from the kernels' step/layer
    con.sql("FROM layer_metrics")

`timeline("A: _ - - - - _ _")` turns an ASCII drawing into intervals (one cell = one unit), so interval
tests can show their input as a picture.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from traceview import db, sqllib
from traceview.db import execute_with
from traceview.segment import busy


@dataclass(frozen=True)
class Kernel:
    """One gpu_activity row (times in ns). `launch_ns` also writes its launching CPU call into `launches`."""

    start_ns: int
    end_ns: int
    name: str = "gemm"
    category: str = "compute"
    kind: str = "kernel"
    rank: int = 0
    stream_id: int = 7
    step: int | None = None
    layer: int | None = None
    launch_ns: int | None = None


def database(path: str | Path = ":memory:", runs: Iterable[str] = ("synthetic",)) -> duckdb.DuckDBPyConnection:
    """A database with the schema, the SQL library and one run per label (run ids 1, 2, ...)."""
    con = duckdb.connect(str(path))
    db.create_schema(con)
    for label in runs:
        add_run(con, label)
    sqllib.install(con)
    return con


def add_run(con: duckdb.DuckDBPyConnection, label: str) -> int:
    """Add a run row and return its run_id (one more than the largest)."""
    run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchall()[0][0]
    con.execute(
        "INSERT INTO runs (run_id, label, backend, source_path, source_sha256, source_bytes, traceview_version,"
        " ingested_at) VALUES (?, ?, 'kineto', ?, ?, 0, 'test', now())",
        [run_id, label, f"/synthetic/{label}.json", f"sha-{label}"],
    )
    return int(run_id)


def add_kernels(con: duckdb.DuckDBPyConnection, kernels: Iterable[Kernel], run_id: int = 1) -> None:
    """Insert `kernels` into gpu_activity (activity ids follow the existing ones), their ranks and launches: one
    statement per table (a statement per row took 7 s for the 61-layer pictures' 750 kernels)."""
    rows = list(kernels)
    if not rows:
        return
    first = con.execute("SELECT coalesce(max(activity_id), 0) + 1 FROM gpu_activity").fetchall()[0][0]
    frame = pd.DataFrame([dataclasses.asdict(k) for k in rows]).astype(
        {"step": "Int64", "layer": "Int64", "launch_ns": "Int64"}
    )
    frame.insert(0, "activity_id", range(first, first + len(rows)))
    params = {"run": run_id}
    execute_with(
        con,
        "_kernels",
        frame,
        "INSERT OR IGNORE INTO ranks (run_id, rank, source_file, rank_from)"
        " SELECT DISTINCT $run, rank, 'synthetic', 'default' FROM _kernels",
        params,
    )
    execute_with(
        con,
        "_kernels",
        frame,
        "INSERT INTO gpu_activity (run_id, rank, activity_id, kind, device_id, stream_id, start_ns, end_ns, name,"
        " short_name, category, correlation_id, launch_id, step, layer) SELECT $run, rank, activity_id, kind, 0,"
        " stream_id, start_ns, end_ns, name, name, category, activity_id,"
        " CASE WHEN launch_ns IS NOT NULL THEN activity_id END, step, layer FROM _kernels ORDER BY activity_id",
        params,
    )
    execute_with(
        con,
        "_kernels",
        frame,
        "INSERT INTO launches (run_id, rank, launch_id, start_ns, end_ns, name, api, correlation_id)"
        " SELECT $run, rank, activity_id, launch_ns, launch_ns + 1, 'cudaLaunchKernel', 'runtime', activity_id"
        " FROM _kernels WHERE launch_ns IS NOT NULL ORDER BY activity_id",
        params,
    )


def segment(
    con: duckdb.DuckDBPyConnection,
    run_id: int = 1,
    warmup_steps: Iterable[int] = (),
    phase: str = "decode",
    method: str = "annotation",
    confidence: float = 1.0,
) -> None:
    """Write `steps` and `layers` rows from the step/layer the kernels of `run_id` carry (what segmentation does),
    and the interval figures segmentation precomputes (kernel_busy, kernel_gaps).

    Each step and layer instance spans its first kernel start to its last kernel end (any kind of activity).
    """
    warmup = list(warmup_steps)
    con.execute(
        "INSERT INTO steps SELECT run_id, rank, step, 'ProfilerStep#' || step, min(start_ns), max(end_ns), ?,"
        " list_contains(?::INTEGER[], step), ?, NULL FROM gpu_activity WHERE run_id = ? AND step IS NOT NULL"
        " GROUP BY ALL",
        [phase, warmup, method, run_id],
    )
    con.execute(
        "INSERT INTO layers SELECT run_id, rank, step, layer, 'model.layers.' || layer, min(start_ns), max(end_ns),"
        " count(*) FILTER (kind = 'kernel'), ?, ? FROM gpu_activity"
        " WHERE run_id = ? AND step IS NOT NULL AND layer IS NOT NULL GROUP BY ALL",
        [method, confidence, run_id],
    )
    busy.record(con, run_id)


def timeline(drawing: str, unit_ns: int = 1) -> list[tuple[int, int]]:
    """Intervals of an ASCII timeline: cells separated by spaces, '-' busy, '_' idle; one cell = `unit_ns`.

    `timeline("A: _ - - _ -")` -> [(1, 3), (4, 5)]. Text up to a ':' is a name and is ignored; '|' in a cell
    splits two touching intervals: `timeline("- -|- -")` -> [(0, 2), (2, 4)].
    """
    cells = drawing.split(":", 1)[-1].split()
    intervals: list[tuple[int, int]] = []
    start: int | None = None
    position = 0
    for cell in cells:
        for part_index, part in enumerate(cell.split("|")):
            if part_index and start is not None:
                intervals.append((start * unit_ns, position * unit_ns))
                start = None
            if not part:
                continue
            if part == "-" and start is None:
                start = position
            elif part == "_" and start is not None:
                intervals.append((start * unit_ns, position * unit_ns))
                start = None
            position += 1
    if start is not None:
        intervals.append((start * unit_ns, position * unit_ns))
    return intervals
