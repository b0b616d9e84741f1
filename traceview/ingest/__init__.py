"""Ingest: trace files in, the schema's tables out, for one run at a time.

`detect_backend` decides which reader a path needs (by extension, then by its first bytes); `load_run`
fills every table for a new run id inside a write session opened by the caller (see db.write_session),
then applies the steps all backends share (ingest/common.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import stat
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInputError, TraceviewError, UsageError, is_text, os_problem
from ..stepsel import format_steps
from ..version import __version__
from .bounds import RATIO

if TYPE_CHECKING:
    from concurrent.futures import Future

    import duckdb

KINETO = "kineto"
NSYS = "nsys"

Progress = Callable[[str, int, int], None]
"""Called as progress(what, done, total) during long work; total 0 when unknown."""


# The stages of an ingest, in order, as progress reports them: `reading FILE` (bytes, from the backend), then
# these, each announced once with done = total = 0 when it starts (the CLI names the one running).
STAGE_TABLES = "tables"  # DuckDB building the schema's tables from what was read
STAGE_NESTING = "nesting"  # cutting --steps/--time-window, nesting CPU ranges, counters
STAGE_SEGMENTATION = "segmentation"  # steps, layers, busy and gap figures
STAGE_COMMIT = "commit"  # writing the database file


def report_stage(progress: Progress | None, stage: str) -> None:
    """Announce that `stage` starts (see STAGE_*)."""
    if progress is not None:
        progress(stage, 0, 0)


def _tables_after_reading(progress: Progress | None) -> Progress | None:
    """`progress`, also announcing STAGE_TABLES once a file has been read to its end (DuckDB still inserts)."""
    if progress is None:
        return None
    announced: set[str] = set()

    def report(what: str, done: int, total: int) -> None:
        progress(what, done, total)
        if what.startswith("reading ") and total and done >= total and what not in announced:
            announced.add(what)
            progress(STAGE_TABLES, 0, 0)

    return report


@dataclass(frozen=True)
class TimeWindow:
    """[start_ns, end_ns) on the trace's clock, or from the run's first event when `relative`; None: open."""

    start_ns: int | None
    end_ns: int | None
    relative: bool = True

    def describe(self) -> str:
        """The window as text, for labels: e.g. 100000000-250000000ns or @1790857026000000000-ns."""
        at = "" if self.relative else "@"
        lo = "" if self.start_ns is None else f"{at}{self.start_ns}"
        hi = "" if self.end_ns is None else f"{at}{self.end_ns}"
        return f"{lo}-{hi}ns"


_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_time_window(text: str) -> TimeWindow:
    """`START:END`, each a number with a unit (ns, us, µs, ms, s; ns when none), either may be empty.

    Relative to the run's first event (`100ms:250ms`), or absolute on the trace's clock when both ends
    start with `@` (`@1790857026100ms:@1790857026200ms`).
    """
    if text.count(":") != 1:
        raise BadInputError(None, f"bad --time-window {text!r}", "write START:END, e.g. 100ms:250ms or @T0ns:@T1ns")
    ends = [part.strip() for part in text.split(":")]
    absolute = {part.startswith("@") for part in ends if part}
    if len(absolute) > 1:
        raise BadInputError(None, f"bad --time-window {text!r}", "make both ends relative, or both absolute (@)")
    values = [_duration_ns(part.removeprefix("@"), text) if part else None for part in ends]
    if values[0] is not None and values[1] is not None and values[1] <= values[0]:
        raise BadInputError(None, f"empty --time-window {text!r}", "give an END after START")
    return TimeWindow(values[0], values[1], relative=True not in absolute)


def _duration_ns(text: str, whole: str) -> int:
    for unit in sorted(_UNITS_NS, key=len, reverse=True):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], _UNITS_NS[unit]
            break
    else:
        number, scale = text, 1
    try:
        ns = round(float(number) * scale) if "." in number or "e" in number.lower() else int(number) * scale
    except (ValueError, OverflowError):  # not a number; infinite (1e400)
        raise BadInputError(
            None, f"bad time {text!r} in --time-window {whole!r}", "write e.g. 250ms, 1.5s or 42ns"
        ) from None
    if abs(ns) > MAX_NS:
        raise BadInputError(
            None, f"time {text!r} in --time-window {whole!r} is out of range", "give a time within ±292 years"
        )
    return ns


MAX_NS = 2**63 - 1  # times are BIGINT nanoseconds


_UNITS_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20}
_UNITS_BYTES |= {"gib": 1 << 30, "tib": 1 << 40}


def parse_memory_limit(text: str) -> int | None:
    """`--memory-limit`: `auto` (None: about the trace's size), `none` (0: no cap), or a size like 4GB, 512MiB."""
    word = text.strip().lower()
    if word in ("auto", "none"):
        return None if word == "auto" else 0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?", word)
    size = int(float(match.group(1)) * _UNITS_BYTES[match.group(2) or "b"]) if match else 0
    if not 1 <= size <= MAX_MEMORY_LIMIT:  # 0.5b is no byte, and 0 would mean no cap at all
        raise BadInputError(None, f"bad --memory-limit {text!r}", "give auto, none, or a size such as 4GB or 512MiB")
    return size


MAX_MEMORY_LIMIT = 2**63 - 1  # the largest DuckDB takes
MAX_STEPS = 100_000  # --steps: more is no part of a trace, and each becomes a Python int


def parse_steps(text: str) -> tuple[int, ...]:
    """`3-5,8` -> (3, 4, 5, 8): ProfilerStep numbers for --steps, at most MAX_STEPS of them."""
    ranges: list[range] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            ranges.append(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise BadInputError(None, f"bad --steps {text!r}", "give ProfilerStep numbers, e.g. 3-5,8") from None
    if not ranges or not all(ranges):  # nothing, or a range that ends before it starts
        raise BadInputError(None, f"bad --steps {text!r}", "give ProfilerStep numbers, e.g. 3-5,8")
    if sum(len(r) for r in ranges) > MAX_STEPS:
        raise BadInputError(None, f"--steps {text!r} selects more than {MAX_STEPS:,} steps", "give fewer steps")
    return tuple(sorted(set().union(*ranges)))


def parse_pattern(option: str, text: str) -> str:
    """A regular expression given with `option` (--comm-pattern, --layer-pattern, --step-pattern), checked by both
    engines that may read it, Python's re and DuckDB's RE2 (no look-around); UsageError when either refuses it, or
    when it matches the empty string (`''`, `nccl|`): it would match every kernel or range name."""
    import duckdb  # loaded only by the commands that take a pattern

    from ..db import duckdb_connect

    try:
        matches_empty = re.search(text, "") is not None
        with duckdb_connect() as con:
            con.execute("SELECT regexp_matches('', ?)", [text]).fetchall()
    except (re.error, duckdb.Error) as error:
        reason = str(error).splitlines()[0].removeprefix("Invalid Input Error: ")
        remedy = "fix the regular expression (RE2 syntax: no look-around or backreferences)"
        raise UsageError(None, f"bad {option} {text!r}: {reason}", remedy) from None
    if matches_empty:  # '' or 'nccl|': every name would match
        problem = f"bad {option} {text!r}: it matches an empty string, so every name"
        raise UsageError(None, problem, "make it require some text (e.g. nccl|rccl, not nccl|)")
    return text


@dataclass(frozen=True)
class IngestOptions:
    """What the user asked of ingest beyond the paths."""

    label: str | None = None
    replace: bool = False
    comm_patterns: tuple[str, ...] = ()
    salvage: bool = False
    nsys: str | None = None
    progress: Progress | None = None
    # Files to read the careful way (no fast path); api.ingest adds a file after RetryCarefully.
    careful: frozenset[Path] = frozenset()
    # Of those, files whose ts and dur are read as raw JSON (a double: not exact from 9.9e12 µs on), not as DECIMAL,
    # for one of them is no number; api.ingest adds a file after a RetryCarefully that asks for it.
    raw_times: frozenset[Path] = frozenset()
    # Keep only part of the trace (--time-window, --steps); see common.apply_window.
    time_window: TimeWindow | None = None
    steps: tuple[int, ...] = ()
    # Processes loading the files of a multi-file (per-rank) Kineto run (--jobs); 1 loads them in turn.
    jobs: int = 1
    # DuckDB's threads (--threads; with --jobs, shared out among the workers); None: one per core.
    threads: int | None = None
    # DuckDB's memory cap in bytes (--memory-limit): None, about the trace's size (db.memory_budget); 0, none.
    memory_limit: int | None = None
    # Store each rank's host name (--keep-host). Off by default: a host name identifies the machine and its owner.
    keep_host: bool = False
    # The cost model's ratio of data to file bytes (--max-expansion; ingest/bounds.py); None: no bound.
    max_expansion: float | None = RATIO


class RetryCarefully(Exception):
    """A fast read of `path` failed inside the write transaction, which DuckDB has therefore aborted.

    Not an error for the user: the caller rolls back and ingests again with `path` in options.careful.
    """

    def __init__(self, path: Path, raw_times: bool = False) -> None:
        super().__init__(f"{path}: read again the careful way")
        self.path = path
        self.raw_times = raw_times  # the careful read failed too: again with ts and dur as raw JSON

    def retried(self, options: IngestOptions) -> IngestOptions:
        """The options to ingest again with: the file read the careful way (with raw times when asked)."""
        raw_times = options.raw_times | ({self.path} if self.raw_times else set())
        return dataclasses.replace(options, careful=options.careful | {self.path}, raw_times=raw_times)


@dataclass(frozen=True)
class LoadedSource:
    """What a backend reports about the files it loaded (the rows themselves are in the tables)."""

    profiler_version: str | None = None
    clock_anchor_ns: int | None = None
    partial: bool = False
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # Set when the backend nested the CPU ranges while inserting, so that common.finish_run skips the pass.
    ranges_nested: bool = False


@dataclass(frozen=True)
class Source:
    """The files of one run, the backend that reads them, and their fingerprint."""

    path: Path
    files: tuple[Path, ...]
    backend: str
    size: int
    # Bytes of data once decompressed (gzip's own record of it for .gz), what ingest budgets memory for.
    data_bytes: int
    # SHA-256 of the files, computed in a background thread while they are ingested (hashlib and file reads
    # release the GIL): a 1 GB trace costs ~0.8 s to hash, which no longer precedes the ingest.
    digest: Future[str]
    # Copies of streams (ingest/spool.py) -> what the user named: `-`, /dev/fd/63, a FIFO.
    given: dict[Path, str] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        """The fingerprint that makes ingest idempotent (waits for the background hash)."""
        return self.digest.result()


_KINETO_SUFFIXES = (".json", ".json.gz", ".gz")
_NSYS_SUFFIXES = (".sqlite", ".sqlite3", ".nsys-rep", ".qdrep")


def detect_backend(path: Path) -> str:
    """kineto or nsys, from the extension, else from the first bytes; BadInputError when neither."""
    name = path.name.lower()
    if path.is_dir():
        return _detect_directory(path)
    if name.endswith(_ARCHIVE_SUFFIXES) or _is_tar(path):
        raise BadInputError(
            path,
            "an archive, not a trace (a tar of an nsys Parquet export or of per-rank traces?)",
            f"untar it (tar -xf {path.name}) and give the folder it holds",
        )
    if name.endswith(_KINETO_SUFFIXES):
        return KINETO
    if name.endswith(_NSYS_SUFFIXES):
        return NSYS
    with open(path, "rb") as handle:
        head = handle.read(16)
    if head.startswith(b"\x1f\x8b") or head.lstrip()[:1] in (b"{", b"["):
        return KINETO
    if head.startswith(b"SQLite format 3"):
        return NSYS
    raise BadInputError(
        path,
        "unknown kind of file",
        "give a PyTorch profiler trace (.json, .json.gz) or an Nsight Systems report (.nsys-rep, .sqlite)",
    )


_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar.zst", ".zip")
_TAR_MAGIC_AT = 257  # a tar header's `ustar` mark (POSIX), in the first block


def _is_tar(path: Path) -> bool:
    """Whether `path`, a regular file (a stream is not read twice), gzip-compressed or not, is a tar archive, from
    its first block."""
    import gzip
    import zlib

    if not path.is_file():
        return False
    try:
        with open(path, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            block = gzip.GzipFile(fileobj=raw).read(512) if head == b"\x1f\x8b" else raw.read(512)
    except (OSError, EOFError, zlib.error):  # damaged: not a tar; the backend's reader words what is wrong
        return False
    return block[_TAR_MAGIC_AT : _TAR_MAGIC_AT + 5] == b"ustar"


def _detect_directory(path: Path) -> str:
    names = [p.name.lower() for p in path.iterdir()]
    if any(n.endswith(".parquet") for n in names):
        return NSYS
    if any(n.endswith((".json", ".json.gz")) for n in names):
        return KINETO
    raise BadInputError(path, "the directory holds no trace files", "give a directory of per-rank .json(.gz) traces")


@contextlib.contextmanager
def opened_source(paths: Sequence[str | Path]) -> Iterator[Source]:
    """resolve_source, with any stream among the paths (`-` for stdin, a FIFO, `<(zcat trace.json.gz)`) first
    copied into a scratch directory that lives as long as the block (ingest/spool.py)."""
    from ..scratch import scratch_directory  # loaded by the commands that ingest, not with the CLI's options

    with contextlib.ExitStack() as cleanup:

        @cache
        def scratch() -> Path:
            return Path(cleanup.enter_context(scratch_directory("input")))

        yield resolve_source(paths, scratch)


def resolve_source(paths: Sequence[str | Path], scratch: Callable[[], Path] | None = None) -> Source:
    """Check that the paths exist, can be read and agree on a backend; fingerprint them. Streams are copied into
    the directory `scratch()` gives (see opened_source); without it they are refused."""
    from . import spool

    if not paths:
        raise BadInputError(None, "no trace given", "name at least one trace file")
    given: dict[Path, str] = {}  # stand-ins in `scratch()` -> what the user named
    known: dict[Path, str] = {}  # SHA-256 of the copies of streams

    def readable(path: Path) -> Path:
        """`path`, or a stand-in the readers can use: the copy of a stream, a link with a name in UTF-8."""
        if spool.is_stream(path) or not is_text(str(path)):
            if scratch is None:
                raise BadInputError(path, "a stream or a name in no encoding cannot be read here", "use opened_source")
            if spool.is_stream(path):
                copy = spool.spool(path, scratch())
                given[copy.path], known[copy.path] = str(path), copy.sha256
                return copy.path
            _checked_readable(path)
            link = scratch() / f"link-{len(given)}" / displayable(path.name)  # DuckDB takes only UTF-8 names
            link.parent.mkdir()
            link.symlink_to(path)
            given[link] = displayable(str(path))
            return link
        return _checked_readable(path)

    resolved = [readable(_resolved(p)) for p in paths]
    backends = {detect_backend(p) for p in resolved}
    if len(backends) > 1:
        raise BadInputError(
            resolved[0],
            "the files mix PyTorch profiler and Nsight Systems traces",
            "ingest them as separate runs",
        )
    backend = backends.pop()
    flat = tuple(readable(f) for p in resolved for f in _trace_files(p, backend))
    if not flat:
        raise BadInputError(resolved[0], "no trace files found", "give a trace file or a directory of them")
    for f in flat:
        if f.is_file() and f.stat().st_size == 0:
            raise BadInputError(f, "the file is empty", "record the trace again; the profiler wrote nothing")
    _refuse_twice(flat)
    size = sum(_size(f) for f in flat)
    path = resolved[0] if len(resolved) == 1 else Path(os.path.commonpath(resolved))
    return Source(
        path=path,
        files=flat,
        backend=backend,
        size=size,
        data_bytes=sum(_data_bytes(f, backend) for f in flat),
        digest=_in_background(lambda: _fingerprint(flat, known)),
        given=given,
    )


# An nsys SQLite export's rows take about twice its size in DuckDB: the staged rows alone are about its size (1.08
# GB in Arrow for the 1 GB bench export: integers SQLite keeps as varints are 8 bytes each), and the tables hold them
# again. With a cap of the file's size the 1 GB export spilled for 52.6 CPU-s, 2.3 GB peak; at twice, 47.9 CPU-s,
# 3.0 GB (nsys-ai: 3.0-3.1 GB). Measured 2026-12-03, 2 shared cores, load 3-4.
NSYS_DATA_PER_BYTE = 2


def _data_bytes(trace_file: Path, backend: str) -> int:
    """What ingest budgets memory for (Source.data_bytes): a Kineto trace's JSON uncompressed, a directory's files,
    twice an nsys SQLite export or report (NSYS_DATA_PER_BYTE)."""
    from . import jsonstream

    if trace_file.is_dir():
        return _size(trace_file)
    size = jsonstream.expected_size(trace_file)
    return size * NSYS_DATA_PER_BYTE if backend == NSYS else size


def _refuse_twice(files: Sequence[Path]) -> None:
    """One file named twice (twice the same path, a link and its target, a directory and a file in it) would be
    two ranks of one run."""
    seen: dict[tuple[int, int], Path] = {}
    for path in files:
        status = path.stat()
        key = (status.st_dev, status.st_ino)
        if key in seen:
            raise BadInputError(path, f"the same file as {seen[key]}, given twice", "give each rank's file once")
        seen[key] = path


def displayable(text: str) -> str:
    """`text` as UTF-8 text, a byte of no encoding in a file name shown as an escape (`\\xff`)."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def checked_label(label: str) -> str:
    """`label` (--label) in Unicode's composed form (NFC: `é` typed as e and an accent is the label `é`, not
    another one that prints the same); refused in one line when it cannot be stored as text."""
    if not is_text(label):
        raise UsageError(None, f"the label {label!r} holds bytes of no encoding", "give a label in UTF-8")
    return unicodedata.normalize("NFC", label)


def _resolved(given: str | Path) -> Path:
    """`given` as an absolute path, links resolved; a stream as given (resolving /dev/fd/63 names `pipe:[…]`)."""
    from . import spool

    path = Path(given).expanduser()
    try:
        os.fsencode(path)
    except UnicodeEncodeError:  # a str no file system name can be
        raise BadInputError(path, "the path is not valid text", "check the path") from None
    if spool.is_stream(path):
        return path if str(given) == spool.STDIN else path.absolute()
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as error:  # a loop of links (RuntimeError before Python 3.13)
        raise BadInputError(path, "a loop of symbolic links", "fix or remove the link") from error
    if not path.exists():
        raise BadInputError(path, "no such file", "check the path")
    return path


def _checked_readable(path: Path) -> Path:
    """`path`, after reading its first byte (a file) or listing it (a directory): a file that cannot be read is one
    line now, not an OS error halfway through the ingest."""
    try:
        if path.is_dir():
            next(path.iterdir(), None)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
    except OSError as error:
        problem, remedy = os_problem(error) or ("cannot read it", "check the path")
        raise BadInputError(path, problem, remedy) from error
    return path


def _in_background(work: Callable[[], str]) -> Future[str]:
    """Run `work` in a daemon thread; its result (or exception) arrives in the returned future."""
    from concurrent.futures import Future  # with hashlib: ~10 ms of start-up that only an ingest needs

    future: Future[str] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)

    threading.Thread(target=run, name="traceview-sha256", daemon=True).start()
    return future


def _fingerprint(files: Sequence[Path], known: dict[Path, str]) -> str:
    """SHA-256 of one file; of a run of several, the SHA-256 of their sorted digests. `known`: digests computed
    already (of the copies of streams)."""
    import hashlib

    digests = sorted(known.get(f) or _sha256(f) for f in files)
    return digests[0] if len(digests) == 1 else hashlib.sha256("".join(digests).encode()).hexdigest()


def _trace_files(path: Path, backend: str) -> tuple[Path, ...]:
    if not path.is_dir() or backend == NSYS:
        return (path,)
    members = tuple(sorted(p for p in path.iterdir() if p.name.lower().endswith((".json", ".json.gz"))))
    remedy = "give a directory of the trace files the profiler wrote (or the file itself)"
    refuse_special_files(members, remedy, streams=True)  # a rank's FIFO is a stream, read once like TRACE itself
    return members


def refuse_special_files(files: Iterable[Path], remedy: str, streams: bool = False) -> None:
    """A file of a directory input (a rank's trace, a Parquet table) that is neither a regular file nor, where
    `streams`, a FIFO (a device, a socket, a link to one) is refused before anything opens it: a device reads
    without end (a rank linked to /dev/zero), and opening a Parquet table that is a FIFO waits for a writer for ever
    (Parquet is read by seeking: a FIFO is never one)."""
    for file in files:
        try:
            mode = file.stat().st_mode
        except OSError as error:  # a dangling link, a loop of links
            raise BadInputError(file, f"cannot be read ({error.strerror})", remedy) from error
        if not (stat.S_ISREG(mode) or (streams and stat.S_ISFIFO(mode))):
            what = "a device or a socket" if streams else "a FIFO, a device or a link to one"
            raise BadInputError(file, f"not a regular file ({what})", remedy)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    targets = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for target in targets:
        with open(target, "rb") as handle:
            while chunk := handle.read(1 << 23):
                digest.update(chunk)
    return digest.hexdigest()


def default_label(source: Source, options: IngestOptions | None = None) -> str:
    """The file or directory name without trace suffixes, e.g. rank-0 for rank-0.pt.trace.json.gz.

    A part of a trace (--steps, --time-window) is another run: its label says which part.
    """
    name = source.path.name
    for suffix in (".gz", ".json", ".trace", ".pt", ".sqlite", ".sqlite3", ".nsys-rep", ".qdrep"):
        name = name.removesuffix(suffix)
    name = name or "run"
    if options is not None and options.steps:
        name += "@steps=" + ",".join(str(s) for s in options.steps)
    if options is not None and options.time_window is not None:
        name += "@" + options.time_window.describe()
    return unicodedata.normalize("NFC", name)


def labelled_run(con: duckdb.DuckDBPyConnection, label: str) -> tuple[int, str] | None:
    """(run id, source SHA-256) of the run labelled `label`, else None."""
    from ..db import first_row  # db loads DuckDB: not needed to build the CLI's options

    row = first_row(con.execute("SELECT run_id, source_sha256 FROM runs WHERE label = ?", [label]).fetchall())
    return (row[0], row[1]) if row else None


def delete_run(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Remove every row of a run (used by --replace)."""
    for table in (
        "gpu_activity",
        "launches",
        "cpu_ranges",
        "gpu_ranges",
        "threads",
        "graph_nodes",
        "steps",
        "layers",
        "kernel_busy",
        "kernel_gaps",
        "ingest_stats",
        "ranks",
        "runs",
    ):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])


def load_run(con: duckdb.DuckDBPyConnection, source: Source, label: str, options: IngestOptions) -> int:
    """Insert a new run for `source` and fill every table; returns its run id.

    The source's SHA-256 is filled in last, so that hashing overlaps the load.
    """
    from . import common

    run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchall()[0][0]
    con.execute(
        """INSERT INTO runs (run_id, label, backend, source_path, source_sha256, source_bytes, traceview_version,
                             ingested_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            run_id,
            label,
            source.backend,
            source.given.get(source.path, str(source.path)),
            "",
            source.size,
            __version__,
            datetime.now(timezone.utc).replace(tzinfo=None),
        ],
    )
    reading = dataclasses.replace(options, progress=_tables_after_reading(options.progress))
    try:
        loaded = _backend_loader(source.backend)(con, source, run_id, reading)
    except TraceviewError as error:
        error.path = error.path or str(source.path)  # a problem found where the file is not known (a reader thread)
        raise
    for copy, given in source.given.items():  # the rank was read from a copy of a stream: name what the user named
        con.execute("UPDATE ranks SET source_file = ? WHERE run_id = ? AND source_file = ?", [given, run_id, str(copy)])
    con.execute(
        "UPDATE runs SET profiler_version = ?, clock_anchor_ns = ?, partial = ?, source_sha256 = ? WHERE run_id = ?",
        [loaded.profiler_version, loaded.clock_anchor_ns, loaded.partial, source.sha256, run_id],
    )
    for warning in loaded.warnings:
        common.add_stat(con, run_id, None, "warning", "data_loss", 1, warning)
    report_stage(options.progress, STAGE_NESTING)
    if options.steps:
        _check_steps(con, run_id, options.steps, source)
    if options.time_window is not None or options.steps:
        window = options.time_window
        span = common.event_span(con, run_id)
        common.apply_window(
            con,
            run_id,
            None if window is None else (window.start_ns, window.end_ns, window.relative),
            options.steps,
        )
        if window is not None and span is not None and common.event_span(con, run_id) is None:
            raise BadInputError(
                source.path,
                f"--time-window {window.describe()} selects nothing of the trace",
                f"its events span 0-{span[1] - span[0]}ns from the first (@{span[0]}-@{span[1]}ns on its clock); "
                "give a window inside it",
            )
    common.finish_run(con, run_id, ranges_nested=loaded.ranges_nested)
    return run_id


def _check_steps(con: duckdb.DuckDBPyConnection, run_id: int, steps: tuple[int, ...], source: Source) -> None:
    """--steps must select at least one ProfilerStep#N of the trace: a one-line error naming those it has."""
    from . import common

    present = common.profiler_step_numbers(con, run_id)
    if not set(steps) & set(present):
        have = f"its steps are {format_steps(present)}" if present else "it has no ProfilerStep#N ranges"
        raise BadInputError(
            source.path,
            f"--steps {format_steps(steps)} selects no step of the trace",
            f"{have}; pick among them, or use --time-window",
        )


def _backend_loader(
    backend: str,
) -> Callable[[duckdb.DuckDBPyConnection, Source, int, IngestOptions], LoadedSource]:
    if backend == KINETO:
        from . import kineto

        return kineto.load
    from . import nsys

    return nsys.load
