"""Many small Kineto files of one run read together: one DuckDB read per batch of files instead of one per file.

Reads: small per-rank trace files (`.json` or `.json.gz`, each one JSON object). Writes: temp table _ev (through
the caller's staging function), with column `file` telling which file of the batch an event came from.

A run of thousands of per-rank files cost ~0.1 s per file loaded one by one (a dozen statements and a set of
pipes and threads each, and every file's replaced temp tables kept until the commit); a batch costs the same
dozen statements for all its files. Only files that a batch reads exactly as a file read alone go into one:
small enough for one DuckDB object (BATCH_OBJECT), starting with `{`, with no --salvage and nothing read the
careful way in this ingest. When DuckDB fails on a batch (a value of another type, damaged JSON) or a file of it
has no events array, the caller starts the ingest over with the batch's folder in options.careful
(`one_by_one`), and every file is then read alone, which words any error for its own file.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from . import IngestOptions, jsonstream

BATCH_OBJECT = 1 << 24  # the largest file (uncompressed) read as one DuckDB object
BATCH_BYTES = 1 << 28  # uncompressed bytes per batch
BATCH_FILES = 4096
# The top-level keys the Kineto reader uses besides traceEvents (kineto.py: rank, clock, devices, versions).
METADATA_KEYS = (
    "distributedInfo",
    "baseTimeNanoseconds",
    "deviceProperties",
    "schemaVersion",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
    "host_name",
    "hostname",
)

Batch = list[tuple[int, Path]]  # (order of the file in the run, path)


def batches(
    files: tuple[Path, ...], options: IngestOptions, first: int = 0, most: int = BATCH_FILES
) -> Iterator[Batch]:
    """The files in order (numbered from `first`), consecutive small ones grouped, at most `most` to a batch; every
    other file alone."""
    batch: Batch = []
    size = 0
    for order, path in enumerate(files, start=first):
        expected = jsonstream.expected_size(path) if _batchable(path, options) else -1
        if batch and (expected < 0 or size + expected > BATCH_BYTES or len(batch) >= min(most, BATCH_FILES)):
            yield batch
            batch, size = [], 0
        if expected < 0:
            yield [(order, path)]
            continue
        batch.append((order, path))
        size += expected
    if batch:
        yield batch


def _batchable(path: Path, options: IngestOptions) -> bool:
    if options.salvage or options.careful or path.stat().st_size > BATCH_OBJECT:
        return False
    if jsonstream.expected_size(path) > BATCH_OBJECT:
        return False
    with open(path, "rb") as raw:
        head = raw.read(2)
    try:
        with gzip.open(path) if head == b"\x1f\x8b" else open(path, "rb") as handle:
            start = handle.read(4096).lstrip()[:1]
    except jsonstream.gzip_errors():  # damaged gzip: read alone, where the error is worded for the file
        return False
    return start == b"{"


def one_by_one(batch: Batch) -> Path:
    """The mark put in options.careful when a batch failed: its folder (no trace file), so that the ingest starts
    over reading every file alone (batches() makes none while options.careful holds anything)."""
    return batch[0][1].parent


def stage(
    con: duckdb.DuckDBPyConnection,
    paths: list[Path],
    event_columns: dict[str, str],
    stage_events: Callable[[str, list[Any]], None],
) -> list[tuple[dict[str, Any], int]] | None:
    """Stage the events of `paths` as _ev through `stage_events(source_sql, params)`; return each file's metadata
    and uncompressed size, in order (None when a file holds no traceEvents array: read them one by one)."""
    names = [str(p) for p in paths]
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _batch_files AS "
        "SELECT unnest(?::VARCHAR[]) AS filename, unnest(range(len(?::VARCHAR[])))::INTEGER AS file",
        [names, names],
    )
    event = "STRUCT(" + ", ".join(f'"{k}" {v}' for k, v in event_columns.items()) + ")[]"
    read = "read_json(?, format = 'unstructured', filename = true, maximum_object_size = {}, columns = {})"
    source = f"""SELECT b.file, e.cat, e.ph, e.name, e.pid, e.tid, e.ts, e.dur, e.args
                 FROM (SELECT filename, unnest(traceEvents) AS e
                       FROM {read.format(BATCH_OBJECT, _spec({"traceEvents": event}))}) r
                 JOIN _batch_files b USING (filename)"""
    stage_events(source, [names])
    events = dict(con.execute("SELECT file, count(*) FROM _ev GROUP BY file").fetchall())
    if len(events) != len(paths):
        return None  # a file without events: alone, it is told what is wrong with it
    found = con.execute(
        f"""SELECT {", ".join(f'"{k}"' for k in METADATA_KEYS)}
            FROM {read.format(BATCH_OBJECT, _spec({k: "JSON" for k in METADATA_KEYS}))} r
            JOIN _batch_files b USING (filename) ORDER BY b.file""",
        [names],
    ).fetchall()
    if len(found) != len(paths):
        return None
    return [
        ({k: json.loads(v) for k, v in zip(METADATA_KEYS, row, strict=True) if v is not None}, size)
        for row, size in zip(found, (jsonstream.expected_size(p) for p in paths), strict=True)
    ]


def _spec(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in columns.items()) + "}"
