"""A guard process for a command run under an address-space limit (`ulimit -v`).

Reads: the process's RLIMIT_AS and its command line. Writes: nothing of its own but one stderr line when the command
ended in a way it could not word.

Near such a limit the command can end where no Python code runs: a C++ `bad_alloc` in one of DuckDB's threads
aborts the process (SIGABRT), glibc aborts a thread it cannot give thread-local data, the loader fails to map a
library (numpy's OpenBLAS), OpenBLAS gives up with its own message. None of those says what happened in one line,
and each leaves its scratch and the database's temporary twin behind. So under a limit the command runs as a child
of this small process (which imports nothing heavy and holds little memory), with its stderr collected:
- a child that ended normally (exit 0, or a worded `error:` line, or an interruption) has its stderr relayed as it
  was written, and its exit code is the command's;
- any other end becomes one line, `error: traceview: ... under an address-space limit of N MiB (ulimit -v) ...`,
  exit 2, after every file the child made for itself was removed. The child notes each such file (scratch.Owned,
  scratch.replacing) in a file the guard names in TRACEVIEW_GUARD_NOTES.
Without a limit (the usual case) the command runs in this process, as before.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import MORE_MEMORY

NOTES = "TRACEVIEW_GUARD_NOTES"  # set in the child: the file in which it notes what it made
CHILD = "import sys; sys.argv[0] = 'traceview'; from traceview.cli import main; main()"
NORMAL = (0, 1, 2, 130)  # the exit codes of a command that ended through cli.main (1: a --fail-if-slower gate)
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # stopped by the user: the child words it


def needed() -> bool:
    """Whether this process should guard the command: an address-space limit, and not the guarded child itself."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY and NOTES not in os.environ


def run() -> int:
    """Run the command line again in a child; relay what it said, or word how it ended. Returns the exit code."""
    handle, notes = tempfile.mkstemp(prefix="traceview-guard-", suffix=".notes")
    os.close(handle)
    try:
        return _supervised(Path(notes))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(notes)


def note(path: Path) -> None:
    """In a guarded child: record that this process made `path` (a scratch directory, a temporary twin), for the
    guard to remove if the process ends where it cannot remove it itself."""
    notes = os.environ.get(NOTES)
    if notes:
        with contextlib.suppress(OSError), open(notes, "a", encoding="utf-8", errors="surrogateescape") as file:
            file.write(f"{os.fspath(path)}\n")


def _supervised(notes: Path) -> int:
    signal.signal(signal.SIGINT, _ignore)  # the terminal's Ctrl-C reaches the child too: it words the stop
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *sys.argv[1:]], stderr=subprocess.PIPE, env={**os.environ, NOTES: str(notes)}
    )
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: child.send_signal(received))
    _, said = child.communicate()
    code = child.returncode
    if _ended_normally(code, said):
        sys.stderr.flush()
        sys.stderr.buffer.write(said)
        sys.stderr.flush()
        return code if code >= 0 else 128 - code
    _remove_noted(notes)
    print(f"error: traceview: {_how(code, said)} — {MORE_MEMORY}", file=sys.stderr, flush=True)
    return 2


def _ignore(_signum: int, _frame: object) -> None:
    """A handler that does nothing (unlike SIG_IGN, not inherited by the child)."""


def _ended_normally(code: int, said: bytes) -> bool:
    """A child that ended through cli.main: exit 0, a worded error, an interruption it reported."""
    if code < 0:
        return -code in PASSED_ON
    lines = said.decode("utf-8", "replace").strip().splitlines()
    return code == 0 or (code in NORMAL and bool(lines) and lines[-1].startswith("error: "))


def _how(code: int, said: bytes) -> str:
    """How the child ended, in words: the signal or exit code, the last thing it said, the limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    ending = f"aborted ({signal.Signals(-code).name})" if code < 0 else f"failed (exit {code})"
    lines = said.decode("utf-8", "replace").strip().splitlines()
    last = f": {lines[-1].strip()[:200]}" if lines else ""
    return (
        f"out of memory under an address-space limit of {soft >> 20:,} MiB (ulimit -v): the process {ending} "
        f"outside any error it could word{last}; nothing was written"
    )


def _remove_noted(notes: Path) -> None:
    """Remove each file or directory the child noted, with the database's WAL and the lock file beside it."""
    from .scratch import LOCK, remove_path

    with contextlib.suppress(OSError):
        for line in notes.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
            for leftover in (line, f"{line}.wal", f"{line}{LOCK}"):
                remove_path(Path(leftover))
