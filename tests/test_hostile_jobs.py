"""`--jobs` with many rank files and little memory (issue 25, item 6).

Before: the parent ATTACHed each part database inside the ingest's transaction, and DuckDB keeps an attached file
open until the commit: one descriptor per rank file (1,100 files under `ulimit -n 1024` gave a traceback after
274 s); and workers were as many as asked, each with DuckDB's default memory (`--jobs 24` peaked at 4.3 GB
against 265 MB serial).
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import duckdb
import pytest
from hostile_traces import traceview
from test_ingest_parse import _rank_file

from traceview.db import create_schema, duckdb_connect
from traceview.ingest.kineto import FileResult
from traceview.ingest.parallel import WORKER_BASE, merge_part, worker_count

RANKS = 1100
DESCRIPTORS = 256


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@pytest.mark.heavy  # 1100 rank files ingested
def test_1100_rank_files_with_jobs_under_256_descriptors(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(RANKS):
        _rank_file(folder, rank, gz=rank % 2 == 1)
    db = tmp_path / "run.db"
    done = traceview("ingest", folder, "-o", db, "--jobs", "2", preexec_fn=_few_descriptors)
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), count(DISTINCT rank) FROM ranks").fetchall() == [(RANKS, RANKS)]


def _part(path: Path, rank: int, schema: Path) -> Path:
    """A part database as a worker leaves it: one rank's row, run 1 (a copy of `schema`, an empty one: creating
    the schema 40 times took 24 s)."""
    shutil.copyfile(schema, path)
    con = duckdb_connect(str(path))
    con.execute("INSERT INTO ranks (run_id, rank, source_file, rank_from) VALUES (1, ?, 'r.json', 'order')", [rank])
    con.close()
    return path


def _empty(path: Path) -> Path:
    con = duckdb_connect(str(path))
    create_schema(con)
    con.close()
    return path


def test_merging_parts_in_one_transaction_holds_no_descriptor_of_them(tmp_path: Path) -> None:
    schema = _empty(tmp_path / "schema.db")
    parts = [_part(tmp_path / f"part-{rank}.db", rank, schema) for rank in range(40)]
    con = duckdb_connect(str(tmp_path / "run.db"))
    create_schema(con)
    con.execute("BEGIN TRANSACTION")
    before = len(os.listdir("/proc/self/fd"))
    for rank, part in enumerate(parts):
        result = FileResult(rank=rank, warnings=(), partial=False, clock_anchor_ns=None, profiler_version="")
        merge_part(con, part, 7, [(rank, part)], [result])
    # none more than before (fewer is no leak: a descriptor of an earlier test's may close meanwhile, as in CI)
    assert len(os.listdir("/proc/self/fd")) <= before
    con.execute("COMMIT")
    assert con.execute("SELECT count(*) FROM ranks WHERE run_id = 7").fetchall() == [(40,)]
    con.close()


def test_workers_are_capped_by_memory_as_well_as_by_cores() -> None:
    gib, worker = 1 << 30, WORKER_BASE + (1 << 30)  # a worker: itself and the 1 GiB an ingest of its part gets
    assert worker_count(24, 48, worker, 64 * gib, cores=128) == 24  # room for all
    assert worker_count(24, 48, worker, 6 * gib, cores=128) == 6 * gib // worker  # memory: 4
    assert worker_count(24, 48, worker, 64 * gib, cores=8) == 8  # cores
    assert worker_count(24, 3, worker, 64 * gib, cores=128) == 3  # parts
    assert worker_count(24, 1, 5 * gib, 2 * gib, cores=128) == 1  # always one
