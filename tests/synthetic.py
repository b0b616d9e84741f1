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

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from traceview import db, sqllib
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
    """Insert `kernels` into gpu_activity (activity ids follow the existing ones), their ranks and launches."""
    rows = list(kernels)
    first = con.execute("SELECT coalesce(max(activity_id), 0) + 1 FROM gpu_activity").fetchall()[0][0]
    for offset, k in enumerate(rows):
        activity_id = first + offset
        launch_id = activity_id if k.launch_ns is not None else None
        con.execute(
            "INSERT OR IGNORE INTO ranks (run_id, rank, source_file, rank_from) VALUES (?, ?, 'synthetic', 'default')",
            [run_id, k.rank],
        )
        con.execute(
            "INSERT INTO gpu_activity (run_id, rank, activity_id, kind, device_id, stream_id, start_ns, end_ns, name,"
            " short_name, category, correlation_id, launch_id, step, layer) VALUES"
            " (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                k.rank,
                activity_id,
                k.kind,
                k.stream_id,
                k.start_ns,
                k.end_ns,
                k.name,
                k.name,
                k.category,
                activity_id,
                launch_id,
                k.step,
                k.layer,
            ],
        )
        if k.launch_ns is not None:
            con.execute(
                "INSERT INTO launches (run_id, rank, launch_id, start_ns, end_ns, name, api, correlation_id)"
                " VALUES (?, ?, ?, ?, ?, 'cudaLaunchKernel', 'runtime', ?)",
                [run_id, k.rank, launch_id, k.launch_ns, k.launch_ns + 1, activity_id],
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
