"""The rest of issue 25's items 8-10: silent wrong results now warn (ingest_stats and stderr), selections of nothing
and a process out of memory are one line, and `nsys export` is stopped with its children."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import HTA
from hostile_traces import assert_one_line_error, traceview
from kineto_builder import KinetoTrace
from test_nsys_inputs import REPORT

import traceview as tv
from traceview.errors import ToolMissingError
from traceview.ingest import IngestOptions, nsys_export

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"
HOURS_US = 3 * 3600 * 1e6


def layered(rank: int | None = None, scale: int = 1) -> KinetoTrace:
    """Three ProfilerSteps of two annotated layers of two kernels each; times in µs, or `scale` times that."""
    trace = KinetoTrace()
    if rank is not None:
        trace.metadata["distributedInfo"] = {"rank": rank, "world_size": 3}
    for step in range(3):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}"):
                    trace.launch_kernel("gemm", dur_us=5)
                    trace.launch_kernel("add", dur_us=2)
    for event in trace.events:
        for key in ("ts", "dur"):
            if key in event:
                event[key] *= scale
    return trace


def warnings_of(db: Path) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT description FROM ingest_stats WHERE name LIKE '%warning'").fetchall()
    return [r[0] for r in rows]


def test_a_rank_whose_times_are_in_another_unit_is_warned_about(tmp_path: Path) -> None:
    """Before: a 1,000x span and medians that mix ns and µs, with no word."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(3):
        layered(rank, scale=1000 if rank == 2 else 1).write(folder / f"rank{rank}.json")
    done = traceview("ingest", folder, "-o", tmp_path / "run.db")
    assert done.returncode == 0, done.stderr
    said = [w for w in warnings_of(tmp_path / "run.db") if "another unit" in w]
    assert len(said) == 1 and said[0].startswith("rank 2: its kernels last 1,000x as long"), said
    assert "rank 2: its kernels last 1,000x" in done.stderr


def test_ranks_of_one_unit_are_not_warned_about(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(3):
        layered(rank).write(folder / f"rank{rank}.json")
    assert traceview("ingest", folder, "-o", tmp_path / "run.db").returncode == 0
    assert not [w for w in warnings_of(tmp_path / "run.db") if "another unit" in w]


def test_a_kernel_hours_after_its_launch_is_left_out_of_its_layer_and_reported(tmp_path: Path) -> None:
    """Before: the layer spanned 10,800,000,008 µs, with no warning."""
    trace = layered()
    kernels = [e for e in trace.events if e.get("cat") == "kernel"]
    kernels[5]["ts"] += HOURS_US
    done = traceview("ingest", trace.write(tmp_path / "far.json"), "-o", tmp_path / "run.db")
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(tmp_path / "run.db"), read_only=True) as con:
        longest = con.execute("SELECT max(end_ns - start_ns) FROM layers").fetchall()[0][0]
        far = con.execute("SELECT step, layer FROM gpu_activity WHERE start_ns > 3600e9").fetchall()
    assert longest < 1_000_000 and far == [(None, None)], (longest, far)
    assert "1 GPU activities started more than 60 s after their launch call" in done.stderr


def test_a_time_window_that_selects_nothing_is_one_line(tmp_path: Path) -> None:
    trace = layered().write(tmp_path / "t.json")
    done = traceview("ingest", trace, "-o", tmp_path / "run.db", "--time-window", "20s:30s")
    assert_one_line_error(done, trace, "selects nothing of the trace", "give a window inside it")
    assert not (tmp_path / "run.db").exists()


def test_an_export_of_a_rank_the_run_lacks_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    assert traceview("ingest", SMALL, "-o", db).returncode == 0
    done = traceview("export", db, "-o", tmp_path / "out.json", "--rank", "7")
    assert_one_line_error(done, db, "has no rank 7 (its ranks: 1)")
    assert not (tmp_path / "out.json").exists()


# ---------------------------------------------------------------------------------------------------------
# Out of memory


NO_THREADS = """
import sys, threading
started = threading.Thread.start
def start(thread):
    if thread.name.startswith("traceview-pipe-2"):  # the third pipe writer: some threads run, the rest do not
        raise RuntimeError("can't start new thread")
    started(thread)
threading.Thread.start = start
from traceview.cli import main
sys.argv = ["traceview", *sys.argv[1:]]
main()
"""


def test_no_memory_for_a_thread_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """Under `ulimit -v 1000000` a pipe thread could not start: a traceback (or a hang on the started ones), and the
    pipe directory left behind. A thread that cannot start stands for it here (the limit's outcome varies with the
    machine's load: a MemoryError, a failed import, DuckDB's bad_alloc, which are worded alike)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = [sys.executable, "-c", NO_THREADS, "ingest", str(SMALL), "-o", str(tmp_path / "run.db")]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(scratch)}
    )
    assert_one_line_error(done, "traceview", "out of memory (can't start new thread)", "ulimit -v")
    assert list(scratch.iterdir()) == [] and not (tmp_path / "run.db").exists()


def test_under_an_address_space_limit_duckdb_is_capped_below_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceview import db

    monkeypatch.setattr(db, "_address_space_left", lambda: 2.0 * (1 << 30))
    assert db.memory_budget(10 << 30) == (1 << 30) // 2


# ---------------------------------------------------------------------------------------------------------
# nsys export: a timeout, and its children stopped with it


HANGS = """#!{python}
import subprocess, sys, time
if sys.argv[1:] == ["--version"]:
    print("NVIDIA Nsight Systems version 2026.2.1.210-1234abc")
    sys.exit(0)
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open({pid_file!r}, "w").write(str(helper.pid))
time.sleep(600)
"""


def test_an_nsys_export_that_hangs_is_stopped_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "helper.pid"
    nsys = tmp_path / "nsys"
    nsys.write_text(HANGS.format(python=sys.executable, pid_file=str(pid_file)))
    nsys.chmod(0o755)
    monkeypatch.setattr(nsys_export, "EXPORT_TIMEOUT_S", 3)
    started = time.monotonic()
    with pytest.raises(ToolMissingError, match="did not finish exporting the report within 3 s"):
        tv.ingest([REPORT], tmp_path / "run.db", IngestOptions(nsys=str(nsys)))
    assert time.monotonic() - started < 60
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(helper), "nsys's helper process outlived the stop"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
