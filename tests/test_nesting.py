"""CPU range nesting (ingest/nesting.py): the answer of a stack that pops the ranges ended by each start.

Timelines: one row per range of one thread, time to the right, `=` covering the range, `|` a zero-length range.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import KinetoTrace, ingested_ranges

from traceview.ingest.nesting import nest, range_nesting_table


def timeline(drawing: str) -> list[tuple[int, int]]:
    """(start, end) of each row: `=` from its first to its last column + 1; `|` a zero-length range."""
    ranges = []
    for row in drawing.strip().splitlines():
        body = row.split(":", 1)[1]
        if "|" in body:
            ranges.append((body.index("|"), body.index("|")))
        else:
            ranges.append((body.index("="), body.rindex("=") + 1))
    return ranges


def stack_nesting(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(depth, parent index or -1) per range of one thread, by the stack itself (the independent truth)."""
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i][0], -ranges[i][1], i))
    stack: list[int] = []
    result = [(0, -1)] * len(ranges)
    for i in order:
        while stack and ranges[stack[-1]][1] <= ranges[i][0]:
            stack.pop()
        result[i] = (len(stack), stack[-1] if stack else -1)
        stack.append(i)
    return result


def nested(ranges: list[tuple[int, int]], threads: list[int] | None = None) -> list[tuple[int, int]]:
    """nest() on `ranges` (sorted as range_nesting_table sorts them), answers in the input's order."""
    threads = threads or [0] * len(ranges)
    order = sorted(range(len(ranges)), key=lambda i: (threads[i], ranges[i][0], -ranges[i][1], i))
    thread = np.array([threads[i] for i in order])
    heads = np.ones(len(order), dtype=bool)
    heads[1:] = thread[1:] != thread[:-1]
    depth, parent = nest(heads, np.array([ranges[i][0] for i in order]), np.array([ranges[i][1] for i in order]))
    result = [(0, -1)] * len(ranges)
    for place, i in enumerate(order):
        result[i] = (int(depth[place]), order[parent[place]] if parent[place] >= 0 else -1)
    return result


def test_zero_length_ranges_are_children_of_what_encloses_them_and_siblings_at_one_instant() -> None:
    ranges = timeline(
        """
        A: ==========
        B:   |
        C:   |
        D:   ====
        E:       =====
        """
    )
    # D starts with B and C but is longer: it comes first, they nest in it; E starts where D ends: its sibling
    assert nested(ranges) == [(0, -1), (2, 3), (2, 3), (1, 0), (1, 0)] == stack_nesting(ranges)


def test_ranges_that_touch_are_siblings_and_a_lone_zero_length_range_is_outermost() -> None:
    ranges = timeline(
        """
        A: ===
        B:    ===
        C:       |
        """
    )
    assert nested(ranges) == [(0, -1), (0, -1), (0, -1)]


def test_threads_nest_apart() -> None:
    ranges = [(0, 10), (2, 4), (1, 3)]
    assert nested(ranges, threads=[1, 1, 2]) == [(0, -1), (1, 0), (0, -1)]


def test_partly_overlapping_ranges_count_the_ranges_still_open() -> None:
    ranges = timeline(
        """
        A: ======
        B:    ======
        C:        ===
        """
    )
    # at C's start A has ended and B is open: depth 1, its parent the latest range one level down (A)
    assert [d for d, _ in nested(ranges)] == [0, 1, 1]


@st.composite
def laminar(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Ranges that nest properly, zero-length ones and equal bounds included: cut from a random bracket walk."""
    ranges: list[tuple[int, int]] = []
    open_at: list[int] = []
    t = 0
    for action in draw(st.lists(st.sampled_from(["open", "close", "zero", "tick"]), max_size=60)):
        if action == "open":
            open_at.append(t)
        elif action == "close" and open_at:
            ranges.append((open_at.pop(), t))
        elif action == "zero":
            ranges.append((t, t))
        elif action == "tick":
            t += 1
    ranges += [(s, t) for s in open_at]
    return ranges


@settings(max_examples=300, deadline=None)
@given(laminar(), st.randoms(use_true_random=False))
def test_properly_nested_ranges_get_the_stacks_answer(ranges: list[tuple[int, int]], random) -> None:
    random.shuffle(ranges)
    truth = stack_nesting(ranges)
    got = nested(ranges)
    assert [d for d, _ in got] == [d for d, _ in truth]
    # among ranges with the same bounds a stack may pick either as the parent: compare the parents' bounds
    assert [ranges[p] if p >= 0 else None for _, p in got] == [ranges[p] if p >= 0 else None for _, p in truth]


def test_the_table_keeps_null_threads_apart_and_negative_durations_as_zero_length() -> None:
    con = duckdb.connect()
    con.execute(
        """CREATE TABLE r AS SELECT * FROM (VALUES
               (1, 0, NULL, 1, 0, 10, 'op'), (2, 0, NULL, 1, 2, 1, 'op'), (3, 0, 5, 1, 3, 4, 'op'),
               (4, 0, NULL, 1, 4, 6, 'mark')) t(range_id, rank, pid, tid, start_ns, end_ns, kind)"""
    )
    range_nesting_table(con, "r")
    rows = con.execute("SELECT range_id, depth, parent_id FROM _range_parent ORDER BY range_id").fetchall()
    assert rows == [(1, 0, None), (2, 1, 1), (3, 0, None)]


def test_a_zero_length_op_inside_a_profiler_step_is_its_child(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace()
    with trace.cpu_range("ProfilerStep#3"):
        trace.cpu_event("aten::empty", "cpu_op", 0.0)  # 0 µs, as the profiler writes short ops
        trace.launch_kernel("gemm")
    rows = [(name, depth, parent) for name, _, depth, parent in ingested_ranges(trace, tmp_path, db_path)]
    assert rows == [("ProfilerStep#3", 0, None), ("aten::empty", 1, "ProfilerStep#3")]
