"""kernel_busy and kernel_gaps, precomputed by segmentation (segment/busy.py), against the SQL library's macros.

The tables must hold exactly what comm_breakdown and interval_gaps give over the same kernels, for every
scope: the queries that read them (layer_metrics, step_metrics, step_idle, layer_idle_gaps, comm_overlap)
return what they returned when they swept the kernels themselves.
"""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import Kernel, add_kernels, database, segment, timeline

from traceview import sqllib
from traceview.segment import busy

# The kernels of each scope, as the queries chose them before the tables existed.
SCOPE_KERNELS = {
    "rank": ("run_id, rank", "TRUE"),
    "step": ("run_id, rank, step", "step IS NOT NULL"),
    "layer": ("run_id, rank, step, layer", "step IS NOT NULL AND layer IS NOT NULL"),
    "draft": ("run_id, rank, step", "step IS NOT NULL AND role = 'draft'"),
}
HUGE = 2**60  # instance spans that add up to 2**62 ns or more take the instance-by-instance path


def swept(con: duckdb.DuckDBPyConnection, scope: str) -> list[tuple[object, ...]]:
    keys, where = SCOPE_KERNELS[scope]
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW k AS SELECT {keys}, start_ns, end_ns, category FROM gpu_activity"
        f" WHERE kind = 'kernel' AND {where}"
    )
    return con.execute(
        f"SELECT {keys}, kernels, first_start_ns, last_end_ns, busy_ns, comm_ns, compute_ns, overlap_ns"
        " FROM comm_breakdown(k) ORDER BY ALL"
    ).fetchall()


def stored(con: duckdb.DuckDBPyConnection, scope: str) -> list[tuple[object, ...]]:
    keys, _ = SCOPE_KERNELS[scope]
    return con.execute(
        f"SELECT {keys}, kernels, first_start_ns, last_end_ns, busy_ns, comm_ns, compute_ns, overlap_ns"
        " FROM kernel_busy WHERE scope = ? ORDER BY ALL",
        [scope],
    ).fetchall()


def gaps(con: duckdb.DuckDBPyConnection, scope: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """(interval_gaps over the scope's kernels, the kernel_gaps rows of the scope)."""
    keys, where = SCOPE_KERNELS[scope]
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW g AS SELECT {keys}, start_ns, end_ns FROM gpu_activity"
        f" WHERE kind = 'kernel' AND {where}"
    )
    expected = con.execute(f"SELECT {keys}, start_ns, end_ns FROM interval_gaps(g) ORDER BY ALL").fetchall()
    found = con.execute(
        f"SELECT {keys}, start_ns, end_ns FROM kernel_gaps WHERE scope = ? ORDER BY ALL", [scope]
    ).fetchall()
    return expected, found


def assert_tables_match_macros(con: duckdb.DuckDBPyConnection) -> None:
    for scope in busy.SCOPES:
        assert stored(con, scope) == swept(con, scope), scope
    for scope in busy.GAP_SCOPES:
        expected, found = gaps(con, scope)
        assert found == expected, scope


kernels = st.builds(
    lambda start, length, category, kind, rank, step, layer: Kernel(
        start, start + length, category=category, kind=kind, rank=rank, step=step, layer=layer
    ),
    start=st.one_of(st.integers(0, 60), st.integers(0, 4).map(lambda i: i * HUGE)),
    length=st.integers(0, 25),
    category=st.sampled_from(["compute", "compute", "comm", "memset"]),
    kind=st.sampled_from(["kernel", "kernel", "kernel", "memcpy"]),
    rank=st.integers(0, 1),
    step=st.one_of(st.none(), st.integers(0, 2)),
    layer=st.one_of(st.none(), st.integers(0, 2)),
)


@pytest.mark.heavy
@settings(max_examples=60, deadline=None)
@given(st.lists(kernels, max_size=30))
def test_tables_hold_what_the_macros_compute(rows: list[Kernel]) -> None:
    con = database()
    add_kernels(con, rows)
    segment(con)
    assert_tables_match_macros(con)


def test_a_drawn_layer() -> None:
    """comm   _ _ - - - - - - _ _ _ _
    gemm   - - - _ _ _ _ _ _ _ - -
    gemm   _ - - - _ _ _ _ _ _ _ _     -> busy 7 + 2, comm 6, compute 4 + 2, overlap 3, one gap [7, 10)."""
    drawn = {
        "comm": timeline("c: _ - - - - - - _ _ _ _"),
        "compute": timeline("g: - - - _ _ _ _ _ _ _ - -") + timeline("g: _ - - - _ _ _ _ _ _ _ _"),
    }
    con = database()
    add_kernels(con, [Kernel(a, b, category=c, step=0, layer=0) for c, pairs in drawn.items() for a, b in pairs])
    segment(con)
    row = con.execute(
        "SELECT kernels, busy_ns, comm_ns, compute_ns, overlap_ns FROM kernel_busy WHERE scope = 'layer'"
    ).fetchall()
    assert row == [(4, 7 + 2, 6, 4 + 2, 3)]
    assert con.execute("SELECT start_ns, end_ns FROM kernel_gaps WHERE scope = 'layer'").fetchall() == [(7, 10)]


def test_instances_far_apart_in_time() -> None:
    """Instance spans that add up past int64's range are measured instance by instance, with the same result."""
    con = database()
    add_kernels(
        con,
        [
            Kernel(0, 10, step=0, layer=0),
            Kernel(5, 3 * HUGE, category="comm", step=0, layer=0),
            Kernel(3 * HUGE + 1, 3 * HUGE + 9, step=0, layer=1),
            Kernel(4 * HUGE, 4 * HUGE + 5, step=1, layer=0),
            Kernel(4 * HUGE + 8, 4 * HUGE + 9, step=1, layer=0),
        ],
    )
    segment(con)
    assert_tables_match_macros(con)
    assert con.execute("SELECT busy_ns FROM kernel_busy WHERE scope = 'rank'").fetchall() == [(3 * HUGE + 8 + 5 + 1,)]


def test_segmenting_again_replaces_the_rows() -> None:
    con = database()
    add_kernels(con, [Kernel(0, 10, step=0, layer=0), Kernel(20, 30, step=0, layer=0)])
    segment(con)
    busy.record(con, 1)
    assert con.execute("SELECT scope, count(*) FROM kernel_busy GROUP BY ALL ORDER BY ALL").fetchall() == [
        ("layer", 1),
        ("rank", 1),
        ("step", 1),
    ]
    assert con.execute("SELECT count(*) FROM kernel_gaps").fetchall() == [(2,)]


def test_comm_overlap_of_steps_that_overlap_in_time() -> None:
    """Step 0's all-reduce still runs while step 1 computes: the steps' figures do not add up.

    step 0  comm   - - - - - - _ _      compute  - - _ _ _ _ _ _
    step 1  compute                              _ _ _ _ - - - -
    steps 0-1: comm 6, compute 2 + 4, overlap 2 + 2 (step 0 alone overlaps 2, step 1 alone 0)."""
    con = database()
    add_kernels(
        con,
        [
            Kernel(0, 6, "all_reduce", category="comm", step=0),
            Kernel(0, 2, step=0),
            Kernel(4, 8, step=1),
        ],
    )
    segment(con)
    rows = sqllib.overlap(con, steps=(0, 1))
    keys = ("time_window", "kernels", "comm_us", "compute_us", "overlap_us", "window_us")
    assert [tuple(r[k] for k in keys) for r in rows] == [("steps 0-1", 3, 6 / 1e3, 6 / 1e3, 4 / 1e3, 8 / 1e3)]
    one = sqllib.overlap(con, steps=(0, 0))
    assert [tuple(r[k] for k in keys) for r in one] == [("step 0", 2, 6 / 1e3, 2 / 1e3, 2 / 1e3, 6 / 1e3)]
