"""Issue 26's wording of steps: the same kind of step range reads alike from every profiler (`by annotation` for
ProfilerStep#N, `by pattern` for nsys's decode_step_N before), an unknown phase says why, and kernels left between
steps by a step range that overlaps another are not said to lie "before the first or after the last" step."""

from __future__ import annotations

from pathlib import Path

from kineto_builder import KinetoTrace

import traceview


def steps_of(names: list[str], trace: KinetoTrace | None = None) -> KinetoTrace:
    trace = trace or KinetoTrace()
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
        "4 kernel(s) outside every step (4 between steps, in a step range not taken as a step (it overlaps an earlier "
        "one or holds others))"
    ]


def nested_steps() -> KinetoTrace:
    """An outer profiler's ProfilerStep#0 around an inner one's ProfilerStep#1..3, with one kernel of its own before
    them: the three inner ranges are the steps."""
    trace = KinetoTrace()
    with trace.cpu_range("ProfilerStep#0"):
        trace.launch_kernel("setup", dur_us=3)
        steps_of([f"ProfilerStep#{n}" for n in range(1, 4)], trace)
    return trace


def test_nested_step_ranges_the_innermost_are_the_steps(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    traceview.ingest([nested_steps().write(tmp_path / "t.json")], db)
    with traceview.connect(db) as con:
        steps = con.execute("SELECT step, name, method FROM steps ORDER BY step").fetchall()
        layers = con.execute("SELECT count(*) FROM layers").fetchall()[0][0]
    assert steps == [(n, f"ProfilerStep#{n}", "annotation") for n in range(1, 4)]
    assert layers == 3 * 2
    warnings = [n for n in segment_notes(nested_steps(), tmp_path / "again") if "step" in n]
    assert (
        "1 step range(s) hold several step ranges each (ProfilerStep#0): not steps; the ranges inside them are"
        in warnings
    )
    assert "1 kernel(s) outside every step (1 before the first)" in warnings


def test_a_step_range_around_one_other_is_one_step_the_outer(tmp_path: Path) -> None:
    """An engine's step range around its forward pass's range (here ProfilerStep#N around ProfilerStep#1N, with a
    kernel of its own before it) is one step: the outer, with every kernel, and no warning."""
    trace = KinetoTrace()
    for n in range(3):
        with trace.cpu_range(f"ProfilerStep#{n}"):
            trace.launch_kernel("prepare", dur_us=3)
            steps_of([f"ProfilerStep#1{n}"], trace)
    notes = segment_notes(trace, tmp_path)
    with traceview.connect(tmp_path / "run.db") as con:
        steps = con.execute("SELECT step, name FROM steps ORDER BY step").fetchall()
    assert steps == [(n, f"ProfilerStep#{n}") for n in range(3)]
    assert not [n for n in notes if "outside every step" in n or "hold several" in n], notes
