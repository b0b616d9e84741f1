"""traceview diff on the real H200 sample traces: eager vs torch.compile (and vs CUDA-graph replay, across
backends). The diff must report each side's kernels per layer exactly as `traceview layers` does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLES

import traceview


@pytest.fixture(scope="module")
def sample_dbs(ingested: Callable[[Path], Path]) -> dict[str, Path]:
    sources = {
        "eager": SAMPLES / "eager.pt.trace.json.gz",
        "compiled": SAMPLES / "compiled.pt.trace.json.gz",
        "graph_nsys": SAMPLES / "graph.sqlite",
    }
    return {name: ingested(source) for name, source in sources.items()}


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
    a_side = [r for r in result.kernels if r["kernel_a"] is not None]
    b_side = {r["kernel_b"] for r in result.kernels if r["kernel_b"] is not None}
    assert len(a_side) == 67
    fused = [r for r in result.kernels if r["status"] == "fused"]
    assert any(r["kernel_a"].startswith("vectorized_elementwise_kernel<") for r in fused)
    assert all(r["kernel_b"].startswith("triton_") for r in fused)
    gemm = "nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN"  # five per layer in both runs: never fused away
    assert {r["status"] for r in result.kernels if gemm in (r["kernel_a"], r["kernel_b"])} <= {"kept", "moved"}
    assert any(name.startswith("nvjet_sm90") for name in b_side)


def test_eager_to_graph_keeps_the_five_gemms(sample_dbs: dict[str, Path]) -> None:
    result = traceview.api.diff(sample_dbs["eager"], sample_dbs["graph_nsys"])
    gemm = "nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN"
    rows = [r for r in result.kernels if gemm in (r["kernel_a"], r["kernel_b"])]
    assert len(rows) == 5 and all(r["status"] in ("kept", "moved") and r["kernel_a"] == r["kernel_b"] for r in rows)


def test_diff_works_across_backends(sample_dbs: dict[str, Path]) -> None:
    result = traceview.api.diff(sample_dbs["eager"], sample_dbs["graph_nsys"])
    assert result.summary["kernels_per_layer"] == [67, 27]
    assert result.summary["speedup"] > 1
