"""The keys of the big tables are unique without an index enforcing them (traceview/schema.sql says why):
one database holding runs of both backends, of one and of two ranks, with a --replace in between."""

from __future__ import annotations

from pathlib import Path

from conftest import SAMPLES, plain

import traceview
from traceview.ingest import IngestOptions

KEYS = {
    "gpu_activity": "activity_id",
    "launches": "launch_id",
    "cpu_ranges": "range_id",
    "gpu_ranges": "range_id",
}
SOURCES = (
    SAMPLES / "eager.pt.trace.json.gz",
    SAMPLES / "graph.sqlite",
    SAMPLES / "tp" / "tp_overlap",
    SAMPLES / "tp" / "tp_default.sqlite.xz",
)


def test_keys_are_unique_per_run(tmp_path: Path) -> None:
    database = tmp_path / "runs.db"
    for source in SOURCES:
        traceview.ingest([plain(source, tmp_path)], database)
    traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], database, IngestOptions(replace=True))
    with traceview.connect(database) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(len(SOURCES),)]
        for table, key in KEYS.items():
            rows, keys = con.execute(f"SELECT count(*), count(DISTINCT (run_id, {key})) FROM {table}").fetchall()[0]
            assert rows > 0 and rows == keys, table
            runs = con.execute(f"SELECT count(DISTINCT run_id) FROM {table}").fetchall()[0][0]
            assert runs >= 2, table
