"""The Kineto parse path on any layout and number format, and on valid JSON that used to be refused.

Truth comes from the trace's own JSON (read with `json`, times turned into ns with `decimal`), or from the
same events written in PyTorch's layout; the fast path must be taken for every layout (the careful path,
kineto_array.extract_event_array, is made to fail in those tests).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES, table_rows

import traceview
from traceview.ingest import IngestOptions, kineto

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import replicate_trace

TABLES = ("gpu_activity", "launches", "cpu_ranges", "gpu_ranges", "threads", "steps", "layers")


def _rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    return table_rows(db, TABLES, "SELECT rank, name, value FROM ingest_stats WHERE name <> 'json_bytes' ORDER BY ALL")


@pytest.fixture
def fast_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a file goes the careful way."""

    def careful(*args: object, **kwargs: object) -> None:
        raise AssertionError("the careful path was taken")

    monkeypatch.setattr(kineto, "extract_event_array", careful)


@pytest.mark.parametrize("layout", ["lines", "one-line", "long-fractions"])
def test_every_layout_and_number_format_takes_the_fast_path_with_the_same_rows(
    layout: str, tmp_path: Path, fast_only: None
) -> None:
    pytorch = tmp_path / "pytorch.json"
    replicate_trace.write(replicate_trace.SAMPLE, pytorch, 1)  # one copy of the sample, PyTorch's layout
    other = tmp_path / f"{layout}.json"
    if layout == "one-line":  # what json.dump writes: no newline at all
        other.write_text(json.dumps(json.loads(pytorch.read_text())))
    else:
        replicate_trace.write(replicate_trace.SAMPLE, other, 1, "lines" if layout == "lines" else "pytorch",
                              long_fractions=layout == "long-fractions")  # fmt: skip
    traceview.ingest([pytorch], tmp_path / "a.db")
    traceview.ingest([other], tmp_path / "b.db")
    assert _rows(tmp_path / "a.db") == _rows(tmp_path / "b.db")


def _ns(text: str) -> int:
    return int((Decimal(text) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


EXACT_TIMES = [("9911282807059.433", "2.4960000000000004"), ("1790857026123456.789", "0.0005"), ("17", "1e-3")]
# A Triton kernel's grid as text fails the fast read of args: the file is read the careful way.
TRITON_GRID = (
    '{"ph": "X", "cat": "kernel", "name": "triton_", "pid": 0, "tid": 7, "ts": 1790857026123456.789, "dur": 2.5, '
    '"args": {"device": 0, "stream": 7, "correlation": 1, "grid": "grid(100,)"}}'
)


@pytest.mark.parametrize("careful", [False, True], ids=["fast", "careful"])
def test_times_are_exact_ns_from_the_text_where_a_double_is_not(tmp_path: Path, careful: bool) -> None:
    # 9.9e12 µs and beyond: a double's last digit is no longer the text's (9911282807059.433 -> ...059.434); the
    # careful path read ts and dur as JSON, which holds a number as a double (epoch µs: ...456.789 -> ...456.8).
    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}}}'
        for i, (ts, dur) in enumerate(EXACT_TIMES)
    ] + ([TRITON_GRID] if careful else [])
    trace = tmp_path / "exact.json"
    trace.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    traceview.ingest([trace], tmp_path / "exact.db")
    with duckdb.connect(str(tmp_path / "exact.db"), read_only=True) as con:
        got = dict(con.execute("SELECT name, (start_ns, end_ns - start_ns) FROM cpu_ranges").fetchall())
        kernels = con.execute("SELECT start_ns, grid FROM gpu_activity").fetchall()
    for i, (ts, dur) in enumerate(EXACT_TIMES):
        assert got[f"op{i}"] == (_ns(ts), _ns(dur)), (ts, dur)
    assert kernels == ([(1790857026123456789, None)] if careful else [])


def test_a_careful_read_whose_times_are_not_all_numbers_reads_them_raw(tmp_path: Path) -> None:
    # read the careful way (a grid as text), ts and dur as DECIMAL fail on a ts that is no number: the file is read
    # again with raw times, and that event counted as without a usable ts, as before
    events = [TRITON_GRID, '{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": "abc", "dur": 1}']
    trace = tmp_path / "odd.json"
    trace.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    traceview.ingest([trace], tmp_path / "odd.db")
    with duckdb.connect(str(tmp_path / "odd.db"), read_only=True) as con:
        stats = dict(con.execute("SELECT name, value FROM ingest_stats").fetchall())
        kernels = con.execute("SELECT count(*) FROM gpu_activity").fetchall()
    assert stats.get("missing_timestamp.cpu_op") == 1 and kernels == [(1,)]


# ---------------------------------------------------------------------------------------------------------
# Valid JSON that was refused (issue 17, items 3 and 10)

KERNEL = (
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.0, "dur": 2.0, '
    '"args": {"device": 0, "stream": 7, "correlation": 1}}'
)
LAUNCH = (
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 9.0, "dur": 0.5, '
    '"args": {"correlation": 1}}'
)


def _kernels_and_device(db: Path) -> tuple[int, int, str | None]:
    with duckdb.connect(str(db), read_only=True) as con:
        kernels = con.execute("SELECT count(*) FROM gpu_activity").fetchall()[0][0]
        linked = con.execute("SELECT count(launch_id) FROM gpu_activity").fetchall()[0][0]
        device = con.execute("SELECT device_name FROM ranks").fetchall()[0][0]
    return kernels, linked, device


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_large_device_list_before_or_after_the_events_is_read(where: str, tmp_path: Path) -> None:
    devices = [{"id": i, "name": "NVIDIA H200" if i == 0 else f"GPU {i}", "numSms": 132} for i in range(100_000)]
    events = json.loads(f"[{KERNEL}, {LAUNCH}]")
    trace = {"deviceProperties": devices, "traceEvents": events}
    if where == "after":
        trace = {"traceEvents": events, "deviceProperties": devices}
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(trace))  # 3.6 MB of devices, more than the fast path holds back at the end
    traceview.ingest([path], tmp_path / "devices.db")
    assert _kernels_and_device(tmp_path / "devices.db") == (1, 1, "NVIDIA H200")


def _gzip_with_space(path: Path, parts: list[str | int]) -> Path:
    """Gzip `parts` to `path`: strings as they are, an int as that many MiB of spaces and newlines."""
    block = (b" " * 1023 + b"\n") * 1024
    with gzip.open(path, "wb", compresslevel=1) as out:
        for part in parts:
            if isinstance(part, int):
                for _ in range(part):
                    out.write(block)
            else:
                out.write(part.encode())
    return path


@pytest.mark.parametrize(
    "layout",
    [
        ['{"traceEvents": [', 80, KERNEL, ",", LAUNCH, "]}"],
        ['{"traceEvents": [', KERNEL, 80, ",", LAUNCH, "]}"],
        ['{"traceEvents": [', KERNEL, ",", 80, LAUNCH, "]}"],
        ['{"traceEvents": [', KERNEL, ",", LAUNCH, 80, "]}"],
    ],
    ids=["after-bracket", "before-comma", "after-comma", "before-end"],
)
def test_long_whitespace_inside_the_array_is_valid_json_and_is_read(layout: list[str | int], tmp_path: Path) -> None:
    trace = _gzip_with_space(tmp_path / "space.json.gz", layout)  # 80 MiB of whitespace: more than 64 MiB
    traceview.ingest([trace], tmp_path / "space.db")
    assert _kernels_and_device(tmp_path / "space.db") == (1, 1, None)


def test_a_gzip_bomb_is_refused_in_one_line_with_bounded_temporary_files(tmp_path: Path) -> None:
    bomb = _gzip_with_space(tmp_path / "bomb.json.gz", ['{"traceEvents": [', KERNEL, ",", 400, "x]}"])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "ingest", str(bomb), "-o", str(tmp_path / "bomb.db")],
        capture_output=True,
        text=True,
        env={"TMPDIR": str(scratch), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "gzip bomb" in lines[0], lines
    assert "truncated" not in lines[0]
    assert not list(scratch.iterdir()) and not (tmp_path / "bomb.db").exists()


def test_the_sample_still_reads(tmp_path: Path) -> None:
    summary = traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], tmp_path / "eager.db")
    assert summary.kernels == 2635


# ---------------------------------------------------------------------------------------------------------
# Many small per-rank files (issue 17, item 5)


def _rank_file(folder: Path, rank: int, gz: bool = False, extra: str = "", grid: str = "[1, 1, 1]") -> Path:
    events = [
        f'{{"ph": "X", "cat": "kernel", "name": "gemm<{rank % 3}>", "pid": 0, "tid": 7, "ts": {10 + rank}.5, '
        f'"dur": 2.0, "args": {{"device": 0, "stream": 7, "correlation": 1, "grid": {grid}}}}}',
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {9 + rank}, '
        f'"dur": 0.5, "args": {{"correlation": 1}}}}',
        f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {8 + rank}, "dur": 3}}',
        '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}',
        '{"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 9}',
    ]
    text = f'{{{extra}"traceEvents": [{", ".join(events)}], "traceName": "r{rank}"}}'
    path = folder / f"rank-{rank}.pt.trace.json{'.gz' if gz else ''}"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def test_many_small_rank_files_load_in_time_independent_of_their_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(500):
        _rank_file(folder, rank, gz=rank % 2 == 1)
    spent = []
    load = kineto.load

    def timed(*args: object) -> object:
        start = time.process_time()
        try:
            return load(*args)  # type: ignore[arg-type]
        finally:
            spent.append(time.process_time() - start)

    monkeypatch.setattr(kineto, "load", timed)
    summary = traceview.ingest([folder], tmp_path / "ranks.db")
    assert summary.ranks == 500 and summary.kernels == 500
    assert spent[0] < 10, spent  # ~1.5 CPU-s; one file at a time took ~0.08 CPU-s per file (40 s)


def test_small_files_read_together_give_the_rows_of_files_read_one_by_one(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(6):
        _rank_file(folder, rank, gz=rank % 2 == 0)
    _rank_file(folder, 6, extra='"baseTimeNanoseconds": 1790857026000000000, "deviceProperties": [{"id": 0, '
               '"name": "NVIDIA H200"}], "distributedInfo": {"rank": 16, "world_size": 32}, ')  # fmt: skip
    (folder / "rank-7.pt.trace.json").write_text(
        '[{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]'
    )  # fmt: skip  (a bare array: read alone)
    for rank in range(8, 12):
        _rank_file(folder, rank)
    together, alone = tmp_path / "together.db", tmp_path / "alone.db"
    traceview.ingest([folder], together)
    traceview.ingest([folder], alone, IngestOptions(careful=frozenset({folder})))  # the mark of a failed batch
    assert _rows(together) == _rows(alone)
    with duckdb.connect(str(together), read_only=True) as con:
        assert con.execute("SELECT count(*), max(rank) FROM ranks").fetchall() == [(12, 16)]


def test_a_batch_with_a_value_of_another_type_falls_back_to_reading_files_alone(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(5):
        _rank_file(folder, rank, grid='"grid(100,)"' if rank == 3 else "[1, 1, 1]")  # Triton writes such grids
    traceview.ingest([folder], tmp_path / "mixed.db")
    with duckdb.connect(str(tmp_path / "mixed.db"), read_only=True) as con:
        grids = con.execute("SELECT rank, grid FROM gpu_activity ORDER BY rank").fetchall()
    assert grids == [(r, None if r == 3 else [1, 1, 1]) for r in range(5)]
