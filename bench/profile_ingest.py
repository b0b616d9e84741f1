"""Where one ingest's time goes: wall and CPU seconds of its stages, in this process (the parent of --jobs workers).

    python bench/profile_ingest.py TRACE_OR_DIR [--jobs N] [--repeat 2]

Each stage is timed around its Python call (wall time, and this process's CPU time: DuckDB's threads count, the
--jobs workers do not): staging the JSON (kineto.stage_events), the inserts (kineto._insert_rows), merging the
workers' parts (parallel.merge_part), loading the run in all (ingest.load_run: for --jobs, the workers' time is
what the merges leave of it), segmentation (segment_run), and the commit (what ingest leaves after the others).
The table is printed as markdown with the machine's cores and load average.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGES: list[tuple[str, str]] = [  # (module, function) timed, in the order printed
    ("traceview.ingest.kineto", "stage_events"),
    ("traceview.ingest.kineto", "_insert_rows"),
    ("traceview.ingest.parallel", "merge_part"),
    ("traceview.api", "load_run"),
    ("traceview.api", "segment_run"),
]


def timed(times: dict[str, list[float]], module: Any, name: str) -> None:
    """Replace module.name by a wrapper that adds its wall and CPU seconds to times[name]."""
    inner: Callable[..., Any] = getattr(module, name)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent = times.setdefault(name, [0.0, 0.0, 0])
            spent[0] += time.perf_counter() - wall
            spent[1] += time.process_time() - cpu
            spent[2] += 1

    setattr(module, name, wrapper)


def profile(trace: Path, jobs: int) -> dict[str, list[float]]:
    """One ingest of `trace` into a new database, its stages timed."""
    import importlib

    from traceview import api
    from traceview.ingest import IngestOptions

    times: dict[str, list[float]] = {}
    for module, name in STAGES:
        timed(times, importlib.import_module(module), name)
    with tempfile.TemporaryDirectory() as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        api.ingest([trace], Path(tmp) / "run.db", IngestOptions(jobs=jobs))
        times["ingest (all)"] = [time.perf_counter() - wall, time.process_time() - cpu, 1]
    inside = [times.get(name, [0.0, 0.0])[:2] for name in ("load_run", "segment_run")]
    times["commit and the rest"] = [times["ingest (all)"][i] - sum(t[i] for t in inside) for i in (0, 1)] + [1]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    times = profile(args.trace, args.jobs)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.trace.name}, --jobs {args.jobs}, {len(os.sched_getaffinity(0))} cores, load {load}\n")
    print("| stage | calls | wall (s) | CPU of this process (s) |\n|---|---:|---:|---:|")
    for name in [n for _, n in STAGES] + ["commit and the rest", "ingest (all)"]:
        if name in times:
            wall, cpu, calls = times[name]
            print(f"| {name} | {int(calls)} | {wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
