"""Chrome-trace export: valid JSON written batch by batch, every activity on its stream's track, and the steps and
layers as two tracks above the GPU streams, at the times the database gives."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import layered_db
import pytest

import traceview
from traceview import api, export
from traceview.errors import UsageError


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return layered_db.build(tmp_path_factory.mktemp("export") / "a.db", "baseline").path


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _tracks(trace: dict[str, Any]) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, tid) -> (thread name, sort index)."""
    events = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    order = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events if e["name"] == "thread_sort_index"}
    return {key: (name, order[key]) for key, name in names.items()}


def test_export_holds_every_activity_step_and_layer(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.trace.json"
    stats = api.export(db, out)
    trace = _load(out)
    events = trace["traceEvents"]
    assert stats.events == len(events) and stats.bytes == out.stat().st_size
    tracks = _tracks(trace)
    assert sorted(tracks.values(), key=lambda v: v[1]) == [
        ("steps", 1),
        ("layers", 2),
        ("GPU 0 · stream 7", 10),
        ("GPU 0 · stream 13", 11),
    ]
    complete = [e for e in events if e["ph"] == "X"]
    by_track: dict[str, list[dict[str, Any]]] = {}
    for event in complete:
        by_track.setdefault(tracks[(event["pid"], event["tid"])][0], []).append(event)
    t0 = layered_db.T0_NS
    with traceview.connect(db) as con:
        streams = dict(con.execute("SELECT stream_id, count(*) FROM gpu_activity GROUP BY ALL").fetchall())
        steps = con.execute("SELECT name, start_ns, end_ns FROM steps ORDER BY step").fetchall()
        layers = con.execute("SELECT layer, step, start_ns, end_ns, method FROM layers ORDER BY step, layer").fetchall()
        total = con.execute("SELECT count(*) FROM gpu_activity").fetchall()[0][0]
    assert stats.activities == total == len(by_track["GPU 0 · stream 7"]) + len(by_track["GPU 0 · stream 13"])
    assert len(by_track["GPU 0 · stream 13"]) == streams[13]
    assert {e["cat"] for e in by_track["GPU 0 · stream 13"]} == {"comm"}
    assert [(e["name"], e["ts"], e["dur"]) for e in by_track["steps"]] == [
        (name, (start - t0) / 1e3, (end - start) / 1e3) for name, start, end in steps
    ]
    assert [
        (e["args"]["layer"], e["args"]["step"], e["ts"], e["dur"], e["args"]["method"]) for e in by_track["layers"]
    ] == [(layer, step, (start - t0) / 1e3, (end - start) / 1e3, method) for layer, step, start, end, method in layers]
    layer = by_track["layers"][0]
    assert layer["name"] == "L0 model.layers.0"
    assert layer["args"]["exposed_comm_us"] == layered_db.EXPECTED["exposed_comm_us"]
    # A memcpy carries no kernel-only arguments (NULLs are left out).
    memcpy = next(e for e in complete if e["cat"] == "memcpy")
    assert "grid" not in memcpy["args"] and "layer" not in memcpy["args"] and memcpy["args"]["step"] == 0
    # GPU work is written in time order.
    gpu = by_track["GPU 0 · stream 7"]
    assert [e["ts"] for e in gpu] == sorted(e["ts"] for e in gpu)
    assert trace["otherData"]["clock_zero_ns"] == t0 and trace["displayTimeUnit"] == "ns"


def test_small_batches_slices_and_gzip_give_the_same_events(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _load(Path(api.export(db, tmp_path / "whole.json").path))
    monkeypatch.setattr(export, "BATCH_ROWS", 7)
    monkeypatch.setattr(export, "SLICE_IDS", 5)
    batched = _load(Path(api.export(db, tmp_path / "batched.json.gz").path))
    assert batched == whole
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_one_rank_and_cli(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "export", str(db), "-o", str(out), "--rank", "0", "-f", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)[0]
    assert stats["activities"] == layered_db.STEPS * len(layered_db.step_kernels(0))
    assert stats["steps"] == layered_db.STEPS and stats["layers"] == layered_db.STEPS * layered_db.LAYERS
    assert len(_load(out)["traceEvents"]) == stats["events"]
    with pytest.raises(UsageError, match="has no rank 5"):  # before: an empty trace, exit 0 (issue 25)
        api.export(db, tmp_path / "none.json", rank=5)
    assert not (tmp_path / "none.json").exists()
