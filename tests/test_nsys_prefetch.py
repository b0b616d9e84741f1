"""Large nsys exports have their big tables read by worker processes (nsys_export.prefetching): the database is the
one an ingest that reads everything itself writes, whatever the export holds, and a worker that fails leaves the
read to the ingest."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from test_nsys_synthetic import gtid, stray_values_export

import traceview
from traceview.ingest import nsys_export

VOLATILE = {"runs": ("ingested_at", "traceview_version", "source_path")}


def tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, in order, without the run's ingest time and paths."""
    with traceview.connect(db) as con:
        found = con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()
        names = [row[0] for row in found]
        return {
            name: con.execute(
                f"SELECT * EXCLUDE ({', '.join(VOLATILE[name])}) FROM {name} ORDER BY ALL"
                if name in VOLATILE
                else f"SELECT * FROM {name} ORDER BY ALL"
            ).fetchall()
            for name in names
        }


def ingested(trace: Path, db: Path, monkeypatch: pytest.MonkeyPatch, prefetch: bool) -> dict[str, Any]:
    """The tables of `trace` ingested with every large table read by a worker (`prefetch`) or by the ingest itself;
    with `prefetch`, checks that the workers' files were read."""
    read: list[Path | None] = []
    found = nsys_export._prefetched_file

    def spy(export: nsys_export.Export, table: str, sql: str) -> Path | None:
        read.append(found(export, table, sql))
        return read[-1]

    with monkeypatch.context() as patch:
        patch.setattr(nsys_export, "PREFETCH_MIN_BYTES", 0 if prefetch else 1 << 62)
        patch.setattr(nsys_export, "_prefetched_file", spy)
        traceview.ingest([trace], db)
    assert sum(path is not None for path in read) == (3 if prefetch else 0)  # _ngpu, _nlaunch, _nnvtx
    return tables(db)


@pytest.mark.parametrize("sample", ["eager", "graph", "compiled"])
def test_workers_read_what_the_ingest_reads(sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = SAMPLES / f"{sample}.sqlite"
    alone = ingested(trace, tmp_path / "alone.db", monkeypatch, prefetch=False)
    assert ingested(trace, tmp_path / "workers.db", monkeypatch, prefetch=True) == alone


@pytest.mark.parametrize("batch_rows", [4, 65536])
def test_workers_read_stray_values_as_the_ingest_does(
    batch_rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text and reals where integers belong, in the first batch or after it (the read goes on checked), and text
    that is not UTF-8: read by a worker as by the ingest itself."""
    monkeypatch.setattr(nsys_export, "BATCH_ROWS", batch_rows)
    trace = stray_values_export().write(tmp_path / "export.sqlite")
    with sqlite3.connect(trace) as con:
        bad_text = "INSERT INTO NVTX_EVENTS VALUES (3, 4, 59, CAST(x'6c61796572ff' AS TEXT), ?, NULL, 0)"
        con.execute(bad_text, [gtid(10, 11)])
    alone = ingested(trace, tmp_path / "alone.db", monkeypatch, prefetch=False)
    assert ingested(trace, tmp_path / "workers.db", monkeypatch, prefetch=True) == alone


def test_a_failing_worker_leaves_the_read_to_the_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = SAMPLES / "eager.sqlite"
    alone = ingested(trace, tmp_path / "alone.db", monkeypatch, prefetch=False)
    monkeypatch.setattr(nsys_export.sys, "executable", "/bin/false")
    monkeypatch.setattr(nsys_export, "PREFETCH_MIN_BYTES", 0)
    traceview.ingest([trace], tmp_path / "failed.db")
    assert tables(tmp_path / "failed.db") == alone
