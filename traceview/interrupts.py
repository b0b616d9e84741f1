"""Stopping on a signal (Ctrl-C, kill, a closed terminal) so that nothing half-written is left.

The command's handler remembers the signal and raises KeyboardInterrupt, so that every cleanup runs (the
temporary database, DuckDB's spill, the scratch copies). Python raises that exception at whatever line runs when
the signal arrives, and two places mishandle it:
- inside a weakref callback or a `__del__` (importlib runs one on every import) it is printed and dropped, and the
  command would go on to write its output;
- inside code compiled from a string (dataclasses builds each `__init__` that way) CPython marks it unhandled for
  good, and the process then ends killed by SIGINT instead of with its exit code (seen on Python 3.11).
So a write asks again as it commits (`committing`), and a stopped command ends through `exit_now`, which skips
Python's shutdown (every cleanup has already run by then); a command that finished ignores signals from then on
(`finished`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

# Signals that end a command the way Ctrl-C does (kill, a closed terminal, a job scheduler's stop).
TERMINATING = (signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []  # the signals that arrived, first first
_state = {"committing": False, "written": False}


def install() -> None:
    """Handle the terminating signals, and Ctrl-C unless it is ignored (a background job keeps it ignored)."""
    for terminating in TERMINATING:
        signal.signal(terminating, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_signal)
    sys.unraisablehook = _quiet_dropped_interrupt


def _on_signal(signum: int, _frame: object) -> None:
    """Remember the signal and raise KeyboardInterrupt, except while a write commits (it then finishes). After a
    terminating signal the next one is ignored, so it cannot interrupt the cleanup; kill -9 still ends it."""
    _received.append(signum)
    if signum in TERMINATING:
        for terminating in TERMINATING:
            signal.signal(terminating, signal.SIG_IGN)
    if not _state["committing"]:
        raise KeyboardInterrupt


def finished() -> None:
    """The command's work is done and printed: from here a signal has nothing to stop. Ignored, it cannot turn a
    complete run into one killed by it, as it would once Python's shutdown has taken the handlers away (0.3 s and
    more after a large ingest)."""
    for stopping in (*TERMINATING, signal.SIGINT):
        signal.signal(stopping, signal.SIG_IGN)


def received() -> int | None:
    """The first stopping signal that arrived, if any."""
    return _received[0] if _received else None


def written() -> bool:
    """Whether this process committed a write (a database or an output file)."""
    return _state["written"]


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """The block that makes a write permanent (a COMMIT, a rename). A stop that arrived before it, even one whose
    KeyboardInterrupt Python dropped, is honoured here: KeyboardInterrupt, nothing written. A signal that arrives
    during the block does not interrupt it: the write completes, and so does the command."""
    if _received:
        raise KeyboardInterrupt
    _state["committing"] = True
    try:
        yield
    finally:
        _state["committing"] = False
    _state["written"] = True


def exit_now(code: int) -> None:
    """Flush the output and end the process with `code`, skipping Python's shutdown (see the module's note)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _quiet_dropped_interrupt(unraisable: Any) -> None:
    """Python's report of an exception it dropped, except our own KeyboardInterrupt: `committing` honours it."""
    if unraisable.exc_type is KeyboardInterrupt and _received:
        return
    sys.__unraisablehook__(unraisable)
