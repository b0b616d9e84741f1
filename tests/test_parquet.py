"""The Parquet dataset as a first-class store: every figure `traceview layers`, `overlap` and `diff` print comes
out the same from the dataset, on the two-rank samples; comments travel in the files; runs of several databases
live side by side.

Truth: the databases themselves (the figures the commands print) and the schema's own comments; the Parquet
files are read back with pyarrow, not with traceview.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES

import traceview
from traceview import diff, parquet, sqllib
from traceview.errors import DatabaseError
from traceview.segment.report import layer_report

TWO_RANKS = {"tp_default": SAMPLES / "tp" / "tp_default", "tp_overlap": SAMPLES / "tp" / "tp_overlap"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Path]:
    """Each two-rank sample in its own database, both exported into ONE dataset directory."""
    out = tmp_path_factory.mktemp("parquet")
    dbs = {}
    for label, source in TWO_RANKS.items():
        dbs[label] = out / f"{label}.db"
        traceview.ingest([source], dbs[label])
        traceview.api.export_parquet(dbs[label], out / "dataset")
    return dbs, out / "dataset"


def dataset_id(dataset: duckdb.DuckDBPyConnection, label: str) -> int:
    return dataset.execute("SELECT run_id FROM runs WHERE label = ?", [label]).fetchall()[0][0]


def test_runs_of_two_databases_live_side_by_side(exported: tuple[dict[str, Path], Path]) -> None:
    dbs, out = exported
    with traceview.connect(dbs["tp_default"]) as a, traceview.connect(dbs["tp_overlap"]) as b:
        assert a.execute("SELECT run_id FROM runs").fetchall() == b.execute("SELECT run_id FROM runs").fetchall()
    with parquet.connect(out) as dataset:
        rows = dataset.execute("SELECT label, count(*) OVER () FROM runs ORDER BY label").fetchall()
        assert rows == [("tp_default", 2), ("tp_overlap", 2)]
        for label, db in dbs.items():
            with traceview.connect(db) as con:
                kernels = con.execute("SELECT count(*) FROM gpu_activity").fetchall()
            run = dataset_id(dataset, label)
            assert dataset.execute("SELECT count(*) FROM gpu_activity WHERE run_id = ?", [run]).fetchall() == kernels


def test_exporting_a_run_again_replaces_it(exported: tuple[dict[str, Path], Path]) -> None:
    dbs, out = exported
    before = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    traceview.api.export_parquet(dbs["tp_default"], out)
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == before


def test_every_table_the_queries_read_is_exported_with_its_comments(exported: tuple[dict[str, Path], Path]) -> None:
    dbs, out = exported
    with traceview.connect(dbs["tp_default"]) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal").fetchall()}
        for table in tables - {"traceview_meta"}:
            files = sorted((out / table).rglob("*.parquet"))
            assert files, table
            carried = json.loads(pq.read_metadata(files[0]).metadata[b"traceview.comments"])
            (comment,) = con.execute("SELECT comment FROM duckdb_tables() WHERE table_name = ?", [table]).fetchall()[0]
            columns = con.execute(
                "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = ?", [table]
            ).fetchall()
            assert carried == {"table": comment, "columns": dict(columns)}, table
    with parquet.connect(out) as dataset:
        comment = dataset.execute(
            "SELECT comment FROM duckdb_columns() WHERE table_name = 'kernel_busy' AND column_name = 'busy_ns'"
        ).fetchall()
        assert comment == [("Length of the union of its kernel intervals, ns.",)]


@pytest.mark.parametrize("label", sorted(TWO_RANKS))
def test_layers_from_the_dataset_equal_traceview_layers(exported: tuple[dict[str, Path], Path], label: str) -> None:
    dbs, out = exported
    printed = traceview.api.layers(dbs[label])
    assert printed.per_layer and {r["rank"] for r in printed.instances} == {0, 1}
    with parquet.connect(out) as dataset:
        from_files = layer_report(dataset, dataset_id(dataset, label), label)
    assert from_files == printed


def test_overlap_from_the_dataset_equals_traceview_overlap(exported: tuple[dict[str, Path], Path]) -> None:
    dbs, out = exported
    with parquet.connect(out) as dataset:
        for label, db in dbs.items():
            with traceview.connect(db) as con:
                steps = tuple(r[0] for r in con.execute("SELECT DISTINCT step FROM steps ORDER BY step").fetchall())
                some = (steps[1], steps[-1])
                printed = [_no_id(r) for r in sqllib.overlap(con)]
                printed_steps = [_no_id(r) for r in sqllib.overlap(con, None, some)]
            assert [_no_id(r) for r in sqllib.overlap(dataset, label)] == printed
            assert [_no_id(r) for r in sqllib.overlap(dataset, label, some)] == printed_steps
            assert any(r["comm_us"] > 0 for r in printed)


def _no_id(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if k != "run_id"}


def test_diff_from_the_dataset_equals_traceview_diff(exported: tuple[dict[str, Path], Path]) -> None:
    dbs, out = exported
    printed = traceview.api.diff(dbs["tp_default"], dbs["tp_overlap"])
    with parquet.connect(out) as dataset:
        a = diff.RunRef(dataset, dataset_id(dataset, "tp_default"), "tp_default")
        b = diff.RunRef(dataset, dataset_id(dataset, "tp_overlap"), "tp_overlap")
        from_files = diff.compare(a, b)
    assert from_files == printed


def test_a_run_id_taken_by_another_run_is_refused(exported: tuple[dict[str, Path], Path], tmp_path: Path) -> None:
    dbs, out = exported
    with parquet.connect(out) as dataset:
        run = dataset_id(dataset, "tp_default")
    impostor = tmp_path / "dataset" / "runs" / f"run_id={run}"
    impostor.mkdir(parents=True)
    duckdb.execute(
        f"COPY (SELECT 'someone_else' AS label, 'other' AS source_sha256) TO '{impostor / 'data_0.parquet'}'"
    )
    with pytest.raises(DatabaseError, match="taken by run 'someone_else'"):
        traceview.api.export_parquet(dbs["tp_default"], tmp_path / "dataset")
    assert [p.name for p in (tmp_path / "dataset" / "runs").iterdir()] == [f"run_id={run}"]
