"""Traces read from a stream: `-` (stdin), a FIFO (alone or among per-rank files), `<(zcat trace.json.gz)`.

Each is read once into a bounded scratch copy; the run equals the one ingested from the file itself, and its
SHA-256 is the stream's.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import duckdb
import pytest
from conftest import HTA
from hostile_traces import traceview, traceview_cmd

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"
RANKS = [HTA / "trace_filter" / f"sampled_rank-{rank}.json.gz" for rank in (0, 1)]


def runs(db: Path) -> list[tuple[object, ...]]:
    """(label, source_path, source_sha256, kernels) of every run."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            """SELECT label, source_path, source_sha256,
                      (SELECT count(*) FROM gpu_activity g WHERE g.run_id = r.run_id AND kind = 'kernel')
               FROM runs r ORDER BY run_id"""
        ).fetchall()


def kernels_of_the_file(tmp_path: Path) -> int:
    db = tmp_path / "file.db"
    assert traceview("ingest", SMALL, "-o", db).returncode == 0
    return int(runs(db)[0][3])  # type: ignore[call-overload]


def feed_fifo(fifo: Path, data: bytes) -> threading.Thread:
    """A writer that opens `fifo` (waiting for the reader) and writes `data`."""
    writer = threading.Thread(target=fifo.write_bytes, args=(data,), daemon=True)
    writer.start()
    return writer


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "json"])
def test_stdin_is_read_like_the_file(tmp_path: Path, compressed: bool) -> None:
    data = SMALL.read_bytes() if compressed else gzip.decompress(SMALL.read_bytes())
    db = tmp_path / "stdin.db"
    result = traceview("ingest", "-", "-o", db, input=None, stdin=_file_with(tmp_path, data))
    assert result.returncode == 0, result.stderr
    assert runs(db) == [("stdin", "-", hashlib.sha256(data).hexdigest(), kernels_of_the_file(tmp_path))]


def _file_with(tmp_path: Path, data: bytes) -> object:
    path = tmp_path / "stdin.bin"
    path.write_bytes(data)
    return path.open("rb")


def test_a_process_substitution_is_read_and_ingested_once(tmp_path: Path) -> None:
    """`<(zcat …)` hands over /dev/fd/63, a pipe; the same stream again is the same run, not a second one."""
    db = tmp_path / "pipe.db"
    command = " ".join(f"'{part}'" for part in traceview_cmd("ingest")) + f" <(zcat '{SMALL}') -o '{db}'"
    for _ in range(2):
        result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
    assert "already holds this trace" in result.stderr
    [(label, source, sha, kernels)] = runs(db)
    assert label == "pipe" and str(source).startswith("/dev/fd/") and kernels == kernels_of_the_file(tmp_path)
    assert sha == hashlib.sha256(gzip.decompress(SMALL.read_bytes())).hexdigest()


def test_a_fifo_is_read_once_and_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json.gz"
    os.mkfifo(fifo)
    writer = feed_fifo(fifo, SMALL.read_bytes())
    result = traceview("ingest", fifo, "-o", tmp_path / "fifo.db")
    writer.join(timeout=10)
    assert result.returncode == 0, result.stderr
    assert runs(tmp_path / "fifo.db")[0][:2] == ("trace", str(fifo))


def test_a_fifo_among_per_rank_files_is_read_as_its_rank(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copyfile(RANKS[0], ranks / RANKS[0].name)
    os.mkfifo(ranks / RANKS[1].name)
    writer = feed_fifo(ranks / RANKS[1].name, RANKS[1].read_bytes())
    db = tmp_path / "ranks.db"
    result = traceview("ingest", ranks, "-o", db)
    writer.join(timeout=10)
    assert result.returncode == 0, result.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        files = con.execute("SELECT rank, source_file FROM ranks ORDER BY rank").fetchall()
    assert files == [(0, str(ranks / RANKS[0].name)), (1, str(ranks / RANKS[1].name))]


def test_a_stream_larger_than_its_scratch_room_is_one_line(tmp_path: Path) -> None:
    """A limit on file size stands for a full disk: the copy stops there, with one line and no database."""

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))

    db = tmp_path / "big.db"
    stdin = _file_with(tmp_path, gzip.decompress(RANKS[0].read_bytes()))
    result = traceview("ingest", "-", "-o", db, stdin=stdin, preexec_fn=small_files)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: -: the streamed trace does not fit in ") and " — set TMPDIR" in line, line
    assert not db.exists()


@pytest.mark.parametrize(
    ("data", "words"), [(b"", "the stream is empty"), (b"hello\n", "unknown kind of data on the stream")]
)
def test_an_empty_or_unknown_stream_is_one_line(tmp_path: Path, data: bytes, words: str) -> None:
    result = traceview("ingest", "-", "-o", tmp_path / "out.db", stdin=_file_with(tmp_path, data))
    assert result.returncode == 2 and result.stderr.splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith(f"error: -: {words} — ")
