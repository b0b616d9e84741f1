"""The traceEvents array of a Kineto trace, fed to DuckDB through named pipes: no copy on disk, parsed in parallel.

Reads: one trace file (.json or .json.gz). Writes: nothing but named pipes (FIFOs) in a temporary directory.
A producer thread decompresses the file (python-isal; the standard library's gzip for --salvage, which
yields the data before damage), and cuts the array into segments at event boundaries; writer threads feed
each pipe a valid JSON array of whole events, so DuckDB's `read_json` parses the pipes in parallel (it
parses one file per thread). DuckDB keeps what it read from a pipe until that pipe ends, so each pipe
carries at most QUOTA bytes, and `lanes` pipes (DuckDB's threads) are fed at a time, in order. The last
`HOLD` bytes are kept back until the end of the file, where the elements left are read forward to the
array's closing bracket and the metadata after it (the trailer) is parsed.

Boundaries are found in any layout: the last `{` of a window that follows `}` and `,` across whitespace
(`\\n  },\\n  {\\n` in PyTorch's pretty-printed layout, `},\\n{` one event per line, `}, {` on one line).
Gaps that hold a newline are preferred, since no JSON string holds a raw newline. A boundary found by mistake
(inside a string, between objects nested in an event, or in the metadata after the array) could only cut
an event in two, or leave the array's end inside a part: such a part fails to parse, and the caller reads the
file the careful way. Where MAX_UNCUT bytes hold no boundary (a long run of whitespace between events, a
large trailer) the elements at the front are decoded one by one instead, so memory stays bounded.

A file that is not compressed is not read through Python at all (FileBody): the producer finds the boundaries by
reading a small window before every CHUNK-th byte, and each writer moves its byte ranges from the file into its pipe
with splice(2) (pread and write where splice is missing), so the bytes reach DuckDB's threads without the one
producer thread in the way (it was the serial part of staging on many cores). The last HOLD + 2 * CHUNK bytes go
through the same code as a compressed file's, so the array's end and the trailer are found the same way.

When the producer fails (a gzip error, no closing bracket at the end) the pipes still end as valid arrays,
DuckDB's read succeeds, and `finish()` raises StreamFailed: the caller reads the file again the careful way
(the temp-file path, which handles damaged files). A DuckDB error (a value of another type, JSON that does
not parse) reaches the caller as it is.
"""

from __future__ import annotations

import contextlib
import errno
import gzip as _stdlib_gzip
import json
import os
import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ..scratch import scratch_directory
from . import bounds

try:  # python-isal: the same gzip format, decompressed 2-3x faster
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency, but zlib is always there
    import gzip as _gzip  # type: ignore[no-redef]

CHUNK = 1 << 22  # decompressed bytes read at a time
HOLD = 1 << 20  # bytes kept back until the end of the file, to find where the array ends
MAX_UNCUT = 1 << 26  # more than this without an event boundary: not the layout this path handles
SPACE = b" \t\r\n"
_SPACE_RE = re.compile(r"[ \t\n\r]*")
_SPACE_BYTES = re.compile(rb"[ \t\n\r]*")
# A string, a run of anything but quotes and brackets, or one bracket: what _skip_value steps over.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[^"{}\[\]]+|[{}\[\]]', re.DOTALL)
_SCALAR = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[^,\]\s]+', re.DOTALL)
_JSON = json.JSONDecoder()
NEWLINE_CANDIDATES = 64  # `{` candidates looked at, from the end, for a boundary whose gap holds a newline
QUEUE_SEGMENTS = 3  # segments waiting per pipe (bounds memory: lanes * QUEUE_SEGMENTS * ~CHUNK)
QUOTA = 1 << 25  # bytes per pipe: DuckDB keeps what it read from a pipe until that pipe ends
PIPES_HELD = 1 << 28  # at most this much held by DuckDB's readers at once: more lanes, less per pipe (pipe_quota)
MIN_QUOTA = 1 << 23  # the least a pipe carries, however many lanes
MAX_LANES = 16  # pipes fed at once, and DuckDB's threads reading them (each holds a buffer: kineto._reading_pipes)
WINDOW = 1 << 16  # bytes read before a range's end to find the last event boundary there (FileBody)
F_SETPIPE_SZ = 1031  # Linux: grow the pipe buffer from 64 KiB
PIPE_SIZE = 1 << 20
_SPLICE = hasattr(os, "splice")  # Linux, Python 3.10+

Progress = Callable[[str, int, int], None]
Segment = bytes | tuple[int, int]  # bytes to write, or a byte range of the FileBody's file to move into the pipe


@dataclass(frozen=True)
class FileBody:
    """An uncompressed trace file whose bytes from `offset` on are the rest of the array (what the chunk iterator
    given to EventPipes has not read yet): the producer cuts them into ranges that the writers move themselves."""

    path: Path
    offset: int
    progress: Progress | None = None


class CountedChunks:
    """An iterator of chunks that counts the bytes it has yielded (`read`): for a file that is not compressed,
    where the next chunk starts in the file."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self.read = 0

    def __iter__(self) -> CountedChunks:
        return self

    def __next__(self) -> bytes:
        chunk = next(self._chunks)
        self.read += len(chunk)
        return chunk


def is_gzip(trace_file: Path) -> bool:
    """Whether the file starts with the gzip magic."""
    with open(trace_file, "rb") as raw:
        return raw.read(2) == b"\x1f\x8b"


def pipe_quota(lanes: int) -> int:
    """Bytes per pipe when `lanes` pipes are read at once: QUOTA, less with many lanes so that DuckDB holds at most
    about PIPES_HELD (16 lanes of QUOTA held 512 MiB: peak RSS grew with the thread count)."""
    return max(MIN_QUOTA, min(QUOTA, PIPES_HELD // max(lanes, 1)))


class StreamFailed(Exception):
    """The fast path cannot read this file; the caller should use the temp-file path."""


def decompressed_chunks(
    trace_file: Path, progress: Progress | None = None, size: int = CHUNK, careful: bool = False
) -> Iterator[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic, about `size` at a time.

    Errors of the gzip layer (EOFError, OSError, zlib.error) reach the caller as they are. `careful` uses
    the standard library's gzip a block at a time, so that everything before damage is yielded before the
    error (--salvage); otherwise python-isal decompresses, and data in the chunk that fails is lost.
    """
    total = trace_file.stat().st_size
    with open(trace_file, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        if not gz:
            while chunk := raw.read(size):
                if progress:
                    progress(f"reading {trace_file.name}", raw.tell(), total)
                yield chunk
            return
        if not careful:
            with _gzip.GzipFile(fileobj=raw) as fast:
                while chunk := fast.read(size):
                    if progress:
                        progress(f"reading {trace_file.name}", raw.tell(), total)
                    yield chunk
            return
        with _stdlib_gzip.GzipFile(fileobj=raw) as stream:
            pieces: list[bytes] = []
            held = 0
            try:
                while piece := stream.read1(size):
                    pieces.append(piece)
                    held += len(piece)
                    if held >= size:
                        if progress:
                            progress(f"reading {trace_file.name}", raw.tell(), total)
                        yield b"".join(pieces)
                        pieces, held = [], 0
            except gzip_errors():
                if pieces:
                    yield b"".join(pieces)  # what decompressed before the damage, then the error
                raise
            if pieces:
                yield b"".join(pieces)


def expected_size(trace_file: Path) -> int:
    """About how many bytes the file holds uncompressed: its size, or for gzip the size its trailer gives
    (modulo 4 GiB: for a file that could hold more, raised to at least 8x the compressed size, a low ratio for
    JSON; a small file's trailer is exact, however little it compressed)."""
    size = trace_file.stat().st_size
    with open(trace_file, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b" or size < 18:
            return size
        handle.seek(-4, os.SEEK_END)
        isize = int.from_bytes(handle.read(4), "little")
    while size > (1 << 32) // 64 and isize < 8 * size:
        isize += 1 << 32
    return isize


def json_limit(trace_file: Path, ratio: float | None) -> int:
    """The most decompressed JSON read from `trace_file` under the cost model (bounds.limit; no bound: 2**62).
    Past it the careful path refuses the file."""
    return bounds.limit(trace_file.stat().st_size, ratio) or 1 << 62


def gzip_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean damaged gzip data, whichever library decompresses."""
    errors: list[type[BaseException]] = [EOFError, OSError, zlib.error]
    with contextlib.suppress(ImportError):
        from isal import isal_zlib

        errors.append(isal_zlib.error)
    return tuple(errors)


class EventPipes:
    """Context manager: named pipes that together hold the events of one trace's array.

    `first` is the decompressed data from the array's `[` on (read by the caller while looking for the
    header); `rest` yields the remaining decompressed chunks. Enter to get the pipe paths, read them all
    with DuckDB, then call `finish()` for the metadata after the array and the byte count; `finish`
    raises StreamFailed when the data was not a clean array.

    DuckDB holds all it read from a pipe until that pipe ends, so no pipe carries more than QUOTA bytes:
    there are about expected_bytes / QUOTA pipes (a pipe that is not needed is an empty array), fed in
    order by `lanes` lanes at a time, as DuckDB's `lanes` threads read them in order.
    """

    def __init__(
        self,
        first: bytes,
        rest: Iterator[bytes],
        lanes: int,
        find_end: Callable[[bytearray, bool], tuple[int, dict[str, Any]] | None],
        expected_bytes: int = 0,
        limit: int = 1 << 62,
        body: FileBody | None = None,
    ) -> None:
        self._first = first
        self._rest = rest
        self._body = body
        self._find_end = find_end
        self._limit = limit
        self._tmp = scratch_directory("pipes")
        lanes = max(lanes, 1)
        self._quota = pipe_quota(lanes)
        count = lanes + max(lanes, -(-expected_bytes // self._quota))
        self.paths = [Path(self._tmp.name) / f"events-{i:05d}.json" for i in range(count)]
        self._queues: list[queue.Queue[Segment | None]] = [queue.Queue(QUEUE_SEGMENTS) for _ in self.paths]
        self._cancel = threading.Event()
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._writer_errors: list[BaseException] = []
        self._lanes = list(range(lanes))  # lane -> the pipe it feeds now
        self._filled = [0] * lanes
        self._next = lanes
        self._turn = 0
        self.trailer: dict[str, Any] = {}
        self.json_bytes = 0
        self._after_element = False  # the front of the buffer follows a whole element (a comma may come next)
        self._closed = False  # the array's `]` is at the front of the buffer

    def __enter__(self) -> list[Path]:
        for path in self.paths:
            os.mkfifo(path)
        self._threads = [
            threading.Thread(target=self._write, args=(path, q), daemon=True, name=f"traceview-pipe-{i}")
            for i, (path, q) in enumerate(zip(self.paths, self._queues, strict=True))
        ]
        self._threads.append(threading.Thread(target=self._produce, daemon=True, name="traceview-producer"))
        try:
            for thread in self._threads:
                thread.start()
        except BaseException:  # no thread to be had (no memory left for its stack): the writers started end empty
            self._threads = [t for t in self._threads if t.ident is not None]
            self._cancel.set()
            for q in self._queues:
                self._put(q, None, force=True)
            self.__exit__(None, None, None)
            raise
        return self.paths

    def cancel(self) -> None:
        """Stop feeding (the reader failed): unblock writers waiting for a reader and let them drain."""
        self._cancel.set()
        for path in self.paths:
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))

    def finish(self) -> None:
        """Wait for the threads; raise StreamFailed unless every event was delivered."""
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise StreamFailed(str(self._error)) from self._error
        if self._writer_errors:
            raise StreamFailed(str(self._writer_errors[0])) from self._writer_errors[0]

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if any(t.is_alive() for t in self._threads):
            self.cancel()
            for thread in self._threads:
                thread.join(0.2)
                while thread.is_alive():  # a writer that reached open() after cancel() waits for a reader: again
                    self.cancel()
                    thread.join(0.2)
        self._tmp.cleanup()

    # -- producer: decompressed bytes -> segments of whole events -> the least busy pipe

    def _produce(self) -> None:
        try:
            self._split()
        except BaseException as error:  # reported by finish(); the pipes still close as valid arrays, so
            self._error = error  # that DuckDB's read succeeds (a DuckDB error would abort the transaction)
        finally:
            for q in self._queues:  # in pipe order, as DuckDB reads them
                self._put(q, None, force=True)

    def _split(self) -> None:
        buf = bytearray(self._first[1:])  # drop the array's `[`; every pipe writes its own
        self.json_bytes = len(self._first)
        self._first = b""
        if self._body is not None and (tail := self._route_ranges(buf, self._body)) is not None:
            self._rest, buf = tail, bytearray()
        searched = 0
        for chunk in self._rest:
            if self._cancel.is_set():
                return
            self.json_bytes += len(chunk)
            if self.json_bytes > self._limit:
                raise StreamFailed("more decompressed JSON than json_limit allows")
            buf += chunk
            if len(buf) < HOLD + CHUNK:
                continue
            if self._closed:
                continue  # the array ended: the rest is the trailer, parsed at the end
            self._skip_gap(buf)
            cut = last_boundary(buf, len(buf) - HOLD, searched)
            if cut is None:
                searched = max(0, len(buf) - HOLD)  # no boundary before here: the next search starts here
                if len(buf) > MAX_UNCUT:
                    self._drain(buf)
                    searched = 0
                continue
            close, start = cut
            searched = 0
            self._route(_copy(buf, 0, close))  # through the event's closing brace
            del buf[:start]  # the comma and whitespace up to the next event's `{`
            self._after_element = False
        self._skip_gap(buf)
        cut = None if self._closed else last_boundary(buf, len(buf))
        if cut is not None:  # leave only the last event and what follows the array to read forward
            self._route(_copy(buf, 0, cut[0]))
            del buf[: cut[1]]
        end = self._find_end(buf, self._after_element)
        if end is None:
            raise StreamFailed("the traceEvents array does not close at the end of the file")
        offset, self.trailer = end
        if buf[:offset].strip():
            self._route(_copy(buf, 0, offset))

    def _route_ranges(self, buf: bytearray, body: FileBody) -> Iterator[bytes] | None:
        """Route `buf` up to its last boundary, then the file from there as ranges of about CHUNK bytes each ending
        at a boundary, up to the last HOLD + 2 * CHUNK bytes; the chunks of the file from the last range's end, for
        the rest of _split. None (nothing routed) when the file is too short or `buf` holds no boundary."""
        size = body.path.stat().st_size
        self._skip_gap(buf)
        cut = last_boundary(buf, len(buf))
        if size - body.offset < HOLD + 4 * CHUNK or cut is None:
            return None
        self._route(_copy(buf, 0, cut[0]))
        start = body.offset - len(buf) + cut[1]  # the next event's `{` in the file
        self._after_element = False
        with open(body.path, "rb") as raw:
            while size - start > HOLD + 2 * CHUNK and not self._cancel.is_set():
                window = os.pread(raw.fileno(), WINDOW, start + CHUNK - WINDOW)
                found = last_boundary(window, len(window))
                if found is None:  # no boundary near: the chunks read from here find one
                    break
                close, after = (start + CHUNK - WINDOW + at for at in found)
                self._route((start, close), close - start)
                start = after
                if body.progress:
                    body.progress(f"reading {body.path.name}", start, size)
        self.json_bytes += start - body.offset
        if self.json_bytes > self._limit:
            raise StreamFailed("more decompressed JSON than json_limit allows")
        return _file_chunks(body.path, start, body.progress)

    def _drain(self, buf: bytearray) -> None:
        """No boundary in MAX_UNCUT bytes: route the whole elements at the front of `buf` and drop the whitespace
        after them (a long run of whitespace between events, or a large trailer)."""
        scan = scan_elements(buf, 0, self._after_element)
        if scan.stop == 0 and scan.bracket < 0:
            raise StreamFailed("an event larger than the fast path reads, or damaged JSON")
        first = _SPACE_BYTES.match(buf).end()  # type: ignore[union-attr]
        if scan.elements_end > first:
            self._route(_copy(buf, first, scan.elements_end))
        del buf[: scan.stop]
        self._after_element = scan.after_element
        self._closed = scan.bracket >= 0

    def _skip_gap(self, buf: bytearray) -> None:
        """Drop the whitespace at the front of `buf`, and after a whole element the comma that follows it: the
        front is then never inside a string, so a run of whitespace there of any length is let go at once."""
        lead = _SPACE_BYTES.match(buf).end()  # type: ignore[union-attr]
        if self._after_element and lead < len(buf) and buf[lead] == 0x2C:  # ","
            lead = _SPACE_BYTES.match(buf, lead + 1).end()  # type: ignore[union-attr]
            self._after_element = False
        del buf[:lead]

    def _route(self, segment: Segment, size: int = -1) -> None:
        """Put `segment` (of `size` bytes; a bytes segment's own length by default) on the next lane in turn whose
        pipe has room, so that DuckDB's threads share the work; wait only when every lane is full (a pipe that is
        not being read never holds up the others)."""
        size = len(segment) if size < 0 else size
        count = len(self._lanes)
        while not self._cancel.is_set():
            for step in range(count):
                lane = (self._turn + step) % count
                try:
                    self._queues[self._lanes[lane]].put_nowait(segment)
                except queue.Full:
                    continue
                self._account(lane, size)
                return
            with contextlib.suppress(queue.Full):
                self._queues[self._lanes[self._turn]].put(segment, timeout=0.05)
                self._account(self._turn, size)
                return

    def _account(self, lane: int, size: int) -> None:
        """Count `size` bytes on `lane`; past QUOTA, end its pipe and move the lane to the next one."""
        self._turn = (lane + 1) % len(self._lanes)
        self._filled[lane] += size
        if self._filled[lane] >= self._quota and self._next < len(self.paths):
            self._put(self._queues[self._lanes[lane]], None, force=True)
            self._lanes[lane], self._next, self._filled[lane] = self._next, self._next + 1, 0

    def _put(self, q: queue.Queue[Segment | None], item: Segment | None, force: bool = False) -> None:
        while True:
            try:
                q.put(item, timeout=0.05)
                return
            except queue.Full:
                if self._cancel.is_set() and not force:
                    return

    # -- writers: one per pipe

    def _write(self, path: Path, q: queue.Queue[Segment | None]) -> None:
        fd, source, ended = -1, -1, False
        try:
            fd = os.open(path, os.O_WRONLY)  # waits for the reader
            with contextlib.suppress(OSError):
                import fcntl

                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
            _write_all(fd, b"[")
            first = True
            while (segment := q.get()) is not None:
                if self._cancel.is_set():
                    continue
                if not first:
                    _write_all(fd, b",")
                if isinstance(segment, tuple):
                    if source < 0 and self._body is not None:
                        source = os.open(self._body.path, os.O_RDONLY)
                    _move_range(source, fd, *segment)
                else:
                    _write_all(fd, segment)
                first = False
            ended = True
            if not self._cancel.is_set():
                _write_all(fd, b"]\n")
        except (OSError, MemoryError) as error:  # out of memory in this thread (a tight ulimit -v) fails the stream
            self._writer_errors.append(error)  # as a failed write does, never a thread's traceback on stderr
            self._cancel.set()
            while not ended and q.get() is not None:  # drain so that the producer never waits on this pipe (when
                pass  # the closing "]" failed, the end marker is already taken: waiting for another would hang)
        finally:
            for open_fd in (fd, source):
                if open_fd >= 0:
                    os.close(open_fd)


@dataclass(frozen=True)
class Scan:
    """How far scan_elements read: up to `stop` (whitespace and commas included), whole elements up to
    `elements_end`; `bracket` is where the array's `]` is (-1: not reached); `after_element` whether the last
    thing read was an element (so that a comma comes next)."""

    stop: int
    elements_end: int
    bracket: int
    after_element: bool


def scan_elements(data: str | bytes | bytearray, pos: int, after_element: bool) -> Scan:
    """Read an array's elements in `data` from `pos` forward, until its `]`, the end of `data`, an element cut by
    the end of `data`, or damage. Whitespace between elements is skipped however long it is.

    Text (str) is decoded element by element with `json`, so that damage stops the scan (the careful path: what
    --salvage keeps); bytes are only followed through strings and nesting (_skip_value), fast and without
    building the values, which DuckDB then reads and checks (the fast path).
    """
    text = isinstance(data, str)
    space, comma, bracket = (_SPACE_RE, ",", "]") if text else (_SPACE_BYTES, 0x2C, 0x5D)
    end = len(data)
    elements_end = pos
    while True:
        pos = space.match(data, pos).end()  # type: ignore[union-attr,call-overload]
        if pos >= end:
            return Scan(pos, elements_end, -1, after_element)
        if data[pos] == bracket:
            return Scan(pos, elements_end, pos, after_element)
        if after_element:
            if data[pos] != comma:
                return Scan(pos, elements_end, -1, after_element)
            pos, after_element = pos + 1, False
            continue
        value_end = _decode_value(data, pos) if isinstance(data, str) else _skip_value(data, pos)
        if value_end is None:
            return Scan(pos, elements_end, -1, after_element)
        elements_end = pos = value_end
        after_element = True


def _decode_value(text: str, pos: int) -> int | None:
    try:
        return _JSON.raw_decode(text, pos)[1]
    except (ValueError, RecursionError):
        return None


def _skip_value(data: bytes | bytearray, pos: int) -> int | None:
    """Where the JSON value at `pos` ends, following strings and nesting only; None when `data` ends first."""
    if data[pos] not in b"{[":
        scalar = _SCALAR.match(data, pos)
        return scalar.end() if scalar and scalar.end() < len(data) else None
    depth, expected = 0, pos
    for token in _TOKEN.finditer(data, pos):
        if token.start() != expected:  # a string that does not close before the end of `data`
            return None
        expected = token.end()
        char = data[token.start()]
        if char in b"{[":
            depth += 1
        elif char in b"}]":
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def last_boundary(buf: bytes | bytearray, end: int, start: int = 0) -> tuple[int, int] | None:
    """The last boundary between two array elements whose `{` lies in [start, end): (after the `}`, at the `{`).

    Looks back from `end` at each `{` whose preceding non-space bytes are `,` then `}`; a gap holding a newline
    is taken at once, else the last such candidate when none of the last NEWLINE_CANDIDATES has one.
    """
    fallback = None
    brace_open = end
    for _ in range(NEWLINE_CANDIDATES):
        brace_open = buf.rfind(b"{", start, brace_open)
        if brace_open <= 0:
            break
        comma = _skip_space_back(buf, brace_open)
        if comma < 0 or buf[comma] != 0x2C:  # ","
            continue
        brace = _skip_space_back(buf, comma)
        if brace < 0 or buf[brace] != 0x7D:  # "}"
            continue
        if b"\n" in buf[brace:brace_open]:
            return brace + 1, brace_open
        fallback = fallback or (brace + 1, brace_open)
    return fallback


def _skip_space_back(buf: bytes | bytearray, pos: int) -> int:
    """Index of the last non-space byte before `pos` (-1 when there is none)."""
    pos -= 1
    while pos >= 0 and buf[pos] in SPACE:
        pos -= 1
    return pos


def _copy(buf: bytearray, start: int, end: int) -> bytes:
    """buf[start:end] as bytes, copied once (slicing a bytearray, then bytes() of it, copies twice)."""
    with memoryview(buf) as view:
        return bytes(view[start:end])


def _file_chunks(path: Path, start: int, progress: Progress | None) -> Iterator[bytes]:
    """The bytes of `path` from `start` on, CHUNK at a time."""
    total = path.stat().st_size
    with open(path, "rb") as raw:
        raw.seek(start)
        while chunk := raw.read(CHUNK):
            if progress:
                progress(f"reading {path.name}", raw.tell(), total)
            yield chunk


def _move_range(source: int, fd: int, start: int, end: int) -> None:
    """Bytes [start, end) of the file open as `source` into the pipe `fd`: by splice(2), in the kernel, without
    the GIL; by pread and write where splice is missing or refuses the file."""
    while start < end:
        moved = 0
        if _SPLICE:
            with contextlib.suppress(OSError):  # refused (the kernel, the file system): pread and write say why, if
                moved = os.splice(source, fd, end - start, offset_src=start)  # anything is wrong
        if not moved:
            data = os.pread(source, min(CHUNK, end - start), start)
            if not data:
                raise OSError(errno.EIO, "the trace file was shortened while it was read")
            _write_all(fd, data)
            moved = len(data)
        start += moved


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
