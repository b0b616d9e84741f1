"""Segmentation on the real traces: the H200 sample traces (sample_traces/) and HTA's training traces.

- Annotated traces (eager, compiled; Kineto and nsys): every layer instance's kernel count equals the count
  derived here independently, in plain Python over the JSON or SQLite file (launch inside the innermost
  `model.layers.N` range of its own thread, inside a step).
- Unannotated traces (the CUDA-graph replay; and the compiled trace with annotations ignored): the period
  method finds the layer count and kernels per layer of the annotated compiled run, kernel for kernel.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HTA, SAMPLES
from segment_fixtures import reference_layer_counts

import traceview
from traceview.segment import Method, SegmentOptions

pytestmark = pytest.mark.skipif(not (SAMPLES / "eager.pt.trace.json.gz").exists(), reason="no sample traces")

# The annotated truth of the compiled code (sample_traces/README.md): layer 0 dense, layers 1-7 MoE.
COMPILED_TRUTH = {layer: (15 if layer == 0 else 27) for layer in range(8)}
STEPS = 5


@pytest.fixture(scope="module")
def databases(ingested: Callable[[Path], Path]) -> dict[str, Path]:
    keys = [f"{name}.{suffix}" for name in ("eager", "compiled", "graph") for suffix in ("pt.trace.json.gz", "sqlite")]
    return {key: ingested(SAMPLES / key) for key in keys}


def layer_counts(db: Path) -> dict[tuple[int, int], int]:
    with traceview.connect(db) as con:
        # steps in time order from 0 (the database keeps the trace's own step numbers, e.g. ProfilerStep#1..5)
        rows = con.execute("SELECT dense_rank() OVER (ORDER BY step) - 1, layer, kernels FROM layers").fetchall()
        return {(s, layer): k for s, layer, k in rows}


def methods(db: Path) -> set[str]:
    with traceview.connect(db) as con:
        return {r[0] for r in con.execute("SELECT DISTINCT method FROM layers").fetchall()}


@pytest.mark.parametrize("name", ["eager", "compiled"])
def test_kineto_annotated_layers_equal_the_independent_count(databases: dict[str, Path], name: str) -> None:
    key = f"{name}.pt.trace.json.gz"
    reference = reference_layer_counts(SAMPLES / key)
    assert len(reference) == STEPS * 8
    assert layer_counts(databases[key]) == reference
    assert methods(databases[key]) == {"annotation"}


@pytest.mark.parametrize("name", ["eager", "compiled"])
def test_nsys_annotated_layers_equal_the_independent_count(databases: dict[str, Path], name: str) -> None:
    key = f"{name}.sqlite"
    reference = nsys_reference_counts(SAMPLES / key)
    assert len(reference) == STEPS * 8
    assert layer_counts(databases[key]) == reference
    assert methods(databases[key]) == {"annotation"}


@pytest.mark.parametrize("key", ["graph.pt.trace.json.gz", "graph.sqlite"])
def test_cuda_graph_replay_layers_equal_the_compiled_truth(databases: dict[str, Path], key: str) -> None:
    assert layer_counts(databases[key]) == {(s, layer): n for s in range(STEPS) for layer, n in COMPILED_TRUTH.items()}
    assert methods(databases[key]) == {"period"}
    with traceview.connect(databases[key]) as con:
        assert con.execute("SELECT min(confidence) > 0.5, count(*) FROM layers").fetchall() == [(True, 40)]


@pytest.mark.parametrize("suffix", ["pt.trace.json.gz", "sqlite"])
def test_period_on_compiled_puts_every_kernel_in_its_annotated_layer(
    databases: dict[str, Path], tmp_path: Path, suffix: str
) -> None:
    db = tmp_path / "compiled.db"
    db.write_bytes(databases[f"compiled.{suffix}"].read_bytes())
    annotated = kernel_layers(db)
    [result] = traceview.api.segment(db, SegmentOptions(method=Method.period))
    assert result.methods == ("period",)
    assert kernel_layers(db) == annotated


def test_eager_period_matches_annotations_too(databases: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "eager.db"
    db.write_bytes(databases["eager.pt.trace.json.gz"].read_bytes())
    annotated = layer_counts(db)
    traceview.api.segment(db, SegmentOptions(method=Method.period))
    assert layer_counts(db) == annotated


def test_steps_of_the_samples(databases: dict[str, Path]) -> None:
    for key, db in databases.items():
        with traceview.connect(db) as con:
            steps = con.execute("SELECT count(*), any_value(method) FROM steps").fetchall()[0]
            per_step = {
                r[0]
                for r in con.execute("SELECT count(*) FROM gpu_activity WHERE kind = 'kernel' GROUP BY step").fetchall()
            }
        assert steps == (STEPS, "annotation"), key
        assert per_step == {527 if key.startswith("eager") else 216}, key


def kernel_layers(db: Path) -> list[tuple[int, int | None, int | None]]:
    with traceview.connect(db) as con:
        return con.execute(
            "SELECT activity_id, step, layer FROM gpu_activity WHERE kind = 'kernel' ORDER BY activity_id"
        ).fetchall()


def nsys_reference_counts(path: Path) -> dict[tuple[int, int], int]:
    """{(step, layer): kernels} from the SQLite export alone: the launch (same correlation id and process) lies
    inside a decode_step_N range and inside the innermost model.layers.N range of its own thread."""
    con = sqlite3.connect(path)
    ranges = con.execute("SELECT start, end, text, globalTid FROM NVTX_EVENTS WHERE eventType = 59").fetchall()
    steps = sorted((lo, hi) for lo, hi, text, _ in ranges if text.startswith("decode_step_"))
    layers: dict[int, list[tuple[int, int, int]]] = {}
    for lo, hi, text, tid in ranges:
        match = re.fullmatch(r"model\.layers\.(\d+)", text or "")
        if match:
            layers.setdefault(tid, []).append((lo, hi, int(match.group(1))))
    launches = {
        (tid >> 24, corr): (start, tid)
        for start, tid, corr in con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    }
    counts: dict[tuple[int, int], int] = {}
    for pid, corr in con.execute("SELECT globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        launch = launches.get((pid >> 24, corr))
        if launch is None:
            continue
        t, tid = launch
        step = next((i for i, (lo, hi) in enumerate(steps) if lo <= t < hi), None)
        inside = [r for r in layers.get(tid, []) if r[0] <= t < r[1]]
        if step is not None and inside:
            layer = max(inside, key=lambda r: (r[0], -r[1]))[2]
            counts[(step, layer)] = counts.get((step, layer), 0) + 1
    return counts


@pytest.mark.parametrize(
    "trace",
    [
        "trace_filter/sampled_rank-0.json.gz",
        "nccl_parser_config/nccl_data.json.gz",
        "with_gpu_user_annotation/step_based_trace_2543932.json.gz",
        "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ],
)
def test_hta_training_traces_get_their_profiler_steps(tmp_path: Path, trace: str) -> None:
    path = HTA / trace
    if not path.exists():
        pytest.skip("trace not bundled")
    names = sorted(set(re.findall(rb'"(ProfilerStep#\d+)"', _raw(path))))
    summary = traceview.ingest([path], tmp_path / "run.db")
    with traceview.connect(tmp_path / "run.db") as con:
        steps = con.execute("SELECT count(*) FROM steps WHERE method = 'annotation'").fetchall()[0][0]
        orphans = con.execute(
            """SELECT count(*) FROM gpu_activity g JOIN launches l USING (run_id, launch_id)
               JOIN steps s ON s.rank = g.rank AND g.step = s.step
               WHERE s.name IS NOT NULL AND g.step IS NULL"""
        ).fetchall()[0][0]
    assert steps == len(names) and summary.steps >= len(names)
    assert orphans == 0


def _raw(path: Path) -> bytes:
    import gzip

    return gzip.decompress(path.read_bytes())
