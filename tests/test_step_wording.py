"""Issue 26's wording of steps: the same kind of step range reads alike from every profiler (`by annotation` for
ProfilerStep#N, `by pattern` for nsys's decode_step_N before), an unknown phase says why, and kernels left between
steps by a step range that overlaps another are not said to lie "before the first or after the last" step."""

from __future__ import annotations

from pathlib import Path

from kineto_builder import KinetoTrace

import traceview


def steps_of(names: list[str]) -> KinetoTrace:
    trace = KinetoTrace()
    for name in names:
        with trace.cpu_range(name):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}"):
                    trace.launch_kernel("gemm", dur_us=5)
                    trace.launch_kernel("add", dur_us=2)
    return trace


def segment_notes(trace: KinetoTrace, tmp_path: Path) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    db = tmp_path / "run.db"
    traceview.ingest([trace.write(tmp_path / "t.json")], db)
    with traceview.connect(db) as con:
        rows = con.execute("SELECT description FROM ingest_stats WHERE name LIKE 'segment.%' ORDER BY name").fetchall()
    return [r[0] for r in rows]


def test_profiler_steps_and_decode_steps_are_both_found_by_annotation(tmp_path: Path) -> None:
    profiler = segment_notes(steps_of([f"ProfilerStep#{n}" for n in range(1, 4)]), tmp_path / "a")
    named = segment_notes(steps_of([f"decode_step_{n}" for n in range(3)]), tmp_path / "b")
    assert (
        "3 steps found by annotation (ProfilerStep#N); phase unknown: their names say neither decode nor prefill"
        in (profiler)
    )
    assert "3 steps found by annotation (decode_step_N)" in named


def test_kernels_of_an_overlapping_step_range_are_between_steps(tmp_path: Path) -> None:
    """ProfilerStep#2 opens 1 µs before ProfilerStep#1 closes: it is not taken, and its 4 kernels lie between the
    steps taken, not before the first or after the last."""
    trace = steps_of([f"ProfilerStep#{n}" for n in range(1, 5)])
    first, second = (e for e in trace.events if e["name"] in ("ProfilerStep#1", "ProfilerStep#2"))
    shift = second["ts"] - (first["ts"] + first["dur"]) + 1
    second["ts"] -= shift
    second["dur"] += shift
    warnings = [n for n in segment_notes(trace, tmp_path) if "outside every step" in n]
    assert warnings == [
        "4 kernel(s) outside every step (4 between steps, in a step range that overlaps an earlier one (not taken "
        "as a step))"
    ]
