"""A CUDA graph captured inside traceview.capture on an H200 (sample_traces/record_capture.py): the replays
carry no annotations, yet every replayed kernel lands in the layer whose range was open when it was
captured. The truth is the eager trace of the same model, annotated on every step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLES

import traceview


def layer_sequences(db: Path) -> dict[int, list[list[str]]]:
    """For each layer index, the kernel short names of each instance, in GPU order."""
    with traceview.connect(db) as con:
        rows = con.execute(
            """SELECT layer, step, list(short_name ORDER BY start_ns, activity_id)
               FROM gpu_activity WHERE kind = 'kernel' AND layer IS NOT NULL GROUP BY ALL ORDER BY layer, step"""
        ).fetchall()
    sequences: dict[int, list[list[str]]] = {}
    for layer, _step, names in rows:
        sequences.setdefault(layer, []).append(names)
    return sequences


@pytest.fixture(scope="module")
def dbs(ingested: Callable[[Path], Path]) -> tuple[Path, Path]:
    return ingested(SAMPLES / "capture_graph.pt.trace.json.gz"), ingested(SAMPLES / "eager.pt.trace.json.gz")


def test_replayed_kernels_are_attributed_by_their_capture(dbs: tuple[Path, Path]) -> None:
    graph_db, _ = dbs
    report = traceview.api.layers(graph_db)
    assert report.methods == ("graph",)
    assert [row["kernels"] for row in report.per_layer] == [46] + [67] * 7


def test_each_layer_replays_exactly_the_eager_layer_kernels(dbs: tuple[Path, Path]) -> None:
    graph_db, eager_db = dbs
    replayed, eager = layer_sequences(graph_db), layer_sequences(eager_db)
    assert sorted(replayed) == sorted(eager) == list(range(8))
    for layer in range(8):
        assert all(seq == eager[layer][0] for seq in replayed[layer]), layer
