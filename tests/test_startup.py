"""Short commands start fast: `traceview --help` loads neither DuckDB nor numpy/pandas/matplotlib/pyarrow, and
`info`, `layers` load DuckDB but none of the others (they cost 0.5-0.9 s of imports before; issue 18)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HTA

import traceview

HEAVY = ("duckdb", "numpy", "pandas", "matplotlib", "pyarrow")
# Runs one command in a fresh interpreter, then prints the heavy modules it loaded.
PROBE = """
import sys
from traceview.cli import main
sys.argv = ["traceview", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
sys.__stderr__.write(",".join(m for m in {heavy!r} if m in sys.modules))
"""


def _loaded(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True, check=False
    )
    return set(filter(None, result.stderr.strip().splitlines()[-1].split(","))) if result.stderr.strip() else set()


def test_help_and_version_load_no_heavy_module() -> None:
    assert _loaded("--help") == set()
    assert _loaded("--version") == set()
    assert _loaded("ingest", "--help") == set()


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "run.db"
    traceview.ingest([HTA / "nccl_parser_config" / "nccl_data.json.gz"], path)
    return path


@pytest.mark.parametrize("command", ["info", "layers"])
def test_commands_that_read_a_database_load_only_duckdb(command: str, small_db: Path) -> None:
    assert _loaded(command, str(small_db)) == {"duckdb"}


def test_the_package_loads_its_api_on_first_use() -> None:
    code = (
        "import sys, traceview.ingest.jsonstream, traceview; assert 'duckdb' not in sys.modules; "
        "assert callable(traceview.ingest) and callable(traceview.connect), traceview.ingest; "
        "from traceview import ingest, IngestOptions; assert callable(ingest); IngestOptions()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_schema_tables_digest_is_that_of_schema_sql() -> None:
    """db.SCHEMA_TABLES_SHA256 stands for schema.sql's tables: when schema.sql changes, change it (and
    SCHEMA_VERSION)."""
    from traceview import db

    assert db._tables_digest(db._schema_tables()) == db.SCHEMA_TABLES_SHA256


def test_opening_a_database_does_not_build_the_schema(small_db: Path) -> None:
    """Reading a database checks its tables against the digest; schema.sql is built in memory only to word a
    refusal (0.12 s of every command before)."""
    code = (
        "import sys; from traceview import db; db.connect(sys.argv[1]).close(); "
        "assert db._schema_tables.cache_info().misses == 0"
    )
    subprocess.run([sys.executable, "-c", code, str(small_db)], check=True)
