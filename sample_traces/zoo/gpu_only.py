"""Shrink bare Kineto traces to their GPU activity, for bringing many back from a recording machine.

    python gpu_only.py SRC_DIR DST_DIR

Every `*.pt.trace.json[.gz]` of SRC_DIR is written to DST_DIR as gzipped JSON holding the trace's header, its
metadata events, and its kernels, copies and sets with their device, stream and correlation id: what the layers of
a bare trace are found from (the kernel sequence and its GPU times). The 164 eight-step decode traces of 2026-12-06
went from 1.8 GB to 53 MB. Launch calls are left out, so a CUDA graph's replays are no longer told apart: use it for
eager runs only.
"""

from __future__ import annotations

import gzip
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))

import truth  # sample_traces/corpus/truth.py

GPU = {"kernel", "gpu_memcpy", "gpu_memset"}
KEPT_ARGS = ("device", "stream", "correlation", "context")


def gpu_only(event: dict) -> dict | None:
    """The event as kept: a metadata event whole, a GPU activity with its placement arguments only, else None."""
    if event.get("ph") == "M":
        return event
    if event.get("cat") not in GPU:
        return None
    args = event.get("args", {})
    return {**event, "args": {key: args[key] for key in KEPT_ARGS if key in args}}


def shrink(source: Path, target: Path) -> None:
    doc = truth.kineto_document(source)
    doc["traceEvents"] = [kept for event in doc["traceEvents"] if (kept := gpu_only(event)) is not None]
    with gzip.open(target, "wt", compresslevel=6) as handle:
        json.dump(doc, handle)


def main() -> None:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    target.mkdir(parents=True, exist_ok=True)
    paths = sorted(source.glob("*.pt.trace.json*"))
    with ProcessPoolExecutor() as pool:  # one trace per core
        list(pool.map(shrink, paths, [target / (path.name.removesuffix(".gz") + ".gz") for path in paths]))


if __name__ == "__main__":
    main()
