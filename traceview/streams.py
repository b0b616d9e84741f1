"""The process's standard streams as the command line needs them: open, able to take any text, and told apart from
the files a command writes.
"""

from __future__ import annotations

import codecs
import io
import os
import sys
from pathlib import Path


def standard_streams() -> None:
    """Streams that take whatever the command writes. A closed descriptor 0, 1 or 2 (`2>&-`) is opened on
    /dev/null: else the next file opened takes its number (the database!) and whatever writes to stderr writes
    into that file; and Python, which set sys.stderr to None, failed at the first message. A character stdout's or
    stderr's encoding lacks (PYTHONIOENCODING=latin-1, a box-drawing line) is written as an escape, not a
    UnicodeEncodeError (in UTF-8 every character is, once output.printable has escaped lone surrogates)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd`, those below it are open
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's stdout, open for its whole life
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(errors="backslashreplace")  # UTF-8 encodes all that output.printable lets through


def is_stdout(path: Path) -> bool:
    """Whether `path` is the file stdout writes to (`-o /dev/stdout`)."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):  # no such file; a stdout with no descriptor
        return False
