"""traceview.sqllib: headers match what the queries return, databases document themselves, HTA's overlap."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from conftest import HTA
from synthetic import Kernel, add_kernels, database, segment

import traceview
from traceview import sqllib
from traceview.errors import DatabaseError, UsageError

QUERIES = sqllib.list_queries()
VALUE_QUERIES = [q for q in QUERIES if not q.takes_tables]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = database()
    add_kernels(con, [Kernel(0, 10, step=0, layer=0, launch_ns=0), Kernel(5, 20, category="comm", step=0, layer=0)])
    segment(con)
    return con


def test_every_file_follows_the_conventions() -> None:
    names = [q.name for q in QUERIES]
    assert len(names) == len(set(names))
    for q in QUERIES:
        folder, stem = q.module.split(".")
        assert q.path == f"queries/{folder}/{stem}.sql"
        assert q.description and q.example and q.columns, q.name
        assert q.kind == ("view" if not q.params else "macro"), q.name
        assert all(c.unit in {"-", "ns", "us", "pct", "count"} for c in q.columns), q.name
        assert all(c.unit == "us" for c in q.columns if c.name.endswith("_us")), q.name
        for param in q.params:
            assert param.default == "-" or param.type != "table", q.name
            assert re.search(rf"\b{param.name} := {re.escape(param.default)}", q.sql) or param.type == "table"
        assert q.sql.count("CREATE OR REPLACE") == len(re.findall(r"^-- .*\n(?=CREATE)", q.sql, re.M)), (
            f"{q.name}: a comment right above every object"
        )


def test_install_order_puts_dependencies_first() -> None:
    order = [q.name for q in QUERIES]
    assert order[0].startswith("interval_")
    assert order.index("interval_union") < order.index("interval_intersect") < order.index("comm_breakdown")
    assert order.index("comm_breakdown") < order.index("layer_metrics") < order.index("layer_summary")
    assert order.index("step_steady") < order.index("layer_summary")


@pytest.mark.parametrize("info", VALUE_QUERIES, ids=[q.name for q in VALUE_QUERIES])
def test_header_columns_are_the_output_columns(con: duckdb.DuckDBPyConnection, info: sqllib.QueryInfo) -> None:
    columns, _ = sqllib.run_query(con, info.name, {})
    assert columns == [c.name for c in info.columns]


@pytest.mark.parametrize("info", VALUE_QUERIES, ids=[q.name for q in VALUE_QUERIES])
def test_each_example_runs(con: duckdb.DuckDBPyConnection, info: sqllib.QueryInfo) -> None:
    con.execute(info.example).fetchall()


def test_building_block_headers_name_their_own_columns(con: duckdb.DuckDBPyConnection) -> None:
    for info in (q for q in QUERIES if q.takes_tables):
        columns = [d[0] for d in con.execute(info.example).description]
        own = [c.name for c in info.columns if c.name != "*"]
        assert columns[-len(own) :] == own, info.name


def test_database_documents_itself(con: duckdb.DuckDBPyConnection) -> None:
    stored = "database_name <> 'temp'"  # not the TEMP copies a connection that ran a query holds
    views = dict(
        con.execute(f"SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND {stored}").fetchall()
    )
    macros = dict(
        con.execute(
            f"SELECT function_name, comment FROM duckdb_functions() WHERE function_type = 'table_macro' AND {stored}"
        ).fetchall()
    )
    for q in QUERIES:
        comment = views.get(q.name) if q.kind == "view" else macros.get(q.name)
        assert comment and comment.startswith(q.description), q.name
    column_comments = dict(
        con.execute(
            f"SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'layer_metrics' AND {stored}"
        ).fetchall()
    )
    assert column_comments["busy_us"].endswith("(us)") and "union" in column_comments["busy_us"]
    assert "param step_from INTEGER = NULL" in macros["comm_overlap"]


def test_run_query_rejects_what_it_cannot_run(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(UsageError, match="no query named 'nope'"):
        sqllib.run_query(con, "nope", {})
    with pytest.raises(UsageError, match="has no parameter 'steps'"):
        sqllib.run_query(con, "comm_overlap", {"steps": "1"})
    with pytest.raises(UsageError, match="is not a valid INTEGER"):
        sqllib.run_query(con, "comm_overlap", {"step_from": "x"})
    with pytest.raises(UsageError, match="takes tables"):
        sqllib.run_query(con, "interval_union", {})
    assert sqllib.get_query("layers.metrics").name == "layer_metrics"


def test_parse_steps() -> None:
    assert sqllib.parse_steps("3-7") == (3, 7)
    assert sqllib.parse_steps("5") == (5, 5)
    for bad in ("7-3", "a-b", "-1", ""):
        with pytest.raises(UsageError):
            sqllib.parse_steps(bad)


def test_an_old_read_only_database_gets_the_library_as_temp_objects(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = database(path)
    add_kernels(con, [Kernel(0, 10), Kernel(5, 20, category="comm")])
    con.execute("UPDATE traceview_meta SET value = 'old' WHERE key = 'sqllib_sha256'")
    con.execute("DROP VIEW layer_summary")
    con.close()
    with duckdb.connect(str(path), read_only=True) as ro:
        rows = sqllib.overlap(ro)
        assert [(r["comm_us"], r["overlap_us"]) for r in rows] == [(0.015, 0.005)]
        sqllib.run_query(ro, "layer_summary", {})
    with duckdb.connect(str(path), read_only=True) as ro, pytest.raises(duckdb.CatalogException):
        ro.execute("FROM layer_summary")


def test_install_refuses_a_database_without_the_schema() -> None:
    with duckdb.connect() as bare, pytest.raises(DatabaseError, match="cannot install"):
        sqllib.install(bare)


# Whole-trace overlap with HTA's definition, computed independently (shared/README.md), in %.
HTA_OVERLAP = {
    "nccl_parser_config/nccl_data.json.gz": (0, 15.61),
    "trace_diff/control/control.json.gz": (3, 46.24),
    "trace_diff/test/test.json.gz": (1, 70.84),
    "trace_filter/sampled_rank-0.json.gz": (0, 14.95),
}


@pytest.mark.parametrize("trace", list(HTA_OVERLAP))
def test_whole_trace_overlap_matches_hta(trace: str, tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    traceview.ingest([HTA / trace], path)
    rank, expected = HTA_OVERLAP[trace]
    # the library is stored in the database: plain DuckDB, no traceview
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute("SELECT rank, time_window, overlap_pct FROM comm_overlap()").fetchall()
        con.execute("FROM layer_summary").fetchall()
    assert [(r, w) for r, w, _ in rows] == [(rank, "whole trace")]
    assert rows[0][2] == pytest.approx(expected, abs=0.01)
