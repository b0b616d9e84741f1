"""Nsight Systems ingest on real exports: counts and links against SQL run straight on the export (sqlite3).

Files: tests/data/nsys (two 2-GPU exports from nsys 2026.2 / schema 3.25, a CPU-only NVTX demo from nsys 2022.4 /
schema 3.0) and sample_traces (H200 exports from nsys 2025.3 / schema 3.20: eager, compiled, CUDA graph, TP=2 on
two GPUs, and the graph export as Parquet). See tests/data/nsys/PROVENANCE.md and sample_traces/README.md.
"""

from __future__ import annotations

import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

import traceview

NSYS_DATA = Path(__file__).parent / "data" / "nsys"
TWO_GPU = NSYS_DATA / "nsysai_mfu_2gpu_before.sqlite"
DEMO_2022 = NSYS_DATA / "nvtx_demo_2022.4.sqlite"
EXPORTS = sorted(NSYS_DATA.glob("*.sqlite")) + sorted(SAMPLES.rglob("*.sqlite"))
RANGES, MARKS = "(59, 60, 70, 71)", "(34, 65)"


def export_sql(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute(sql).fetchall()


def has_table(path: Path, table: str) -> bool:
    return bool(export_sql(path, f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{table}'"))


def count(path: Path, table: str, where: str = "1") -> int:
    return export_sql(path, f"SELECT count(*) FROM {table} WHERE {where}")[0][0] if has_table(path, table) else 0


def linked_share_per_gpu(path: Path) -> list[float]:
    """Share of kernels whose runtime/driver call (same process, same correlation id) is in the export, per
    (device, process) in that order (traceview's rank order)."""
    if not has_table(path, "CUPTI_ACTIVITY_KIND_KERNEL"):
        return []
    rows = export_sql(
        path,
        """SELECT k.deviceId, k.globalPid >> 24, count(*),
                  count(*) FILTER (WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                                   WHERE r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24))
           FROM CUPTI_ACTIVITY_KIND_KERNEL k GROUP BY 1, 2 ORDER BY 1, 2""",
    )
    return [round(100.0 * linked / n, 3) for _, _, n, linked in rows]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    """Each export ingested once into its own database."""
    out = tmp_path_factory.mktemp("nsys")
    databases = {}
    for i, export in enumerate(EXPORTS):
        databases[export] = out / f"{i}.db"
        traceview.ingest([export], databases[export])
    return databases


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.name)
def test_counts_equal_the_exports_own(export: Path, ingested: dict[Path, Path]) -> None:
    with traceview.connect(ingested[export]) as con:
        got = dict(con.execute("SELECT kind, count(*) FROM gpu_activity GROUP BY kind").fetchall())
        assert got.get("kernel", 0) == count(export, "CUPTI_ACTIVITY_KIND_KERNEL")
        assert got.get("memcpy", 0) == count(export, "CUPTI_ACTIVITY_KIND_MEMCPY")
        assert got.get("memset", 0) == count(export, "CUPTI_ACTIVITY_KIND_MEMSET")
        assert con.execute("SELECT count(*) FROM launches").fetchall()[0][0] == count(
            export, "CUPTI_ACTIVITY_KIND_RUNTIME"
        )
        ranges = dict(con.execute("SELECT kind, count(*) FROM cpu_ranges GROUP BY kind").fetchall())
        assert ranges.get("nvtx", 0) == count(export, "NVTX_EVENTS", f"eventType IN {RANGES}")
        assert ranges.get("mark", 0) == count(export, "NVTX_EVENTS", f"eventType IN {MARKS}")


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.name)
def test_link_share_equals_a_join_on_process_and_correlation_id(export: Path, ingested: dict[Path, Path]) -> None:
    with traceview.connect(ingested[export]) as con:
        shares = con.execute(
            "SELECT value FROM ingest_stats WHERE name = 'kernels_linked_to_launch_pct' ORDER BY rank"
        ).fetchall()
        assert [s[0] for s in shares] == pytest.approx(linked_share_per_gpu(export), abs=1e-3)
        crossed = """SELECT count(*) FROM gpu_activity g JOIN launches l ON l.run_id = g.run_id
                     AND l.launch_id = g.launch_id WHERE g.pid <> l.pid OR g.correlation_id <> l.correlation_id"""
        assert con.execute(crossed).fetchall() == [(0,)]


def test_every_kernel_of_a_complete_capture_is_linked(ingested: dict[Path, Path]) -> None:
    """The sample traces hold whole capture ranges: every kernel's launch call is there (graph: cudaGraphLaunch)."""
    for name in ("eager.sqlite", "compiled.sqlite", "graph.sqlite"):
        if (SAMPLES / name).exists():
            with traceview.connect(ingested[SAMPLES / name]) as con:
                unlinked = "SELECT count(*) FROM gpu_activity WHERE launch_id IS NULL"
                assert con.execute(unlinked).fetchall() == [(0,)], name


def test_joining_on_the_id_alone_would_match_7_percent_more_pairs(ingested: dict[Path, Path]) -> None:
    """Correlation ids restart in every process: on the 2-GPU export the id alone pairs kernels with the other
    rank's calls. traceview links on (pid, id): exactly the pairs that exist."""
    by_id = export_sql(
        TWO_GPU,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)",
    )[0][0]
    by_process = export_sql(
        TWO_GPU,
        """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
           ON r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24""",
    )[0][0]
    assert (by_id, by_process) == (4280, 3986)
    assert 1.07 < by_id / by_process < 1.08
    with traceview.connect(ingested[TWO_GPU]) as con:
        linked = con.execute("SELECT count(*) FROM gpu_activity WHERE kind = 'kernel' AND launch_id IS NOT NULL")
        assert linked.fetchall()[0][0] == by_process


def test_one_rank_per_process_and_gpu(ingested: dict[Path, Path]) -> None:
    with traceview.connect(ingested[TWO_GPU]) as con:
        ranks = con.execute("SELECT rank, pid, device_id, rank_from, hostname FROM ranks ORDER BY rank").fetchall()
        assert ranks == [(0, 144, 0, "process_order", None), (1, 145, 1, "process_order", None)]  # no --keep-host
        mixed = """SELECT count(*) FROM gpu_activity g JOIN ranks r USING (run_id, rank)
                   WHERE g.pid <> r.pid OR g.device_id <> r.device_id"""
        assert con.execute(mixed).fetchall() == [(0,)]
        assert con.execute("SELECT DISTINCT rank, pid FROM launches ORDER BY 1").fetchall() == [(0, 144), (1, 145)]
        assert con.execute("SELECT DISTINCT rank, pid FROM cpu_ranges ORDER BY 1").fetchall() == [(0, 144), (1, 145)]


def test_api_names_lose_their_version_suffix_and_say_runtime_or_driver(ingested: dict[Path, Path]) -> None:
    with traceview.connect(ingested[TWO_GPU]) as con:
        names = dict(con.execute("SELECT name, any_value(api) FROM launches GROUP BY name").fetchall())
    assert names["cudaLaunchKernel"] == "runtime" and names["cudaMemcpyAsync"] == "runtime"
    assert names["cuLaunchKernelEx"] == "driver" and names["cuKernelGetAttribute"] == "driver"
    assert names["cudaStreamGetCaptureInfo_v2"] == "runtime"  # cudaStreamGetCaptureInfo_v2_v11030
    assert not [n for n in names if n.endswith(("_v7000", "_v3020", "_v10000"))]


def test_nvtx_domains_and_registered_strings(ingested: dict[Path, Path]) -> None:
    """NCCL's ranges are in domain 1, named through textId; the window cut its domain-creation event."""
    with traceview.connect(ingested[TWO_GPU]) as con:
        by_domain = dict(
            con.execute("SELECT coalesce(domain, '(default)'), count(*) FROM cpu_ranges GROUP BY 1").fetchall()
        )
        nccl = {r[0] for r in con.execute("SELECT DISTINCT name FROM cpu_ranges WHERE domain IS NOT NULL").fetchall()}
    assert by_domain == {
        "(default)": count(TWO_GPU, "NVTX_EVENTS", "domainId = 0"),
        "domain_1": count(TWO_GPU, "NVTX_EVENTS", "domainId = 1"),
    }
    assert {"ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"} <= nccl


def test_nvtx_demo_from_nsys_2022_4(ingested: dict[Path, Path]) -> None:
    """Every NVTX feature of tests/data/nsys/nvtx_demo.c, read from an export schema 3.0."""
    with traceview.connect(ingested[DEMO_2022]) as con:
        rows = con.execute(
            "SELECT name, kind, domain, closed, depth, start_ns, end_ns FROM cpu_ranges ORDER BY range_id"
        ).fetchall()
        by_name = {r[0]: r for r in rows}
        end = con.execute("SELECT trace_end_ns FROM runs").fetchall()[0][0]
        layers = "SELECT p.name, count(*) FROM cpu_ranges c JOIN cpu_ranges p ON p.range_id = c.parent_id "
        layers += "WHERE c.name LIKE 'model.layers._' GROUP BY 1"
        assert con.execute(layers).fetchall() == [("decode_step", 6)]
        threads = {r[0] for r in con.execute("SELECT thread_name FROM threads WHERE tid IS NOT NULL").fetchall()}
        stats = dict(con.execute("SELECT name, value FROM ingest_stats WHERE rank IS NULL").fetchall())
    assert len(rows) == 29 and sum(r[1] == "mark" for r in rows) == 2
    assert by_name["checkpoint"][1:4] == ("mark", None, True) and by_name["checkpoint"][5] == by_name["checkpoint"][6]
    assert by_name["model.layers.registered"][1:3] == ("nvtx", "traceview.demo")  # registered string, custom domain
    assert by_name["domain.mark"][1:3] == ("mark", "traceview.demo")
    assert by_name["domain.startend"][1:3] == ("nvtx", "traceview.demo")
    assert by_name["startend.range"][1:4] == ("nvtx", None, True)
    never_closed = {r[0] for r in rows if not r[3]}
    assert never_closed == {"worker.never_popped", "startend.never_ended", "main.never_popped"}
    assert all(by_name[n][6] == end for n in never_closed)
    assert stats["nvtx_ranges_never_closed"] == 3
    assert "nvtx_demo" in threads
    assert stats["export_schema_version"] == 3.0
    assert stats["absent_table.CUPTI_ACTIVITY_KIND_KERNEL"] == 1  # lazy export, CPU-only trace


@pytest.mark.parametrize(
    ("export", "version", "schema"),
    [(TWO_GPU, "2026.2.1.210", 3.25), (DEMO_2022, "2022.4.2.1", 3.0), (SAMPLES / "graph.sqlite", "2025.3.2.0", 3.2)],
    ids=["2026.2", "2022.4", "2025.3"],
)
def test_versions_and_clock_anchor(export: Path, version: str, schema: float, ingested: dict[Path, Path]) -> None:
    """clock_anchor_ns is the Unix time of the trace clock's zero: the capture start minus the capture start on
    the trace clock (the target's clock since 2026 exports say so in systemClockNs, else 0: time from the start)."""
    if export not in ingested:
        pytest.skip("sample trace not present")
    columns = {r[1] for r in export_sql(export, "PRAGMA table_info(TARGET_INFO_SESSION_START_TIME)")}
    clock = "systemClockNs" if "systemClockNs" in columns else "0"
    anchor = export_sql(export, f"SELECT utcEpochNs - {clock} FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    with traceview.connect(ingested[export]) as con:
        profiler, got_anchor, start = con.execute(
            "SELECT profiler_version, clock_anchor_ns, trace_start_ns FROM runs"
        ).fetchall()[0]
        stat = con.execute("SELECT value FROM ingest_stats WHERE name = 'export_schema_version'").fetchall()
    assert version in profiler and got_anchor == anchor and stat == [(schema,)]
    kept = {"CUPTI_ACTIVITY_KIND_KERNEL": "1", "CUPTI_ACTIVITY_KIND_RUNTIME": "1", "NVTX_EVENTS": "eventType <> 75"}
    first = min(
        export_sql(export, f"SELECT min(start) FROM {table} WHERE {where}")[0][0] or 1 << 62
        for table, where in kept.items()
        if has_table(export, table)
    )
    assert start == first  # absolute times on the export's own clock


def test_device_names_and_graph_node_ids(ingested: dict[Path, Path]) -> None:
    graph = SAMPLES / "graph.sqlite"
    if graph not in ingested:
        pytest.skip("sample trace not present")
    with traceview.connect(ingested[graph]) as con:
        assert con.execute("SELECT device_names FROM runs").fetchall() == [(["NVIDIA H200"],)]
        nodes = con.execute("SELECT count(DISTINCT graph_node_id) FROM gpu_activity WHERE kind = 'kernel'")
        assert (
            nodes.fetchall()[0][0]
            == export_sql(graph, "SELECT count(DISTINCT graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
        )
        launches = "SELECT l.name, count(*) FROM gpu_activity g JOIN launches l USING (run_id, launch_id) GROUP BY 1"
        assert con.execute(launches).fetchall() == [("cudaGraphLaunch", 1165)]
        stats = dict(con.execute("SELECT name, value FROM ingest_stats").fetchall())
        assert stats["graph_node_events"] == count(graph, "CUDA_GRAPH_NODE_EVENTS")


def test_parquet_export_gives_the_same_rows_as_sqlite(tmp_path: Path, ingested: dict[Path, Path]) -> None:
    archive = SAMPLES / "graph.parquet.tar.gz"
    if not archive.exists() or SAMPLES / "graph.sqlite" not in ingested:
        pytest.skip("sample trace not present")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    db = tmp_path / "parquet.db"
    traceview.ingest([tmp_path / "graph.parquet"], db)
    tables = {
        "gpu_activity": "kind, device_id, stream_id, start_ns, end_ns, name, short_name, pid, correlation_id, "
        "launch_id, graph_node_id, grid, block, bytes",
        "launches": "launch_id, pid, tid, start_ns, end_ns, name, api, correlation_id",
        "cpu_ranges": "range_id, pid, tid, start_ns, end_ns, closed, name, kind, domain, depth, parent_id",
        "threads": "pid, tid, process_name, thread_name",
        "ranks": "rank, pid, hostname, device_id, device_name",
    }
    with traceview.connect(db) as parquet, traceview.connect(ingested[SAMPLES / "graph.sqlite"]) as sqlite:
        for table, columns in tables.items():
            query = f"SELECT {columns} FROM {table} ORDER BY ALL"
            assert parquet.execute(query).fetchall() == sqlite.execute(query).fetchall(), table


def test_two_exports_as_one_run_line_up_on_the_first_clock(tmp_path: Path) -> None:
    """Several files (one per node) make one run: ranks continue, times move by the difference of the anchors."""
    after = NSYS_DATA / "nsysai_mfu_2gpu_after.sqlite"
    traceview.ingest([TWO_GPU, after], tmp_path / "both.db")
    traceview.ingest([after], tmp_path / "after.db")
    with traceview.connect(tmp_path / "both.db") as both, traceview.connect(tmp_path / "after.db") as alone:
        assert both.execute("SELECT rank, pid FROM ranks ORDER BY rank").fetchall() == [
            (0, 144),
            (1, 145),
            (2, 148),
            (3, 149),
        ]
        anchor_before = both.execute("SELECT clock_anchor_ns FROM runs").fetchall()[0][0]
        anchor_after, start_after = alone.execute("SELECT clock_anchor_ns, trace_start_ns FROM runs").fetchall()[0]
        moved = both.execute("SELECT min(start_ns) FROM gpu_activity WHERE rank >= 2").fetchall()[0][0]
        own = alone.execute("SELECT min(start_ns) FROM gpu_activity").fetchall()[0][0]
        assert moved == own + anchor_after - anchor_before
        linked = "SELECT count(*) FROM gpu_activity WHERE launch_id IS NOT NULL AND rank >= 2"
        assert both.execute(linked).fetchall() == alone.execute(linked.replace(" AND rank >= 2", "")).fetchall()
        assert start_after is not None
