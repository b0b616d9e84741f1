"""The operating system says no: a full disk, an output that is a device. One line, exit 2, nothing half-written.

A full disk is simulated portably with a limit on file size (RLIMIT_FSIZE, with SIGXFSZ ignored): every write
past the limit fails with EFBIG, the way writes fail with ENOSPC on a full disk; /dev/full fails every write
with ENOSPC itself.
"""

from __future__ import annotations

import resource
import signal
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HTA, SAMPLES
from fuzz_runner import db_fingerprint
from hostile_traces import assert_one_line_error, traceview

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"
LARGER = SAMPLES / "eager.pt.trace.json.gz"
DEV_FULL = Path("/dev/full")


def limited(*args: str | Path, file_size: int) -> subprocess.CompletedProcess[str]:
    """`traceview ARGS` unable to write past `file_size` bytes in any file."""
    return traceview(*args, preexec_fn=_file_size_limit(file_size))


def _file_size_limit(size: int) -> Callable[[], None]:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def test_a_full_disk_while_adding_a_run_is_one_line_and_keeps_the_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    assert traceview("ingest", SMALL, "-o", db).returncode == 0
    before = db_fingerprint(db)
    assert_one_line_error(limited("ingest", LARGER, "-o", db, file_size=1 << 18), db, "nothing was written")
    assert db_fingerprint(db) == before
    assert traceview("ingest", LARGER, "-o", db).returncode == 0  # and the next ingest, with room, works


def test_a_full_disk_while_creating_a_database_leaves_no_file(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    assert_one_line_error(limited("ingest", LARGER, "-o", db, file_size=1 << 20), db)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full")
@pytest.mark.parametrize("command", ["export", "report", "plot"])
def test_writing_to_a_full_device_is_one_line_and_the_device_stays(
    tmp_path: Path, command: str, ingested: Callable[[Path], Path]
) -> None:
    """Through a symbolic link too (plot needs a suffix): the link is followed, the device written in place."""
    db = ingested(LARGER)
    output = DEV_FULL
    if command == "plot":
        output = tmp_path / "picture.png"
        output.symlink_to(DEV_FULL)
    result = traceview(command, db, "-o", output, *(["--kind", "layers"] if command == "plot" else []))
    assert_one_line_error(result, output, "no space left")
    assert stat.S_ISCHR(DEV_FULL.stat().st_mode)  # written to, not renamed over
