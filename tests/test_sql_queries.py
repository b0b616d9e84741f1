"""Every query of queries/ on one small synthetic trace whose answers are worked out by hand.

The trace (times in µs from the start of each step; step s starts at s * 100 µs; rank 0, run 'synthetic'):

    layer 0  gemm      [ 0, 10)  stream 7   launched 5 µs before it starts
             gemm      [ 8, 20)  stream 8   launched 6 µs before
             all_reduce[15, 30)  stream 20  comm, launched 10 µs before
             copy      [30, 33)  memcpy     (neither comm nor compute, not a kernel)
             norm      [34, 40)  stream 7   launched 4 µs before
    layer 1  gemm      [50, 60)             launched 2 µs before
             gemm      [62, 70)             launched 2 µs before
             gemm      [72, 75)             step 2 only, no launch record
    no layer epilogue  [80, 85)
    compile  [40, 45)  layer 0 of step 0 only; step 0 is warm-up

    timeline of layer 0:  compute - - - - - - - - - - - - - - - - - - - - _ _ _ _ _ _ _ _ _ _ _ _ _ _ - - - - - -
                          comm    _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ - - - - - - - - - - - - - - - _ _ _ _ _ _ _ _ _ _
    (one cell = 1 µs): compute union 20 + 6 = 26, comm 15, overlap [15, 20) = 5, busy [0, 30) + [34, 40) = 36.

Rank 1 (no steps): all_reduce [0, 10) comm, gemm [5, 10) and [12, 14). A second run 'other': all_reduce [0, 4),
gemm [2, 6).
"""

from __future__ import annotations

import duckdb
import pytest
from synthetic import Kernel, add_kernels, add_run, database, segment

from traceview import sqllib
from traceview.errors import UsageError

US = 1000
STEP_US = 100


def _step(step: int) -> list[Kernel]:
    def k(start: int, end: int, name: str, launch_before: int | None = None, **kw: object) -> Kernel:
        base = step * STEP_US
        launch = None if launch_before is None else (base + start - launch_before) * US
        return Kernel((base + start) * US, (base + end) * US, name, step=step, launch_ns=launch, **kw)  # type: ignore[arg-type]

    kernels = [
        k(0, 10, "gemm", 5, layer=0),
        k(8, 20, "gemm", 6, layer=0, stream_id=8),
        k(15, 30, "all_reduce", 10, layer=0, category="comm", stream_id=20),
        k(30, 33, "copy", layer=0, kind="memcpy", category="memcpy"),
        k(34, 40, "norm", 4, layer=0),
        k(50, 60, "gemm", 2, layer=1),
        k(62, 70, "gemm", 2, layer=1),
        k(80, 85, "epilogue"),
    ]
    if step == 0:
        kernels.append(k(40, 45, "compile", 1, layer=0))
    if step == 2:
        kernels.append(k(72, 75, "gemm", layer=1))
    return kernels


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = database()
    add_kernels(con, [kernel for step in range(3) for kernel in _step(step)])
    add_kernels(
        con,
        [
            Kernel(0, 10 * US, "all_reduce", category="comm", rank=1, stream_id=20),
            Kernel(5 * US, 10 * US, "gemm", rank=1),
            Kernel(12 * US, 14 * US, "gemm", rank=1),
        ],
    )
    segment(con, warmup_steps=[0])
    other = add_run(con, "other")
    add_kernels(con, [Kernel(0, 4 * US, "all_reduce", category="comm"), Kernel(2 * US, 6 * US)], run_id=other)
    return con


def query(con: duckdb.DuckDBPyConnection, name: str, **params: object) -> list[dict[str, object]]:
    columns, rows = sqllib.run_query(con, name, params)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def pick(row: dict[str, object], *keys: str) -> tuple[object, ...]:
    return tuple(row[k] for k in keys)


LAYER_COLUMNS = ("kernels", "span_us", "busy_us", "idle_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us")


def test_layer_metrics(con: duckdb.DuckDBPyConnection) -> None:
    rows = {(r["step"], r["layer"]): r for r in query(con, "layer_metrics") if r["run_id"] == 1}
    assert set(rows) == {(s, layer) for s in range(3) for layer in range(2)}
    # layer 0: the memcpy is not a kernel and not busy time
    assert pick(rows[1, 0], *LAYER_COLUMNS) == (4, 40, 30 + 6, 40 - 36, 15, 20 + 6, 20 - 15, 15 - 5)
    assert rows[1, 0]["overlap_pct"] == 33.33  # 100 * 5 / 15 to 2 decimals (figure_precision)
    assert pick(rows[1, 0], "method", "confidence", "name") == ("annotation", 1.0, "model.layers.0")
    # warm-up step 0: compile [40, 45) touches norm [34, 40)
    assert pick(rows[0, 0], *LAYER_COLUMNS) == (5, 45, 30 + 11, 45 - 41, 15, 20 + 11, 5, 10)
    # layer 1 has no communication: overlap % is undefined
    assert pick(rows[1, 1], *LAYER_COLUMNS) == (2, 70 - 50, 10 + 8, 2, 0, 18, 0, 0)
    assert rows[1, 1]["overlap_pct"] is None
    assert pick(rows[2, 1], *LAYER_COLUMNS) == (3, 75 - 50, 10 + 8 + 3, 25 - 21, 0, 21, 0, 0)


def test_layer_metrics_keeps_a_layer_without_kernels(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("INSERT INTO layers VALUES (1, 0, 1, 9, NULL, 0, 0, 0, 'period', 0.5)")
    try:
        row = next(r for r in query(con, "layer_metrics") if r["layer"] == 9)
        assert pick(row, *LAYER_COLUMNS, "overlap_pct", "confidence") == (0, 0, 0, 0, 0, 0, 0, 0, None, 0.5)
    finally:
        con.execute("DELETE FROM layers WHERE layer = 9")


def test_step_metrics(con: duckdb.DuckDBPyConnection) -> None:
    rows = {r["step"]: r for r in query(con, "step_metrics") if r["run_id"] == 1}
    keys = ("layers", *LAYER_COLUMNS)
    # step 1: busy [0,30) [34,40) [50,60) [62,70) [80,85); the epilogue kernel has no layer but counts
    assert pick(rows[1], *keys) == (2, 4 + 2 + 1, 85, 30 + 6 + 10 + 8 + 5, 85 - 59, 15, 26 + 18 + 5, 5, 10)
    assert pick(rows[0], "warmup", "phase", "method") == (True, "decode", "annotation")
    assert rows[2]["kernels"] == 8 and rows[2]["busy_us"] == 59 + 3


def test_step_steady_leaves_out_warmup(con: duckdb.DuckDBPyConnection) -> None:
    assert query(con, "step_steady") == [
        {"run_id": 1, "rank": 0, "step": s, "phase": "decode", "warmup": False} for s in (1, 2)
    ]


def test_layer_summary_medians_over_steady_steps(con: duckdb.DuckDBPyConnection) -> None:
    rows = {r["layer"]: r for r in query(con, "layer_summary")}
    keys = ("steps", "kernels_median", "kernels_min", "kernels_max", "span_us_median", "busy_us_median")
    assert pick(rows[0], *keys) == (2, 4, 4, 4, 40, 36)
    assert pick(rows[0], "comm_us_median", "overlap_us_median", "exposed_comm_us_median") == (15, 5, 10)
    assert pick(rows[1], *keys) == (2, 2, 2, 3, (20 + 25) / 2, (18 + 21) / 2)  # kernels: the lower median
    assert rows[1]["idle_us_median"] == (2 + 4) / 2 and rows[1]["phase"] == "decode"


def test_layer_kernels_by_name(con: duckdb.DuckDBPyConnection) -> None:
    rows = {(r["layer"], r["short_name"]): r for r in query(con, "layer_kernels", run="synthetic")}
    keys = ("category", "steps", "calls", "calls_per_step", "total_us", "mean_us")
    layer0_us = 2 * (10 + 12 + 15 + 6)
    assert pick(rows[0, "gemm"], *keys) == ("compute", 2, 4, 2, 2 * (10 + 12), 11)
    assert rows[0, "gemm"]["share_pct"] == round(100 * 44 / layer0_us, 2)
    assert pick(rows[0, "all_reduce"], *keys) == ("comm", 2, 2, 1, 30, 15)
    assert pick(rows[0, "norm"], *keys) == ("compute", 2, 2, 1, 12, 6)
    assert (0, "copy") not in rows and (0, "compile") not in rows  # a memcpy; a warm-up kernel
    assert pick(rows[1, "gemm"], *keys) == ("compute", 2, 5, 2.5, 18 + 21, 39 / 5)
    assert rows[1, "gemm"]["share_pct"] == 100


def test_layer_launch_overhead(con: duckdb.DuckDBPyConnection) -> None:
    rows = {r["layer"]: r for r in query(con, "layer_launch_overhead")}
    delays = sorted([5, 6, 10, 4] * 2)
    keys = ("kernels", "unlinked", "delay_us_median", "delay_us_max", "delay_us_mean")
    assert pick(rows[0], *keys) == (8, 0, (5 + 6) / 2, 10, sum(delays) / 8)
    assert rows[0]["delay_us_p90"] == pytest.approx(10)
    assert pick(rows[1], *keys) == (4, 1, 2, 2, 2)


def test_layer_idle_gaps(con: duckdb.DuckDBPyConnection) -> None:
    rows = [pick(r, "step", "layer", "gap_us") for r in query(con, "layer_idle_gaps", run=1)]
    # layer 0: [30, 34) (the memcpy does not fill it); layer 1: [60, 62), and [70, 72) in step 2
    assert rows == [(0, 0, 4), (0, 1, 2), (1, 0, 4), (1, 1, 2), (2, 0, 4), (2, 1, 2), (2, 1, 2)]
    first = query(con, "layer_idle_gaps", run=1)[0]
    assert (first["start_ns"], first["end_ns"]) == (30 * US, 34 * US)
    assert [pick(r, "step", "layer") for r in query(con, "layer_idle_gaps", min_us=3)] == [(0, 0), (1, 0), (2, 0)]


def test_step_idle(con: duckdb.DuckDBPyConnection) -> None:
    rows = {r["step"]: r for r in query(con, "step_idle", run="synthetic")}
    keys = ("warmup", "kernels", "span_us", "busy_us", "idle_us", "gaps", "gaps_us", "longest_gap_us")
    # step 1 gaps: [30,34) [40,50) [60,62) [70,80)
    assert pick(rows[1], *keys) == (False, 7, 85, 59, 26, 4, 4 + 10 + 2 + 10, 10)
    assert rows[1]["idle_pct"] == round(100 * 26 / 85, 2)
    wide = {r["step"]: r for r in query(con, "step_idle", min_us=5)}
    assert pick(wide[1], "idle_us", "gaps", "gaps_us") == (26, 2, 20)


def test_kernel_top(con: duckdb.DuckDBPyConnection) -> None:
    rows = query(con, "kernel_top", run="synthetic", n=3)
    gemm_us = 3 * (10 + 12 + 10 + 8) + 3 + (5 + 2)  # every step, step 2's extra, rank 1
    total_us = gemm_us + (3 * 15 + 10) + 3 * 6 + 3 * 3 + 3 * 5 + 5
    keys = ("position", "short_name", "kind", "category", "ranks", "calls", "total_us")
    assert [pick(r, *keys) for r in rows] == [
        (1, "gemm", "kernel", "compute", 2, 3 * 4 + 1 + 2, gemm_us),
        (2, "all_reduce", "kernel", "comm", 2, 4, 55),
        (3, "norm", "kernel", "compute", 1, 3, 18),
    ]
    assert rows[0]["share_pct"] == round(100 * gemm_us / total_us, 2)
    assert [r["run_id"] for r in query(con, "kernel_top", n=1)] == [1, 2]


OVERLAP_KEYS = ("rank", "time_window", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "window_us")


def test_comm_overlap_whole_trace(con: duckdb.DuckDBPyConnection) -> None:
    rows = sqllib.overlap(con, run="synthetic")
    # rank 0, per step: comm 15, overlap 5; compute 49, plus compile (step 0) 5 and the extra gemm (step 2) 3
    assert [pick(r, *OVERLAP_KEYS) for r in rows] == [
        (0, "whole trace", 45, 49 * 3 + 5 + 3, 15, 30, 2 * STEP_US + 85),
        (1, "whole trace", 10, 5 + 2, 5, 5, 14),
    ]
    assert [r["overlap_pct"] for r in rows] == [33.33, 50]
    assert (rows[0]["window_start_ns"], rows[0]["window_end_ns"]) == (0, (2 * STEP_US + 85) * US)


def test_comm_overlap_of_chosen_steps(con: duckdb.DuckDBPyConnection) -> None:
    rows = sqllib.overlap(con, run="synthetic", steps=(1, 2))
    assert [pick(r, *OVERLAP_KEYS) for r in rows] == [(0, "steps 1-2", 30, 49 + 52, 10, 20, STEP_US + 85)]
    assert rows[0]["window_start_ns"] == STEP_US * US
    one = sqllib.overlap(con, run=1, steps=(2, 2))
    assert pick(one[0], "time_window", "comm_us", "kernels") == ("step 2", 15, 8)


def test_comm_overlap_by_run(con: duckdb.DuckDBPyConnection) -> None:
    rows = sqllib.overlap(con, run="other")
    assert [pick(r, "label", "rank", "comm_us", "overlap_us", "overlap_pct") for r in rows] == [("other", 0, 4, 2, 50)]
    assert {r["label"] for r in sqllib.overlap(con)} == {"synthetic", "other"}
    with pytest.raises(UsageError, match="no run 'missing'"):
        sqllib.overlap(con, run="missing")


def test_comm_breakdown_equals_the_interval_macros(con: duckdb.DuckDBPyConnection) -> None:
    """The one-sweep comm_breakdown gives what interval_length and interval_intersect give."""
    con.execute(
        "CREATE OR REPLACE TEMP VIEW k AS SELECT rank, step, start_ns, end_ns, category FROM gpu_activity"
        " WHERE run_id = 1 AND kind = 'kernel' AND step IS NOT NULL"
    )
    swept = con.execute(
        "SELECT rank, step, busy_ns, comm_ns, compute_ns, overlap_ns FROM comm_breakdown(k) ORDER BY ALL"
    ).fetchall()
    composed = con.execute(
        """
        WITH a AS (SELECT rank, step, start_ns, end_ns FROM k),
             c AS (SELECT rank, step, start_ns, end_ns FROM k WHERE category = 'comm'),
             p AS (SELECT rank, step, start_ns, end_ns FROM k WHERE category = 'compute'),
             o AS (SELECT rank, step, sum(end_ns - start_ns) AS length_ns FROM interval_intersect(c, p) GROUP BY ALL)
        SELECT rank, step, b.length_ns, coalesce(cl.length_ns, 0), coalesce(pl.length_ns, 0), coalesce(o.length_ns, 0)
        FROM interval_length(a) b
        LEFT JOIN interval_length(c) cl USING (rank, step)
        LEFT JOIN interval_length(p) pl USING (rank, step)
        LEFT JOIN o USING (rank, step)
        ORDER BY ALL
        """
    ).fetchall()
    assert swept == composed


def test_run_select(con: duckdb.DuckDBPyConnection) -> None:
    assert query(con, "run_select", run="other") == [{"run_id": 2, "label": "other"}]
    assert query(con, "run_select", run="2") == [{"run_id": 2, "label": "other"}]
    assert len(query(con, "run_select")) == 2
    # a value is bound, never spliced into the SQL
    assert query(con, "run_select", run="x' OR '1'='1") == []
