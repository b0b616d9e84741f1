"""Cut the last layers of every forward pass out of a bare zoo trace and its labels: a stack whose last unit of
layer kinds is incomplete (Gemma 3 1B has 26 layers in units of six, Gemma 3 27B 62), with the truth by construction.

    python drop_layers.py LABELS TRACE KEEP OUT_DIR

Writes OUT_DIR/torch/NAME.pt.trace.json (every kernel of a true layer numbered KEEP or more left out, and the launch
calls of those kernels alone; the time those kernels took on the GPU is taken out of every later time, so that no
idle gap stands where they ran) and OUT_DIR/labels/NAME.json (the runs of the kept kernels, the digest of their names),
NAME being the run's with `_keepKEEP` before its mode. For eager runs: a CUDA graph replay's one launch call runs the
kernels of every layer. `python bench/accuracy.py --zoo OUT_DIR` then measures traceview on them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))

import truth  # sample_traces/corpus/truth.py

LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def drop_layers(labels: Path, trace: Path, keep: int, out: Path) -> tuple[Path, Path]:
    """Write the trace and labels without the layers numbered `keep` or more under `out`; returns their paths."""
    true, _ = truth.zoo_labels(labels)
    with tempfile.TemporaryDirectory() as tmp:
        document = truth.kineto_document(truth.plain(trace, Path(tmp)))
    events = document["traceEvents"] if isinstance(document, dict) else document
    kernels = sorted(  # in GPU start order, as truth.kineto_kernels and the labels
        (e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"),
        key=lambda e: (e["ts"], _correlation(e)),
    )
    if len(kernels) != len(true):
        raise SystemExit(f"{trace}: {len(kernels)} kernels, its labels {len(true)}")
    dropped = {id(e) for e, (_, layer) in zip(kernels, true, strict=True) if layer is not None and layer >= keep}
    kept = _kept_events(events, kernels, dropped)
    _close_gaps(kept, _dropped_spans(kernels, dropped))
    if isinstance(document, dict):
        document["traceEvents"] = kept
    else:
        document = kept
    name, mode = labels.stem.rsplit("_", 1)
    stem = f"{name}_keep{keep}_{mode}"
    for sub in ("torch", "labels"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    target = out / "torch" / f"{stem}_bare.pt.trace.json"
    target.write_text(json.dumps(document))
    left = [label for e, label in zip(kernels, true, strict=True) if id(e) not in dropped]
    return target, _write_labels(labels, target, left, out / "labels" / f"{stem}.json")


def _kept_events(events: list[dict], kernels: list[dict], dropped: set[int]) -> list[dict]:
    """The events less the dropped kernels and the launch calls that launched only dropped kernels."""
    launches = {_correlation(e) for e in kernels if id(e) in dropped}
    launches -= {_correlation(e) for e in kernels if id(e) not in dropped}
    return [
        e
        for e in events
        if id(e) not in dropped and not (e.get("cat") in LAUNCH_CATEGORIES and _correlation(e) in launches)
    ]


def _write_labels(labels: Path, target: Path, left: list[tuple[int | None, int | None]], written: Path) -> Path:
    """The run's labels for the kept kernels (`left`), with the digest of the names in `target`, at `written`."""
    names = [k.name for k in truth.kineto_kernels(target)]
    data = json.loads(labels.read_text())
    data.update(trace=target.name, kernels=len(left), runs=_runs(left))
    data["names_sha256"] = hashlib.sha256("\n".join(names).encode()).hexdigest()
    written.write_text(json.dumps(data))
    return written


def _dropped_spans(kernels: list[dict], dropped: set[int]) -> list[tuple[float, float]]:
    """The GPU time of each run of dropped kernels: from its first kernel's start to the next kept kernel's start."""
    spans: list[tuple[float, float]] = []
    start = None
    for event in kernels:
        if id(event) in dropped:
            start = float(event["ts"]) if start is None else start
        elif start is not None:
            spans.append((start, float(event["ts"])))
            start = None
    if start is not None:
        spans.append((start, float(kernels[-1]["ts"]) + float(kernels[-1].get("dur", 0))))
    return spans


def _close_gaps(events: list[dict], spans: list[tuple[float, float]]) -> None:
    """Take the dropped spans' time out of every event's times: a time moves back by the part of the spans before it
    (so no two events change order)."""

    def earlier(t: float) -> float:
        return round(t - sum(max(0.0, min(b, t) - a) for a, b in spans), 3)

    for event in events:
        if not isinstance(event.get("ts"), int | float):
            continue
        end = event["ts"] + event["dur"] if isinstance(event.get("dur"), int | float) else None
        event["ts"] = earlier(event["ts"])
        if end is not None:
            event["dur"] = round(earlier(end) - event["ts"], 3)


def _correlation(event: dict) -> int:
    return event.get("args", {}).get("correlation", 0)


def _runs(labels: list[tuple[int | None, int | None]]) -> list[list]:
    """Run-length [step, layer, count] labels, as record_zoo.py writes them."""
    return [[step, layer, len(list(group))] for (step, layer), group in itertools.groupby(labels)]


if __name__ == "__main__":
    print(*drop_layers(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])))
