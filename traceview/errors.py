"""Errors traceview raises. Each message stands alone: `FILE: what is wrong — what to do`.

The library raises these and never prints or exits; `cli.main()` turns one into a single stderr line and
an exit code (`exit_code`).
"""

from __future__ import annotations

from pathlib import Path


class TraceviewError(Exception):
    """Base class: a problem with a file the user gave, and what to do about it."""

    exit_code = 2

    def __init__(self, path: str | Path | None, problem: str, remedy: str) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.remedy = remedy
        super().__init__(str(self))

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
