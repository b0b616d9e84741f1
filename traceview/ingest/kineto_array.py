"""The traceEvents array of a Kineto trace, found and cut out of the file (the careful path of kineto.py).

Reads: one trace file (.json or .json.gz). Writes: a temp file holding only the file's traceEvents array.
The metadata before the array (header) and after it (trailer) is parsed with `json`; a file cut off before
the array closes is an error, or with --salvage keeps every complete event before the cut.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInputError
from . import IngestOptions, bounds, jsonstream

CHUNK = 1 << 24
MAX_EVENT = 1 << 30  # read_json's maximum_object_size: the largest single event read
MAX_HEADER = 1 << 28


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
    ratio = options.max_expansion
    limit = jsonstream.json_limit(trace_file, ratio)
    with open(out_path, "wb") as out:
        out.write(first)
        for chunk in chunks:
            out.write(chunk)
            json_bytes += len(chunk)
            if ratio is not None and json_bytes > limit:
                problem = f"the file decompresses to more than {limit >> 20:,} MiB, {bounds.beyond(ratio)}"
                problem += " (a gzip bomb?)"
                raise bounds.refusal(trace_file, problem)
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


# Byte-order marks that a JSON file written by a Windows tool may start with: what they mean and what to do.
TEXT_MARKS = {
    codecs.BOM_UTF8: ("UTF-8 with a byte-order mark", "remove the mark (sed -i '1s/^\\xEF\\xBB\\xBF//' FILE)"),
    codecs.BOM_UTF16_LE: ("UTF-16", "convert it to UTF-8 (iconv -f UTF-16 -t UTF-8 FILE > OUT.json)"),
    codecs.BOM_UTF16_BE: ("UTF-16", "convert it to UTF-8 (iconv -f UTF-16 -t UTF-8 FILE > OUT.json)"),
}


def _find_array_start(buffer: bytes, trace_file: Path, at_end: bool = False) -> tuple[Header, int] | None:
    stripped = buffer.lstrip()
    if not stripped:
        return None
    first = stripped[:1]
    if first == b"[":
        return Header({}, 0, True), len(buffer) - len(stripped)
    if first != b"{":
        for mark, (encoding, remedy) in TEXT_MARKS.items():
            if stripped.startswith(mark):
                raise BadInputError(trace_file, f"JSON in {encoding}, which traceview does not read", remedy)
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
        except RecursionError:
            raise BadInputError(trace_file, *TOO_DEEP) from None
        metadata.pop("traceEvents", None)
        return Header(metadata, match.end() - 1, False), match.end() - 1
    if at_end:
        return None
    return None


def _cut_after_array(path: Path, trace_file: Path, bare_array: bool, salvage: bool) -> tuple[dict[str, Any], int]:
    """Truncate `path` right after the array's closing bracket; return the metadata after it and bytes lost.

    The array is read forward, element by element (scan_array), so that a bracket inside the metadata after
    it (an array of deviceProperties, say) is never taken for its end.
    """
    size = path.stat().st_size
    elements_end, closed = scan_array(path, validate=salvage)
    if closed is not None:
        with open(path, "rb") as handle:
            handle.seek(closed - 1)  # from the `]` on
            rest = handle.read().decode("utf-8", "surrogateescape")
        trailer = _trailer(rest, bare_array)
        if trailer is not None:
            with open(path, "r+b") as handle:
                handle.truncate(closed)
            return trailer, 0
    if salvage:
        keep = closed or elements_end
        with open(path, "r+b") as handle:
            handle.truncate(keep)
            if closed is None:
                handle.seek(keep)
                handle.write(b"]")
        return {}, max(size - keep, 1)  # at least 1: a cut just after an event's brace drops nothing, yet it is partial
    raise BadInputError(
        trace_file,
        "the trace is truncated (the traceEvents array never closes)"
        if closed is None
        else "malformed trace JSON after the traceEvents array",
        "copy the file again, or add --salvage to keep every complete event before the cut",
    )


def array_end(data: bytes | bytearray, bare_array: bool, after_element: bool) -> tuple[int, dict[str, Any]] | None:
    """Where the array's `]` is in `data` (which starts between two of its elements), and the parsed keys after
    it; None unless `data` holds whole elements, the `]`, and a valid end of the file."""
    scan = jsonstream.scan_elements(data, 0, after_element)
    if scan.bracket < 0:
        return None
    trailer = _trailer(bytes(data[scan.bracket :]).decode("utf-8", "surrogateescape"), bare_array)
    return None if trailer is None else (scan.bracket, trailer)


def _trailer(rest: str, bare_array: bool) -> dict[str, Any] | None:
    """The members after the array: `rest` starts at its `]`. None unless it ends the file as JSON."""
    if bare_array:
        return {} if rest[1:].strip(" \t\r\n") == "" else None
    return _object_rest(rest, 1)


_JSON = json.JSONDecoder()
# Python's JSON reader stops at ~1000 levels of nesting; no profiler writes metadata that deep.
TOO_DEEP = ("the trace's metadata is nested too deep (over ~1000 levels)", "remove that key from the trace")
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
    except RecursionError:
        raise BadInputError(None, *TOO_DEEP) from None
    if text[pos : pos + 1] != "}" or _SPACE.match(text, pos + 1).end() != end:  # type: ignore[union-attr]
        return None
    try:
        text[pos:].encode("utf-8")  # invalid UTF-8 in the trailer is not JSON
    except UnicodeEncodeError:
        return None
    return members


def scan_array(path: Path, validate: bool) -> tuple[int, int | None]:
    """Bytes of the array in `path` up to the end of its last complete element, and through its `]` (None when it
    never closes, or is damaged before).

    The elements are read one by one from the `[` on (jsonstream.scan_elements), since braces in strings and
    nested objects make a search back from the end unreliable: decoded with `json` when `validate` (--salvage
    keeps what comes before damage), else followed through strings and nesting only, on the bytes (DuckDB
    checks the values). Memory holds one CHUNK of input plus the element being read, whatever the whitespace
    between elements.
    """
    offset, elements_end, after, buffer = 1, 1, False, bytearray()
    with open(path, "rb") as handle:
        handle.seek(1)
        while data := handle.read(CHUNK):
            buffer += data
            text = buffer.decode("utf-8", "surrogateescape") if validate else None
            scan = jsonstream.scan_elements(buffer if text is None else text, 0, after)

            def size(end: int, text: str | None = text) -> int:
                return end if text is None else len(text[:end].encode("utf-8", "surrogateescape"))

            if scan.elements_end:
                elements_end = offset + size(scan.elements_end)
            if scan.bracket >= 0:
                return elements_end, offset + size(scan.bracket + 1)
            used = size(scan.stop)
            offset, after = offset + used, scan.after_element
            del buffer[:used]
            if len(buffer) > MAX_EVENT:
                break
    return elements_end, None
