"""Build small Kineto (PyTorch profiler) traces in tests, so the expected answer is known by construction.

trace = KinetoTrace()
with trace.cpu_range("model.layers.0"):
    trace.launch_kernel("gemm", dur_us=5)
trace.write(tmp_path / "t.json.gz")
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import traceview

PID = 1000
TID = 1001


@dataclass
class KinetoTrace:
    """A growing list of trace events on one CPU thread and one GPU stream, with a moving clock (µs)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=lambda: {"schemaVersion": 1})
    cpu_ts: float = 1_000_000.0
    gpu_ts: float = 1_000_000.0
    correlation: int = 100

    def cpu_event(self, name: str, cat: str, dur: float, **args: Any) -> dict[str, Any]:
        event = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": self.cpu_ts, "dur": dur}
        if args:
            event["args"] = args
        self.events.append(event)
        return event

    @contextlib.contextmanager
    def cpu_range(self, name: str, cat: str = "user_annotation") -> Iterator[None]:
        """A record_function-style range around whatever is launched inside the block."""
        event = self.cpu_event(name, cat, 0.0)
        self.cpu_ts += 1
        yield
        self.cpu_ts += 1
        event["dur"] = self.cpu_ts - event["ts"]

    def launch(self, api: str = "cudaLaunchKernel", cat: str = "cuda_runtime") -> int:
        """A launch API call on the CPU; returns its correlation id."""
        self.correlation += 1
        self.cpu_event(api, cat, 2.0, correlation=self.correlation)
        self.cpu_ts += 3
        return self.correlation

    def kernel(self, name: str, correlation: int | None, dur_us: float = 5.0, stream: int = 7, **args: Any) -> None:
        """A kernel on the GPU starting after the previous one (or the launch)."""
        self.gpu_ts = max(self.gpu_ts, self.cpu_ts) + 1
        kernel_args = {"device": 0, "stream": stream, "grid": [1, 1, 1], "block": [128, 1, 1], **args}
        if correlation is not None:
            kernel_args["correlation"] = correlation
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": self.gpu_ts,
                "dur": dur_us,
                "args": kernel_args,
            }
        )
        self.gpu_ts += dur_us

    def launch_kernel(self, name: str, dur_us: float = 5.0, api: str = "cudaLaunchKernel", **args: Any) -> None:
        cat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
        self.kernel(name, self.launch(api, cat), dur_us, **args)

    def document(self) -> dict[str, Any]:
        return {**self.metadata, "traceEvents": self.events}

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def ingested_ranges(trace: KinetoTrace, tmp_path: Path, db_path: Path) -> list[tuple[str, str, int, str | None]]:
    """Ingest `trace` and return its CPU ranges as (name, kind, depth, parent's name), outermost first."""
    traceview.ingest([trace.write(tmp_path / "t.json")], db_path)
    with traceview.connect(db_path) as con:
        return con.execute(
            """SELECT c.name, c.kind, c.depth, p.name FROM cpu_ranges c
               LEFT JOIN cpu_ranges p ON p.run_id = c.run_id AND p.range_id = c.parent_id ORDER BY c.depth"""
        ).fetchall()
