"""`traceview queries`, `traceview query` and `traceview overlap`: stdout per format, exit codes, one-line errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import Kernel, add_kernels, database, segment

US = 1000


def traceview(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def run_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rank 0: step 0 comm [0, 10) with compute [5, 10); step 1 comm [20, 30) with compute [20, 22)."""
    path = tmp_path_factory.mktemp("cli") / "run.db"
    con = database(path, runs=["base"])
    add_kernels(
        con,
        [
            Kernel(0, 10 * US, "all_reduce", category="comm", step=0, layer=0),
            Kernel(5 * US, 10 * US, "gemm", step=0, layer=0),
            Kernel(20 * US, 30 * US, "all_reduce", category="comm", step=1, layer=0),
            Kernel(20 * US, 22 * US, "gemm", step=1, layer=0),
        ],
    )
    segment(con)
    con.close()
    return path


def _one_error_line(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], result.stderr
    assert all(p in lines[0] for p in parts), lines[0]


def test_queries_lists_every_query_with_its_description() -> None:
    result = traceview("queries", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["comm_overlap"]["params"] == "run=NULL, step_from=NULL, step_to=NULL"
    assert rows["layer_metrics"]["kind"] == "view" and rows["layer_metrics"]["description"].startswith("Kernels")
    assert "interval_union" in rows


def test_overlap_json_per_rank_with_its_window(run_db: Path) -> None:
    result = traceview("overlap", run_db, "--format", "json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert {k: row[k] for k in ("rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us")} == {
        "rank": 0,
        "comm_us": 10 + 10,
        "compute_us": 5 + 2,
        "overlap_us": 5 + 2,
        "exposed_comm_us": 20 - 7,
    }
    assert row["overlap_pct"] == pytest.approx(100 * 7 / 20)
    assert (row["time_window"], row["window_start_ns"], row["window_end_ns"]) == ("whole trace", 0, 30 * US)


def test_overlap_of_chosen_steps_says_so(run_db: Path) -> None:
    result = traceview("overlap", run_db, "--steps", "1-1", "--run", "base", "--format", "csv")
    assert result.returncode == 0, result.stderr
    [row] = list(csv.DictReader(io.StringIO(result.stdout)))
    assert (row["time_window"], float(row["overlap_pct"])) == ("step 1", 20.0)
    table = traceview("overlap", run_db, "--steps", "0-1")
    assert table.returncode == 0 and "over: steps 0-1" in table.stdout.splitlines()[0]


def test_query_binds_parameters(run_db: Path) -> None:
    result = traceview("query", run_db, "kernel_top", "--param", "n=1", "-p", "run=base", "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["short_name"], r["calls"], float(r["total_us"])) for r in rows] == [("all_reduce", "2", 20.0)]
    view = traceview("query", run_db, "layer_summary", "--format", "json")
    assert json.loads(view.stdout)[0]["kernels_median"] == 2


def test_query_with_no_rows_prints_the_header_and_exits_0(run_db: Path) -> None:
    result = traceview("query", run_db, "layer_idle_gaps", "-p", "min_us=1000", "--format", "csv")
    assert result.returncode == 0 and result.stdout.strip().startswith("run_id,rank,step,layer,start_ns")


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (("query", "{db}", "nope"), ("run.db: no query named 'nope'",)),
        (("query", "{db}", "kernel_top", "-p", "top=3"), ("has no parameter 'top'",)),
        (("query", "{db}", "kernel_top", "-p", "n3"), ("bad --param 'n3'",)),
        (("query", "{db}", "kernel_top", "-p", "n=three"), ("n='three' is not a valid INTEGER",)),
        (("query", "{db}", "interval_union"), ("takes tables",)),
        (("overlap", "{db}", "--steps", "7-3"), ("bad step range '7-3'",)),
        (("overlap", "{db}", "--run", "nope"), ("no run 'nope'", "choose one of: base")),
        (("overlap", "{missing}"), ("missing.db: no such database",)),
    ],
)
def test_errors_are_one_line_and_exit_2(run_db: Path, args: tuple[str, ...], parts: tuple[str, ...]) -> None:
    missing = run_db.parent / "missing.db"
    _one_error_line(traceview(*[a.format(db=run_db, missing=missing) for a in args]), *parts)
