"""Liveness by lock, not by process id (issue 25, item 5): what an ingest leaves in $TMPDIR or beside its output is
removed by the next one only when no live process holds its lock (traceview/scratch.py).

Before: a directory or database twin whose name held the id of a process that does not run here was removed, though
its owner lived in another PID namespace (a container) or on another host sharing the directory (NFS); that ingest
then failed, lost its run, or waited forever on a FIFO of its removed pipe directory. A child process stands for
that owner: it names its files after a process id that has ended and holds their lock files.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HTA
from hostile_traces import traceview

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"
OWNER = """
import fcntl, os, sys
path = sys.argv[1]
os.mkdir(path) if sys.argv[2] == "dir" else open(path, "wb").close()
handle = os.open(path + ".lock", os.O_RDWR | os.O_CREAT)
fcntl.flock(handle, fcntl.LOCK_EX)
print("ready", flush=True)
sys.stdin.read()  # until the test lets go
"""


def ended_pid() -> int:
    """The id of a process that has ended (as a process of another namespace looks from here)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@contextlib.contextmanager
def hold(path: Path, kind: str) -> Iterator[subprocess.Popen[str]]:
    """A live owner of `path` (a `dir` or a `file`) and of its lock, for the block."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(path), kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None and owner.stdout.readline() == "ready\n"
    try:
        yield owner
    finally:
        owner.communicate(timeout=30)


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    return scratch


def test_a_live_owners_scratch_directory_stays_whatever_its_process_id(tmpdir_env: Path, tmp_path: Path) -> None:
    foreign = tmpdir_env / f"traceview-pipes-{ended_pid()}-abc123"
    with hold(foreign, "dir"):
        (foreign / "events-00000.json").write_bytes(b"[]")
        assert traceview("ingest", SMALL, "-o", tmp_path / "run.db").returncode == 0
        assert (foreign / "events-00000.json").exists()


def test_a_live_owners_database_twin_stays_whatever_its_process_id(tmp_path: Path) -> None:
    twin = tmp_path / f"run.db.tmp-{ended_pid()}"
    with hold(twin, "file"):
        assert traceview("ingest", SMALL, "-o", tmp_path / "run.db").returncode == 0
        assert twin.exists() and Path(f"{twin}.lock").exists()


def test_what_no_one_holds_is_removed(tmpdir_env: Path, tmp_path: Path) -> None:
    """The owner ended (the kernel released its lock, as after kill -9): the next ingest removes its files."""
    left = {tmpdir_env / "traceview-spill-abc123": "dir", tmp_path / "run.db.tmp-abc123": "file"}
    for path, kind in left.items():
        with hold(path, kind):
            pass
    assert traceview("ingest", SMALL, "-o", tmp_path / "run.db").returncode == 0
    assert list(tmpdir_env.iterdir()) == [] and sorted(p.name for p in tmp_path.glob("run.db*")) == ["run.db"]


def test_a_fifo_named_like_a_lock_file_neither_hangs_the_cleanup_nor_goes(tmpdir_env: Path, tmp_path: Path) -> None:
    fifos = [tmpdir_env / "traceview-pipes-x.lock", tmp_path / "run.db.tmp-x.lock"]
    for fifo in fifos:
        os.mkfifo(fifo)
    assert traceview("ingest", SMALL, "-o", tmp_path / "run.db", timeout=120).returncode == 0
    assert all(fifo.exists() for fifo in fifos)
