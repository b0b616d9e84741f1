"""Segmentation speed on a large synthetic run: rows written straight into a database, then timed.

    python bench/bench_segment.py [--steps 100] [--layers 80] [--annotated]

Each step: an embedding kernel, `--layers` layers (one dense first, then MoE layers whose routed-expert part
varies from 1 to 4 experts), and an epilogue; with --annotated, every kernel has its launch call and each
layer a `model.layers.N` range on the launching thread (annotation method), else the kernels of a step
share one cudaGraphLaunch (period method); with --no-step-ranges there are no ProfilerStep ranges either (steps
from the forward passes, segment/passes.py). Prints kernels, wall and CPU seconds, kernels per second and the
load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from segment_fixtures import Model

from traceview import db
from traceview.segment import SegmentOptions, segment_run


def build(con, steps: int, layers: int, annotated: bool, step_ranges: bool = True) -> int:
    """Insert one run of `steps` steps; returns the number of kernels."""
    model = Model(layers=layers, dense=1, expert_loop=True)
    names, starts, layer_of, step_of = [], [], [], []
    for step in range(steps):
        step_names, truth = model.step(step)
        names += step_names
        layer_of += truth
        step_of += [step] * len(step_names)
    n = len(names)
    t = np.arange(n, dtype=np.int64) * 2000 + np.repeat(np.arange(steps), np.bincount(step_of)) * 1_000_000
    starts = t + 1_000_000_000
    kernel = pd.DataFrame(
        {
            "activity_id": np.arange(1, n + 1),
            "start_ns": starts,
            "end_ns": starts + 1500,
            "name": names,
            "launch": np.arange(1, n + 1) if annotated else np.array(step_of) + 1,
        }
    )
    con.execute(
        "INSERT INTO runs (run_id, label, backend, source_path, source_sha256, source_bytes, traceview_version, "
        "ingested_at) VALUES (1, 'bench', 'kineto', 'x', 'x', 0, 'x', now())"
    )
    con.execute("INSERT INTO ranks VALUES (1, 0, 'x', 'default', 1, NULL, 0, NULL, 1)")
    con.register("k", kernel)
    con.execute(
        """INSERT INTO gpu_activity (run_id, rank, activity_id, kind, device_id, stream_id, start_ns, end_ns, name,
                                     short_name, category, pid, correlation_id, launch_id)
           SELECT 1, 0, activity_id, 'kernel', 0, 7, start_ns, end_ns, name, name, 'compute', 1, launch, launch
           FROM k"""
    )
    launches = _launches(kernel, annotated, steps)
    con.register("l", launches)
    con.execute(
        "INSERT INTO launches SELECT 1, 0, launch_id, 1, 1, start_ns, start_ns + 500, name, 'runtime', launch_id FROM l"
    )
    ranges = _ranges(kernel, layer_of, step_of, annotated, step_ranges)
    con.register("r", ranges)
    con.execute(
        "INSERT INTO cpu_ranges SELECT 1, 0, row_number() OVER (ORDER BY start_ns, end_ns DESC), 1, 1, start_ns, "
        "end_ns, TRUE, name, 'annotation', NULL, 0, NULL FROM r"
    )
    return n


def _launches(kernel: pd.DataFrame, annotated: bool, steps: int) -> pd.DataFrame:
    if annotated:
        return pd.DataFrame(
            {"launch_id": kernel["launch"], "start_ns": kernel["start_ns"] - 1000, "name": "cudaLaunchKernel"}
        )
    first = kernel.groupby("launch")["start_ns"].min()
    return pd.DataFrame({"launch_id": first.index, "start_ns": first.to_numpy() - 1000, "name": "cudaGraphLaunch"})


def _ranges(kernel: pd.DataFrame, layer_of: list, step_of: list, annotated: bool, step_ranges: bool) -> pd.DataFrame:
    frame = kernel.assign(step=step_of, layer=[-1 if x is None else x for x in layer_of])
    steps = frame.groupby("step")["start_ns"].agg(["min", "max"])
    rows = [
        pd.DataFrame(
            {
                "name": [f"ProfilerStep#{s}" for s in steps.index],
                "start_ns": steps["min"] - 5000,
                "end_ns": steps["max"] + 5000,
            }
        )
    ][: int(step_ranges)]
    if annotated:
        inside = frame[frame["layer"] >= 0].groupby(["step", "layer"])["start_ns"].agg(["min", "max"]).reset_index()
        rows.append(
            pd.DataFrame(
                {
                    "name": "model.layers." + inside["layer"].astype(str),
                    "start_ns": inside["min"] - 1100,
                    "end_ns": inside["max"] - 900,
                }
            )
        )
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["name", "start_ns", "end_ns"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--annotated", action="store_true")
    parser.add_argument("--no-step-ranges", action="store_true", help="no ProfilerStep ranges: steps from passes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, db.write_session(Path(tmp) / "bench.db") as con:
        started = time.perf_counter()
        kernels = build(con, args.steps, args.layers, args.annotated, not args.no_step_ranges)
        built = time.perf_counter() - started
        started, started_cpu = time.perf_counter(), time.process_time()
        result = segment_run(con, 1, SegmentOptions())
        took, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    print(f"built {kernels:,} kernels in {built:.1f} s")
    print(f"segmented in {took:.1f} s, {cpu:.1f} CPU-s ({kernels / took:,.0f} kernels/s): {result.notes}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
