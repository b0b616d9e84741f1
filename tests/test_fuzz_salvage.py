"""--salvage on a Kineto trace cut off anywhere: it ingests the complete events before the cut, or says why not.

The trace is built so the byte span of every event is known; for a cut at `offset`, the kernels whose
closing brace lies before the cut are the ones salvage must keep. bench/fuzz.py --salvage-sweep runs every
offset; CI runs a sample of offsets, plain and gzipped.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import zlib
from functools import cache
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto_builder import KinetoTrace

from traceview import api
from traceview.errors import TraceviewError
from traceview.ingest import IngestOptions


@cache
def _events_and_spans() -> tuple[bytes, list[tuple[int, bool]]]:
    """The trace's bytes and, per event, (offset just after its closing brace, whether it is a kernel)."""
    trace = KinetoTrace()
    trace.metadata |= {"deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "distributedInfo": {"rank": 0}}
    for step in range(2):
        with trace.cpu_range(f"ProfilerStep#{step}", cat="user_annotation"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}"):
                    trace.launch_kernel("void gemm<128, {a}>(float const*)", dur_us=3)
                    trace.launch_kernel('name with "quotes", braces }{ ], and \\ backslash', dur_us=2)
    head = json.dumps(trace.metadata)[:-1].encode() + b', "traceEvents": [\n'
    parts, spans, offset = [], [], len(head)
    for i, event in enumerate(trace.events):
        text = (b",\n" if i else b"") + json.dumps(event).encode()
        parts.append(text)
        offset += len(text)
        spans.append((offset, event["cat"] == "kernel"))
    data = head + b"".join(parts) + b'\n], "traceName": "t", "displayTimeUnit": "ms"}\n'
    return data, spans


def small_trace() -> bytes:
    """A small Kineto trace (JSON): 8 kernels, their launches, step and layer annotations."""
    return _events_and_spans()[0]


def complete_kernels(plain_prefix_length: int) -> int:
    """Kernels whose event ends within the first `plain_prefix_length` bytes of the JSON."""
    return sum(kernel for end, kernel in _events_and_spans()[1] if end <= plain_prefix_length)


def complete_events(plain_prefix_length: int) -> int:
    return sum(1 for end, _ in _events_and_spans()[1] if end <= plain_prefix_length)


def check_salvage_at(data: bytes, offset: int, gz: bool = False) -> tuple[str, str]:
    """Ingest the trace cut at `offset` (of the gzipped bytes when gz) with --salvage and judge it.

    Returns (ok | clean_error | failure, detail).
    """
    if gz:
        cut = gzip.compress(data, mtime=0)[:offset]
        plain = len(zlib.decompressobj(wbits=31).decompress(cut))
    else:
        cut, plain = data[:offset], offset
    expected = complete_kernels(plain)
    with tempfile.TemporaryDirectory(prefix="traceview-salvage-") as tmp:
        trace = Path(tmp) / ("cut.json.gz" if gz else "cut.json")
        trace.write_bytes(cut)
        db = Path(tmp) / "out.db"
        try:
            summary = api.ingest([trace], db, IngestOptions(salvage=True))
        except TraceviewError as error:
            message = str(error)
            if "\n" in message or " — " not in message:
                return "failure", f"error message is not one line `FILE: problem — remedy`: {message!r}"
            if db.exists() or any(Path(tmp).glob("out.db*")):
                return "failure", "a database was left after the error"
            if complete_events(plain) > 0:
                return "failure", f"{complete_events(plain)} complete events before the cut, yet: {message}"
            return "clean_error", message
        except Exception as error:
            return "failure", f"{type(error).__name__}: {error}"
        if summary.kernels != expected:
            return "failure", f"kept {summary.kernels} kernels, {expected} are complete before the cut"
        with duckdb.connect(str(db), read_only=True) as con:
            partial, lost = con.execute(
                """SELECT partial, (SELECT sum(value) FROM ingest_stats WHERE name = 'salvaged_bytes_lost')
                   FROM runs"""
            ).fetchall()[0]
        cut_short = plain < len(data)
        if cut_short and complete_events(plain) < len(_events_and_spans()[1]) and not (partial and lost):
            return "failure", f"events were lost but partial={partial}, salvaged_bytes_lost={lost}"
        if not cut_short and (partial or lost):
            return "failure", "a whole trace was marked partial"
        return "ok", ""


def test_the_trace_has_what_the_checks_assume() -> None:
    data = small_trace()
    assert json.loads(data)["traceEvents"][-1]["cat"] == "kernel"
    assert complete_kernels(len(data)) == 8
    assert check_salvage_at(data, len(data)) == ("ok", "")


SALVAGE = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.heavy  # fuzzing cuts, tens of seconds
@SALVAGE
@given(fraction=st.floats(min_value=0.0, max_value=1.0))
def test_salvage_keeps_every_complete_kernel_before_any_cut(fraction: float) -> None:
    data = small_trace()
    offset = round(fraction * len(data))
    kind, detail = check_salvage_at(data, offset)
    assert kind != "failure", f"cut at {offset} of {len(data)}: {detail}"


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(fraction=st.floats(min_value=0.0, max_value=1.0))
def test_salvage_of_a_cut_gzip_keeps_what_decompresses(fraction: float) -> None:
    data = small_trace()
    size = len(gzip.compress(data, mtime=0))
    offset = round(fraction * size)
    kind, detail = check_salvage_at(data, offset, gz=True)
    assert kind != "failure", f"gzip cut at {offset} of {size}: {detail}"


def test_salvage_at_event_boundaries() -> None:
    """Cuts right after an event's brace, after its comma, and inside the next event's first bytes."""
    data = small_trace()
    for end, _ in _events_and_spans()[1][-2:]:
        for offset in (end, end + 1, end + 3):
            kind, detail = check_salvage_at(data, offset)
            assert kind == "ok", f"cut at {offset}: {detail}"
