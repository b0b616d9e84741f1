"""Memory on huge input: many events of a kind traceview skips, and one enormous event.

The traces are streamed to disk (tests/hostile_traces.py) and ingested by the CLI in a child process whose
peak resident memory is measured. `python bench/fuzz.py --memory` runs the full-size versions (3 million
python_function events, ~0.8 GB; one 200 MB name) and prints the figures.

Measured on the CI machine (2 cores) when this test was written: a trace with 1,000 kernels peaks at
~205 MiB (the baseline: Python, DuckDB, pandas); with 400,000 python_function events (104 MB of JSON) at
~415 MiB; with one 50 MB name at ~325 MiB.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from hostile_traces import peak_rss_mb, traceview_cmd, write_kineto

SKIPPED = 400_000
HUGE = 50_000_000
MIB_PER_MB_OF_SKIPPED_JSON = 3.0  # measured ~2 (the staged rows plus DuckDB's read buffers)
MIB_PER_MB_OF_ONE_EVENT = 4.0  # measured ~2.4


@pytest.fixture(scope="module")
def baseline_mb(tmp_path_factory: pytest.TempPathFactory) -> float:
    tmp = tmp_path_factory.mktemp("baseline")
    trace = write_kineto(tmp / "small.pt.trace.json", launches=1000)
    peak, done = peak_rss_mb(traceview_cmd("ingest", trace, "-o", tmp / "small.db"))
    assert done.returncode == 0, done.stderr
    return peak


def stats(db: Path) -> dict[str, float]:
    with duckdb.connect(str(db), read_only=True) as con:
        return dict(con.execute("SELECT name, sum(value) FROM ingest_stats GROUP BY name").fetchall())


def test_memory_on_many_skipped_events_stays_within_a_small_multiple_of_their_json(
    tmp_path: Path, baseline_mb: float
) -> None:
    trace = write_kineto(tmp_path / "skipped.pt.trace.json", launches=1000, skipped=SKIPPED)
    json_mb = trace.stat().st_size / 1e6
    peak, done = peak_rss_mb(traceview_cmd("ingest", trace, "-o", tmp_path / "out.db"))
    assert done.returncode == 0, done.stderr
    counted = stats(tmp_path / "out.db")
    assert counted["skipped_category.python_function"] == SKIPPED and counted["kernels"] == 1000
    assert peak - baseline_mb < MIB_PER_MB_OF_SKIPPED_JSON * json_mb, (peak, baseline_mb, json_mb)


@pytest.mark.heavy  # peak memory of ingests of a huge event
@pytest.mark.parametrize("where", ["name", "args"])
def test_memory_on_one_enormous_event_stays_within_a_small_multiple_of_it(
    tmp_path: Path, baseline_mb: float, where: str
) -> None:
    trace = write_kineto(tmp_path / "huge.pt.trace.json", launches=1000, huge_bytes=HUGE, huge_in=where)
    peak, done = peak_rss_mb(traceview_cmd("ingest", trace, "-o", tmp_path / "out.db"))
    if done.returncode == 0:
        assert stats(tmp_path / "out.db")["kernels"] == 1000
    else:  # refusing an event this big is allowed, in one line
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not (tmp_path / "out.db").exists()
    assert peak - baseline_mb < MIB_PER_MB_OF_ONE_EVENT * HUGE / 1e6, (peak, baseline_mb)
