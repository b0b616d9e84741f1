"""The Kineto parse path on any layout and number format, and on valid JSON that used to be refused.

Truth comes from the trace's own JSON (read with `json`, times turned into ns with `decimal`), or from the
same events written in PyTorch's layout; the fast path must be taken for every layout (the careful path,
kineto_array.extract_event_array, is made to fail in those tests).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES

import traceview

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))

TABLES = ("gpu_activity", "launches", "cpu_ranges", "gpu_ranges", "threads", "steps", "layers")


def _rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = {t: con.execute(f"SELECT * EXCLUDE (run_id) FROM {t} ORDER BY ALL").fetchall() for t in TABLES}
        rows["stats"] = con.execute(
            "SELECT rank, name, value FROM ingest_stats WHERE name <> 'json_bytes' ORDER BY ALL"
        ).fetchall()
    return rows


# ---------------------------------------------------------------------------------------------------------
# Valid JSON that was refused (issue 17, item 10)

KERNEL = (
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.0, "dur": 2.0, '
    '"args": {"device": 0, "stream": 7, "correlation": 1}}'
)
LAUNCH = (
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 9.0, "dur": 0.5, '
    '"args": {"correlation": 1}}'
)


def _kernels_and_device(db: Path) -> tuple[int, int, str | None]:
    with duckdb.connect(str(db), read_only=True) as con:
        kernels = con.execute("SELECT count(*) FROM gpu_activity").fetchall()[0][0]
        linked = con.execute("SELECT count(launch_id) FROM gpu_activity").fetchall()[0][0]
        device = con.execute("SELECT device_name FROM ranks").fetchall()[0][0]
    return kernels, linked, device


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_large_device_list_before_or_after_the_events_is_read(where: str, tmp_path: Path) -> None:
    devices = [{"id": i, "name": "NVIDIA H200" if i == 0 else f"GPU {i}", "numSms": 132} for i in range(100_000)]
    events = json.loads(f"[{KERNEL}, {LAUNCH}]")
    trace = {"deviceProperties": devices, "traceEvents": events}
    if where == "after":
        trace = {"traceEvents": events, "deviceProperties": devices}
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(trace))  # 3.6 MB of devices, more than the fast path holds back at the end
    traceview.ingest([path], tmp_path / "devices.db")
    assert _kernels_and_device(tmp_path / "devices.db") == (1, 1, "NVIDIA H200")


def test_the_sample_still_reads(tmp_path: Path) -> None:
    summary = traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], tmp_path / "eager.db")
    assert summary.kernels == 2635
