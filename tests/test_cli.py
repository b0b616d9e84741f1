"""The command line: exit codes, one-line errors on bad input, no database left behind."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HTA


def traceview(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    real = gzip.decompress((HTA / "trace_filter/sampled_rank-0.json.gz").read_bytes())
    files = {
        "empty.json": b"",
        "truncated.json.gz": gzip.compress(real)[:5000],
        "truncated.json": real[: len(real) // 2],
        "not_json.json": b"hello, this is not json\n",
        "not_a_trace.json": json.dumps({"rows": [1, 2, 3]}).encode(),
        "empty_trace.json": b'{"traceEvents": []}',
        "trace.txt": b"just text",
    }
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    return {name: tmp / name for name in files} | {"missing.json": tmp / "missing.json"}


@pytest.mark.parametrize(
    "name",
    [
        "empty.json",
        "truncated.json.gz",
        "truncated.json",
        "not_json.json",
        "not_a_trace.json",
        "empty_trace.json",
        "trace.txt",
        "missing.json",
    ],
)
def test_bad_input_gives_one_line_exit_2_and_no_database(name: str, tmp_path: Path) -> None:
    path = _bad_inputs(tmp_path)[name]
    db = tmp_path / "out.db"
    result = traceview("ingest", path, "-o", db)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and " — " in lines[0], result.stderr
    assert not any(tmp_path.glob("out.db*"))


def test_bad_input_leaves_an_existing_database_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    assert traceview("ingest", HTA / "trace_filter/sampled_rank-0.json.gz", "-o", db).returncode == 0
    before = traceview("info", db, "--format", "json").stdout
    assert traceview("ingest", _bad_inputs(tmp_path)["truncated.json"], "-o", db).returncode == 2
    assert traceview("info", db, "--format", "json").stdout == before


def test_ingest_info_and_sql(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    result = traceview("ingest", HTA / "nccl_parser_config/nccl_data.json.gz", "-o", db, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["kernels"] == 2700
    info = json.loads(traceview("info", db, "-f", "json").stdout)
    assert info[0]["run"] == "nccl_data" and info[0]["devices"] == "NVIDIA A100-PG509-200"
    sql = traceview("sql", db, "SELECT category, count(*) AS n FROM gpu_activity GROUP BY 1 ORDER BY 1", "-f", "csv")
    assert sql.stdout.splitlines() == ["category,n", "comm,21", "compute,2679", "memcpy,960", "memset,114"]


def test_sql_errors_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    traceview("ingest", HTA / "trace_compare/base/base.json.gz", "-o", db)
    result = traceview("sql", db, "SELECT nope FROM gpu_activity")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_reading_commands_do_not_modify_the_database(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    traceview("ingest", HTA / "trace_compare/base/base.json.gz", "-o", db)
    db.chmod(0o444)
    assert traceview("info", db).returncode == 0
    result = traceview("sql", db, "DELETE FROM runs")
    assert result.returncode == 2 and "read-only" in result.stderr.lower()


def test_usage_errors_exit_2_without_a_traceback() -> None:
    for args in (["no-such-command"], ["ingest"], ["diff"]):
        result = traceview(*args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize(("limit", "words"), [("lots", "bad --memory-limit 'lots'"), ("1MB", "out of memory under")])
def test_a_bad_or_too_small_memory_limit_is_one_line_and_no_database(limit: str, words: str, tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    result = traceview("ingest", HTA / "trace_filter/sampled_rank-0.json.gz", "-o", db, "--memory-limit", limit)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    assert not any(tmp_path.glob("out.db*"))
