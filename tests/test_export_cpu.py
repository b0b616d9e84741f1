"""Chrome-trace export, CPU side: launch calls and annotations on their thread's track, and a flow arrow from
each launch call to the kernel it launched, so that Perfetto shows why the GPU waited.

Truth by construction: a KinetoTrace with two annotated layers of three launches each; every launch call and
kernel is read back from the builder's own events, not from traceview.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kineto_builder import PID, TID, KinetoTrace

import traceview


def test_cpu_threads_and_flows_from_launch_to_kernel(tmp_path: Path) -> None:
    trace = KinetoTrace()
    with trace.cpu_range("ProfilerStep#1"):
        for layer in range(2):
            with trace.cpu_range(f"model.layers.{layer}"):
                for name in ("gemm", "norm", "add"):
                    trace.launch_kernel(name, dur_us=5)
    source = trace.write(tmp_path / "t.json")
    traceview.ingest([source], tmp_path / "run.db")
    stats = traceview.api.export(tmp_path / "run.db", tmp_path / "out.json")
    events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]

    built = trace.events
    t0 = min(e["ts"] for e in built)
    launches = sorted((e["ts"] - t0, e["args"]["correlation"]) for e in built if e["cat"] == "cuda_runtime")
    kernels = {e["args"]["correlation"]: e["ts"] - t0 for e in built if e["cat"] == "kernel"}
    assert len(launches) == len(kernels) == 6

    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    cpu_track = [key for key, name in names.items() if name.startswith(f"CPU {PID} · thread")]
    assert len(cpu_track) == 1 and names[cpu_track[0]] == f"CPU {PID} · thread {TID}"
    on_cpu = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == cpu_track[0]]
    assert sorted((e["ts"], e["args"]["correlation"]) for e in on_cpu if e["cat"] == "launch") == launches
    assert sorted(e["name"] for e in on_cpu if e["cat"] != "launch") == [
        "ProfilerStep#1",
        "model.layers.0",
        "model.layers.1",
    ]

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert stats.flows == len(starts) == len(ends) == 6 and starts.keys() == ends.keys()
    kernel_events = {e["args"]["correlation"]: e for e in events if e["ph"] == "X" and e["cat"] == "compute"}
    for ts, correlation in launches:
        kernel = kernel_events[correlation]
        (flow,) = [f for f in ends.values() if f["ts"] == kernel["ts"] and f["tid"] == kernel["tid"]]
        start = starts[flow["id"]]
        assert (start["pid"], start["tid"], start["ts"]) == (*cpu_track[0], ts)
        assert flow["ts"] == kernels[correlation] and flow["bp"] == "e"
    assert stats.cpu_events == len(on_cpu)


@pytest.mark.parametrize(
    ("thread_name", "track"),
    [
        (f"thread {TID} (python3)", f"CPU {PID} · thread {TID} (python3)"),  # Kineto's own spelling, not doubled
        ("python3", f"CPU {PID} · thread {TID} (python3)"),  # a bare name, as nsys records it
    ],
)
def test_a_named_thread_is_named_once(tmp_path: Path, thread_name: str, track: str) -> None:
    trace = KinetoTrace()
    trace.events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": thread_name}})
    with trace.cpu_range("ProfilerStep#1"):
        trace.launch_kernel("gemm")
    traceview.ingest([trace.write(tmp_path / "t.json")], tmp_path / "run.db")
    traceview.api.export(tmp_path / "run.db", tmp_path / "out.json")
    events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    names = [e["args"]["name"] for e in events if e["name"] == "thread_name" and e["args"]["name"].startswith("CPU")]
    assert names == [track]
