"""Scratch space: directories for named pipes, spilled DuckDB data and temporary copies in the system temp
directory, and the temporary twin of an output file being written.

Liveness is a lock, not a process id: whatever this module makes (`traceview-WHAT-RANDOM` in $TMPDIR, a database's
`NAME.tmp-RANDOM` twin) comes with a lock file beside it (the same name + `.lock`) on which its owner holds an
exclusive `flock` for as long as it lives; the kernel releases it when the owner dies, however it dies (kill -9
skips every cleanup, and a spill or a copy can be as large as the trace). The next traceview process removes
what it can lock at once (never waiting) and nothing else: the files of a live owner in another PID namespace
(a container) or on another host sharing the directory (NFS, whose client takes the lock on the server) stay.
A lock file that is not a regular file (a FIFO, a device) is skipped without being read.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from . import guard, interrupts
from .errors import OutputError, os_problem

PREFIX = "traceview-"
LOCK = ".lock"


class Owned:
    """A new name `parent/PREFIX+RANDOM` that this process owns (nothing is created at it here), and the lock file
    `NAME.lock` it holds until `release`. A sweep that took the lock file first (it was created unlocked) removed
    it: the name is then claimed again."""

    def __init__(self, parent: Path, prefix: str) -> None:
        while True:
            handle, lock = tempfile.mkstemp(dir=parent, prefix=prefix, suffix=LOCK)
            fcntl.flock(handle, fcntl.LOCK_EX)  # waits only for a sweep that found the file unlocked, briefly
            with contextlib.suppress(FileNotFoundError):
                if os.stat(lock).st_ino == os.fstat(handle).st_ino:
                    break
            os.close(handle)
        self.path = Path(lock.removesuffix(LOCK))
        self._handle = handle
        guard.note(self.path)

    def release(self, remove: Callable[[Path], None]) -> None:
        """Remove what was made at `path` (with `remove`), then the lock file; the lock goes last."""
        try:
            remove(self.path)
            with contextlib.suppress(OSError):
                os.unlink(str(self.path) + LOCK)
        finally:
            os.close(self._handle)


def sweep(parent: Path, prefix: str, remove: Callable[[Path], None]) -> None:
    """Remove (with `remove`) each `parent/PREFIX*` whose lock file this process can lock at once: its owner has
    ended. A lock held elsewhere, a lock file that is not a regular file or cannot be opened: left alone."""
    for lock in parent.glob(glob.escape(prefix) + "*" + LOCK):
        try:
            handle = os.open(lock, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # another user's, a link, gone meanwhile
            continue
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                continue
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: its owner lives
                continue
            remove(Path(str(lock).removesuffix(LOCK)))
            with contextlib.suppress(OSError):
                lock.unlink()
        finally:
            os.close(handle)


class Scratch:
    """A new directory `traceview-WHAT-RANDOM` in the system temp directory, owned (see Owned) until `cleanup`;
    as a context manager, its path as text (as tempfile.TemporaryDirectory)."""

    def __init__(self, what: str) -> None:
        parent = Path(tempfile.gettempdir())
        sweep(parent, PREFIX, remove_path)
        self._owned = Owned(parent, f"{PREFIX}{what}-")
        try:
            self._owned.path.mkdir(mode=0o700)
        except BaseException:
            self._owned.release(remove_path)
            raise
        self.name = str(self._owned.path)
        self._done = False

    def cleanup(self) -> None:
        if not self._done:
            self._done = True
            self._owned.release(remove_path)

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def scratch_directory(what: str) -> Scratch:
    """A new temporary directory for `what` (a word without '-'), removed when its context ends."""
    return Scratch(what)


def remove_path(path: Path) -> None:
    """Remove `path` whatever it is (a directory tree, a file, a link, a FIFO), never following a link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


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
        guard.note(tmp)
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
