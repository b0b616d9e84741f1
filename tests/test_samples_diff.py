"""traceview diff on the real H200 sample traces: eager vs torch.compile (and vs CUDA-graph replay, across
backends). The diff must report each side's kernels per layer exactly as `traceview layers` does."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLES

import traceview


@pytest.fixture(scope="module")
def sample_dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("samples")
    sources = {
        "eager": SAMPLES / "eager.pt.trace.json.gz",
        "compiled": SAMPLES / "compiled.pt.trace.json.gz",
        "graph_nsys": SAMPLES / "graph.sqlite",
    }
    for name, source in sources.items():
        traceview.ingest([source], out / f"{name}.db")
    return {name: out / f"{name}.db" for name in sources}


def _median_kernels_per_layer(db: Path) -> dict[int, float]:
    return {row["layer"]: row["kernels"] for row in traceview.api.layers(db).per_layer}


def test_diff_reports_kernels_per_layer_as_layers_does(sample_dbs: dict[str, Path]) -> None:
    result = traceview.api.diff(sample_dbs["eager"], sample_dbs["compiled"])
    eager, compiled = _median_kernels_per_layer(sample_dbs["eager"]), _median_kernels_per_layer(sample_dbs["compiled"])
    assert {r["layer"]: r["kernels_a"] for r in result.layers} == eager
    assert {r["layer"]: r["kernels_b"] for r in result.layers} == compiled
    assert result.summary["layers_per_step"] == [8, 8]
    assert result.summary["kernels_per_layer"] == [67, 27]


def test_alignment_shows_the_eager_kernels_the_compiled_path_fused(sample_dbs: dict[str, Path]) -> None:
    result = traceview.api.diff(sample_dbs["eager"], sample_dbs["compiled"])
    statuses = [r["status"] for r in result.kernels]
    assert statuses.count("kept") + statuses.count("replaced") + statuses.count("fused_away") == 67
    assert statuses.count("kept") + statuses.count("replaced") + statuses.count("new") == 27
    fused = [r["kernel_a"] for r in result.kernels if r["status"] == "fused_away"]
    assert any(n.startswith("vectorized_elementwise_kernel<") for n in fused)
    assert any(n.startswith("elementwise_kernel<") for n in fused)
    replacements = [r["kernel_b"] for r in result.kernels if r["status"] == "replaced"]
    assert any(name.startswith("triton_") for name in replacements)
    kept = {r["kernel_a"] for r in result.kernels if r["status"] == "kept"}
    assert any(name.startswith("nvjet_sm90") for name in kept)  # the cuBLAS GEMMs stay


def test_diff_works_across_backends(sample_dbs: dict[str, Path]) -> None:
    result = traceview.api.diff(sample_dbs["eager"], sample_dbs["graph_nsys"])
    assert result.summary["kernels_per_layer"] == [67, 27]
    assert result.summary["speedup"] > 1
