"""Ingest at scale: the fast streamed path against the careful one, parts of a trace (--steps, --time-window)."""

from __future__ import annotations

import itertools
import json
import sys
import threading
from pathlib import Path

import duckdb
import pytest
from conftest import HTA, SAMPLES, table_rows
from kineto_builder import KinetoTrace

import traceview
from traceview.errors import BadInputError, DatabaseError
from traceview.ingest import IngestOptions, TimeWindow, parse_memory_limit, parse_steps, parse_time_window

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import gen_traces

TABLES = {
    "gpu_activity": "activity_id",
    "launches": "launch_id",
    "cpu_ranges": "range_id",
    "gpu_ranges": "range_id",
    "threads": "pid, tid",
    "ranks": "rank",
}


def _rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    return table_rows(db, TABLES, "SELECT rank, name, severity, value FROM ingest_stats ORDER BY ALL")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks in PyTorch's own layout (the layout the fast path splits across pipes), one gzipped."""
    out = tmp_path_factory.mktemp("gen")
    gen_traces.write_kineto(out / "rank-0.pt.trace.json", 3_000_000, rank=0, world=2, layers=4)
    gen_traces.write_kineto(out / "rank-1.pt.trace.json.gz", 3_000_000, rank=1, world=2, layers=4, gzip_level=1)
    return out


@pytest.mark.parametrize(
    "trace",
    [
        SAMPLES / "eager.pt.trace.json.gz",
        HTA / "trace_diff/control/control.json.gz",
        HTA / "critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
        None,  # the generated two-rank directory
    ],
    ids=["eager", "hta-control", "hta-multi-stream", "generated"],
)
def test_fast_and_careful_reads_give_the_same_rows(trace: Path | None, generated: Path, tmp_path: Path) -> None:
    source = trace or generated
    files = sorted(generated.iterdir()) if trace is None else [trace]
    fast, careful = tmp_path / "fast.db", tmp_path / "careful.db"
    traceview.ingest([source], fast)
    traceview.ingest([source], careful, IngestOptions(careful=frozenset(files)))
    fast_rows, careful_rows = _rows(fast), _rows(careful)
    for table in (*TABLES, "ingest_stats"):
        assert fast_rows[table] == careful_rows[table], table
    assert fast_rows["gpu_activity"], "the trace has GPU work"


def test_parallel_load_of_rank_files_gives_the_same_rows(generated: Path, tmp_path: Path) -> None:
    serial, parallel = tmp_path / "serial.db", tmp_path / "parallel.db"
    traceview.ingest([generated], serial)
    summary = traceview.ingest([generated], parallel, IngestOptions(jobs=2))
    assert summary.ranks == 2
    assert _rows(serial) == _rows(parallel)


def test_one_thread_gives_the_rows_of_one_per_core(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--threads reaches DuckDB's session, and changes how fast, not what is written."""
    default, one = tmp_path / "default.db", tmp_path / "one.db"
    traceview.ingest([generated], default)
    settings: list[dict[str, str | int]] = []
    access = traceview.db.ingest_access

    def recording(*args: object, **kwargs: object) -> traceview.db.Access:
        settings.append((found := access(*args, **kwargs)).settings)  # type: ignore[arg-type]
        return found

    monkeypatch.setattr(traceview.db, "ingest_access", recording)
    traceview.ingest([generated], one, IngestOptions(threads=1))
    assert settings and all(s["threads"] == 1 for s in settings)
    assert _rows(default) == _rows(one)


def test_parallel_load_reports_a_bad_file_as_a_serial_one_does(generated: Path, tmp_path: Path) -> None:
    bad = tmp_path / "ranks"
    bad.mkdir()
    for path in generated.iterdir():
        (bad / path.name).write_bytes(path.read_bytes())
    (bad / "rank-1.pt.trace.json.gz").write_bytes(b"not gzip at all")
    with pytest.raises(BadInputError) as serial:
        traceview.ingest([bad], tmp_path / "serial.db")
    with pytest.raises(BadInputError) as parallel:
        traceview.ingest([bad], tmp_path / "parallel.db", IngestOptions(jobs=2))
    assert str(serial.value) == str(parallel.value)
    assert not (tmp_path / "parallel.db").exists()


def test_parquet_dataset_holds_the_same_rows_and_runs_the_same_sql(generated: Path, tmp_path: Path) -> None:
    from traceview import parquet

    db, out = tmp_path / "run.db", tmp_path / "dataset"
    traceview.ingest([generated], db)
    traceview.api.export_parquet(db, out)
    assert [p.name for p in (out / "gpu_activity").glob("run_id=*/rank=1")] == ["rank=1"]
    query = "SELECT rank, step, layer, count(*), sum(end_ns - start_ns) FROM gpu_activity GROUP BY ALL ORDER BY ALL"
    with duckdb.connect(str(db), read_only=True) as con, parquet.connect(out) as dataset:
        for table in (*TABLES, "runs", "steps", "layers", "ingest_stats"):
            sql = f"SELECT * EXCLUDE (run_id) FROM {table} ORDER BY ALL"  # the dataset's run id: from the source
            assert con.execute(sql).fetchall() == dataset.execute(sql).fetchall(), table
        assert con.execute(query).fetchall() == dataset.execute(query).fetchall()


def test_parsing_windows_and_steps() -> None:
    assert parse_time_window("100ms:250ms") == TimeWindow(100_000_000, 250_000_000, relative=True)
    assert parse_time_window("@5us:@1.5ms") == TimeWindow(5_000, 1_500_000, relative=False)
    assert parse_time_window(":2s") == TimeWindow(None, 2_000_000_000, relative=True)
    assert parse_steps("3-5,8") == (3, 4, 5, 8)
    for bad in ("100ms", "5ms:1ms", "@1ms:2ms", "1parsec:2ms"):
        with pytest.raises(BadInputError):
            parse_time_window(bad)
    with pytest.raises(BadInputError):
        parse_steps("three")


def _stepped_trace(tmp_path: Path) -> Path:
    """Four steps; in each, two kernels; the last kernel of step 2 runs long after step 2 ends on the CPU."""
    trace = KinetoTrace()
    for step in range(1, 5):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            trace.launch_kernel(f"gemm_{step}", dur_us=5)
            trace.launch_kernel(f"late_{step}", dur_us=5 if step != 2 else 400)
    return trace.write(tmp_path / "stepped.json")


def test_steps_keep_what_the_steps_launched(tmp_path: Path, db_path: Path) -> None:
    summary = traceview.ingest([_stepped_trace(tmp_path)], db_path, IngestOptions(steps=(2, 3)))
    with duckdb.connect(str(db_path), read_only=True) as con:
        kernels = [r[0] for r in con.execute("SELECT name FROM gpu_activity ORDER BY start_ns").fetchall()]
        steps = [r[0] for r in con.execute("SELECT name FROM cpu_ranges WHERE kind = 'step' ORDER BY 1").fetchall()]
    assert kernels == ["gemm_2", "late_2", "gemm_3", "late_3"]
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert summary.label == "stepped@steps=2,3"


def test_time_window_relative_and_absolute(tmp_path: Path, db_path: Path) -> None:
    """GPU work follows its launch call: a window around the first two launches keeps their two kernels."""
    path = _stepped_trace(tmp_path)
    whole = traceview.ingest([path], db_path)
    with duckdb.connect(str(db_path), read_only=True) as con:
        first, second = con.execute("SELECT start_ns FROM launches ORDER BY start_ns LIMIT 2").fetchall()
        start = con.execute("SELECT trace_start_ns FROM runs").fetchall()[0][0]
    relative = traceview.ingest([path], db_path, IngestOptions(time_window=TimeWindow(0, second[0] - start + 1)))
    absolute = traceview.ingest([path], db_path, IngestOptions(time_window=TimeWindow(None, first[0] + 1, False)))
    assert whole.kernels == 8
    assert (relative.kernels, relative.launches) == (2, 2)
    assert (absolute.kernels, absolute.launches) == (1, 1)


def test_memory_limit_words_and_sizes() -> None:
    assert parse_memory_limit("auto") is None
    assert parse_memory_limit("none") == 0
    assert parse_memory_limit("8GB") == 8 * 10**9
    assert parse_memory_limit("512MiB") == 512 << 20
    assert parse_memory_limit("1.5 gib") == 3 << 29
    for bad in ("", "lots", "-1GB", "0", "4XB"):
        with pytest.raises(BadInputError, match="memory-limit"):
            parse_memory_limit(bad)


def test_a_statement_that_cannot_spill_under_the_automatic_cap_is_run_again_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    caps: list[int | None] = []
    session = traceview.db.write_session

    def recording(
        path: Path, memory_limit: int | None = None, readable: tuple[Path, ...] = (), threads: int | None = None
    ) -> object:
        caps.append(memory_limit)
        return session(path, memory_limit, readable, threads)

    monkeypatch.setattr(traceview.db, "memory_budget", lambda data_bytes: 1 << 20)  # 1 MiB: nothing fits
    monkeypatch.setattr(traceview.db, "write_session", recording)
    summary = traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], tmp_path / "run.db")
    assert caps == [1 << 20, None]
    assert summary.kernels == 2635


def test_a_user_cap_too_small_is_one_clear_error(tmp_path: Path) -> None:
    database = tmp_path / "run.db"
    with pytest.raises(DatabaseError, match=r"out of memory under --memory-limit 1,048,576 bytes.*--memory-limit none"):
        traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], database, IngestOptions(memory_limit=1 << 20))
    assert not database.exists()


def test_running_out_of_memory_without_a_cap_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(*args: object) -> object:
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    monkeypatch.setattr(traceview.api, "_ingest_once", out_of_memory)
    database = tmp_path / "run.db"
    with pytest.raises(DatabaseError, match=r"ran out of memory \(Out of Memory Error.*--steps, --time-window"):
        traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], database, IngestOptions(memory_limit=0))
    with pytest.raises(DatabaseError, match="ran out of memory"):  # automatic cap: lifted once, then the error
        traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], database)


@pytest.fixture(scope="module")
def spliced_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain trace of ~9 MB in PyTorch's layout, the same events one per line and all on one line."""
    out = tmp_path_factory.mktemp("spliced")
    pretty = out / "pretty.pt.trace.json"
    gen_traces.write_kineto(pretty, 9_000_000, rank=0, world=2, layers=4)
    data = json.loads(pretty.read_text())
    events = data.pop("traceEvents")
    lines = ",\n".join(json.dumps(e) for e in events)
    (out / "lines.pt.trace.json").write_text(json.dumps(data)[:-1] + ', "traceEvents": [\n' + lines + "\n]}")
    (out / "one-line.pt.trace.json").write_text(json.dumps({**data, "traceEvents": events}))
    return out


@pytest.mark.parametrize("layout", ["pretty", "lines", "one-line"])
@pytest.mark.parametrize("splice", [True, False], ids=["splice", "pread"])
def test_an_uncompressed_file_moved_by_byte_ranges_gives_the_rows_of_the_careful_read(
    layout: str, splice: bool, spliced_inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small ranges (CHUNK 128 KiB) over 16 lanes: many ranges, many pipes, the file's tail read as chunks."""
    from traceview.ingest import jsonstream, kineto

    trace = spliced_inputs / f"{layout}.pt.trace.json"
    careful = tmp_path / "careful.db"
    traceview.ingest([trace], careful, IngestOptions(careful=frozenset([trace])))
    moved: list[tuple[int, int]] = []
    move = jsonstream._move_range
    monkeypatch.setattr(jsonstream, "_move_range", lambda src, fd, a, b: (moved.append((a, b)), move(src, fd, a, b)))
    monkeypatch.setattr(jsonstream, "_SPLICE", splice)
    monkeypatch.setattr(jsonstream, "CHUNK", 1 << 17)
    monkeypatch.setattr(jsonstream, "HOLD", 1 << 16)
    monkeypatch.setattr(jsonstream, "WINDOW", 1 << 14)
    monkeypatch.setattr(jsonstream, "MIN_QUOTA", 1 << 19)
    monkeypatch.setattr(jsonstream, "PIPES_HELD", 1 << 22)  # 512 KiB a pipe: a lane moves on to further pipes
    monkeypatch.setattr(kineto, "_lanes", lambda con: 16)
    fast = tmp_path / "fast.db"
    traceview.ingest([trace], fast)
    assert len(moved) > 20, "the file went through byte ranges"
    ranges = sorted(moved)
    assert all(a < b <= next_a for (a, b), (next_a, _) in itertools.pairwise(ranges))  # each byte moved once
    assert _rows(fast) == _rows(careful)


def test_a_pipe_writer_out_of_memory_fails_the_stream_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Under `ulimit -v` near what ingest needs, a writer thread's allocation failed and the thread printed its
    traceback before the one error line (CI, 2026-12-07). Its MemoryError now fails the stream as a failed write
    does: the careful read runs instead (here it has memory: the same rows), and nothing else reaches stderr."""
    from traceview.ingest import jsonstream

    trace = SAMPLES / "eager.pt.trace.json.gz"
    careful = tmp_path / "careful.db"
    traceview.ingest([trace], careful, IngestOptions(careful=frozenset([trace])))
    write = jsonstream._write_all

    def failing(fd: int, data: bytes) -> None:
        if threading.current_thread().name == "traceview-pipe-0":
            raise MemoryError
        write(fd, data)

    monkeypatch.setattr(jsonstream, "_write_all", failing)
    fast = tmp_path / "fast.db"
    traceview.ingest([trace], fast)
    assert "Exception in thread" not in capfd.readouterr().err
    assert _rows(fast) == _rows(careful)
