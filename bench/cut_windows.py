"""Capture windows that cut forward passes: zoo decode runs cut inside their first and last step.

    python bench/cut_windows.py DIR [--start 0.4] [--end 0.6] [--every 5]

For every `--every`-th eager decode run of a zoo recording (DIR as for `bench/accuracy.py --zoo`), the bare trace
loses every event before the kernel at `--start` of its first step's kernels and from the kernel at `--end` of its
last step's (a window from inside one pass to inside another, as `nsys --duration` or a profiler started by hand
records it), and is ingested. Per run: the middle step's kernels in another layer than their true one (labels sliced
to the kept kernels), and whether the capture-window warning fired. The same runs whole are measured by
`bench/accuracy.py --zoo` (most are exact).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sample_traces" / "corpus"))

import truth  # sample_traces/corpus/truth.py
import zoo_accuracy

from traceview import api


def cut_run(labels: Path, trace: Path, start: float, end: float, workdir: Path) -> tuple[int, int, bool]:
    """(middle-step kernels wrong, middle-step kernels, capture-window warning) of one run cut as the module says."""
    true, _ = truth.zoo_labels(labels)
    doc = truth.kineto_document(truth.plain(trace, workdir))
    kernels = sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"),
        key=lambda e: (e["ts"], e.get("args", {}).get("correlation", 0)),
    )
    steps = sorted({step for step, _ in true if step is not None})
    first = [i for i, (step, _) in enumerate(true) if step == steps[0]]
    last = [i for i, (step, _) in enumerate(true) if step == steps[-1]]
    t0, t1 = kernels[first[int(len(first) * start)]]["ts"], kernels[last[int(len(last) * end)]]["ts"]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if "ts" not in e or t0 <= float(e["ts"]) < t1]
    source = workdir / "cut.pt.trace.json"
    source.write_text(json.dumps(doc))
    summary = api.ingest([source], workdir / "cut.db")
    found, _, _, _ = zoo_accuracy._found(workdir / "cut.db")
    kept = [label for label, kernel in zip(true, kernels, strict=True) if t0 <= kernel["ts"] < t1]
    middle = [(f, t) for f, t in zip(found, kept, strict=True) if t[0] == steps[1]]
    wrong = sum(f[1] != t[1] for f, t in middle)
    return wrong, len(middle), any("capture window" in w for w in summary.warnings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("zoo", type=Path)
    parser.add_argument("--start", type=float, default=0.4, help="share of the first step's kernels cut away")
    parser.add_argument("--end", type=float, default=0.6, help="share of the last step's kernels kept")
    parser.add_argument("--every", type=int, default=5, help="every n-th decode run (sorted by name)")
    args = parser.parse_args()
    cases = [c for c in zoo_accuracy.zoo_cases(args.zoo) if c[0].stem.endswith("_decode")][args.every - 1 :: args.every]
    exact = warned = 0
    print("| run | middle-step kernels wrong | capture-window warning |\n|---|---:|---|")
    for labels, trace in cases:
        with tempfile.TemporaryDirectory() as tmp:
            wrong, total, warning = cut_run(labels, trace, args.start, args.end, Path(tmp))
        exact, warned = exact + (wrong == 0), warned + warning
        print(f"| {labels.stem} | {wrong} of {total} | {'yes' if warning else 'no'} |")
    print(f"\n{len(cases)} runs cut: middle step exact in {exact}, warning in {warned}")


if __name__ == "__main__":
    main()
