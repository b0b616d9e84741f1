"""Scratch directories (named pipes, spilled DuckDB data, temporary copies) in the system temp directory.

Each is named `traceview-WHAT-PID-RANDOM`, so that the next traceview process removes those of a process that
was killed (kill -9 skips every cleanup, and a spill or a copy can be as large as the trace).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "traceview-"


def scratch_directory(what: str) -> tempfile.TemporaryDirectory[str]:
    """A new temporary directory for `what` (a word without '-'), removed when its context ends."""
    remove_stale()
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{what}-{os.getpid()}-")


def remove_stale() -> None:
    """Remove the scratch directories whose process no longer runs."""
    for path in Path(tempfile.gettempdir()).glob(PREFIX + "*-*-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and not process_exists(int(pid)) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def process_exists(pid: int) -> bool:
    """Whether a process `pid` runs (possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True
