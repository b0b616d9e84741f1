"""Scratch space: directories for named pipes, spilled DuckDB data and temporary copies in the system temp
directory, and the temporary twin of an output file being written.

Each directory is named `traceview-WHAT-PID-RANDOM`, so that the next traceview process removes those of a process
that was killed (kill -9 skips every cleanup, and a spill or a copy can be as large as the trace).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from . import interrupts
from .errors import OutputError, os_problem

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


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary file beside `path` to write; renamed over `path` when the block ends, removed on any error,
    so that a failure leaves what was there before.

    The temporary file's name is this writer's own (`.NAME.RANDOM.tmp`, made by tempfile): two commands writing
    one `-o` at once each rename a whole file of theirs, the last one wins. It gets the permissions a new file
    gets (the umask's). A symbolic link is followed (its target is replaced, the link kept). A path that exists
    and is not a regular file (a terminal, /dev/stdout, a FIFO) is written in place: renaming over it would
    replace the device. An OS error (no space, read-only, permission denied) becomes OutputError.
    """
    given = Path(path)
    try:
        if _is_special(given):  # through links: /dev/stdout names /proc/self/fd/1, a pipe or a terminal
            yield given
            return
        target = given.resolve() if given.is_symlink() else given
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(handle)
        tmp = Path(name)
        try:
            yield tmp
            tmp.chmod(0o666 & ~_umask())
            with interrupts.committing():
                tmp.replace(target)
        finally:
            with contextlib.suppress(OSError):  # the error that matters came first
                tmp.unlink(missing_ok=True)
    except OSError as error:
        problem, remedy = os_problem(error) or ("cannot write the file", "check the path")
        raise OutputError(path, f"cannot write the file: {problem}", remedy) from error


def refuse_inputs(output: str | Path, inputs: Sequence[str | Path | None]) -> None:
    """OutputError when `output` is the same file as one of `inputs` (the databases a command reads), under any
    name (a symbolic or hard link): writing it would replace the data with the command's output."""
    for given in inputs:
        with contextlib.suppress(OSError):  # an output that does not exist yet is no input
            if given is not None and os.path.samefile(output, given):
                raise OutputError(
                    output, f"the same file as {given}, which the command reads", "write to another -o file"
                )


def _umask() -> int:
    """The process's umask (read by setting it, then set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        return False
