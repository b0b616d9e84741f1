"""Steps every backend shares once its rows are in the schema's tables.

Reads and writes: the schema's tables for one run (`run_id`). Backends call `short_names_table`,
`kernel_class_table`, `launch_table` and the range nesting (ingest/nesting.py) while loading; `finish_run` then
nests CPU ranges where a backend did not (after --time-window/--steps cuts), and records the run's span and
counters in `ingest_stats`.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from .demangle import demangle
from .kernel_names import short_kernel_name

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class KernelClass:
    """One row of queries/kernel_classes.csv: kernels whose name matches `pattern` are `category`."""

    priority: int
    category: str
    comm_op: str
    pattern: str
    example: str


def numbered(source: str, order: str, row: str = "rowid") -> str:
    """A query of (row, n): each `row` of the staged rows `source` (a table, or a view with a WHERE) and its place in
    `order`, from 1 (`row`, the staging order, breaks ties). Numbered on the narrow key and joined back: a window
    over the wide rows sorts all of them."""
    return f"SELECT {row} AS row, row_number() OVER (ORDER BY {order}, {row}) AS n FROM {source}"


def kernel_classes(extra_comm_patterns: tuple[str, ...] = ()) -> list[KernelClass]:
    """The classification table, user patterns (`--comm-pattern`) first, in priority order."""
    text = resources.files("traceview.queries").joinpath("kernel_classes.csv").read_text()
    rows = [
        KernelClass(int(r["priority"]), r["category"], r["comm_op"], r["pattern"], r["example"])
        for r in csv.DictReader(text.splitlines())
    ]
    user = [KernelClass(i, "comm", "other", p, "") for i, p in enumerate(extra_comm_patterns)]
    return user + sorted(rows, key=lambda r: r.priority)


def short_names_table(con: duckdb.DuckDBPyConnection, names_sql: str, table: str = "_short_names") -> None:
    """Create temp table `table(name, short_name)` for the distinct names that `names_sql` returns (the mangled
    ones demangled first, all in one call)."""
    names = [
        row[0] for row in con.execute(f"SELECT DISTINCT name FROM ({names_sql}) WHERE name IS NOT NULL").fetchall()
    ]
    readable = demangle(names)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {table} AS "
        "SELECT unnest(?::VARCHAR[]) AS name, unnest(?::VARCHAR[]) AS short_name",
        [names, [short_kernel_name(readable.get(n, n)) for n in names]],
    )


def kernel_class_table(
    con: duckdb.DuckDBPyConnection, names_sql: str, extra_comm_patterns: tuple[str, ...] = ()
) -> None:
    """Create temp table `_name_class(name, category, comm_op)`: the first class matching each name of `names_sql`.

    Names that match no class are absent (they stay `compute`). Backends that classify while inserting join it.
    Each pattern is a constant of the statement (a bound parameter in a CASE), which DuckDB compiles once: joined
    as a column of a table of classes, it was compiled again for every name and class (100,000 distinct names
    took 26 s, against 0.1 s now).
    """
    classes = kernel_classes(extra_comm_patterns)
    for cls in classes:
        re.compile(cls.pattern)  # a user pattern that does not compile fails here with a clear error
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _kernel_classes AS SELECT unnest(range(?))::INTEGER AS rank_order, "
        "unnest(?::VARCHAR[]) AS category, unnest(?::VARCHAR[]) AS comm_op",
        [len(classes), [c.category for c in classes], [c.comm_op for c in classes]],
    )
    first_match = " ".join(f"WHEN regexp_matches(name, $p{i}) THEN {i}" for i in range(len(classes)))
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _name_class AS
        WITH ranked AS (  -- each distinct name with the first class (in priority order) whose pattern it matches
            SELECT name, CASE {first_match} END AS rank_order FROM (SELECT DISTINCT name FROM ({names_sql}))
        )
        SELECT r.name, c.category, c.comm_op FROM ranked r JOIN _kernel_classes c USING (rank_order)
        """,
        {f"p{i}": cls.pattern for i, cls in enumerate(classes)},
    )


def launch_table(con: duckdb.DuckDBPyConnection, launches_sql: str, scope: str = "rank") -> None:
    """Create temp table `_launch_by_corr(<scope>, correlation_id, launch_id, pid)` from launch rows.

    The first launch of a correlation id within a `scope` (a Kineto rank: one process) wins
    (count_shared_correlations counts ids with several), for backends that link GPU work while inserting it.
    nsys links with its own query (correlation ids are scoped by pid or rank there).
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _launch_by_corr AS
        SELECT {scope}, correlation_id, min(launch_id) AS launch_id, arg_min(pid, launch_id) AS pid
        FROM ({launches_sql}) WHERE correlation_id IS NOT NULL
        GROUP BY {scope}, correlation_id
        """
    )


def count_shared_correlations(con: duckdb.DuckDBPyConnection, run_id: int, same_process: str) -> None:
    """Record `correlation_ids_with_several_launches`: ids shared by more than one launch in one scope."""
    several = con.execute(
        f"""
        SELECT count(*) FROM (
            SELECT 1 FROM launches WHERE run_id = ? AND correlation_id IS NOT NULL
            GROUP BY {same_process}, correlation_id HAVING count(*) > 1
        )
        """,
        [run_id],
    ).fetchall()[0][0]
    add_stat(
        con,
        run_id,
        None,
        "correlation_ids_with_several_launches",
        "data_loss" if several else "info",
        several,
        "correlation ids shared by more than one launch call (the first call was used)",
    )


def compute_range_nesting(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Fill cpu_ranges.depth and parent_id of a run's ranges (see ingest/nesting.py)."""
    from .nesting import range_nesting_table  # numpy and pandas: loaded by an ingest, not with the CLI

    range_nesting_table(
        con,
        f"""(SELECT range_id, rank, pid, tid, start_ns, end_ns, kind FROM cpu_ranges
             WHERE run_id = {int(run_id)})""",
    )
    con.execute(
        """
        UPDATE cpu_ranges r SET depth = p.depth, parent_id = CASE WHEN p.depth > 0 THEN p.parent_id END
        FROM _range_parent p WHERE r.run_id = ? AND r.range_id = p.range_id
        """,
        [run_id],
    )


def apply_window(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    window: tuple[int | None, int | None, bool] | None,
    steps: tuple[int, ...] = (),
) -> None:
    """Keep only part of a run (--time-window, --steps): delete what lies outside, and count it.

    `window` is (start_ns, end_ns, relative): relative to the run's first event, else on the trace's clock;
    `steps` are ProfilerStep numbers, whose CPU spans (per rank) make the window. With both, an event must
    be in both. An event [s, e] is inside [lo, hi) when s < hi and (e > lo or s >= lo). CPU ranges, launch
    calls and GPU ranges are kept when inside; GPU work is kept when its launch call is kept, or, when it
    has no launch in the trace, when it is inside (so a kernel launched in step 3 but run after it stays).
    """
    if window is not None:
        lo, hi, relative = window
        origin = (event_span(con, run_id) or (0, 0))[0] if relative else 0
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _window AS
            SELECT NULL::INTEGER AS rank,
                   {origin} + {int(lo) if lo is not None else -(1 << 62)}::HUGEINT AS lo,
                   {origin} + {int(hi) if hi is not None else 1 << 62}::HUGEINT AS hi
            """
        )
        _delete_outside(con, run_id, "time_window")
    if steps:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _window AS
            SELECT rank, start_ns::HUGEINT AS lo, end_ns::HUGEINT AS hi FROM cpu_ranges
            WHERE run_id = $run AND name LIKE 'ProfilerStep#%'
              AND {PROFILER_STEP_NUMBER} IN ({", ".join(map(str, steps))})
            """,
            {"run": run_id},
        )
        _delete_outside(con, run_id, "steps")


def event_span(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[int, int] | None:
    """(first start, last end) of the run's GPU work, launch calls and CPU ranges, in ns; None when it has none."""
    row = con.execute(
        """
        SELECT min(lo), max(hi) FROM (
            SELECT min(start_ns) AS lo, max(end_ns) AS hi FROM gpu_activity WHERE run_id = $run
            UNION ALL SELECT min(start_ns), max(end_ns) FROM launches WHERE run_id = $run
            UNION ALL SELECT min(start_ns), max(end_ns) FROM cpu_ranges WHERE run_id = $run
        )
        """,
        {"run": run_id},
    ).fetchall()[0]
    return None if row[0] is None else (int(row[0]), int(row[1]))


# The N of a CPU range named ProfilerStep#N (NULL for any other name): the step numbers --steps takes.
PROFILER_STEP_NUMBER = "TRY_CAST(regexp_extract(name, '^ProfilerStep#(\\d+)$', 1) AS BIGINT)"


def profiler_step_numbers(con: duckdb.DuckDBPyConnection, run_id: int) -> list[int]:
    """The distinct N of the run's ProfilerStep#N ranges, in order."""
    rows = con.execute(
        f"""SELECT DISTINCT {PROFILER_STEP_NUMBER} AS n FROM cpu_ranges
            WHERE run_id = ? AND name LIKE 'ProfilerStep#%' AND n IS NOT NULL ORDER BY n""",
        [run_id],
    ).fetchall()
    return [r[0] for r in rows]


def _delete_outside(con: duckdb.DuckDBPyConnection, run_id: int, why: str) -> None:
    """Delete the run's rows outside every interval of temp table _window(rank, lo, hi); count them."""

    def inside(alias: str) -> str:
        return f"""EXISTS (SELECT 1 FROM _window w WHERE (w.rank IS NULL OR w.rank = {alias}.rank)
                   AND {alias}.start_ns < w.hi AND ({alias}.end_ns > w.lo OR {alias}.start_ns >= w.lo))"""

    dropped = {}
    for table in ("cpu_ranges", "launches", "gpu_ranges"):
        dropped[table] = con.execute(
            f"DELETE FROM {table} t WHERE t.run_id = ? AND NOT {inside('t')}", [run_id]
        ).fetchall()[0][0]
    dropped["gpu_activity"] = con.execute(
        f"""
        DELETE FROM gpu_activity t WHERE t.run_id = ? AND NOT (
            CASE WHEN t.launch_id IS NOT NULL
                 THEN t.launch_id IN (SELECT launch_id FROM launches WHERE run_id = ?)
                 ELSE {inside("t")} END)
        """,
        [run_id, run_id],
    ).fetchall()[0][0]
    for table, n in dropped.items():
        add_stat(
            con,
            run_id,
            None,
            f"outside_{why}.{table}",
            "info",
            n,
            f"rows of {table} left out by --{why.replace('_', '-')}",
        )


def add_stat(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    rank: int | None,
    name: str,
    severity: str,
    value: float,
    description: str,
) -> None:
    """Record one counter in ingest_stats."""
    add_stats(con, [(run_id, rank, name, severity, value, description)])


def add_stats(con: duckdb.DuckDBPyConnection, rows: list[tuple[int, int | None, str, str, float, str]]) -> None:
    """Record counters (run_id, rank, name, severity, value, description) in ingest_stats, in one statement."""
    if rows:
        columns = list(zip(*rows, strict=True))
        con.execute(
            "INSERT INTO ingest_stats SELECT unnest(?::INTEGER[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[]), unnest(?::DOUBLE[]), unnest(?::VARCHAR[])",
            [list(c) for c in columns],
        )


def record_link_stats(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Count, per rank, kernels and how many are linked to their launch call."""
    rows = con.execute(
        """
        SELECT rank, count(*) FILTER (kind = 'kernel') AS kernels,
               count(*) FILTER (kind = 'kernel' AND launch_id IS NULL) AS unlinked,
               count(*) FILTER (kind = 'memcpy') AS memcpy, count(*) FILTER (kind = 'memset') AS memset
        FROM gpu_activity WHERE run_id = ? GROUP BY rank ORDER BY rank
        """,
        [run_id],
    ).fetchall()
    stats = []
    for rank, kernels, unlinked, memcpy, memset in rows:
        share = 100.0 * (kernels - unlinked) / kernels if kernels else 100.0
        stats += [
            (run_id, rank, "kernels", "info", kernels, "GPU kernels kept"),
            (run_id, rank, "memcpy", "info", memcpy, "GPU memory copies kept"),
            (run_id, rank, "memset", "info", memset, "GPU memory sets kept"),
            (
                run_id,
                rank,
                "kernels_without_launch",
                "data_loss" if unlinked else "info",
                unlinked,
                "kernels whose launch call (runtime or driver API) is not in the trace",
            ),
            (
                run_id,
                rank,
                "kernels_linked_to_launch_pct",
                "info",
                round(share, 3),
                "percentage of kernels linked to their launch call through the correlation id",
            ),
        ]
    add_stats(con, stats)


def finish_run(con: duckdb.DuckDBPyConnection, run_id: int, ranges_nested: bool = False) -> None:
    """Nesting, span and counters: what is the same for every backend.

    A backend that nested ranges while inserting (ingest/nesting.py) says so, and that pass is skipped.
    """
    if not ranges_nested:
        compute_range_nesting(con, run_id)
    record_link_stats(con, run_id)
    warn_other_time_units(con, run_id)
    lo, hi = event_span(con, run_id) or (None, None)
    con.execute(
        """
        UPDATE runs SET trace_start_ns = $lo, trace_end_ns = $hi,
               device_names = coalesce((SELECT list(DISTINCT device_name ORDER BY device_name) FROM ranks
                                        WHERE run_id = $run AND device_name IS NOT NULL), [])
        WHERE runs.run_id = $run
        """,
        {"run": run_id, "lo": lo, "hi": hi},
    )


UNIT_FACTOR = 300  # a rank whose typical kernel is this many times longer or shorter than the others' keeps other units


def warn_other_time_units(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Warn (ingest_stats, shown with the run) about each rank whose median kernel lasts UNIT_FACTOR times longer or
    shorter than the ranks' median (the lower one: an actual rank's): its file likely writes times in another unit
    (ns where Kineto writes µs), and the run's span and medians mix units. One model's ranks run kernels alike."""
    rows = con.execute(
        """
        WITH per_rank AS (  -- each rank's typical kernel duration
            SELECT rank, median(end_ns - start_ns) AS typical FROM gpu_activity
            WHERE run_id = $run AND kind = 'kernel' AND end_ns > start_ns GROUP BY rank
        ), run AS (  -- the ranks' typical one (an actual rank's value, the lower of two)
            SELECT quantile_disc(typical, 0.5) AS typical, count(*) AS ranks FROM per_rank
        )
        SELECT p.rank, p.typical / r.typical FROM per_rank p, run r
        WHERE r.ranks > 1 AND r.typical > 0 AND (p.typical >= $factor * r.typical OR p.typical * $factor <= r.typical)
        ORDER BY p.rank
        """,
        {"run": run_id, "factor": UNIT_FACTOR},
    ).fetchall()
    add_stats(
        con,
        [
            (
                run_id,
                rank,
                "warning",
                "data_loss",
                1,
                f"rank {rank}: its kernels last {_times(ratio)} as long as the other ranks' (medians): its times "
                "are likely in another unit (ns where the others have µs?); the run's span and medians mix units",
            )
            for rank, ratio in rows
        ],
    )


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 1 else f"1/{1 / ratio:,.0f}"
