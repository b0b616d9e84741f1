"""Kineto JSON ingest: real HTA traces against independent counts, and synthetic traces with known answers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import HTA, SAMPLES
from kineto_builder import KinetoTrace, ingested_ranges

import traceview

HTA_TRACES = sorted(HTA.rglob("*.json.gz"))


def _events(path: Path) -> list[dict[str, Any]]:
    return json.load(gzip.open(path))["traceEvents"]


def _independent_counts(path: Path) -> dict[str, float]:
    """Counts taken from the file with plain json, the way a reader would check by hand."""
    events = _events(path)
    kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
    counts = {"kernel": 0, "memcpy": 0, "memset": 0}
    launch_ids = {
        (e.get("args") or {}).get("correlation")
        for e in events
        if str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime", "cuda_driver")
    }
    linked = 0
    for e in events:
        kind = kinds.get(str(e.get("cat", "")).lower())
        if kind and e.get("ph") == "X":
            counts[kind] += 1
            if kind == "kernel" and (e.get("args") or {}).get("correlation") in launch_ids:
                linked += 1
    counts["linked_pct"] = round(100.0 * linked / counts["kernel"], 3) if counts["kernel"] else 100.0
    return counts


@pytest.mark.parametrize("trace", HTA_TRACES, ids=lambda p: str(p.relative_to(HTA)))
def test_real_hta_traces_match_independent_counts(trace: Path, db_path: Path) -> None:
    traceview.ingest([trace], db_path)
    expected = _independent_counts(trace)
    with traceview.connect(db_path) as con:
        got = dict(con.execute("SELECT kind, count(*) FROM gpu_activity GROUP BY kind").fetchall())
        for kind in ("kernel", "memcpy", "memset"):
            assert got.get(kind, 0) == expected[kind], kind
        share = con.execute("SELECT value FROM ingest_stats WHERE name = 'kernels_linked_to_launch_pct'").fetchall()
        if expected["kernel"]:
            assert share[0][0] == pytest.approx(expected["linked_pct"], abs=1e-3)


def test_traces_that_record_all_launches_link_every_kernel(db_path: Path) -> None:
    traceview.ingest([HTA / "nccl_parser_config/nccl_data.json.gz"], db_path)
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT count(*) FROM gpu_activity WHERE launch_id IS NULL").fetchall() == [(0,)]


def test_rows_lie_in_key_order(db_path: Path) -> None:
    """A table read without ORDER BY gives its rows by key, as a reader scrolling `SELECT * ... LIMIT` expects: the
    GPU work is numbered on its sort key and joined back (kineto._insert_gpu_activity), then inserted in that order.
    The eager sample's events are not in time order in its file, so rows inserted as joined would not be."""
    traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], db_path)
    with traceview.connect(db_path) as con:
        for table, key in (("gpu_activity", "activity_id"), ("launches", "launch_id"), ("cpu_ranges", "range_id")):
            keys = [k for (k,) in con.execute(f"SELECT {key} FROM {table}").fetchall()]
            assert len(keys) > 1000 and keys == sorted(keys), table


def test_rank_comes_from_distributed_info_then_file_name(tmp_path: Path) -> None:
    traceview.ingest([HTA / "trace_filter/sampled_rank-1.json.gz"], tmp_path / "a.db")
    traceview.ingest([HTA / "large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"], tmp_path / "b.db")
    with traceview.connect(tmp_path / "a.db") as con:
        assert con.execute("SELECT rank, rank_from, world_size FROM ranks").fetchall() == [(1, "distributed_info", 128)]
    with traceview.connect(tmp_path / "b.db") as con:
        assert con.execute("SELECT rank, rank_from FROM ranks").fetchall() == [(70, "file_name")]


def test_directory_of_rank_files_is_one_run(tmp_path: Path, db_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        (ranks / name).write_bytes((HTA / "trace_filter" / name).read_bytes())
    summary = traceview.ingest([ranks], db_path)
    assert (summary.ranks, summary.kernels) == (2, 1154 + 1104)


def test_timestamps_keep_nanoseconds_and_base_time(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace(metadata={"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000})
    trace.gpu_ts = 2_413_669_097_444.592
    trace.kernel("k", correlation=None, dur_us=1.761)
    traceview.ingest([trace.write(tmp_path / "t.json")], db_path)
    with traceview.connect(db_path) as con:
        start, end = con.execute("SELECT start_ns, end_ns FROM gpu_activity").fetchall()[0]
    assert start == 1_700_000_000_000_000_000 + 2_413_669_097_445_592
    assert end - start == 1761


def test_driver_api_launches_and_graph_fan_out_are_linked(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace()
    trace.launch_kernel("triton_poi_fused_add_0", api="cuLaunchKernel")
    graph = trace.launch("cudaGraphLaunch")
    for i in range(40):
        trace.kernel(f"replayed_{i % 4}", graph)
    traceview.ingest([trace.write(tmp_path / "t.json.gz")], db_path)
    with traceview.connect(db_path) as con:
        rows = con.execute(
            """SELECT l.name, l.api, count(*) FROM gpu_activity g JOIN launches l USING (run_id, launch_id)
               GROUP BY ALL ORDER BY 1"""
        ).fetchall()
    assert rows == [("cuLaunchKernel", "driver", 1), ("cudaGraphLaunch", "runtime", 40)]


def test_custom_all_reduce_without_nccl_in_its_name_is_communication(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace()
    trace.launch_kernel("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, int)")
    trace.launch_kernel("void at::native::elementwise_kernel<128, 4>(int)")
    trace.launch_kernel("some_kernel", **{"Collective name": "allgather"})
    traceview.ingest([trace.write(tmp_path / "t.json")], db_path)
    with traceview.connect(db_path) as con:
        rows = con.execute("SELECT short_name, category, comm_op FROM gpu_activity ORDER BY start_ns").fetchall()
    assert rows == [
        ("cross_device_reduce_1stage<__nv_bfloat16, 2>", "comm", "all_reduce"),
        ("elementwise_kernel<128, 4>", "compute", None),
        ("some_kernel", "comm", "all_gather"),
    ]


def test_ranges_nest_per_thread(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace()
    with trace.cpu_range("ProfilerStep#3"), trace.cpu_range("model.layers.0"), trace.cpu_range("aten::mm", "cpu_op"):
        trace.launch_kernel("gemm")
    assert ingested_ranges(trace, tmp_path, db_path) == [
        ("ProfilerStep#3", "step", 0, None),
        ("model.layers.0", "annotation", 1, "ProfilerStep#3"),
        ("aten::mm", "op", 2, "model.layers.0"),
    ]


def test_metadata_after_the_event_array_and_bare_arrays_are_read(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace()
    trace.launch_kernel("k")
    body = json.dumps(trace.events)
    after = f'{{"traceEvents": {body}, "deviceProperties": [{{"id": 0, "name": "NVIDIA H200"}}], "x": [1]}}'
    (tmp_path / "after.json").write_text(after)
    (tmp_path / "bare.json").write_text(body)
    traceview.ingest([tmp_path / "after.json"], db_path)
    traceview.ingest([tmp_path / "bare.json"], db_path)
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT label, device_names FROM runs ORDER BY run_id").fetchall() == [
            ("after", ["NVIDIA H200"]),
            ("bare", []),
        ]


def test_ingest_is_idempotent_and_labels_are_unique(tmp_path: Path, db_path: Path) -> None:
    trace = HTA / "trace_filter/sampled_rank-0.json.gz"
    first = traceview.ingest([trace], db_path)
    again = traceview.ingest([trace], db_path)
    assert again.already_ingested and again.run_id == first.run_id
    with pytest.raises(traceview.DatabaseError, match="already labelled"):
        traceview.ingest(
            [HTA / "trace_filter/sampled_rank-1.json.gz"], db_path, traceview.IngestOptions(label=first.label)
        )
    replaced = traceview.ingest(
        [HTA / "trace_filter/sampled_rank-1.json.gz"], db_path, traceview.IngestOptions(label=first.label, replace=True)
    )
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
        assert con.execute("SELECT count(*) FROM gpu_activity WHERE kind = 'kernel'").fetchall() == [
            (replaced.kernels,)
        ]


def test_cpu_only_trace_is_valid_with_a_warning(db_path: Path) -> None:
    summary = traceview.ingest([HTA / "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"], db_path)
    assert summary.kernels == 0 and any("CPU-only" in w for w in summary.warnings)


def test_salvage_keeps_complete_events_of_a_cut_trace(tmp_path: Path, db_path: Path) -> None:
    trace = KinetoTrace()
    for i in range(10):
        trace.launch_kernel(f"k{i}")
    text = json.dumps(trace.document())
    cut = text.index('"k7"')
    (tmp_path / "cut.json").write_text(text[:cut])
    with pytest.raises(traceview.BadInputError, match="truncated"):
        traceview.ingest([tmp_path / "cut.json"], db_path)
    assert not db_path.exists()
    summary = traceview.ingest([tmp_path / "cut.json"], db_path, traceview.IngestOptions(salvage=True))
    assert summary.kernels == 7
    with traceview.connect(db_path) as con:
        assert con.execute("SELECT partial FROM runs").fetchall() == [(True,)]
        lost = con.execute("SELECT value FROM ingest_stats WHERE name = 'salvaged_bytes_lost'").fetchall()
    assert lost and lost[0][0] > 0
