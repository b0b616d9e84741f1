"""The interval macros (queries/intervals/), case by case: input drawn as a timeline, the query, the expected rows.

In a drawing one cell is 1 ns: '-' covered, '_' not, '|' between two touching intervals.
"""

from __future__ import annotations

import itertools

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import database, timeline


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return database()


def _load(con: duckdb.DuckDBPyConnection, table: str, drawings: dict[str, list[str]]) -> None:
    """Table `table` (part, start_ns, end_ns): the intervals of each drawing line, partition by partition."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} (part VARCHAR, start_ns BIGINT, end_ns BIGINT)")
    for part, lines in drawings.items():
        for line in lines:
            for start, end in timeline(line):
                con.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", [part, start, end])


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[object, ...]]:
    return con.execute(sql).fetchall()


# (case, lines of one interval set, expected union)
UNION_CASES = [
    (
        "overlapping",
        ["A: - - - _ _ _ _",
         "A: _ _ - - - _ _"],
        "   - - - - - _ _",
    ),
    (
        "touching intervals merge",
        ["A: - - _ _ _ _ _",
         "A: _ _ - - _ _ _"],
        "   - - - - _ _ _",
    ),
    (
        "touching within one line",
        ["A: - -|- - _ _ _"],
        "   - - - - _ _ _",
    ),
    (
        "nested",
        ["A: - - - - - - _",
         "A: _ - - _ _ _ _",
         "A: _ _ _ - _ _ _"],
        "   - - - - - - _",
    ),
    (
        "disjoint stay apart",
        ["A: - _ - - _ - _"],
        "   - _ - - _ - _",
    ),
    (
        "identical",
        ["A: _ - - - _ _ _",
         "A: _ - - - _ _ _"],
        "   _ - - - _ _ _",
    ),
    (
        "identical starts, different ends",
        ["A: - - _ _ _ _ _",
         "A: - - - - _ _ _"],
        "   - - - - _ _ _",
    ),
    (
        "a long interval reaches over later ones",
        ["A: - - - - - _ _",
         "A: _ - _ - _ _ -"],
        "   - - - - - _ -",
    ),
    (
        "chain of overlaps",
        ["A: - - _ _ - - _",
         "A: _ - - _ _ - -",
         "A: _ _ - - - _ _"],
        "   - - - - - - -",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "lines", "expected"), UNION_CASES, ids=[c[0] for c in UNION_CASES])
def test_union(con: duckdb.DuckDBPyConnection, case: str, lines: list[str], expected: str) -> None:
    _load(con, "a", {"p": lines})
    got = _rows(con, "SELECT start_ns, end_ns FROM interval_union(a) ORDER BY start_ns")
    assert got == timeline(expected), case


def test_union_keeps_partitions_apart(con: duckdb.DuckDBPyConnection) -> None:
    _load(con, "a", {"x": ["- - - _ _ _"], "y": ["_ _ - - - _"]})
    got = _rows(con, "FROM interval_union(a) ORDER BY part, start_ns")
    assert got == [("x", 0, 3), ("y", 2, 5)]


def test_union_partitions_by_every_other_column(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE OR REPLACE TEMP TABLE k AS SELECT * FROM (VALUES (0, 1, 0, 10), (0, 1, 5, 20), (0, 2, 5, 20))"
        " t(rank, step, start_ns, end_ns)"
    )
    got = _rows(con, "FROM interval_union(k) ORDER BY rank, step")
    assert got == [(0, 1, 0, 20), (0, 2, 5, 20)]


def test_union_of_zero_length_interval_is_a_point(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE OR REPLACE TEMP TABLE a AS SELECT 'p' AS part, 4 AS start_ns, 4 AS end_ns")
    assert _rows(con, "SELECT start_ns, end_ns FROM interval_union(a)") == [(4, 4)]
    assert _rows(con, "SELECT length_ns FROM interval_length(a)") == [(0,)]


# (case, intervals as (start_ns, end_ns), expected union, expected gaps): zero-length intervals cannot be drawn
ZERO_LENGTH_CASES = [
    ("at the end of an interval", [(0, 5), (5, 5)], [(0, 5)], []),
    ("at the start of an interval", [(5, 5), (5, 9)], [(5, 9)], []),
    ("alone in a gap", [(0, 2), (4, 4), (6, 8)], [(0, 2), (4, 4), (6, 8)], [(2, 4), (4, 6)]),
    ("twice at one time", [(3, 3), (3, 3)], [(3, 3)], []),
    ("inside an interval", [(0, 10), (4, 4)], [(0, 10)], []),
]


@pytest.mark.parametrize(("case", "rows", "union", "gaps"), ZERO_LENGTH_CASES, ids=[c[0] for c in ZERO_LENGTH_CASES])
def test_zero_length_intervals(
    con: duckdb.DuckDBPyConnection,
    case: str,
    rows: list[tuple[int, int]],
    union: list[tuple[int, int]],
    gaps: list[tuple[int, int]],
) -> None:
    con.execute("CREATE OR REPLACE TEMP TABLE a (part VARCHAR, start_ns BIGINT, end_ns BIGINT)")
    con.executemany("INSERT INTO a VALUES ('p', ?, ?)", rows)
    assert _rows(con, "SELECT start_ns, end_ns FROM interval_union(a) ORDER BY start_ns") == union, case
    assert _rows(con, "SELECT start_ns, end_ns FROM interval_gaps(a) ORDER BY start_ns") == gaps, case
    assert _rows(con, "SELECT length_ns FROM interval_length(a)") == [(sum(e - s for s, e in union),)], case
    con.execute("CREATE OR REPLACE TEMP TABLE b AS SELECT 'p' AS part, -1::BIGINT AS start_ns, 20::BIGINT AS end_ns")
    got = _rows(con, "SELECT start_ns, end_ns FROM interval_intersect(b, a) ORDER BY start_ns")
    assert got == [(s, e) for s, e in union if e > s], case


# (case, set A, set B, expected A ∩ B)
INTERSECT_CASES = [
    (
        "partial overlap",
        ["A: _ - - - - _ _"],
        ["B: - - _ - - - -"],
        "    _ - _ - - _ _",
    ),
    (
        "no overlap",
        ["A: - - _ _ _ _ _"],
        ["B: _ _ _ - - _ _"],
        "    _ _ _ _ _ _ _",
    ),
    (
        "touching is not overlapping",
        ["A: - - _ _ _ _ _"],
        ["B: _ _ - - _ _ _"],
        "    _ _ _ _ _ _ _",
    ),
    (
        "B inside A",
        ["A: - - - - - - -"],
        ["B: _ _ - - _ - _"],
        "    _ _ - - _ - _",
    ),
    (
        "overlaps within a set count once",
        ["A: - - - - _ _ _",
         "A: _ - - - - _ _"],
        ["B: _ _ - - - - -",
         "B: _ _ _ - - - _"],
        "    _ _ - - - _ _",
    ),
    (
        "same start in both sets",
        ["A: _ - - - _ _ _"],
        ["B: _ - - _ _ - _"],
        "    _ - - _ _ _ _",
    ),
    (
        "a long interval of B reaches over later ones of A",
        ["A: _ - _ - _ _ -"],
        ["B: - - - - - _ _",
         "B: _ _ - _ _ _ _"],
        "    _ - _ - _ _ _",
    ),
    (
        "pieces split by gaps of either set",
        ["A: - - - _ - - -"],
        ["B: _ - - - - - _"],
        "    _ - - _ - - _",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "a", "b", "expected"), INTERSECT_CASES, ids=[c[0] for c in INTERSECT_CASES])
def test_intersect(con: duckdb.DuckDBPyConnection, case: str, a: list[str], b: list[str], expected: str) -> None:
    _load(con, "a", {"p": a})
    _load(con, "b", {"p": b})
    got = _rows(con, "SELECT start_ns, end_ns FROM interval_intersect(a, b) ORDER BY start_ns")
    assert got == timeline(expected), case


def test_intersect_only_within_a_partition(con: duckdb.DuckDBPyConnection) -> None:
    _load(con, "a", {"x": ["- - - - _"], "y": ["_ _ _ _ _"]})
    _load(con, "b", {"x": ["_ _ _ _ _"], "y": ["- - - - _"]})
    assert _rows(con, "FROM interval_intersect(a, b)") == []


# (case, intervals, expected length of their union)
LENGTH_CASES = [
    ("overlap counted once", ["- - - - _ _", "_ _ - - - _"], 5),
    ("disjoint add up", ["- - _ - _ -"], 4),
    ("nested", ["- - - - - -", "_ - - - _ _"], 6),
]


@pytest.mark.parametrize(("case", "lines", "expected"), LENGTH_CASES, ids=[c[0] for c in LENGTH_CASES])
def test_length(con: duckdb.DuckDBPyConnection, case: str, lines: list[str], expected: int) -> None:
    _load(con, "a", {"p": lines})
    assert _rows(con, "FROM interval_length(a)") == [("p", expected)], case


# (case, intervals, expected gaps between them)
GAPS_CASES = [
    (
        "gaps between merged intervals",
        ["A: - - _ _ - - _ -",
         "A: _ - _ _ _ _ _ _"],
        "   _ _ - - _ _ - _",
    ),
    (
        "no gap before the first or after the last",
        ["A: _ _ - - - _ _ _"],
        "   _ _ _ _ _ _ _ _",
    ),
    (
        "touching intervals leave no gap",
        ["A: - -|- _ - _ _ _"],
        "   _ _ _ - _ _ _ _",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "lines", "expected"), GAPS_CASES, ids=[c[0] for c in GAPS_CASES])
def test_gaps(con: duckdb.DuckDBPyConnection, case: str, lines: list[str], expected: str) -> None:
    _load(con, "a", {"p": lines})
    got = _rows(con, "SELECT start_ns, end_ns FROM interval_gaps(a) ORDER BY start_ns")
    assert got == timeline(expected), case


def test_timeline_helper_reads_drawings() -> None:
    assert timeline("A: _ - - _ -") == [(1, 3), (4, 5)]
    assert timeline("- -|- -") == [(0, 2), (2, 4)]
    assert timeline("_ - -", unit_ns=10) == [(10, 30)]


_INTERVALS = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), max_size=12)


def _cells(intervals: list[tuple[int, int]]) -> set[int]:
    return {t for start, length in intervals for t in range(start, start + length)}


@settings(max_examples=60, deadline=None)
@given(a=_INTERVALS, b=_INTERVALS)
def test_union_and_intersect_agree_with_counting_cells(
    con: duckdb.DuckDBPyConnection, a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    for table, intervals in (("a", a), ("b", b)):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} (part VARCHAR, start_ns BIGINT, end_ns BIGINT)")
        for start, length in intervals:
            con.execute(f"INSERT INTO {table} VALUES ('p', ?, ?)", [start, start + length])
    union = _rows(con, "SELECT start_ns, end_ns FROM interval_union(a) ORDER BY start_ns")
    assert all(end < next_start for (_, end), (next_start, _) in itertools.pairwise(union))
    assert _cells([(s, e - s) for s, e in union]) == _cells(a)
    both = _rows(con, "SELECT start_ns, end_ns FROM interval_intersect(a, b) ORDER BY start_ns")
    assert _cells([(s, e - s) for s, e in both]) == _cells(a) & _cells(b)
    assert all(end < next_start for (_, end), (next_start, _) in itertools.pairwise(both))
    gaps = _rows(con, "SELECT start_ns, end_ns FROM interval_gaps(a) ORDER BY start_ns")
    assert gaps == [(end, next_start) for (_, end), (next_start, _) in itertools.pairwise(union)]
    assert _rows(con, "SELECT length_ns FROM interval_length(a)") == ([(len(_cells(a)),)] if a else [])


@settings(max_examples=60, deadline=None)
@given(comm=_INTERVALS, compute=_INTERVALS, other=_INTERVALS)
def test_comm_breakdown_agrees_with_counting_cells(
    con: duckdb.DuckDBPyConnection,
    comm: list[tuple[int, int]],
    compute: list[tuple[int, int]],
    other: list[tuple[int, int]],
) -> None:
    con.execute("CREATE OR REPLACE TEMP TABLE k (part VARCHAR, start_ns BIGINT, end_ns BIGINT, category VARCHAR)")
    for category, intervals in (("comm", comm), ("compute", compute), ("memcpy", other)):
        for start, length in intervals:
            con.execute("INSERT INTO k VALUES ('p', ?, ?, ?)", [start, start + length, category])
    got = _rows(con, "SELECT kernels, busy_ns, comm_ns, compute_ns, overlap_ns FROM comm_breakdown(k)")
    kernels = len(comm) + len(compute) + len(other)
    cells = (_cells(comm + compute + other), _cells(comm), _cells(compute), _cells(comm) & _cells(compute))
    assert got == ([(kernels, *(len(c) for c in cells))] if kernels else [])
