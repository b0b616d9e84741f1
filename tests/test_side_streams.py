"""Issue 26: kernels on other streams that overlap a layer in time belong to the layer that launched them, or are
shown apart (README: Kernels on other streams; traceview/segment/side_streams.py). The SGLang decode trace's
`neg_kernel`, launched on its own while a CUDA graph replayed the step, ran beside layer 5 and was counted into it
(16 kernels instead of 15)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import KinetoTrace

import traceview

ENGINE_TRACES = Path(__file__).parent.parent.parent / "shared" / "external" / "tracelens"
LAYERS = 6
KERNELS = ("attn_gemm", "rmsnorm", "mlp_gemm", "silu_mul")


def graph_steps() -> KinetoTrace:
    """Four ProfilerSteps, each one cudaGraphLaunch replaying 6 layers of 4 kernels on stream 7; in step 2, a kernel
    on stream 9 started by a cudaLaunchKernel of its own runs while layer 2 does."""
    trace = KinetoTrace()
    for step in range(4):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            replay = trace.launch("cudaGraphLaunch")
            for layer in range(LAYERS):
                for index, name in enumerate(KERNELS):
                    trace.kernel(name, replay)
                    if step == 2 and layer == 2 and index == 1:
                        trace.kernel("neg_kernel", trace.launch(), dur_us=1, stream=9)
    return trace


def eager_steps() -> KinetoTrace:
    """The same layers launched kernel by kernel, with an all-reduce on stream 9 launched by each layer."""
    trace = KinetoTrace()
    for step in range(4):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for _ in range(LAYERS):
                for name in KERNELS:
                    trace.launch_kernel(name)
                trace.launch_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", stream=9)
    return trace


def layer_kernels(db: Path) -> dict[tuple[int, int], int]:
    with traceview.connect(db) as con:
        rows = con.execute("SELECT step, layer, count(*) FROM gpu_activity WHERE kind = 'kernel' GROUP BY ALL")
        return {(step, layer): n for step, layer, n in rows.fetchall() if layer is not None}


def test_a_kernel_a_graph_replayed_layer_did_not_launch_is_set_apart(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    traceview.ingest([graph_steps().write(tmp_path / "t.json")], db)
    counts = layer_kernels(db)
    assert set(counts.values()) == {len(KERNELS)} and len(counts) == 4 * LAYERS
    with traceview.connect(db) as con:
        assert con.execute("SELECT layer FROM gpu_activity WHERE short_name = 'neg_kernel'").fetchall() == [(None,)]
        notes = [
            r[0] for r in con.execute("SELECT description FROM ingest_stats WHERE name = 'segment.note'").fetchall()
        ]
    assert any("1 kernel(s) on another stream" in note for note in notes), notes


def test_a_collective_an_eager_layer_launched_stays_in_it(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    traceview.ingest([eager_steps().write(tmp_path / "t.json")], db)
    counts = layer_kernels(db)
    # (the last layer's trailing all-reduce the kernel sequence leaves to the step's epilogue, as before)
    assert {n for (_, layer), n in counts.items() if layer < LAYERS - 1} == {len(KERNELS) + 1}


@pytest.mark.skipif(not ENGINE_TRACES.is_dir(), reason="../shared/external is not beside this checkout")
def test_the_sglang_side_stream_kernel_is_in_no_layer(tmp_path: Path) -> None:
    db = tmp_path / "sglang.db"
    traceview.ingest([ENGINE_TRACES / "sglang_qwen3_8b_decode_bs32_mi300x.json.gz"], db)
    counts = layer_kernels(db)
    assert counts[0, 5] == 15 and set(counts.values()) == {15}
