"""Traces that arrive as a stream: `-` (stdin), a FIFO, `<(zcat trace.json.gz)` (a /dev/fd/N pipe).

Reads: the stream, once. Writes: one file in a scratch directory (scratch.py) that the readers can seek and read
again, named for the run (`stdin`, `pipe`, or the FIFO's own name) with the suffix its first bytes call for
(.json.gz, .json, .sqlite). The SHA-256 that makes ingest idempotent is computed on the way.

Bounded: the copy stops with one line when its disk would be left with less than a reserve (SPOOL_RESERVE, at most
a tenth of the disk: the ingest still needs room to spill), or when the disk is full.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import BadInputError, os_problem

STDIN = "-"
CHUNK = 1 << 22
CHECK_EVERY = 1 << 26  # bytes copied between two looks at the free space
SPOOL_RESERVE = 1 << 30
_KNOWN_SUFFIXES = (".json.gz", ".json", ".gz", ".sqlite", ".sqlite3", ".nsys-rep", ".qdrep")
# The suffix a copy gets from its first bytes, which the backends' detection then reads.
_SUFFIX_OF_CONTENT = ((b"\x1f\x8b", ".json.gz"), (b"SQLite format 3\x00", ".sqlite"), (b"{", ".json"), (b"[", ".json"))


@dataclass(frozen=True)
class Spooled:
    """A stream copied to a file."""

    path: Path
    sha256: str
    size: int


def is_stream(path: str | Path) -> bool:
    """Whether `path` is `-` or names something that can be read only once (a FIFO, a pipe, a terminal)."""
    if str(path) == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def spool(path: str | Path, directory: Path) -> Spooled:
    """Copy the stream `path` into `directory` (see the module docstring); BadInputError when it does not fit."""
    with _reading(path) as stream:
        head = stream.read(CHUNK)
        if not head:
            raise BadInputError(path, "the stream is empty", "check the command that writes the trace")
        target = directory / (_run_name(path) + _suffix(head, path))
        digest, size = hashlib.sha256(), 0
        try:
            with open(target, "wb") as out:
                chunk = head
                while chunk:
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    if size % CHECK_EVERY < len(chunk):
                        _check_room(directory, path, size)
                    chunk = stream.read(CHUNK)
        except OSError as error:
            problem = (os_problem(error) or ("cannot copy it",))[0]
            raise _no_room(path, directory, size, problem) from error
    return Spooled(target, digest.hexdigest(), size)


@contextlib.contextmanager
def _reading(path: str | Path) -> Iterator[BinaryIO]:
    if str(path) == STDIN:
        yield sys.stdin.buffer
        return
    with open(path, "rb") as stream:  # a FIFO: waits for its writer, as `cat` does
        yield stream


def _run_name(path: str | Path) -> str:
    """stdin for `-`, pipe for /dev/fd/N, else the stream's own name without its trace suffixes."""
    text = str(path)
    if text == STDIN:
        return "stdin"
    if Path(text).parent.name == "fd":  # /dev/fd/63, /proc/self/fd/63
        return "pipe"
    name = Path(text).name
    for suffix in _KNOWN_SUFFIXES:
        name = name.removesuffix(suffix)
    return name or "pipe"


def _suffix(head: bytes, path: str | Path) -> str:
    stripped = head.lstrip()
    found = next((suffix for magic, suffix in _SUFFIX_OF_CONTENT if stripped.startswith(magic)), None)
    if found is not None:
        return found
    own = next((suffix for suffix in _KNOWN_SUFFIXES if str(path).lower().endswith(suffix)), None)
    if own is None:
        raise BadInputError(
            path,
            "unknown kind of data on the stream",
            "pipe a PyTorch profiler trace (JSON, gzip) or an nsys SQLite export; give an .nsys-rep as a file",
        )
    return own


def _check_room(directory: Path, path: str | Path, size: int) -> None:
    usage = shutil.disk_usage(directory)
    if usage.free < min(SPOOL_RESERVE, usage.total // 10):
        raise _no_room(path, directory, size, "its disk is nearly full")


def _no_room(path: str | Path, directory: Path, size: int, problem: str) -> BadInputError:
    return BadInputError(
        path,
        f"the streamed trace does not fit in {directory.parent} ({problem} after {size / 1e6:,.0f} MB)",
        "set TMPDIR to a disk with room for the trace, or give the trace as a file",
    )
