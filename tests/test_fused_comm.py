"""Kernels that fuse a collective with computation are their own category (fused_comm), neither hidden nor exposed
communication, so that the overlap figures do not jump when a fusion lands. Synthetic traces: the answer is known by
construction (every kernel runs alone on one stream, back to back with 1 µs gaps)."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import pytest
from kineto_builder import KinetoTrace

import traceview
from traceview import IngestOptions
from traceview.ingest.common import kernel_class_table

CLASSES = Path(__file__).resolve().parent.parent / "queries" / "kernel_classes.csv"
FUSED = "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16>(Params)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas"
NORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, float, int, int)"


def _class_of(name: str) -> tuple[str, str | None]:
    """The class ingest gives a kernel of this name (ingest/common.py's table, DuckDB's regular expressions)."""
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE names AS SELECT ? AS name", [name])
    kernel_class_table(con, "SELECT name FROM names")
    found = con.execute("SELECT category, comm_op FROM _name_class").fetchall()
    return found[0] if found else ("compute", None)


def test_every_example_in_the_table_is_classed_by_its_own_row() -> None:
    with CLASSES.open() as fh:
        for row in csv.DictReader(fh):
            assert _class_of(row["example"]) == (row["category"], row["comm_op"]), row["priority"]


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_twoshot_sync<__nv_bfloat16, 8>", "all_reduce"),
        ("void tensorrt_llm::kernels::moe_finalize_allreduce_kernel<__nv_bfloat16>(Params)", "all_reduce"),
        ("void c10d::symmetric_memory::multimem_all_reduce_rms_norm_kernel<c10::BFloat16, 8>(Args)", "all_reduce"),
        ("void flux::GemmRS_kernel<cutlass::bfloat16_t>(flux::GemmRSParams)", "reduce_scatter"),
        ("void ag_gemm_kernel<__nv_bfloat16>(AgGemmParams)", "all_gather"),
    ],
)
def test_engines_fused_collectives_are_fused_comm(name: str, op: str) -> None:
    assert _class_of(name) == ("fused_comm", op)


@pytest.mark.parametrize("name", [NCCL, "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(RankData*)"])
def test_plain_collectives_stay_comm(name: str) -> None:
    assert _class_of(name)[0] == "comm"


@pytest.mark.parametrize("name", [GEMM, NORM, "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(Args)"])
def test_compute_stays_compute(name: str) -> None:
    assert _class_of(name)[0] == "compute"


def _layers_trace(path: Path, fused: bool) -> Path:
    """3 steps of 2 annotated layers: a 10 µs GEMM, then the all-reduce with residual add and RMSNorm (one 8 µs
    fused kernel, or an 8 µs NCCL all-reduce then a 2 µs norm), then a 3 µs GEMM."""
    trace = KinetoTrace()
    for step in range(3):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}"):
                    trace.launch_kernel(GEMM, dur_us=10)
                    if fused:
                        trace.launch_kernel(FUSED, dur_us=8)
                    else:
                        trace.launch_kernel(NCCL, dur_us=8)
                        trace.launch_kernel(NORM, dur_us=2)
                    trace.launch_kernel(GEMM, dur_us=3)
    return trace.write(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("fused")
    database = tmp / "run.db"
    traceview.ingest([_layers_trace(tmp / "unfused.json", fused=False)], database, IngestOptions(label="unfused"))
    traceview.ingest([_layers_trace(tmp / "fused.json", fused=True)], database, IngestOptions(label="fused"))
    return database


def _layer_figures(con: duckdb.DuckDBPyConnection, label: str) -> set[tuple[float, ...]]:
    return set(
        con.execute(
            """SELECT comm_us, exposed_comm_us, overlap_us, fused_comm_us, compute_us, busy_us
               FROM layer_metrics JOIN runs USING (run_id) WHERE label = ?""",
            [label],
        ).fetchall()
    )


def test_a_fused_kernel_is_fused_comm_with_its_collective(runs: Path) -> None:
    with traceview.connect(runs) as con:
        rows = con.execute("SELECT DISTINCT category, comm_op FROM gpu_activity WHERE name = ?", [FUSED]).fetchall()
    assert rows == [("fused_comm", "all_reduce")]


def test_the_fusion_moves_time_from_exposed_comm_to_its_own_figure(runs: Path) -> None:
    with traceview.connect(runs) as con:
        unfused, fused = _layer_figures(con, "unfused"), _layer_figures(con, "fused")
    # comm, exposed, overlap, fused_comm, compute, busy (µs) of every layer instance
    assert unfused == {(8.0, 8.0, 0.0, 0.0, 15.0, 23.0)}
    assert fused == {(0.0, 0.0, 0.0, 8.0, 13.0, 21.0)}


def test_step_metrics_report_fused_comm_and_no_overlap_share_without_comm(runs: Path) -> None:
    with traceview.connect(runs) as con:
        rows = con.execute(
            """SELECT DISTINCT fused_comm_us, overlap_pct FROM step_metrics JOIN runs USING (run_id)
               WHERE label = 'fused'"""
        ).fetchall()
    assert rows == [(16.0, None)]
