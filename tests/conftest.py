"""Shared pytest fixtures: paths to the bundled real traces, and their databases ingested once per session."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import duckdb
import fuzz_runner
import pytest
from filelock import FileLock

import traceview

DATA = Path(__file__).parent / "data"
HTA = DATA / "hta"
SAMPLES = Path(__file__).parent.parent / "sample_traces"
sys.path.insert(0, str(SAMPLES / "corpus"))

from truth import plain  # noqa: E402, F401 - a bundled .xz trace decompressed, as tests import it from here

# The modules of 20 CPU-seconds or more (2026-12-02), longest first: they start first, so that the workers finish
# together (--dist loadfile hands out whole files in collection order, and test_zoo.py, last by name, used to run
# alone at the end). A module not listed runs after them, in its usual order.
LONG_MODULES = (
    "test_corpus.py",
    "test_zoo.py",
    "test_hostile_shared_db.py",
    "test_spec.py",
    "test_nsys_real.py",
    "test_why.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long modules first (LONG_MODULES); every other test keeps its place relative to the others."""
    rank = {name: place for place, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_MODULES)))


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


@pytest.fixture(scope="session")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """`ingested(trace)`: the database of `trace` ingested with the default options, once per test session, shared
    by every test (and every pytest-xdist worker) that reads it. Open it read-only; a test that changes a database
    ingests its own.

    Under xdist the workers' temp folders share a parent made for this session, where a file lock lets the first
    worker ingest while the others wait; without xdist the session's own temp folder is used. Nothing outlives the
    session, so a database is never older than the code that wrote it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    shared = root / "ingested"
    shared.mkdir(exist_ok=True)

    def database(trace: Path) -> Path:
        key = hashlib.sha256(str(trace.resolve()).encode()).hexdigest()[:16]
        path = shared / f"{trace.name}-{key}.db"
        with FileLock(f"{path}.lock"):
            if not path.exists():
                partial = path.with_suffix(".partial.db")
                partial.unlink(missing_ok=True)
                traceview.ingest([trace], partial)
                partial.rename(path)
        return path

    return database
