"""Values an nsys export holds that cannot be stored as they are, and are changed on the way in: each change is
counted in ingest_stats (severity data_loss) and `traceview ingest` says so in one line.

Planted in a cut-down copy of the real sample export: kernels whose name ids point nowhere in StringIds, kernels
and API calls whose end precedes their start. The expected counts are the rows changed, read back from SQLite.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES
from fuzzing import cut_down_sqlite
from hostile_traces import traceview_cmd

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """The export with values planted, and how many rows of each kind were changed."""
    export = cut_down_sqlite(SAMPLES / "compiled.sqlite", tmp_path_factory.mktemp("nsys") / "planted.sqlite", 2000)
    with sqlite3.connect(export) as con:
        missing = con.execute("SELECT max(id) + 1000 FROM StringIds").fetchall()[0][0]
        kernels = [r[0] for r in con.execute(f"SELECT rowid FROM {KERNEL} ORDER BY start LIMIT 7").fetchall()]
        unnamed = con.execute(
            f"UPDATE {KERNEL} SET demangledName = ?, shortName = ? WHERE rowid IN ({kernels[0]}, {kernels[1]})",
            [missing, missing + 1],
        ).rowcount
        reversed_kernels = con.execute(
            f'UPDATE {KERNEL} SET "end" = start - 1000 WHERE rowid IN ({kernels[4]}, {kernels[5]}, {kernels[6]})'
        ).rowcount
        reversed_calls = con.execute(
            f'UPDATE {RUNTIME} SET "end" = start - 5 WHERE rowid IN (SELECT rowid FROM {RUNTIME} LIMIT 4)'
        ).rowcount
    planted = {
        "kernels_without_name": unnamed,
        "end_before_start.gpu_work": reversed_kernels,
        "end_before_start.api_calls": reversed_calls,
    }
    return export, planted


def test_every_changed_value_is_counted_and_said(damaged: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    export, planted = damaged
    db = tmp_path / "out.db"
    result = subprocess.run(traceview_cmd("ingest", export, "-o", db), capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        stats = dict(
            con.execute("SELECT name, value FROM ingest_stats WHERE severity = 'data_loss' AND rank IS NULL").fetchall()
        )
        unnamed = con.execute("SELECT count(*) FROM gpu_activity WHERE kind = 'kernel' AND name = ''").fetchall()
        zero = con.execute("SELECT count(*) FROM gpu_activity WHERE kind = 'kernel' AND end_ns = start_ns").fetchall()
    assert {name: stats.get(name) for name in planted} == planted
    assert unnamed == [(planted["kernels_without_name"],)]
    assert zero[0][0] >= planted["end_before_start.gpu_work"]
    [note] = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    for name, count in planted.items():
        assert f"{name} {count}" in note, note
