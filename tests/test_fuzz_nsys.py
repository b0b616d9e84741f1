"""Fuzzing Nsight Systems SQLite ingest (a bounded sample for CI; bench/fuzz.py runs 10,000+).

Mutated real exports (tests/fuzzing.py: dropped tables, NULLs past NOT NULL, wrong types, deleted StringIds
rows, duplicated rows, ends before starts, ranges never closed, truncated or damaged files) either ingest or
fail with a one-line error, leaving no database behind. Then, on a cut-down real export, each oddity is
counted by ingest_stats.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import fuzz_runner
import fuzzing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceview import api

pytest.importorskip("traceview.ingest.nsys")

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
PROPERTY = settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
SEEDS = fuzzing.nsys_seed_files()
SEED = next(p for p in SEEDS if p.name.startswith("compiled")) if any("compiled" in p.name for p in SEEDS) else SEEDS[0]


@pytest.mark.heavy
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_mutated_real_exports_ingest_or_fail_cleanly(runner: fuzz_runner.CaseRunner, rng: random.Random) -> None:
    case = fuzzing.nsys_case(rng, SEEDS)
    outcome = runner.run(case)
    assert outcome.kind in ("ok", "clean_error"), f"{case.mutations}: {outcome.detail}"


def export_copy(tmp: Path) -> Path:
    path = tmp / "trace.sqlite"
    path.write_bytes(fuzzing.nsys_seed(SEED))
    return path


def ingest(path: Path) -> tuple[dict[str, float], duckdb.DuckDBPyConnection]:
    db = path.with_suffix(".db")
    api.ingest([path], db)
    con = duckdb.connect(str(db), read_only=True)
    return dict(con.execute("SELECT name, sum(value) FROM ingest_stats GROUP BY name").fetchall()), con


def sqlite_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as con:
        return con.execute(sql).fetchall()


@PROPERTY
@given(n=st.integers(1, 20))
def test_nvtx_ranges_that_never_close_are_kept_open_and_counted(
    tmp_path_factory: pytest.TempPathFactory, n: int
) -> None:
    path = export_copy(tmp_path_factory.mktemp("nvtx"))
    with sqlite3.connect(path) as con:
        con.execute(
            f"""UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS
                WHERE eventType IN (59, 60) AND "end" IS NOT NULL ORDER BY start LIMIT {n})"""
        )
        opened = con.execute("SELECT changes()").fetchall()[0][0]
    stats, db = ingest(path)
    with db:
        still_open = db.execute("SELECT count(*) FROM cpu_ranges WHERE NOT closed").fetchall()[0][0]
        bad = db.execute("SELECT count(*) FROM cpu_ranges WHERE end_ns < start_ns").fetchall()[0][0]
    assert stats["nvtx_ranges_never_closed"] >= opened == min(n, opened)
    assert still_open == stats["nvtx_ranges_never_closed"] and bad == 0


@pytest.mark.heavy  # fuzzing exports, tens of seconds
@PROPERTY
@given(n=st.integers(1, 50), target=st.sampled_from([999_999_999, -1]))
def test_kernels_whose_correlation_points_nowhere_are_counted(
    tmp_path_factory: pytest.TempPathFactory, n: int, target: int
) -> None:
    path = export_copy(tmp_path_factory.mktemp("corr"))
    stats_before, db = ingest(path)
    db.close()
    path.with_suffix(".db").unlink()
    with sqlite3.connect(path) as con:
        con.execute(
            f"""UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = ? WHERE rowid IN
                (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT {n})""",
            [target],
        )
        changed = con.execute("SELECT changes()").fetchall()[0][0]
    stats, db = ingest(path)
    db.close()
    assert stats["kernels_without_launch"] == stats_before["kernels_without_launch"] + changed


@PROPERTY
@given(column=st.sampled_from(["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName"]))
def test_kernels_with_a_wrong_type_or_null_are_kept_or_counted(
    tmp_path_factory: pytest.TempPathFactory, column: str
) -> None:
    path = export_copy(tmp_path_factory.mktemp("types"))
    total = sqlite_rows(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    with sqlite3.connect(path) as con:
        con.execute('CREATE TABLE "_k" AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL')
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute('ALTER TABLE "_k" RENAME TO CUPTI_ACTIVITY_KIND_KERNEL')
        con.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "{column}" = ? WHERE rowid % 3 = 0', ["abc"])
        con.execute(f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "{column}" = NULL WHERE rowid % 3 = 1')
    stats, db = ingest(path)
    with db:
        kept = db.execute("SELECT count(*) FROM gpu_activity WHERE kind = 'kernel'").fetchall()[0][0]
    dropped = sum(value for name, value in stats.items() if name.startswith("time_out_of_range"))
    assert kept + dropped == total, stats
