"""Per-layer communication figures of the tensor-parallel traces against a count that traceview does not make.

For every multi-rank trace - sample_traces/tp/ (our decoder on two H200s: Kineto rank files and nsys exports) and,
once recorded, sample_traces/tp_hf/ (transformers' own tensor parallelism, DTensor sequence parallelism, async TP;
record_tp.sh) - each layer instance's comm_us, overlap_us and exposed_comm_us from `traceview layers --format json`,
and compute_us from the layer_metrics view, equal to the nanosecond what sample_traces/tp_hf/overlap_truth.py counts
from the raw JSON or SQLite with the standard library: union and intersection of the kernel intervals of each layer,
the layer of a kernel being the `model.layers.N` range around its launch. Bare transformers traces take their
annotated twin's layers; traceview must find their structure (steps, layers per step, kernels per layer).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import SAMPLES

import traceview

TP, TP_HF = SAMPLES / "tp", SAMPLES / "tp_hf"
sys.path.insert(0, str(TP_HF))

import overlap_truth  # noqa: E402 - sample_traces/tp_hf/overlap_truth.py, standard library only

EXISTING = [TP / "tp_default", TP / "tp_overlap", TP / "tp_default.sqlite.xz", TP / "tp_overlap.sqlite.xz"]
NOT_RECORDED = "no transformers TP traces in sample_traces/tp_hf yet: they need 2 GPUs (sample_traces/tp_hf/README.md)"
Figures = dict[tuple[int, int, int], dict[str, int]]


def recorded(variant: str) -> list:
    """The transformers recordings of one variant: Kineto folders of rank files and nsys exports (a skip if none)."""
    folders = {p.parent for p in (TP_HF / "torch").glob(f"*_{variant}/rank-*.pt.trace.json.gz")}
    exports = set((TP_HF / "nsys").glob(f"*_{variant}.sqlite*"))
    found = sorted(folders | exports)
    return [pytest.param(p, id=p.relative_to(TP_HF).as_posix()) for p in found] or [
        pytest.param(None, marks=pytest.mark.skip(reason=NOT_RECORDED), id=f"tp_hf-{variant}")
    ]


def ingest(source: Path, tmp_path: Path) -> Path:
    database = tmp_path / "run.db"
    traceview.ingest([overlap_truth.truth.plain(source, tmp_path)], database)
    return database


def ordered(rows: Iterable[dict]) -> Figures:
    """(rank, place of the step among the rank's steps, layer) -> figures in ns: step numbers differ between the
    sources (ProfilerStep#1.., decode_step_0.., inferred 0..), their order does not."""
    rows = list(rows)
    order: dict[int, list[int]] = {}
    for r in rows:
        order.setdefault(r["rank"], []).append(r["step"])
    place = {(rank, step): i for rank, steps in order.items() for i, step in enumerate(sorted(set(steps)))}
    return {(r["rank"], place[(r["rank"], r["step"])], r["layer"]): r["figures"] for r in rows}


def reported(database: Path) -> Figures:
    """What traceview reports per layer instance: `traceview layers --format json` and the layer_metrics view."""
    shown = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "layers", str(database), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    with traceview.connect(database) as con:
        rows = con.execute("SELECT rank, step, layer, compute_us FROM layer_metrics").fetchall()
    compute = {(rank, step, layer): us for rank, step, layer, us in rows}
    instances = []
    for r in json.loads(shown.stdout):
        figures = {name: round(r[f"{name}_us"] * 1000) for name in ("comm", "overlap", "exposed_comm")}
        figures["compute"] = round(compute[(r["rank"], r["step"], r["layer"])] * 1000)
        instances.append({**r, "figures": {"kernels": r["kernels"], **figures}})
    return ordered(instances)


def counted(source: Path, tmp_path: Path) -> Figures:
    """The independent count (overlap_truth.py) for the same instances."""
    rows = overlap_truth.layer_figures(overlap_truth.labelled_kernels(source, tmp_path))
    return ordered(
        {
            "rank": f.rank,
            "step": f.step,
            "layer": f.layer,
            "figures": {
                "kernels": f.kernels,
                "comm": f.comm_ns,
                "overlap": f.overlap_ns,
                "exposed_comm": f.exposed_comm_ns,
                "compute": f.compute_ns,
            },
        }
        for f in rows
    )


def test_union_and_intersection_on_drawn_intervals() -> None:
    """The checker's own arithmetic, on intervals whose answer is drawn (one character = 1 ns):
    comm     AA__BBBB__  and a kernel inside B:  ___CC_____
    compute  _DDDD___EE
    comm union [0,2) + [4,8) = 6, compute union [1,5) + [8,10) = 6, intersection [1,2) + [4,5) = 2."""
    comm = overlap_truth.union([(0, 2), (4, 8), (5, 7)])
    compute = overlap_truth.union([(1, 5), (8, 10)])
    assert comm == [(0, 2), (4, 8)]
    assert overlap_truth.length(comm) == 6 and overlap_truth.length(compute) == 6
    assert overlap_truth.intersection_length(comm, compute) == 2
    assert overlap_truth.union([(0, 2), (2, 3)]) == [(0, 3)]  # touching intervals merge


@pytest.mark.parametrize("source", [pytest.param(p, id=p.name) for p in EXISTING])
def test_our_decoder_tp_layer_figures_equal_the_independent_count(source: Path, tmp_path: Path) -> None:
    found, true = reported(ingest(source, tmp_path)), counted(source, tmp_path)
    assert len(true) == 2 * 4 * 8  # ranks x steps x layers
    assert found == true
    assert any(f["overlap"] > 0 for f in true.values()) == ("overlap" in source.name)


def assert_bare_layers_match(found: Figures, true: Figures) -> None:
    """Layers found without annotations: the twin's steps and layers, kernel counts exact in at least 95% of the
    layer instances (the corpus's bar), and wherever the count is exact, every figure."""
    assert sorted(found) == sorted(true), "steps and layers per step"
    exact = [key for key in true if found[key]["kernels"] == true[key]["kernels"]]
    assert len(exact) >= 0.95 * len(true), f"{len(exact)} of {len(true)} layer instances with the true kernel count"
    assert {key: found[key] for key in exact} == {key: true[key] for key in exact}


@pytest.mark.parametrize(
    "name",
    [
        "torch/llama_graph_twin.pt.trace.json.gz",
        "torch/qwen3moe_graph_bare.pt.trace.json.gz",
        "nsys/llama_graph_twin.sqlite.xz",
        "nsys/qwen3moe_graph_bare.sqlite.xz",
    ],
)
def test_checker_labels_graph_replays_and_bare_traces_as_traceview_does(name: str, tmp_path: Path) -> None:
    """The checker's paths that only the transformers TP traces will need, on the one-GPU corpus now: kernels
    replayed from a CUDA graph (layer of their capture, Kineto and nsys) and bare traces (their twin's labels).
    No communication there: comm 0, compute = the layer's busy time."""
    source = SAMPLES / "corpus" / name
    found, true = reported(ingest(source, tmp_path)), counted(source, tmp_path)
    assert len(true) == 4 * 6 and all(f["comm"] == 0 < f["compute"] for f in true.values())
    if "_bare" in name:
        assert_bare_layers_match(found, true)
    else:
        assert found == true


@pytest.mark.parametrize("source", recorded("twin"))
def test_transformers_tp_twin_layer_figures_equal_the_independent_count(source: Path, tmp_path: Path) -> None:
    found, true = reported(ingest(source, tmp_path)), counted(source, tmp_path)
    assert {rank for rank, _, _ in true} == {0, 1}
    assert all(f["comm"] > 0 for f in true.values()), "every layer of a TP model communicates"
    assert found == true


@pytest.mark.parametrize("source", recorded("bare"))
def test_transformers_tp_bare_layers_match_the_twin(source: Path, tmp_path: Path) -> None:
    found, true = reported(ingest(source, tmp_path)), counted(source, tmp_path)
    assert {rank for rank, _, _ in true} == {0, 1}
    assert_bare_layers_match(found, true)
