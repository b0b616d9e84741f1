"""Per-rank Kineto files loaded by several processes (--jobs N), merged into the run in one transaction.

Reads: the files of one run. Writes: the run's rows in the caller's connection (its open transaction).
Each worker process loads one file at a time with the same code as a serial load (kineto.load_file) into
its own temporary DuckDB database, as run 1; the parent then attaches each part in file order and copies
its rows in, with the run id replaced and the keys (activity, launch and range ids, and the references
to them) moved past the rows already there, so the result is the same as a serial load. Linking,
classification and range nesting are per rank, so they are done in the workers.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .. import errors
from ..db import checkpoint, create_schema, duckdb_connect, first_row, ingest_access
from ..errors import BadInputError, TraceviewError
from ..scratch import scratch_directory
from . import IngestOptions, RetryCarefully, Source

if TYPE_CHECKING:
    from .kineto import FileResult

PART_RUN = 1
# Table -> the key columns offset by the rows already in the run (column -> table whose max it continues).
KEYS = {
    "launches": {"launch_id": "launches"},
    "gpu_activity": {"activity_id": "gpu_activity", "launch_id": "launches"},
    "cpu_ranges": {"range_id": "cpu_ranges", "parent_id": "cpu_ranges"},
    "gpu_ranges": {"range_id": "gpu_ranges"},
    "threads": {},
    "ranks": {},
    "ingest_stats": {},
}
MAX_KEY = {"launches": "launch_id", "gpu_activity": "activity_id", "cpu_ranges": "range_id", "gpu_ranges": "range_id"}


class WorkerError(Exception):
    """A TraceviewError raised in a worker, in a form that crosses the process boundary."""

    def __init__(self, kind: str, path: str | None, problem: str, remedy: str) -> None:
        super().__init__(kind, path, problem, remedy)

    def reraise(self) -> None:
        kind, path, problem, remedy = self.args
        raise getattr(errors, kind, TraceviewError)(path, problem, remedy)


def load_files(con: duckdb.DuckDBPyConnection, source: Source, run_id: int, options: IngestOptions) -> list[FileResult]:
    """Load `source.files` with options.jobs processes; merge them into run `run_id` of `con` in file order."""
    worker_options = dataclasses.replace(options, progress=None, jobs=1)
    jobs = max(1, min(options.jobs, len(source.files)))
    threads = max(1, (os.cpu_count() or 1) // jobs)  # DuckDB threads per worker: the cores, shared out
    with scratch_directory("parts") as tmp:
        parts = [Path(tmp) / f"part-{order}.db" for order in range(len(source.files))]
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [
                pool.submit(load_part, str(path), str(trace_file), order, len(source.files), worker_options, threads)
                for order, (trace_file, path) in enumerate(zip(source.files, parts, strict=True))
            ]
            results: list[FileResult] = []
            for order, future in enumerate(futures):
                try:
                    result = future.result()
                except WorkerError as error:
                    error.reraise()
                merge_part(con, parts[order], run_id, source.files[order], result.rank)
                parts[order].unlink()
                results.append(result)
    return results


def load_part(
    path: str, trace_file: str, order: int, files: int, options: IngestOptions, threads: int = 1
) -> FileResult:
    """In a worker: load one file into a new database at `path` as run 1; return its kineto.FileResult."""
    try:
        return _load_part(path, trace_file, order, files, options, threads)
    except TraceviewError as error:
        raise WorkerError(type(error).__name__, error.path, error.problem, error.remedy) from None


def _load_part(path: str, trace_file: str, order: int, files: int, options: IngestOptions, threads: int) -> FileResult:
    from . import kineto

    while True:
        con = duckdb_connect(path, access=ingest_access([Path(trace_file)], threads=threads))
        try:
            create_schema(con)
            con.execute(
                """INSERT INTO runs (run_id, label, backend, source_path, source_sha256, source_bytes,
                                     traceview_version, ingested_at)
                   VALUES (?, 'part', 'kineto', ?, '', 0, '', now())""",
                [PART_RUN, trace_file],
            )
            result = kineto.load_file(con, Path(trace_file), order, files, PART_RUN, options)
            checkpoint(con)
            return result
        except RetryCarefully as retry:
            options = dataclasses.replace(options, careful=options.careful | {retry.path})
        finally:
            con.close()
        for leftover in (Path(path), Path(path + ".wal")):
            leftover.unlink(missing_ok=True)


def merge_part(con: duckdb.DuckDBPyConnection, part: Path, run_id: int, trace_file: Path, rank: int) -> None:
    """Copy the rows of one part database into run `run_id`, moving its keys past the run's rows."""
    if first_row(con.execute("SELECT 1 FROM ranks WHERE run_id = ? AND rank = ?", [run_id, rank]).fetchall()):
        raise BadInputError(
            trace_file, f"rank {rank} appears in two files of the same run", "ingest them as separate runs"
        )
    offsets = {
        table: con.execute(f"SELECT coalesce(max({key}), 0) FROM {table} WHERE run_id = ?", [run_id]).fetchall()[0][0]
        for table, key in MAX_KEY.items()
    }
    quoted = str(part).replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS _part (READ_ONLY)")
    try:
        for table, keys in KEYS.items():
            columns = [r[0] for r in con.execute(f"SELECT name FROM pragma_table_info('{table}')").fetchall()]
            select = ", ".join(
                str(run_id) if c == "run_id" else f"{c} + {int(offsets[keys[c]])}" if c in keys else c for c in columns
            )
            con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM _part.{table}")
    finally:
        con.execute("DETACH _part")
