"""traceview diff on synthetic runs whose answer is known by construction."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import synthetic
from synthetic import Kernel

import traceview
import traceview.api
from traceview.diff import headline

US = 1000


def layer_kernels(names: Sequence[str], span_us: float, step: int, layer: int, start_ns: int) -> list[Kernel]:
    """Kernels back to back, together spanning `span_us`."""
    width = int(span_us * US) // len(names)
    return [
        Kernel(start_ns + i * width, start_ns + (i + 1) * width, name=n, step=step, layer=layer)
        for i, n in enumerate(names)
    ]


def add_run(con, label: str, layer_names: Sequence[Sequence[str]], span_us: float, steps: int = 3) -> None:
    run_id = synthetic.add_run(con, label)
    kernels = []
    clock = 0
    for step in range(steps):
        for layer, names in enumerate(layer_names):
            kernels += layer_kernels(names, span_us, step, layer, clock)
            clock += int(span_us * US) + 2 * US
        clock += 50 * US
    synthetic.add_kernels(con, kernels, run_id=run_id)
    synthetic.segment(con, run_id=run_id, warmup_steps=[0])


# One eager decoder layer (23 kernels) and the same layer compiled (13 kernels).
EAGER = [
    "rmsnorm_pow",
    "mean",
    "add",
    "rsqrt",
    "mul",
    "mul",
    "gemm_qkv",
    "rope",
    "sdpa",
    "gemm_o",
    "add",
    "pow",
    "mean",
    "add",
    "rsqrt",
    "mul",
    "mul",
    "router",
    "topk",
    "gemm_up",
    "silu",
    "gemm_down",
    "add",
]
FUSED = [
    "triton_red_fused_add_mean_mul_pow_rsqrt_0",
    "gemm_qkv",
    "triton_poi_fused_rope_1",
    "sdpa",
    "gemm_o",
    "triton_red_fused_add_mean_mul_pow_rsqrt_2",
    "router",
    "topk",
    "gemm_up",
    "triton_poi_silu_3",
    "gemm_down",
    "triton_poi_fused_add_4",
    "copy",
]


def two_run_database(path: Path, a_layers: int = 4, b_layers: int = 4, b_span: float = 69) -> Path:
    con = synthetic.database(path, runs=())
    add_run(con, "auto", [EAGER] * a_layers, 130)
    add_run(con, "specialized", [FUSED] * b_layers, b_span)
    con.close()
    return path


def test_headline_reports_kernels_time_and_speedup(tmp_path: Path) -> None:
    db = two_run_database(tmp_path / "two.db")
    result = traceview.api.diff(db, label_a="auto", label_b="specialized")
    assert len(EAGER) == 23 and len(FUSED) == 13
    assert result.summary["kernels_per_layer"] == [23, 13]
    assert result.summary["us_per_layer"] == [pytest.approx(130, abs=0.1), pytest.approx(69, abs=0.1)]
    assert result.summary["headline"] == (
        "per layer: 23 → 13 kernels; span 130 → 69 µs (1.88x faster); busy 130 → 69 µs (1.88x faster)"
    )
    assert [r["layer"] for r in result.layers] == [0, 1, 2, 3]
    assert all(r["instances_a"] == 2 for r in result.layers)  # warm-up step 0 is skipped
    assert not result.notes


def test_identical_runs_report_no_change(tmp_path: Path) -> None:
    con = synthetic.database(tmp_path / "same.db", runs=())
    add_run(con, "a", [EAGER] * 2, 130)
    add_run(con, "b", [EAGER] * 2, 130)
    con.close()
    result = traceview.api.diff(tmp_path / "same.db", label_a="a", label_b="b")
    assert result.summary["speedup"] == 1.0
    assert {r["status"] for r in result.kernels} == {"kept"}
    assert all(r["delta_us"] == 0 for r in result.top_changes)


def test_a_kernel_that_changes_place_is_not_fused_away(tmp_path: Path) -> None:
    """Both runs launch gemm_qkv; B launches rope before it instead of after. The old edit distance called the GEMM
    fused away and rope its replacement; the GEMM is the same kernel, moved or kept."""
    a = ["norm", "gemm_qkv", "rope", "sdpa", "gemm_o", "gemm_qkv"]
    b = ["norm", "rope", "gemm_qkv", "sdpa", "gemm_o", "gemm_qkv"]
    con = synthetic.database(tmp_path / "moved.db", runs=())
    add_run(con, "a", [a] * 2, 60)
    add_run(con, "b", [b] * 2, 60)
    con.close()
    rows = traceview.api.diff(tmp_path / "moved.db", label_a="a", label_b="b").kernels
    assert {r["status"] for r in rows} == {"kept", "moved"}
    assert all(r["kernel_a"] == r["kernel_b"] for r in rows)


def test_alignment_shows_fused_kernels(tmp_path: Path) -> None:
    db = two_run_database(tmp_path / "fused.db")
    result = traceview.api.diff(db, label_a="auto", label_b="specialized")
    fused = {(r["kernel_a"], r["kernel_b"]) for r in result.kernels if r["status"] == "fused"}
    assert ("rsqrt", "triton_red_fused_add_mean_mul_pow_rsqrt_0") in fused
    assert ("silu", "triton_poi_silu_3") not in fused  # named without "fused": it fused nothing
    kept = [r["kernel_a"] for r in result.kernels if r["status"] == "kept"]
    assert kept == ["gemm_qkv", "sdpa", "gemm_o", "router", "topk", "gemm_up", "gemm_down"]


def test_layer_count_mismatch_is_said_plainly(tmp_path: Path) -> None:
    db = two_run_database(tmp_path / "mismatch.db", a_layers=4, b_layers=3)
    result = traceview.api.diff(db, label_a="auto", label_b="specialized")
    assert "layer count differs: auto has 4 layers per step, specialized has 3" in result.notes
    assert result.layers[-1]["instances_b"] == 0


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


def test_regression_gate_exits_1_only_when_slower(tmp_path: Path) -> None:
    db = two_run_database(tmp_path / "slower.db", b_span=150)
    slower = cli("diff", db, "--a", "auto", "--b", "specialized", "--fail-if-slower", "10")
    assert slower.returncode == 1 and "slower" in slower.stderr
    within = cli("diff", db, "--a", "auto", "--b", "specialized", "--fail-if-slower", "20")
    assert within.returncode == 0, within.stderr


def test_json_output_has_summary_layers_and_kernels(tmp_path: Path) -> None:
    db = two_run_database(tmp_path / "j.db")
    result = cli("diff", db, "--a", "auto", "--b", "specialized", "--format", "json")
    document = json.loads(result.stdout)
    assert document["summary"]["kernels_per_layer"] == [23, 13]
    assert document["summary"]["speedup"] == pytest.approx(130 / 69, abs=0.01)
    assert len(document["layers"]) == 4 and document["kernels"]


def test_headline_wording() -> None:
    assert headline([10, 10], [100, 125], [80, 80]) == (
        "per layer: 10 → 10 kernels; span 100 → 125 µs (1.25x slower); busy 80 → 80 µs (1.00x faster)"
    )


def host_bound_database(path: Path) -> Path:
    """Run B runs A's kernels (same durations) with a 5 µs launch gap after each: span grows, busy does not."""
    con = synthetic.database(path, runs=())
    add_run(con, "a", [EAGER] * 2, 130)
    run_id = synthetic.add_run(con, "b")
    width, gap, clock, kernels = 130 * US // len(EAGER), 5 * US, 0, []
    for step in range(3):
        for layer in range(2):
            for name in EAGER:
                kernels.append(Kernel(clock, clock + width, name=name, step=step, layer=layer))
                clock += width + gap
            clock += 50 * US
    synthetic.add_kernels(con, kernels, run_id=run_id)
    synthetic.segment(con, run_id=run_id, warmup_steps=[0])
    con.close()
    return path


def test_headline_and_gate_tell_span_from_busy(tmp_path: Path) -> None:
    db = host_bound_database(tmp_path / "host_bound.db")
    width_us = 130 * US // len(EAGER) / US
    span_b = len(EAGER) * width_us + (len(EAGER) - 1) * 5
    summary = traceview.api.diff(db, label_a="a", label_b="b").summary
    assert summary["us_per_layer"] == [pytest.approx(130, abs=0.1), pytest.approx(span_b, abs=0.01)]
    assert summary["busy_us_per_layer"] == [pytest.approx(len(EAGER) * width_us)] * 2
    assert (
        summary["headline"]
        == f"per layer: 23 → 23 kernels; span 130 → {span_b:.0f} µs (1.85x slower); busy 130 → 130 µs (1.00x faster)"
    )
    by_span = cli("diff", db, "--a", "a", "--b", "b", "--fail-if-slower", "10", "--metric", "span")
    assert by_span.returncode == 1
    assert (
        by_span.stderr.strip()
        == f"error: b is more than 10% slower per layer than a by span time (130 → {span_b:.0f} µs)"
    )
    by_busy = cli("diff", db, "--a", "a", "--b", "b", "--fail-if-slower", "10", "--metric", "busy")
    assert by_busy.returncode == 0, by_busy.stderr
    assert "span 130 → 240 µs (1.85x slower); busy 130 → 130 µs" in by_busy.stdout
