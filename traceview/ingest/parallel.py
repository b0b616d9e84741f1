"""Per-rank Kineto files loaded by several processes (--jobs N), merged into the run in one transaction.

Reads: the files of one run. Writes: the run's rows in the caller's connection (its open transaction).
The files are cut into parts of consecutive files (kineto_batch.batches: small files grouped, at most an even share
of them to a part). Each worker process loads one part at a time with the same code as a serial load
(kineto.load_in_turn) into its own temporary DuckDB database, as run 1; the parent then opens each part in order with
a connection of its own, streams its rows in, with the run id replaced and the keys (activity, launch and range ids,
and the references to them) moved past the rows already there, and closes it: the result is the same as a serial
load, and the parent holds no descriptor of a part once merged (a database ATTACHed in a transaction keeps its file
open until the commit: one descriptor per part). Linking, classification and range nesting are per rank, so they
are done in the workers.

Workers: at most --jobs, the parts, the cores, and what the ingest's memory budget allows (`worker_count`): each
worker needs WORKER_BASE for itself and, for DuckDB, the cap one ingest of the largest part would get
(db.memory_budget: at least 1 GiB; with less, a worker spilled what a single ingest of its file holds in memory).
DuckDB's cap in each is its share of the budget (it spills beyond).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .. import errors
from ..db import (
    checkpoint,
    create_schema,
    duckdb_connect,
    execute_with,
    ingest_access,
    machine_share,
    memory_budget,
    usable_cores,
)
from ..errors import BadInputError, TraceviewError
from ..scratch import scratch_directory
from . import IngestOptions, RetryCarefully, Source, jsonstream, kineto_batch

if TYPE_CHECKING:
    from .kineto import FileResult
    from .kineto_batch import Batch

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
WORKER_BASE = 256 << 20  # a worker's own memory: Python, DuckDB and pyarrow loaded (~200 MiB RSS measured)
MIN_WORKER_CAP = 256 << 20  # the least DuckDB memory cap a worker gets


class WorkerError(Exception):
    """A TraceviewError raised in a worker, in a form that crosses the process boundary."""

    def __init__(self, kind: str, path: str | None, problem: str, remedy: str) -> None:
        super().__init__(kind, path, problem, remedy)

    def reraise(self) -> None:
        kind, path, problem, remedy = self.args
        raise getattr(errors, kind, TraceviewError)(path, problem, remedy)


def load_files(con: duckdb.DuckDBPyConnection, source: Source, run_id: int, options: IngestOptions) -> list[FileResult]:
    """Load `source.files` with up to options.jobs processes; merge them into run `run_id` of `con` in file order."""
    share = math.ceil(len(source.files) / options.jobs)
    parts = list(kineto_batch.batches(source.files, options, most=share))
    sizes = [_part_bytes(part) for part in parts]
    per_worker = WORKER_BASE + memory_budget(max(sizes, default=0))  # what one ingest of the largest part gets
    budget = _budget(options, source, min(options.jobs, len(parts)) * per_worker)
    cores = usable_cores()
    jobs = worker_count(options.jobs, len(parts), per_worker, budget, cores)
    threads = max(1, (options.threads or cores) // jobs)  # DuckDB threads per worker: the cores (or --threads), shared
    worker_options = dataclasses.replace(
        options, progress=None, jobs=1, memory_limit=max(MIN_WORKER_CAP, budget // jobs - WORKER_BASE)
    )
    results: list[FileResult] = []
    with scratch_directory("parts") as tmp:
        paths = [Path(tmp) / f"part-{number}.db" for number in range(len(parts))]
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [
                pool.submit(
                    load_part,
                    str(path),
                    part[0][0],
                    tuple(p for _, p in part),
                    len(source.files),
                    worker_options,
                    threads,
                )
                for part, path in zip(parts, paths, strict=True)
            ]
            for part, path, future in zip(parts, paths, futures, strict=True):
                try:
                    loaded = future.result()
                except WorkerError as error:
                    error.reraise()
                merge_part(con, path, run_id, part, loaded)
                path.unlink()
                results.extend(loaded)
    return results


def worker_count(requested: int, parts: int, per_worker: int, budget: int, cores: int) -> int:
    """How many workers to start: at most `requested`, the `parts`, the cores, and as many as `budget` bytes of
    memory hold, `per_worker` each (at least 1)."""
    return max(1, min(requested, parts, cores, budget // per_worker))


def _budget(options: IngestOptions, source: Source, wanted: int) -> int:
    """The memory the workers share: --memory-limit, else the automatic cap (db.memory_budget) of the traces' size
    or of what the workers want (`wanted`: each WORKER_BASE plus its largest part), whichever is more, else (none)
    DuckDB's own default share of the machine's memory. Capped at the traces' size alone, 8 files of 250 MB got 3
    workers on 16 cores."""
    if options.memory_limit:
        return options.memory_limit
    if options.memory_limit is None:
        return memory_budget(max(source.data_bytes, wanted))
    return machine_share()


def _part_bytes(part: Batch) -> int:
    return sum(jsonstream.expected_size(path) for _, path in part)


def load_part(
    path: str, first: int, trace_files: tuple[Path, ...], files: int, options: IngestOptions, threads: int = 1
) -> list[FileResult]:
    """In a worker: load consecutive files (the first numbered `first` of the run's `files`) into a new database at
    `path` as run 1; return their kineto.FileResults."""
    try:
        return _load_part(path, first, trace_files, files, options, threads)
    except TraceviewError as error:
        raise WorkerError(type(error).__name__, error.path, error.problem, error.remedy) from None


def _load_part(
    path: str, first: int, trace_files: tuple[Path, ...], files: int, options: IngestOptions, threads: int
) -> list[FileResult]:
    from . import kineto

    while True:
        con = duckdb_connect(path, access=ingest_access(trace_files, threads=threads))
        try:
            con.execute(f"SET memory_limit = '{int(options.memory_limit or 0)}B'")
            create_schema(con)
            con.execute(
                """INSERT INTO runs (run_id, label, backend, source_path, source_sha256, source_bytes,
                                     traceview_version, ingested_at)
                   VALUES (?, 'part', 'kineto', '', '', 0, '', now())""",
                [PART_RUN],
            )
            batches = kineto_batch.batches(trace_files, options, first)
            results = kineto.load_in_turn(con, batches, files, PART_RUN, options)
            checkpoint(con)
            return results
        except RetryCarefully as retry:
            options = retry.retried(options)
        finally:
            con.close()
        for leftover in (Path(path), Path(path + ".wal")):
            leftover.unlink(missing_ok=True)


def merge_part(
    con: duckdb.DuckDBPyConnection, part: Path, run_id: int, batch: Batch, results: list[FileResult]
) -> None:
    """Copy the rows of one part database into run `run_id`, moving its keys past the run's rows; the part is read
    through a connection of its own, closed at the end (see the module's note on descriptors)."""
    taken = {r[0] for r in con.execute("SELECT rank FROM ranks WHERE run_id = ?", [run_id]).fetchall()}
    for (_, trace_file), result in zip(batch, results, strict=True):
        if result.rank in taken:
            raise BadInputError(
                trace_file, f"rank {result.rank} appears in two files of the same run", "ingest them as separate runs"
            )
    offsets = {
        table: con.execute(f"SELECT coalesce(max({key}), 0) FROM {table} WHERE run_id = ?", [run_id]).fetchall()[0][0]
        for table, key in MAX_KEY.items()
    }
    reader = duckdb_connect(str(part), read_only=True)
    try:
        for table, keys in KEYS.items():
            columns = [r[0] for r in con.execute(f"SELECT name FROM pragma_table_info('{table}')").fetchall()]
            select = ", ".join(
                str(run_id) if c == "run_id" else f"{c} + {int(offsets[keys[c]])}" if c in keys else c for c in columns
            )
            rows = reader.sql(f"SELECT {select} FROM {table}").to_arrow_reader()
            execute_with(con, "_part_rows", rows, f"INSERT INTO {table} ({', '.join(columns)}) FROM _part_rows")
    finally:
        reader.close()
