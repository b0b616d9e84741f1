"""Fuzzing beyond trace JSON and SQLite exports (a bounded sample for CI; `python bench/fuzz.py` runs 1,000 cases
over every format): nsys Parquet directories, databases someone hands you, and command lines either work or fail in
one line naming the file, change no input, leave nothing behind (tests/fuzzing_formats.py, tests/fuzz_runner.py)."""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import duckdb
import fuzz_runner
import fuzzing
import fuzzing_formats
import pyarrow.parquet as pq
import pytest
from hostile_traces import assert_one_line_error, traceview
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceview import api
from traceview.errors import BadInputError

FUZZ = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))


@cache
def base_database(folder: str) -> bytes:
    path = Path(folder) / "base.db"
    api.ingest([fuzzing_formats.DATABASE_SEED], path)
    return path.read_bytes()


def judged(runner: fuzz_runner.CaseRunner, case: fuzzing.Case) -> None:
    outcome = runner.run(case)
    assert outcome.kind in ("ok", "clean_error"), f"{case.kind} {case.mutations}: {outcome.detail}"


@pytest.mark.heavy  # a fuzz campaign, as the kineto and nsys ones
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_mutated_parquet_exports_ingest_or_fail_cleanly(runner: fuzz_runner.CaseRunner, rng: random.Random) -> None:
    judged(runner, fuzzing_formats.parquet_case(rng))


@pytest.mark.heavy  # a fuzz campaign
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_mutated_databases_read_or_fail_cleanly(
    runner: fuzz_runner.CaseRunner, rng: random.Random, tmp_path_factory: pytest.TempPathFactory
) -> None:
    judged(runner, fuzzing_formats.database_case(rng, base_database(str(tmp_path_factory.getbasetemp()))))


@pytest.mark.heavy  # a fuzz campaign of command lines
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_random_command_lines_run_or_fail_in_one_line(runner: fuzz_runner.CaseRunner, rng: random.Random) -> None:
    judged(runner, fuzzing_formats.cli_case(rng))


def test_a_parquet_export_lacking_a_column_traceview_reads_is_one_line(tmp_path: Path) -> None:
    """Found by the fuzzer: a BinderException (and, for a damaged file, DuckDB's bare Error) went up as it was."""
    export = tmp_path / "export.parquet"
    export.mkdir()
    for name, data in fuzzing_formats.parquet_seed():
        (export / name).write_bytes(data)
    kernels = export / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    table = pq.read_table(kernels)
    pq.write_table(table.drop_columns(["blockX"]), kernels)
    with pytest.raises(BadInputError, match="not laid out as traceview expects"):
        api.ingest([export], tmp_path / "run.db")
    assert not (tmp_path / "run.db").exists()


def test_a_database_with_times_no_ingest_writes_is_one_line(tmp_path: Path) -> None:
    """Found by the fuzzer: `layers` on a database whose step ends were set to the least BIGINT overflowed in DuckDB
    (OutOfRangeException), a traceback."""
    db = tmp_path / "shared.db"
    db.write_bytes(base_database(str(tmp_path)))
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE steps SET end_ns = -9223372036854775808")
    assert_one_line_error(traceview("layers", db), db, "values no ingest writes", "Overflow")


def test_the_fuzzer_offers_each_command_only_options_it_has() -> None:
    """Its hand-written table offered `layers` a --layer-pattern it lacks (every such case a usage error): the
    options are now read from the CLI, flags told apart from options that take a value."""
    layers = fuzzing_formats.command_options("layers")
    assert "--layer-pattern" not in layers and layers["--by-rank"] and not layers["--run"]
    assert "--layer-pattern" in fuzzing_formats.command_options("segment")
    assert {"report", "plot"} <= set(fuzzing_formats.COMMANDS)
