"""The Python API that the CLI is a thin layer over: ingest traces, open databases, summarize runs.

Each stage lives in its own module and talks to the others only through the database tables:
ingest (per backend) -> segmentation -> queries -> diff / plots.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from . import db, plotdata, sqllib
from . import diff as diff_stage
from . import export as export_stage
from .choices import Kind
from .db import first_row
from .errors import MORE_MEMORY, DatabaseError, UsageError
from .ingest import (
    STAGE_COMMIT,
    STAGE_SEGMENTATION,
    IngestOptions,
    RetryCarefully,
    Source,
    checked_label,
    default_label,
    delete_run,
    labelled_run,
    load_run,
    opened_source,
    report_stage,
)
from .scratch import refuse_inputs, replacing
from .segment import Method, SegmentOptions, SegmentResult, segment_run
from .segment.report import LayerReport, layer_report
from .stepsel import format_steps

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .parquet import Staging
    from .report import RunInput


@dataclass(frozen=True)
class RunSummary:
    """What a run holds: the figures `traceview ingest` and `traceview info` print."""

    run_id: int
    label: str
    backend: str
    source_path: str
    ranks: int
    events: int
    kernels: int
    memcpy: int
    memset: int
    launches: int
    cpu_ranges: int
    steps: int
    layers: int
    span_ms: float
    device_names: tuple[str, ...]
    warnings: tuple[str, ...]
    # Counters of data lost or values changed while reading (ingest_stats, severity not info), as "name count".
    data_loss: tuple[str, ...] = ()
    already_ingested: bool = False


def ingest(
    paths: Sequence[str | Path],
    database: str | Path,
    options: IngestOptions | None = None,
    segment_options: SegmentOptions | None = None,
    parquet: str | Path | None = None,
) -> RunSummary:
    """Ingest one run (a trace file, several per-rank files, or a directory of them) into `database`, then
    find its steps and layers (`segment_options`, see traceview.segment); with `parquet`, also write the run into
    that Parquet dataset (traceview.parquet).

    Atomic: on any error the database is left as it was (a new one is not created), and so is the dataset: its
    partitions are moved into place just before the database commits, and back out if the commit fails.
    Idempotent: the same source under the same label is not ingested twice; `options.replace` replaces a run of
    that label.
    """
    options = options or IngestOptions()
    with opened_source(paths) as source:
        while True:
            try:
                with _dataset(parquet) as dataset:
                    return _ingest_once(source, database, options, segment_options, dataset)
            except RetryCarefully as retry:  # a fast read failed and DuckDB aborted the transaction: start over
                options = retry.retried(options)
            except duckdb.OutOfMemoryException as error:  # a statement could not spill enough under the cap
                options = _without_memory_cap(options, database, error)


def _dataset(directory: str | Path | None) -> contextlib.AbstractContextManager[Staging | None]:
    """A staged Parquet dataset to write the run into (traceview.parquet.staged), or nothing."""
    if directory is None:
        return contextlib.nullcontext()
    from .parquet import staged

    return staged(directory)


def _memory_cap(options: IngestOptions, source: Source) -> int | None:
    """DuckDB's memory cap for this ingest in bytes (see db.memory_budget), None for none."""
    if options.memory_limit is None:
        return db.memory_budget(source.data_bytes)
    return options.memory_limit or None


def _without_memory_cap(options: IngestOptions, database: str | Path, error: Exception) -> IngestOptions:
    """Options to ingest again without a cap, when the cap was traceview's own; else a one-line error."""
    if options.memory_limit is None:
        return dataclasses.replace(options, memory_limit=0)
    reason = str(error).splitlines()[0]
    if options.memory_limit == 0:  # no cap, and still too little memory
        raise DatabaseError(
            database,
            f"DuckDB ran out of memory ({reason})",
            MORE_MEMORY,
        ) from error
    raise DatabaseError(
        database,
        f"DuckDB ran out of memory under --memory-limit {options.memory_limit:,} bytes ({reason})",
        "raise --memory-limit, or pass --memory-limit none",
    ) from error


def _ingest_once(
    source: Source,
    database: str | Path,
    options: IngestOptions,
    segment_options: SegmentOptions | None,
    dataset: Staging | None,
) -> RunSummary:
    label = checked_label(options.label) if options.label else default_label(source, options)
    readable = (*source.files, *([dataset.root] if dataset else []))
    with db.write_session(database, _memory_cap(options, source), readable, options.threads) as con:
        taken = labelled_run(con, label)
        if taken and not options.replace and taken[1] == source.sha256:
            sqllib.install(con)  # the session dropped the stored views and macros
            _publish(con, dataset, taken[0])
            return summarize(con, taken[0], already_ingested=True)
        if taken and not options.replace:
            raise DatabaseError(
                database,
                f"a different run is already labelled {label!r}",
                "pass another --label, or --replace",
            )
        if taken:
            delete_run(con, taken[0])
        run_id = load_run(con, source, label, options)
        report_stage(options.progress, STAGE_SEGMENTATION)
        segment_run(con, run_id, segment_options)
        sqllib.install(con)
        summary = summarize(con, run_id)
        _publish(con, dataset, run_id)
        report_stage(options.progress, STAGE_COMMIT)  # when the session closes
        return summary


def _publish(con: duckdb.DuckDBPyConnection, dataset: Staging | None, run_id: int) -> None:
    """Write the run into the dataset and move it into place, as the last step before the database commits."""
    if dataset is not None:
        dataset.write(con, [run_id])
        dataset.publish()


def export_parquet(database: str | Path, directory: str | Path, run: str | None = None) -> Path:
    """Write the database (or the run labelled `run`) as a hive-partitioned Parquet dataset (traceview.parquet).

    DIR/<table>/run_id=<id>/rank=<rank>/*.parquet: DuckDB, Spark or Trino query it in place with the same SQL.
    """
    from . import parquet

    with parquet.staged(directory) as dataset, db.connect(database, readable=[dataset.root]) as con:
        ids = None
        if run is not None:
            row = first_row(con.execute("SELECT run_id FROM runs WHERE label = ?", [run]).fetchall())
            if row is None:
                raise DatabaseError(database, f"no run labelled {run!r}", "list the runs with `traceview info DB`")
            ids = [row[0]]
        dataset.write(con, ids)
        dataset.publish()
    return Path(directory)


def connect(database: str | Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to a traceview database (read-only unless asked)."""
    return db.connect(database, read_only=read_only)


# What `sql` runs: queries. Anything else (SET, COPY, EXPORT, INSTALL, ATTACH, PRAGMA, CALL, CREATE...) is refused
# before it runs, though the read-only connection and its locked configuration would stop most of it anyway.
READ_STATEMENTS = ("SELECT", "EXPLAIN")


def sql(database: str | Path, query: str) -> tuple[list[str], list[tuple[object, ...]]]:
    """Run one read-only statement (SELECT, including FROM-first, WITH, DESCRIBE, SUMMARIZE; or EXPLAIN) on the
    database: (column names, rows). The SQL library is there as TEMP objects (db.connect)."""
    with connect(database) as con:
        try:
            statements = con.extract_statements(query)
            if len(statements) != 1 or statements[0].type.name not in READ_STATEMENTS:
                raise UsageError(database, _not_a_query(statements), "give one SELECT (or EXPLAIN) statement")
            result = con.execute(statements[0])
            columns = [d[0] for d in result.description or []]
            return columns, result.fetchall()
        except duckdb.Error as error:
            failed = UsageError(database, f"the SQL failed: {str(error).splitlines()[0]}", "fix the query")
            raise (db.damage_error(error, [Path(database)]) or failed) from error


def _not_a_query(statements: list[duckdb.Statement]) -> str:
    if not statements:
        return "the SQL holds no statement"
    if len(statements) > 1:
        return f"the SQL holds {len(statements)} statements; sql runs one, read-only"
    return f"sql runs one read-only statement, not {statements[0].type.name}"


def run_ids(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Every run id in the database, in order."""
    return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]


def run_labels(database: str | Path) -> dict[int, str]:
    """Run id -> label, of every run in the database."""
    with connect(database) as con:
        return dict(con.execute("SELECT run_id, label FROM runs ORDER BY run_id").fetchall())


def summarize(con: duckdb.DuckDBPyConnection, run_id: int, already_ingested: bool = False) -> RunSummary:
    """Counts and span of one run."""
    row = first_row(
        con.execute(
            """
        SELECT r.label, r.backend, r.source_path, coalesce(r.device_names, []),
               (trace_end_ns - trace_start_ns) / 1e6,
               (SELECT count(*) FROM ranks WHERE run_id = $run),
               (SELECT coalesce(sum(value), 0) FROM ingest_stats WHERE run_id = $run AND name = 'events'),
               (SELECT count(*) FILTER (kind = 'kernel') FROM gpu_activity WHERE run_id = $run),
               (SELECT count(*) FILTER (kind = 'memcpy') FROM gpu_activity WHERE run_id = $run),
               (SELECT count(*) FILTER (kind = 'memset') FROM gpu_activity WHERE run_id = $run),
               (SELECT count(*) FROM launches WHERE run_id = $run),
               (SELECT count(*) FROM cpu_ranges WHERE run_id = $run),
               (SELECT count(*) FROM steps WHERE run_id = $run),
               (SELECT count(*) FROM layers WHERE run_id = $run),
               (SELECT list(description ORDER BY description) FROM ingest_stats
                 WHERE run_id = $run AND name IN ('warning', 'segment.warning')),
               (SELECT list(name || ' ' || CAST(total AS BIGINT) ORDER BY name) FROM (
                    SELECT name, sum(value) AS total FROM ingest_stats
                    WHERE run_id = $run AND severity <> 'info' AND name NOT IN ('warning', 'segment.warning')
                      AND value > 0
                    GROUP BY name))
        FROM runs r WHERE r.run_id = $run
        """,
            {"run": run_id},
        ).fetchall()
    )
    if row is None:
        raise DatabaseError(None, f"no run {run_id} in the database", "list the runs with `traceview info DB`")
    (
        label,
        backend,
        source_path,
        devices,
        span_ms,
        ranks,
        events,
        kernels,
        memcpy,
        memset,
        launches,
        cpu_ranges,
        steps,
        layers,
        warnings,
        data_loss,
    ) = row
    return RunSummary(
        run_id=run_id,
        label=label,
        backend=backend,
        source_path=source_path,
        ranks=ranks,
        events=int(events),
        kernels=kernels,
        memcpy=memcpy,
        memset=memset,
        launches=launches,
        cpu_ranges=cpu_ranges,
        steps=steps,
        layers=layers,
        span_ms=round(span_ms or 0.0, 3),
        device_names=tuple(devices),
        warnings=tuple(warnings or ()),
        data_loss=tuple(data_loss or ()),
        already_ingested=already_ingested,
    )


def data_loss(con: duckdb.DuckDBPyConnection) -> list[dict[str, object]]:
    """Counters of ingest_stats that report lost or unusable data, per run and rank (not the warnings, which
    RunSummary.warnings holds)."""
    result = con.execute(
        """
        SELECT r.label AS run, s.rank, s.name, s.value, s.description
        FROM ingest_stats s JOIN runs r USING (run_id)
        WHERE s.severity <> 'info' AND s.value > 0 AND s.name <> 'warning'
        ORDER BY r.run_id, s.rank, s.name
        """
    )
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]


def diff(
    a: str | Path, b: str | Path | None = None, label_a: str | None = None, label_b: str | None = None
) -> diff_stage.Diff:
    """Compare run B against run A layer by layer (see diff.compare).

    `b` is a second database, or None to compare two labelled runs of database `a`.
    """
    with connect(a) as con_a, connect(b if b is not None else a) as con_b:
        run_a = diff_stage.resolve_run(con_a, label_a, str(a))
        if b is None and label_b is None:
            raise DatabaseError(a, "one database needs two run labels to compare", "pass --a LABEL --b LABEL")
        run_b = diff_stage.resolve_run(con_b, label_b, str(b if b is not None else a))
        return diff_stage.compare(*told_apart(run_a, run_b, a, b if b is not None else a))


def told_apart(
    run_a: diff_stage.RunRef, run_b: diff_stage.RunRef, a: str | Path, b: str | Path
) -> tuple[diff_stage.RunRef, diff_stage.RunRef]:
    """Runs A and B (of databases `a` and `b`) named so that they can be told apart: two runs with one label (the
    same trace file name ingested into two databases) take their database's file name, `eager (before.db)`, or
    its path when the file names are the same too, or their run id within one database."""
    if run_a.label != run_b.label:
        return run_a, run_b
    if Path(a).resolve() == Path(b).resolve():
        where = (f"run {run_a.run_id}", f"run {run_b.run_id}")
    elif Path(a).name != Path(b).name:
        where = (Path(a).name, Path(b).name)
    else:
        where = (str(a), str(b))
    return (
        dataclasses.replace(run_a, label=f"{run_a.label} ({where[0]})"),
        dataclasses.replace(run_b, label=f"{run_b.label} ({where[1]})"),
    )


def segment(database: str | Path, options: SegmentOptions | None = None, run: str | None = None) -> list[SegmentResult]:
    """Find steps and layers again in an ingested database (every run, or the one labelled `run`)."""
    connect(database).close()  # an existing traceview database, not a new one
    with db.write_session(database) as con:
        targets = [diff_stage.resolve_run(con, run, str(database)).run_id] if run else run_ids(con)
        results = [segment_run(con, run_id, options) for run_id in targets]
        _refuse_forced_empty(con, database, options, results)
        sqllib.install(con)
        return results


def _refuse_forced_empty(
    con: duckdb.DuckDBPyConnection, database: str | Path, options: SegmentOptions | None, results: list[SegmentResult]
) -> None:
    """A method the user forced (`--method graph`) that finds no layers in a run with steps is refused, in one line
    with its reason: the session rolls back, so the layers found before are kept (not replaced by none)."""
    method = options.method if options else None
    empty = [r for r in results if r.steps and not r.layers]
    if method in (None, Method.auto) or not empty:
        return
    label = first_row(con.execute("SELECT label FROM runs WHERE run_id = ?", [empty[0].run_id]).fetchall())[0]
    why = next((n for n in empty[0].notes if n.startswith("no layers found")), "no layers found")
    raise UsageError(
        database,
        f"--method {method.value} found no layers in run {label} ({why})",
        "the layers found before are kept; try --method auto or another method",
    )


def layers(database: str | Path, run: str | None = None) -> LayerReport:
    """Per-layer kernels and microseconds of one run (the first, or the one labelled `run`)."""
    with connect(database) as con:
        ref = diff_stage.resolve_run(con, run, str(database))
        return layer_report(con, ref.run_id, ref.label)


def layer_ranks(database: str | Path, run: str | None = None) -> tuple[list[dict[str, object]], dict[int, str]]:
    """Per layer, phase and rank, the medians across the rank's steady steps (query layer_summary); and per layer
    index the figure whose ranks differ most (query layer_rank_spread, the widest of any phase)."""
    with connect(database) as con:
        ref = diff_stage.resolve_run(con, run, str(database))
        sqllib.ensure_installed(con)
        result = con.execute(
            """SELECT rank, phase, layer, steps AS instances, kernels_median AS kernels,
                      span_us_median AS span_us, busy_us_median AS busy_us,
                      comm_us_median AS comm_us, exposed_comm_us_median AS exposed_comm_us
               FROM layer_summary WHERE run_id = ? ORDER BY rank, phase, layer""",
            [ref.run_id],
        )
        columns = [d[0] for d in result.description]
        rows = [dict(zip(columns, r, strict=True)) for r in result.fetchall()]
        spread = con.execute(
            """SELECT layer, arg_max(widest, widest_ratio) FROM layer_rank_spread
               WHERE run_id = ? AND widest IS NOT NULL GROUP BY layer""",
            [ref.run_id],
        ).fetchall()
    return rows, dict(spread)


# Pictures, report and export (issue 7): open the databases, pick the runs, hand over to plot/report/export.
# plot and report are imported when used: matplotlib takes a third of a second to load.


def figure(
    database: str | Path,
    kind: Kind | str = Kind.timeline,
    other: str | Path | None = None,
    run: str | None = None,
    run_b: str | None = None,
    step: int | None = None,
    layers: tuple[int, int] | str | None = None,
    rank: int | None = None,
) -> Figure:
    """A matplotlib Figure of one run (timeline, layers) or of two runs (diff: `other` or `run_b` is run B)."""
    from . import plot as plot_stage

    kind = Kind(kind)
    layer_range = plotdata.parse_layer_range(layers) if isinstance(layers, str) else layers
    with connect(database) as con:
        ref = diff_stage.resolve_run(con, run, str(database))
        if kind is Kind.timeline:
            return plot_stage.timeline_figure(plotdata.timeline(ref, rank, step, layer_range))
        if kind is Kind.layers:
            rows, scope = plotdata.layer_breakdown(ref, rank, step, layer_range)
            return plot_stage.layers_figure(rows, ref.label, scope)
        if other is None and run_b is None:
            raise DatabaseError(database, "a diff needs two runs", "give a second database, or --run-b LABEL")
        with connect(other if other is not None else database) as con_b:
            path_b = other if other is not None else database
            ref_b = diff_stage.resolve_run(con_b, run_b, str(path_b))
            result = diff_stage.compare(*told_apart(ref, ref_b, database, path_b))
        rows = [r for r in result.layers if layer_range is None or layer_range[0] <= r["layer"] <= layer_range[1]]
        why = [r for r in result.why if layer_range is None or layer_range[0] <= r["layer"] <= layer_range[1]]
        return plot_stage.diff_figure(rows, result.summary, why)


def plot(
    database: str | Path,
    output: str | Path,
    kind: Kind | str = Kind.timeline,
    other: str | Path | None = None,
    run: str | None = None,
    run_b: str | None = None,
    step: int | None = None,
    layers: tuple[int, int] | str | None = None,
    rank: int | None = None,
) -> Path:
    """Draw `figure(...)` into `output` (.png, .svg or .pdf)."""
    from . import plot as plot_stage

    plot_stage.image_format(output)
    refuse_inputs(output, [database, other])
    return plot_stage.save(figure(database, kind, other, run, run_b, step, layers, rank), output)


def report(
    database: str | Path,
    output: str | Path,
    other: str | Path | None = None,
    run: str | None = None,
    run_b: str | None = None,
    full_paths: bool = False,
) -> Path:
    """Write one self-contained HTML report of a run, or of two runs compared (`other` or `run_b` is run B). The
    trace's file name is shown, not where it was (a home directory in an attachment), unless `full_paths`."""
    from . import report as report_stage

    output = Path(output)
    refuse_inputs(output, [database, other])
    with connect(database) as con:
        ref_a = diff_stage.resolve_run(con, run, str(database))
        if other is not None or run_b is not None:
            path_b = other if other is not None else database
            with connect(path_b) as con_b:
                ref_a, ref_b = told_apart(ref_a, diff_stage.resolve_run(con_b, run_b, str(path_b)), database, path_b)
                page = report_stage.build_html(
                    _report_input(con, ref_a, full_paths), _report_input(con_b, ref_b, full_paths)
                )
        else:
            page = report_stage.build_html(_report_input(con, ref_a, full_paths))
    with replacing(output) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return output


def _report_input(con: duckdb.DuckDBPyConnection, ref: diff_stage.RunRef, full_paths: bool) -> RunInput:
    from .report import RunInput

    summary = summarize(con, ref.run_id)
    overview = {
        "run": summary.label,
        "backend": summary.backend,
        "source": summary.source_path if full_paths else Path(summary.source_path).name,
        "devices": ", ".join(summary.device_names),
        "ranks": summary.ranks,
        "kernels": summary.kernels,
        "memcpy": summary.memcpy,
        "memset": summary.memset,
        "steps": summary.steps,
        "layers": summary.layers,
        "span_ms": summary.span_ms,
        "warnings": "; ".join(summary.warnings),
    }
    losses = [row for row in data_loss(con) if row["run"] == summary.label]
    return RunInput(ref, overview, losses)


def export(
    database: str | Path, output: str | Path, run: str | None = None, rank: int | None = None
) -> export_stage.ExportStats:
    """Write one run as Chrome-trace JSON for the Perfetto UI (.json, or .json.gz compressed)."""
    refuse_inputs(output, [database])
    with connect(database) as con:
        ref = diff_stage.resolve_run(con, run, str(database))
        _check_rank(ref, rank, database)
        return export_stage.write_chrome_trace(ref, output, rank)


def _check_rank(ref: diff_stage.RunRef, rank: int | None, database: str | Path) -> None:
    """UsageError when `rank` is given and the run has no such rank (the export would hold nothing)."""
    ranks = [
        r[0] for r in ref.con.execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [ref.run_id]).fetchall()
    ]
    if rank is not None and rank not in ranks:
        have = format_steps(tuple(ranks)) if ranks else "none"
        raise UsageError(database, f"run {ref.label!r} has no rank {rank} (its ranks: {have})", "pick one of its ranks")
