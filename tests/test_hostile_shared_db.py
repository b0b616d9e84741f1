"""A database someone hands you (attached to a bug report, a CI baseline) runs none of the SQL it stores (issue 25).

Each attack is a genuine database with views or macros added by hand, as DuckDB stores them: a view under a
library name that reads the environment, recurses without end or rescales a figure; macros named after DuckDB's
built-ins (round, hash, lower, regexp_matches, median). Each test runs the real `traceview` command on it and
expects what the same command prints on the untouched database. Then: every connection is locked down, and
`traceview sql` runs one read-only statement and nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import HTA, SAMPLES
from hostile_traces import assert_one_line_error, traceview

import traceview as tv
from traceview import sqllib

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"
SECRET = "AWS_SECRET_ACCESS_KEY=traceview-test-secret-0451"
# Macros under the names of DuckDB's functions, each making traceview's own SQL wrong if it were called.
SHADOWING_MACROS = (
    "CREATE MACRO round(x, digits) AS 25.0",
    "CREATE MACRO median(x) AS 25.0",
    "CREATE MACRO hash(x) AS 0",
    "CREATE MACRO lower(x) AS 'nothing'",
    "CREATE MACRO regexp_matches(x, pattern) AS false",
    "CREATE MACRO current_database() AS 'nothing'",
    "CREATE MACRO duckdb_databases() AS TABLE SELECT 'nothing' AS database_name, 0 AS database_oid",
)


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Databases of the eager and the compiled sample (the compiled run is faster per layer), built once."""
    folder = tmp_path_factory.mktemp("genuine")
    built = {}
    for name in ("eager", "compiled"):
        built[name] = folder / f"{name}.db"
        done = traceview("ingest", SAMPLES / f"{name}.pt.trace.json.gz", "-o", built[name])
        assert done.returncode == 0, done.stderr
    return built


def crafted(original: Path, folder: Path, *statements: str) -> Path:
    """A copy of `original` with `statements` run on it by DuckDB itself, as an attacker would."""
    path = Path(shutil.copyfile(original, folder / f"crafted-{original.name}"))
    with duckdb.connect(str(path)) as con:
        for statement in statements:
            con.execute(statement)
    return path


def layers_json(db: Path) -> list[dict[str, object]]:
    result = traceview("layers", db, "-f", "json", timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_stored_view_that_reads_the_environment_never_reaches_the_report(
    genuine: dict[str, Path], tmp_path: Path
) -> None:
    db = crafted(
        genuine["eager"],
        tmp_path,
        "CREATE OR REPLACE VIEW layer_metrics AS SELECT content AS secret FROM read_text('/proc/self/environ')",
        "CREATE OR REPLACE VIEW step_metrics AS SELECT content AS secret FROM read_text('/proc/self/environ')",
    )
    report = tmp_path / "report.html"
    result = traceview("report", db, "-o", report, env={**os.environ, "TRACEVIEW_TEST_SECRET": SECRET})
    assert result.returncode == 0, result.stderr
    page = report.read_text()
    assert SECRET not in page and "traceview-test-secret" not in page
    assert "layer" in page


def test_a_stored_macro_named_like_a_builtin_changes_no_figure(genuine: dict[str, Path], tmp_path: Path) -> None:
    db = crafted(genuine["eager"], tmp_path, *SHADOWING_MACROS)
    assert layers_json(db) == layers_json(genuine["eager"])
    overlap = traceview("overlap", db, "-f", "json")
    assert overlap.returncode == 0 and overlap.stdout == traceview("overlap", genuine["eager"], "-f", "json").stdout


def test_stored_lower_and_regexp_matches_do_not_empty_the_next_ingest(genuine: dict[str, Path], tmp_path: Path) -> None:
    """The issue's ingest stored a run of 0 kernels: kernel kinds and classes are found with lower/regexp_matches."""
    db = crafted(genuine["eager"], tmp_path, *SHADOWING_MACROS)
    fresh = tmp_path / "fresh.db"
    expected = json.loads(traceview("ingest", SMALL, "-o", fresh, "-f", "json").stdout)[0]
    result = traceview("ingest", SMALL, "-o", db, "-f", "json")
    assert result.returncode == 0, result.stderr
    added = json.loads(result.stdout)[0]
    assert added["kernels"] == expected["kernels"] > 0
    with duckdb.connect(str(db), read_only=True) as con:  # what the database stored: the kernels and their classes
        classes = con.execute("SELECT category, count(*) FROM gpu_activity WHERE run_id = 2 GROUP BY 1 ORDER BY 1")
        with duckdb.connect(str(fresh), read_only=True) as clean:
            assert (
                classes.fetchall()
                == clean.execute("SELECT category, count(*) FROM gpu_activity GROUP BY 1 ORDER BY 1").fetchall()
            )


def test_writing_to_a_database_drops_the_code_it_stored(genuine: dict[str, Path], tmp_path: Path) -> None:
    """After an ingest the database holds the SQL library and nothing else: `duckdb run.db` users run no stored
    macro in place of a built-in either."""
    db = crafted(
        genuine["eager"], tmp_path, *SHADOWING_MACROS, "CREATE VIEW extra AS SELECT 1", "CREATE MACRO helper(x) AS x"
    )
    assert traceview("ingest", SMALL, "-o", db).returncode == 0
    with duckdb.connect(str(db), read_only=True) as con:
        macros = {
            r[0] for r in con.execute("SELECT function_name FROM duckdb_functions() WHERE NOT internal").fetchall()
        }
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    library = {q.name for q in sqllib.list_queries()}
    assert "round" not in macros and "helper" not in macros and "extra" not in views
    assert library <= macros | views


def test_a_stored_hash_macro_does_not_switch_the_damage_check_off(genuine: dict[str, Path], tmp_path: Path) -> None:
    db = crafted(genuine["eager"], tmp_path, "CREATE MACRO hash(x) AS 0")
    with duckdb.connect(str(db), read_only=True) as con:
        sql = "SELECT min(block_id) FROM pragma_storage_info('gpu_activity') WHERE block_id >= 0"
        block = con.execute(sql).fetchall()[0][0]
    with open(db, "r+b") as out:
        out.seek(3 * 4096 + block * 262144)
        out.write(bytes(262144))
    assert_one_line_error(traceview("ingest", SMALL, "-o", db), db, "damaged")


def test_a_recursive_stored_view_does_not_run(genuine: dict[str, Path], tmp_path: Path) -> None:
    """The issue's `traceview layers` ran without end (5.9 GB) through a view that recursed."""
    endless = (
        "CREATE OR REPLACE VIEW {name} AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
        "SELECT n AS run_id FROM r"
    )
    views = ("layer_metrics", "layer_summary", "step_steady", "layer_rank_spread")
    db = crafted(genuine["eager"], tmp_path, *(endless.format(name=v) for v in views))
    assert layers_json(db) == layers_json(genuine["eager"])
    for statement in ("SELECT count(*) FROM layer_summary", "SELECT count(*) FROM layer_metrics"):
        result = traceview("sql", db, statement, "-f", "csv", timeout=120)
        assert result.stdout == traceview("sql", genuine["eager"], statement, "-f", "csv").stdout


def test_a_stored_view_that_shrinks_the_span_does_not_pass_the_gate(genuine: dict[str, Path], tmp_path: Path) -> None:
    """B (eager) is slower than A (compiled) per layer; a view in B that divides its span by 100 hid it."""
    shrunk = crafted(
        genuine["eager"],
        tmp_path,
        "CREATE TABLE _real AS FROM layer_metrics",
        "CREATE OR REPLACE VIEW layer_metrics AS SELECT * REPLACE (span_us / 100 AS span_us) FROM _real",
    )
    honest = traceview("diff", genuine["compiled"], genuine["eager"], "--fail-if-slower", "10")
    assert honest.returncode == 1, honest.stderr
    result = traceview("diff", genuine["compiled"], shrunk, "--fail-if-slower", "10")
    assert result.returncode == 1, result.stderr
    assert result.stdout == honest.stdout.replace(str(genuine["eager"]), str(shrunk))


def test_the_why_table_runs_the_library_not_macros_of_its_names(tmp_path: Path) -> None:
    """diff's why table reads layer_kernel_time, and `traceview sql` and `traceview query` may call layer_why: each
    is the library's TEMP object, never a macro of that name the database stores (here, one reading the environ)."""
    both = tmp_path / "both.db"
    for name in ("eager", "compiled"):
        done = traceview("ingest", SAMPLES / f"{name}.pt.trace.json.gz", "-o", both, "--label", name)
        assert done.returncode == 0, done.stderr
    environ = "AS TABLE SELECT content AS secret FROM read_text('/proc/self/environ')"
    db = crafted(
        both,
        tmp_path,
        f"CREATE OR REPLACE MACRO layer_kernel_time(run := NULL) {environ}",
        f"CREATE OR REPLACE MACRO layer_why(run_a := NULL, run_b := NULL, phase := NULL) {environ}",
    )
    commands = [
        ["diff", "{db}", "--a", "eager", "--b", "compiled", "-f", "json"],
        ["sql", "{db}", "FROM layer_why(run_a := 'eager', run_b := 'compiled') ORDER BY layer", "-f", "csv"],
        ["query", "{db}", "layer_why", "--param", "run_a=eager", "--param", "run_b=compiled", "-f", "csv"],
    ]
    for command in commands:
        honest = traceview(*[both if arg == "{db}" else arg for arg in command])
        result = traceview(*[db if arg == "{db}" else arg for arg in command], env={**os.environ, "X": SECRET})
        assert honest.returncode == 0 == result.returncode, result.stderr
        assert result.stdout == honest.stdout.replace(str(both), str(db)) and SECRET not in result.stdout
    assert len(result.stdout.splitlines()) == 1 + 8  # the header and the 8 layers both runs have


@pytest.mark.parametrize(
    ("statement", "table"),
    [
        ("ALTER TABLE runs ADD COLUMN leak VARCHAR DEFAULT 'x'", "runs"),
        (
            "DROP TABLE threads; CREATE TABLE threads (run_id INTEGER NOT NULL, rank INTEGER NOT NULL, pid BIGINT NOT "
            "NULL, tid BIGINT, process_name VARCHAR, thread_name VARCHAR GENERATED ALWAYS AS (upper(process_name)))",
            "threads",
        ),
        (
            "CREATE TABLE _meta AS FROM traceview_meta; DROP TABLE traceview_meta; CREATE TABLE traceview_meta (key "
            "VARCHAR PRIMARY KEY, value VARCHAR, CHECK (length(value) < 100)); INSERT INTO traceview_meta FROM _meta",
            "traceview_meta",
        ),
        ("CREATE INDEX by_name ON gpu_activity (lower(name))", "gpu_activity"),
    ],
)
def test_a_table_with_code_added_by_hand_is_refused(
    genuine: dict[str, Path], tmp_path: Path, statement: str, table: str
) -> None:
    """Defaults, generated columns and index expressions run when a table is read or written."""
    db = crafted(genuine["eager"], tmp_path, statement)
    for args in (["info", db], ["ingest", SMALL, "-o", db]):
        assert_one_line_error(traceview(*args), db, f"table {table}", "by hand")


def test_every_connection_is_locked_down(genuine: dict[str, Path], tmp_path: Path) -> None:
    settings = """SELECT current_setting('enable_external_access'), current_setting('autoinstall_known_extensions'),
                         current_setting('autoload_known_extensions'), current_setting('lock_configuration')"""
    locked = [(False, False, False, True)]
    with tv.connect(genuine["eager"]) as con:
        assert con.execute(settings).fetchall() == locked
        for statement in ("SET enable_external_access = true", "SET autoinstall_known_extensions = true"):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
    from traceview import db, parquet

    with db.write_session(tmp_path / "new.db") as con:
        assert con.execute(settings).fetchall() == locked
    tv.ingest([SMALL], tmp_path / "run.db")
    tv.api.export_parquet(tmp_path / "run.db", tmp_path / "dataset")
    with parquet.connect(tmp_path / "dataset") as con:
        assert con.execute(settings).fetchall() == locked
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute("SELECT * FROM read_text('/proc/self/environ')")


@pytest.mark.parametrize(
    "statement",
    [
        "COPY runs TO '{out}/runs.csv'",
        "COPY (SELECT 1) TO '{out}/one.parquet' (FORMAT parquet)",
        "EXPORT DATABASE '{out}/export'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET autoinstall_known_extensions = true",
        "SET enable_external_access = true",
        "RESET search_path",
        "ATTACH '{out}/other.db' AS other",
        "PRAGMA enable_profiling",
        "CALL duckdb_tables()",
        "CREATE TEMP MACRO round(x, d) AS 25.0",
        "SELECT 1; SELECT 2",
        "",
    ],
)
def test_sql_runs_one_read_only_statement(genuine: dict[str, Path], tmp_path: Path, statement: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    before = genuine["eager"].read_bytes()
    assert_one_line_error(traceview("sql", genuine["eager"], statement.format(out=out)), genuine["eager"])
    assert not list(out.iterdir())
    assert genuine["eager"].read_bytes() == before


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT content FROM read_text('/proc/self/environ')",
        "SELECT * FROM read_csv('/etc/hostname')",
        "SELECT * FROM read_json('https://example.com/x.json')",
        "FROM glob('/*')",
    ],
)
def test_sql_reads_no_file_and_reaches_no_network(genuine: dict[str, Path], statement: str) -> None:
    result = traceview("sql", genuine["eager"], statement, env={**os.environ, "TRACEVIEW_TEST_SECRET": SECRET})
    assert SECRET not in result.stdout + result.stderr
    assert_one_line_error(result, genuine["eager"])
