"""Cut a bare Kineto trace of the zoo and its labels to the first K true steps, for committing a long recording's run.

    python cut_steps.py LABELS TRACE K OUT_DIR

Writes OUT_DIR/torch/NAME.pt.trace.json.xz (the metadata events and every event that starts before the first kernel
of step K) and OUT_DIR/labels/NAME.json (the runs of the kept kernels, the digest of their names), and checks that
the cut trace holds exactly the kernels its labels describe. Used for eager runs (a CUDA graph trace's launch calls
before the cut may name replays whose kernels lie after it: not tried).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))

import truth  # sample_traces/corpus/truth.py


def cut(labels: Path, trace: Path, steps: int, out: Path) -> Path:
    """Write the cut trace and labels under `out`; returns the trace's path."""
    true, _ = truth.zoo_labels(labels)
    kernels = truth.kineto_kernels(trace)
    if len(kernels) != len(true):
        raise SystemExit(f"{trace}: {len(kernels)} kernels, its labels {len(true)}")
    kept = next((i for i, (step, _) in enumerate(true) if step is not None and step >= steps), len(true))
    end = kernels[kept].start if kept < len(kernels) else float("inf")
    doc = truth.kineto_document(trace)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or e.get("ts", 0) < end]
    for sub in ("torch", "labels"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    target = out / "torch" / (trace.name.removesuffix(".gz").removesuffix(".xz") + ".xz")
    with lzma.open(target, "wt", preset=9 | lzma.PRESET_EXTREME) as handle:
        json.dump(doc, handle)
    with tempfile.TemporaryDirectory() as tmp:
        names = [k.name for k in truth.kineto_kernels(truth.plain(target, Path(tmp)))]
    if names != [k.name for k in kernels[:kept]]:
        raise SystemExit(f"{target}: the cut changed the kernels")
    data = json.loads(labels.read_text())
    data.update(trace=target.name, kernels=kept, runs=_runs_cut(data["runs"], kept))
    data["names_sha256"] = hashlib.sha256("\n".join(names).encode()).hexdigest()
    (out / "labels" / labels.name).write_text(json.dumps(data))
    return target


def _runs_cut(runs: list[list], kept: int) -> list[list]:
    """The run-length [step, layer, count] labels of the first `kept` kernels."""
    out, left = [], kept
    for step, layer, count in runs:
        if left <= 0:
            break
        out.append([step, layer, min(count, left)])
        left -= count
    return out


if __name__ == "__main__":
    print(cut(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])))
