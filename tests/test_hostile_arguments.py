"""Command-line arguments that gave a traceback, a silent no-op or a wrong result (issue 25, items 8-10): each is
one line and exit 2 now, or the result it should have been.
"""

from __future__ import annotations

import resource
import shutil
import tarfile
import unicodedata
from pathlib import Path

import pytest
from conftest import HTA, SAMPLES
from hostile_traces import assert_one_line_error, traceview

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"


def _at_most_4_gib() -> None:
    """The old parse of --steps built a set of every number: 4.6 GB before its traceback."""
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--time-window", "1e400:2e400", "bad time '1e400'"),  # OverflowError: float infinity to integer
        ("--time-window", "0:99999999999999999999s", "out of range"),
        ("--memory-limit", "99999999999999999999TB", "bad --memory-limit"),  # DuckDB's ParserException
        ("--memory-limit", "0.5b", "bad --memory-limit"),  # 0 bytes, which meant no cap
        ("--steps", "0-99999999999", "more than 100,000 steps"),
        ("--comm-pattern", "", "matches an empty string"),  # every kernel became communication
        ("--comm-pattern", "nccl|", "matches an empty string"),
        ("--layer-pattern", "(\\d*)", "matches an empty string"),
    ],
)
def test_an_ingest_option_out_of_bounds_is_one_line(tmp_path: Path, option: str, value: str, words: str) -> None:
    result = traceview("ingest", SMALL, "-o", tmp_path / "run.db", option, value, preexec_fn=_at_most_4_gib)
    assert_one_line_error(result, None, words)
    assert not (tmp_path / "run.db").exists()


@pytest.mark.parametrize("twice", ["same path", "a link", "a directory and its file"])
def test_one_file_given_twice_is_refused(tmp_path: Path, twice: str) -> None:
    """It became two ranks of one run (3,000 copies: 9.3 GB of spill)."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    trace = Path(shutil.copyfile(SMALL, folder / "rank0.json.gz"))
    (tmp_path / "link.json.gz").symlink_to(trace)
    second = {"same path": trace, "a link": tmp_path / "link.json.gz", "a directory and its file": folder}[twice]
    result = traceview("ingest", trace, second, "-o", tmp_path / "run.db")
    assert_one_line_error(result, None, "given twice")


@pytest.mark.parametrize("percent", ["nan", "inf", "-inf", "-100"])
def test_a_gate_that_can_never_fail_is_refused(tmp_path: Path, percent: str) -> None:
    db = tmp_path / "run.db"
    assert traceview("ingest", SAMPLES / "eager.pt.trace.json.gz", "-o", db).returncode == 0
    assert_one_line_error(traceview("diff", db, db, f"--fail-if-slower={percent}"), None, "--fail-if-slower")


def test_a_label_is_one_label_however_its_accents_are_typed(tmp_path: Path) -> None:
    """NFC and NFD spellings of one label became two runs that print the same."""
    db = tmp_path / "run.db"
    composed, decomposed = "café", unicodedata.normalize("NFD", "café")
    assert composed != decomposed
    assert traceview("ingest", SMALL, "-o", db, "--label", composed).returncode == 0
    again = traceview("ingest", SMALL, "-o", db, "--label", decomposed)
    assert again.returncode == 0 and "already holds this trace" in again.stderr
    assert traceview("info", db, "-f", "csv").stdout.count("café") == 1
    assert traceview("layers", db, "--run", decomposed).returncode == 0


@pytest.mark.parametrize("name", ["gpu_activity", "RUNS", "_ngpu", "sqlite_master"])
def test_an_nsys_parquet_file_named_like_traceviews_tables_is_refused(tmp_path: Path, name: str) -> None:
    """Each file of the directory becomes a TEMP view of its name: `gpu_activity.parquet` hid the table the run is
    written to (a CatalogException traceback), `_ngpu.parquet` a staging table."""
    with tarfile.open(SAMPLES / "graph.parquet.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    export = tmp_path / "graph.parquet"
    shutil.copyfile(export / "StringIds.parquet", export / f"{name}.parquet")
    result = traceview("ingest", export, "-o", tmp_path / "run.db")
    assert_one_line_error(result, export / f"{name}.parquet", "not one nsys exports")
    assert not (tmp_path / "run.db").exists()
