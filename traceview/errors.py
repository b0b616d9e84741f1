"""Errors traceview raises. Each message stands alone: `FILE: what is wrong — what to do`.

The library raises these and never prints or exits; `cli.main()` turns one into a single stderr line and
an exit code (`exit_code`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class TraceviewError(Exception):
    """Base class: a problem with a file the user gave, and what to do about it."""

    exit_code = 2

    def __init__(self, path: str | Path | None, problem: str, remedy: str) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.remedy = remedy
        super().__init__(str(self))

    def __reduce__(self) -> tuple[type[TraceviewError], tuple[str | None, str, str]]:
        """Pickled with its three parts (a worker process's error reaches the parent as itself)."""
        return type(self), (self.path, self.problem, self.remedy)

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.problem} — {self.remedy}"


class BadInputError(TraceviewError):
    """The input file is missing, empty, truncated, corrupt or not a trace traceview reads."""


class ToolMissingError(TraceviewError):
    """An external tool traceview needs (nsys) is missing or too old."""


class DatabaseError(TraceviewError):
    """The database is locked, from an unknown schema version, or lacks what a command needs."""


class UsageError(TraceviewError):
    """The command line asks for something that cannot be done (unknown query, bad parameter)."""


class OutputError(TraceviewError):
    """A file traceview writes (a report, a picture, an export) cannot be written: no space, read-only, ..."""


_FREE_SPACE = "free some space, or write to another disk"
_PERMISSIONS = "check the permissions of the file and its directory"
# What an operating-system error means for the user, and what to do: (problem, remedy) by errno.
OS_PROBLEMS = {
    errno.ENOSPC: ("no space left on the device", _FREE_SPACE),
    errno.EDQUOT: ("the disk quota is exhausted", _FREE_SPACE),
    errno.EFBIG: ("the file grew past the limit on file size (ulimit -f)", "raise the limit, or write less"),
    errno.EROFS: ("the file system is read-only", "write to a writable directory"),
    errno.EACCES: ("permission denied", _PERMISSIONS),
    errno.EPERM: ("operation not permitted", _PERMISSIONS),
    errno.ELOOP: ("a loop of symbolic links", "fix or remove the link"),
    errno.ENOENT: ("no such file or directory", "check the path"),
    errno.ENOTDIR: ("a part of the path is not a directory", "check the path"),
    errno.EISDIR: ("this is a directory", "give a file"),
    errno.ENAMETOOLONG: ("the file name is too long", "give a shorter path"),
    errno.EIO: ("input/output error (a failing disk or network file system)", "check the device, then run again"),
}


def os_problem(error: BaseException) -> tuple[str, str] | None:
    """(problem, remedy) when `error` is an OSError, or a DuckDB error quoting one (`... : No space left on
    device`); None when it is neither."""
    code = error.errno if isinstance(error, OSError) else None
    if code in OS_PROBLEMS:
        return OS_PROBLEMS[code]
    if isinstance(error, OSError):
        return (error.strerror or str(error)).lower(), "check the path"
    text = str(error)
    return next((problem for code, problem in OS_PROBLEMS.items() if os.strerror(code) in text), None)


MORE_MEMORY = "free memory or allow the process more (ulimit -v), or ingest part of the trace (--steps, --time-window)"


def memory_problem(error: BaseException) -> str | None:
    """What says the process ran out of memory in `error`: Python's MemoryError, a thread that could not start (no
    memory left for its stack), DuckDB's out-of-memory error or a C++ bad_alloc; None for any other error."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryException" or "bad_alloc" in text:
        return text
    if isinstance(error, RuntimeError) and "can't start new thread" in text:
        return text
    if isinstance(error, ImportError) and "failed to map segment" in text:  # a module loaded late, with no room left
        return text
    return None


def is_text(text: str) -> bool:
    """Whether `text` can be stored as UTF-8: not a name holding bytes of no encoding (read as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
