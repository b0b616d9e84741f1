"""Shared pytest fixtures: paths to the bundled real traces."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import duckdb
import fuzz_runner
import pytest

DATA = Path(__file__).parent / "data"
HTA = DATA / "hta"
SAMPLES = Path(__file__).parent.parent / "sample_traces"


def table_rows(db: Path, tables: Iterable[str], stats_sql: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of `tables` without its run id, and the rows of `stats_sql`, in order: two ingests that must agree."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = {t: con.execute(f"SELECT * EXCLUDE (run_id) FROM {t} ORDER BY ALL").fetchall() for t in tables}
        rows["ingest_stats"] = con.execute(stats_sql).fetchall()
    return rows


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's database goes (not created yet)."""
    return tmp_path / "run.db"


@pytest.fixture(scope="module")
def runner() -> Iterator[fuzz_runner.CaseRunner]:
    """A worker process that runs fuzz cases one at a time, each under a 60 s timeout."""
    with fuzz_runner.CaseRunner(timeout_s=60) as case_runner:
        yield case_runner
