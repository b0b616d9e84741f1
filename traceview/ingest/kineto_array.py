"""The traceEvents array of a Kineto trace, found and cut out of the file (the careful path of kineto.py).

Reads: one trace file (.json or .json.gz). Writes: a temp file holding only the file's traceEvents array.
The metadata before the array (header) and after it (trailer) is parsed with `json`; a file cut off before
the array closes is an error, or with --salvage keeps every complete event before the cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInputError
from . import IngestOptions, jsonstream

CHUNK = 1 << 24
MAX_EVENT = 1 << 30  # read_json's maximum_object_size: the largest single event read
MAX_HEADER = 1 << 28
TAIL_WINDOWS = (1 << 20, 1 << 26)


@dataclass(frozen=True)
class EventArray:
    """A file's traceEvents array extracted to `path`, and the metadata that surrounded it."""

    path: Path
    metadata: dict[str, Any]
    json_bytes: int
    lost_bytes: int


def extract_event_array(trace_file: Path, tmp: Path, options: IngestOptions) -> EventArray:
    """Stream `trace_file` (gunzipping it) into tmp/N.json holding only its traceEvents array."""
    out_path = tmp / f"{trace_file.name}.events.json"
    chunks = _decompressed_chunks(trace_file, options)
    header, first = read_header(trace_file, chunks)
    json_bytes = len(first) + header.offset
    with open(out_path, "wb") as out:
        out.write(first)
        for chunk in chunks:
            out.write(chunk)
            json_bytes += len(chunk)
    trailer, lost = _cut_after_array(out_path, trace_file, header.bare_array, options.salvage)
    return EventArray(out_path, {**header.metadata, **trailer}, json_bytes, lost)


def _decompressed_chunks(trace_file: Path, options: IngestOptions) -> Iterator[bytes]:
    chunks = jsonstream.decompressed_chunks(trace_file, options.progress, CHUNK, careful=True)
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except jsonstream.gzip_errors() as error:
            if options.salvage and isinstance(error, EOFError):
                return
            raise BadInputError(
                trace_file,
                f"the gzip data is truncated or corrupt ({error})",
                "copy the file again, or add --salvage to keep the events before the damage",
            ) from error
        yield chunk


@dataclass(frozen=True)
class Header:
    metadata: dict[str, Any]
    offset: int
    bare_array: bool


def read_header(trace_file: Path, chunks: Iterator[bytes]) -> tuple[Header, bytes]:
    """Find where the traceEvents array starts; return the metadata before it and the bytes from `[` on."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        found = _find_array_start(buffer, trace_file)
        if found is not None:
            header, start = found
            return header, buffer[start:]
        if len(buffer) > MAX_HEADER:
            break
    if not buffer.strip():
        raise BadInputError(trace_file, "the file is empty", "record the trace again; the profiler wrote nothing")
    found = _find_array_start(buffer, trace_file, at_end=True)
    if found is None:
        raise BadInputError(
            trace_file,
            "JSON without a traceEvents array: not a PyTorch profiler / Chrome trace",
            "give the trace file written by torch.profiler (export_chrome_trace or tensorboard_trace_handler)",
        )
    header, start = found
    return header, buffer[start:]


def _find_array_start(buffer: bytes, trace_file: Path, at_end: bool = False) -> tuple[Header, int] | None:
    stripped = buffer.lstrip()
    if not stripped:
        return None
    first = stripped[:1]
    if first == b"[":
        return Header({}, 0, True), len(buffer) - len(stripped)
    if first != b"{":
        raise BadInputError(
            trace_file,
            "not JSON (the file does not start with { or [)",
            "give a PyTorch profiler .json or .json.gz trace",
        )
    for match in re.finditer(rb'"traceEvents"\s*:\s*\[', buffer):
        try:
            metadata = json.loads(buffer[: match.start()] + b'"traceEvents": null}')
        except ValueError:
            continue
        metadata.pop("traceEvents", None)
        return Header(metadata, match.end() - 1, False), match.end() - 1
    if at_end:
        return None
    return None


def _cut_after_array(path: Path, trace_file: Path, bare_array: bool, salvage: bool) -> tuple[dict[str, Any], int]:
    """Truncate `path` right after the array's closing bracket; return the metadata after it and bytes lost."""
    size = path.stat().st_size
    for window in TAIL_WINDOWS:
        start = max(0, size - window)
        with open(path, "rb") as handle:
            handle.seek(start)
            tail = handle.read()
        end = array_end_in_tail(tail, bare_array)
        if end is not None:
            offset, trailer = end
            with open(path, "r+b") as handle:
                handle.truncate(start + offset + 1)
            return trailer, 0
        if start == 0:
            break
    if salvage:
        return {}, _salvage(path, size)
    raise BadInputError(
        trace_file,
        "the trace is truncated (the traceEvents array never closes)",
        "copy the file again, or add --salvage to keep every complete event before the cut",
    )


def array_end_in_tail(tail: bytes, bare_array: bool) -> tuple[int, dict[str, Any]] | None:
    """Position of the `]` closing traceEvents within `tail`, and the parsed keys after it.

    The closing bracket follows the last event's `}` (or the opening `[`) and is followed by `,` or `}`
    (the rest of the top-level object). Among such brackets, the earliest whose remainder parses as the
    end of an object is the one: a bracket inside an event leaves unbalanced closers behind it. The tail is
    decoded once and each candidate's remainder parsed in place (no copy per candidate: traces with
    record_shapes hold thousands of `[]` candidates).
    """
    if bare_array:
        stripped = tail.rstrip()
        return (len(stripped) - 1, {}) if stripped.endswith(b"]") else None
    first = re.search(rb"[}\[]\s*\]\s*[,}]", tail)
    if first is None:
        return None
    text = tail[first.start() :].decode("utf-8", "surrogateescape")
    for match in re.finditer(r"[}\[]\s*\]\s*[,}]", text):
        bracket = text.index("]", match.start() + 1)
        trailer = _object_rest(text, bracket + 1)
        if trailer is not None:
            return first.start() + len(text[:bracket].encode("utf-8", "surrogateescape")), trailer
    return None


_JSON = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _object_rest(text: str, pos: int) -> dict[str, Any] | None:
    """The members of `, "key": value ... }` from `pos` to the end of `text`; None unless that is all there is."""
    members: dict[str, Any] = {}
    end = len(text)
    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
    try:
        while pos < end and text[pos] == ",":
            key, pos = _JSON.raw_decode(text, _SPACE.match(text, pos + 1).end())  # type: ignore[union-attr]
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if not isinstance(key, str) or text[pos : pos + 1] != ":":
                return None
            members[key], pos = _JSON.raw_decode(text, _SPACE.match(text, pos + 1).end())  # type: ignore[union-attr]
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
    except ValueError:
        return None
    if text[pos : pos + 1] != "}" or _SPACE.match(text, pos + 1).end() != end:  # type: ignore[union-attr]
        return None
    try:
        text[pos:].encode("utf-8")  # invalid UTF-8 in the trailer is not JSON
    except UnicodeEncodeError:
        return None
    return members


def _salvage(path: Path, size: int) -> int:
    """Keep every complete event before the cut (or the damage) and close the array; return the bytes dropped.

    At least 1 when the array never closed: a cut just after an event's brace drops nothing, yet the run is partial.
    """
    keep, closed = _complete_prefix(path)
    with open(path, "r+b") as handle:
        handle.truncate(keep)
        if not closed:
            handle.seek(keep)
            handle.write(b"]")
    return size - keep if closed else max(size - keep, 1)


def _complete_prefix(path: Path) -> tuple[int, bool]:
    """Bytes of the array in `path` up to its last complete event (or its `]`), and whether the array closed.

    The events are decoded one by one from the `[` on, since braces in strings and nested objects make a
    search back from the end unreliable; memory holds one CHUNK of input plus the event being decoded.
    """
    keep, buffer, first = 1, b"", True
    with open(path, "rb") as handle:
        handle.seek(1)
        while data := handle.read(CHUNK):
            buffer += data
            text = buffer.decode("utf-8", "surrogateescape")
            pos = done = 0
            while True:
                pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
                if text[pos : pos + 1] == "]":
                    return keep + len(text[: pos + 1].encode("utf-8", "surrogateescape")), True
                if not first:
                    if text[pos : pos + 1] != ",":
                        break
                    pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
                if text[pos : pos + 1] != "{":
                    break
                try:
                    _, pos = _JSON.raw_decode(text, pos)
                except (ValueError, RecursionError):
                    break
                first, done = False, pos
            used = len(text[:done].encode("utf-8", "surrogateescape"))
            keep, buffer = keep + used, buffer[used:]
            if len(buffer) > MAX_EVENT:
                break
    return keep, False
