"""A real trace grown to any size: its events repeated with shifted times and ids, in one of three layouts.

Reads: a real PyTorch profiler trace (default `sample_traces/eager.pt.trace.json.gz`, an H200 decode recorded by
PyTorch 2.11). Writes: one `.json` (or `.json.gz`) file of about `size` bytes that holds the sample's header,
its complete, flow and instant events repeated back to back in time (copy k is shifted by k times the
sample's span; `External id`, `correlation`, flow `id` and `Ev Idx` by k times their maximum; `ProfilerStep#N`
renumbered), then the sample's metadata events and trailer once. The text of every event is the sample's own,
so the bytes per event, the argument mix and the number formats are what the profiler writes.

Layouts:
    pytorch   the sample's own (pretty-printed, an event over several lines: what torch.profiler writes)
    lines     one event per line (what `json.dump` of one event per line, or other tools, write)
Long fractions (`--long-fractions`): every `dur` written as Python writes a float that went through
arithmetic (`2.4960000000000004`: 16-17 significant digits), as traces re-serialised by other tools carry.

    python bench/replicate_trace.py --size 1GB --out /tmp/tv-bench/real-1GB.json [--layout lines] [--gzip]
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "sample_traces" / "eager.pt.trace.json.gz"
BOUNDARY = b"\n  },\n  {\n"
LAYOUTS = ("pytorch", "lines")
# Numbers that a copy shifts: the times, and the ids that link events (flows, launches, kernels, ops).
SHIFTED = re.compile(rb'"(ts|dur|External id|correlation|id|Ev Idx)": (-?\d+)(?:\.(\d+))?|ProfilerStep#(\d+)')


def _split(text: bytes) -> tuple[bytes, list[bytes], bytes]:
    """The header through the array's `[`, each event's text (from `{` to `}`), and the trailer from `]`."""
    start = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = text.rindex(b"]")
    body = text[start:end].strip()
    pieces = body.split(BOUNDARY)  # the first keeps its `{`, the last its `}`
    events = [(b"{\n" if i else b"") + p + (b"\n  }" if i < len(pieces) - 1 else b"") for i, p in enumerate(pieces)]
    return text[:start], events, text[end:]


def _ns(whole: bytes, fraction: bytes | None) -> int:
    """A time in µs as written (`5111282807059.433`) -> integer ns."""
    digits = (fraction or b"").ljust(3, b"0")
    return int(whole) * 1000 + int(digits[:3])


class Replicator:
    """The sample's repeated events, one copy at a time, as bytes in the chosen layout."""

    def __init__(self, sample: Path, layout: str, long_fractions: bool) -> None:
        text = gzip.decompress(sample.read_bytes()) if sample.suffix == ".gz" else sample.read_bytes()
        self.header, events, self.trailer = _split(text)
        once = [b'"ph": "M"' in e or b'"cat": "Trace"' in e for e in events]  # metadata and the profiler's span
        self.repeated = [e for e, one in zip(events, once, strict=True) if not one]
        self.once = [e for e, one in zip(events, once, strict=True) if one]
        maxima: dict[bytes, int] = {}
        lo, hi, steps = None, 0, 0
        for match in SHIFTED.finditer(b"\n".join(self.repeated)):
            key, whole, fraction, step = match.groups()
            if step is not None:
                steps = max(steps, int(step))
            elif key == b"ts":
                ns = _ns(whole, fraction)
                lo = ns if lo is None else min(lo, ns)
                hi = max(hi, ns)
            elif key != b"dur":
                maxima[key] = max(maxima.get(key, 0), int(whole))
        self.span_ns = hi - (lo or 0) + 1_000_000  # copies 1 ms apart
        self.id_step = max(maxima.values()) + 1  # one step for every id: flow ids equal correlation ids
        self.steps = steps + 1
        self.layout = layout
        self.long_fractions = long_fractions
        self.separator = b",\n  " if layout == "pytorch" else b",\n"
        self.body = self.separator.join(self._layout(e) for e in self.repeated)

    def _layout(self, event: bytes) -> bytes:
        return re.sub(rb"\n *", b"", event) if self.layout == "lines" else event

    def copy(self, k: int) -> bytes:
        """Copy `k` of the repeated events (k = 0 is the sample's own text, but for long fractions)."""

        def shift(match: re.Match[bytes]) -> bytes:
            key, whole, fraction, step = match.groups()
            if step is not None:
                return b"ProfilerStep#%d" % (int(step) + k * self.steps)
            if key == b"ts":
                ns = _ns(whole, fraction) + k * self.span_ns
                return b'"ts": %d.%03d' % divmod(ns, 1000)
            if key == b"dur":
                if not self.long_fractions:
                    return match.group(0)
                return b'"dur": ' + repr(float(match.group(0)[7:]) * (1 + 2**-52)).encode()
            return b'"%s": %d' % (key, int(whole) + k * self.id_step)

        return SHIFTED.sub(shift, self.body) if k or self.long_fractions else self.body


def write(sample: Path, out: Path, size: int, layout: str = "pytorch", long_fractions: bool = False) -> dict[str, int]:
    """Write about `size` bytes of uncompressed JSON to `out` (gzipped when it ends in .gz); return its counts."""
    rep = Replicator(sample, layout, long_fractions)
    opener = gzip.open if out.suffix == ".gz" else open
    tmp = out.with_name(out.name + ".part")
    written = copies = 0
    with opener(tmp, "wb") as handle:  # type: ignore[operator]
        start = rep.header + (b"\n  " if layout == "pytorch" else b"\n")
        handle.write(start)
        written += len(start)
        while written < size or copies == 0:
            chunk = (rep.separator if copies else b"") + rep.copy(copies)
            handle.write(chunk)
            written += len(chunk)
            copies += 1
        tail = rep.separator + rep.separator.join(rep._layout(e) for e in rep.once) + b"\n  " + rep.trailer
        handle.write(tail)
        written += len(tail)
    tmp.rename(out)
    events = copies * len(rep.repeated) + len(rep.once)
    return {"bytes": written, "events": events, "copies": copies}


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from gen_traces import parse_size

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100MB", help="uncompressed size")
    parser.add_argument("--sample", type=Path, default=SAMPLE)
    parser.add_argument("--layout", choices=LAYOUTS, default="pytorch")
    parser.add_argument("--long-fractions", action="store_true")
    parser.add_argument("--out", type=Path, required=True, help=".json or .json.gz file")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(write(args.sample, args.out, parse_size(args.size), args.layout, args.long_fractions), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
