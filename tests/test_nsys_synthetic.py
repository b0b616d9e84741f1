"""Nsight Systems ingest on the smallest exports that show one behaviour each, built with sqlite3.

The builder writes the real table and column names of nsys exports (only the columns traceview reads), in the
layout of a given export schema: 3.0 (nsys 2022.4: EXPORT_META_DATA, node events in CUDA_GRAPH_EVENTS, time from
the session start) or 3.25 (nsys 2026.2: META_DATA_EXPORT, CUDA_GRAPH_NODE_EVENTS, the target's clock).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import traceview

PUSH_POP, START_END, MARK, DOMAIN_CREATE = 59, 60, 34, 75
RUNTIME_CLASS, DRIVER_CLASS = 0, 1


def gtid(pid: int, tid: int) -> int:
    """nsys's serialized thread id: pid in bits 24-47, tid in bits 0-23 (and a host id above)."""
    return (1 << 48) | (pid << 24) | tid


@dataclass
class Export:
    """Rows of a tiny nsys export; `write` lays them out as export schema `schema` (3.0 or 3.25)."""

    schema: str = "3.25.0"
    strings: dict[str, int] = field(default_factory=dict)
    kernels: list[tuple[Any, ...]] = field(default_factory=list)
    memcpys: list[tuple[Any, ...]] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    nvtx: list[tuple[Any, ...]] = field(default_factory=list)
    graph_nodes: list[tuple[Any, ...]] = field(default_factory=list)
    graph_replays: list[tuple[Any, ...]] = field(default_factory=list)
    gpus: list[tuple[Any, ...]] = field(default_factory=list)
    session: tuple[int, int] = (1_700_000_000_000_000_000, 5_000_000_000)  # utcEpochNs, systemClockNs
    session_end: int = 9_000_000_000
    system_clock: bool = True  # TARGET_INFO_SESSION_START_TIME.systemClockNs (from 2026 on; never in 3.0)

    @property
    def old(self) -> bool:
        return self.schema.startswith("3.0")

    def sid(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 1)

    def kernel(self, pid: int, device: int, corr: int, start: int, end: int, name: str = "k", node: int | None = None):
        self.kernels.append((start, end, device, 7, corr, gtid(pid, 0), self.sid(name), self.sid(name), node))

    def memcpy(self, pid: int, device: int, corr: int, start: int, end: int, kind: int, src: int, dst: int):
        self.memcpys.append((start, end, device, 7, corr, gtid(pid, 0), 64, kind, src, dst))

    def call(self, pid: int, tid: int, corr: int, start: int, end: int, name: str, cls: int = RUNTIME_CLASS):
        self.calls.append((start, end, cls, gtid(pid, tid), corr, self.sid(name)))

    def range(self, pid: int, tid: int, start: int, end: int | None, text: str | None = None, **kw: Any):
        event_type = kw.get("event_type", PUSH_POP)
        text_id = self.sid(kw["registered"]) if "registered" in kw else None
        self.nvtx.append((start, end, event_type, text, gtid(pid, tid), text_id, kw.get("domain", 0)))

    def write(self, path: Path) -> Path:
        con = sqlite3.connect(path)
        meta = "EXPORT_META_DATA" if self.old else "META_DATA_EXPORT"
        clock = ", systemClockNs INTEGER" if self.system_clock and not self.old else ""
        node_table = "CUDA_GRAPH_EVENTS" if self.old else "CUDA_GRAPH_NODE_EVENTS"
        con.executescript(
            f"""
            CREATE TABLE {meta} (name TEXT NOT NULL, value TEXT);
            CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT{clock});
            CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, stopTime INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
                streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,
                graphNodeId INTEGER, gridX INTEGER DEFAULT 1, gridY INTEGER DEFAULT 2, gridZ INTEGER DEFAULT 3,
                blockX INTEGER DEFAULT 128, blockY INTEGER DEFAULT 1, blockZ INTEGER DEFAULT 1);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
                streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER,
                srcKind INTEGER, dstKind INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
                eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL);
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,
                globalTid INTEGER, textId INTEGER, domainId INTEGER);
            CREATE TABLE {node_table} (start INTEGER NOT NULL, end INTEGER NOT NULL, globalTid INTEGER,
                nameId INTEGER NOT NULL, graphNodeId INTEGER NOT NULL, originalGraphNodeId INTEGER);
            """
        )
        if not self.old:  # 3.x: whole graphs in CUDA_GRAPH_EVENTS, whole-graph replays in GRAPH_TRACE
            con.executescript(
                """
                CREATE TABLE CUDA_GRAPH_EVENTS (start INTEGER, end INTEGER, globalTid INTEGER, nameId INTEGER,
                    graphId INTEGER, originalGraphId INTEGER, graphExecId INTEGER);
                CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, deviceId INTEGER,
                    streamId INTEGER, correlationId INTEGER, globalPid INTEGER, graphId INTEGER);
                CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT);
                CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER);
                """
            )
            con.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?, ?)", [(g, n) for g, n, _ in self.gpus])
            con.executemany("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, 0)", [(g, c) for g, _, c in self.gpus])
            con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?,?,?,?,?,?,?)", self.graph_replays)
        version = "2022.4.2.1" if self.old else "2026.2.1.210"
        con.executemany(
            f"INSERT INTO {meta} VALUES (?, ?)",
            [("EXPORT_PRODUCT_VERSION", version), ("EXPORT_SCHEMA_VERSION", self.schema)],
        )
        utc, system = self.session
        session = (utc, "t", "t", system) if self.system_clock and not self.old else (utc, "t", "t")
        con.execute(f"INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES ({', '.join('?' * len(session))})", session)
        start = 0 if self.old else system
        con.execute(
            "INSERT INTO ANALYSIS_DETAILS VALUES (1, ?, ?, ?)", (self.session_end - start, start, self.session_end)
        )
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        kernel_columns = (
            "start, end, deviceId, streamId, correlationId, globalPid, demangledName, shortName, graphNodeId"
        )
        con.executemany(
            f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({kernel_columns}) VALUES (?,?,?,?,?,?,?,?,?)", self.kernels
        )
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?)", self.memcpys)
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)", self.calls)
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?)", self.nvtx)
        con.executemany(f"INSERT INTO {node_table} VALUES (?,?,?,?,?,?)", self.graph_nodes)
        con.commit()
        con.close()
        return path


def ingest(export: Export, tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "run.db"
    traceview.ingest([export.write(tmp_path / "export.sqlite")], db)
    return db


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with traceview.connect(db) as con:
        return con.execute(sql).fetchall()


def stats(db: Path) -> dict[str, float]:
    return dict(query(db, "SELECT name, value FROM ingest_stats WHERE rank IS NULL"))


def test_correlation_ids_repeat_across_processes_and_link_within_their_own(tmp_path: Path) -> None:
    """Both processes number their calls 1, 2, 3: each kernel links to the call of its own process.

    pid 10 calls:  1 ─ 2 ─ 3        kernels on GPU 0: 1 2 3
    pid 20 calls:  1 ─ 2            kernels on GPU 1: 1 2 3  (3 was launched before the trace: no call)
    """
    e = Export()
    for corr in (1, 2, 3):
        e.call(10, 11, corr, 100 * corr, 100 * corr + 5, "cudaLaunchKernel_v7000")
        e.kernel(10, 0, corr, 100 * corr + 10, 100 * corr + 50)
        e.kernel(20, 1, corr, 100 * corr + 20, 100 * corr + 60)
    for corr in (1, 2):
        e.call(20, 21, corr, 100 * corr + 1, 100 * corr + 6, "cuLaunchKernelEx", DRIVER_CLASS)
    db = ingest(e, tmp_path)
    links = query(
        db,
        """SELECT g.pid, g.correlation_id, l.pid, l.name, l.api FROM gpu_activity g
           LEFT JOIN launches l USING (run_id, launch_id) ORDER BY g.pid, g.correlation_id""",
    )
    assert links == [
        (10, 1, 10, "cudaLaunchKernel", "runtime"),
        (10, 2, 10, "cudaLaunchKernel", "runtime"),
        (10, 3, 10, "cudaLaunchKernel", "runtime"),
        (20, 1, 20, "cuLaunchKernelEx", "driver"),
        (20, 2, 20, "cuLaunchKernelEx", "driver"),
        (20, 3, None, None, None),
    ]
    shares = query(db, "SELECT rank, value FROM ingest_stats WHERE name = 'kernels_linked_to_launch_pct'")
    assert sorted(shares) == [(0, 100.0), (1, round(100 * 2 / 3, 3))]


def test_a_process_on_two_gpus_is_two_ranks_and_its_calls_follow_their_work(tmp_path: Path) -> None:
    e = Export(gpus=[(0, "NVIDIA H200", 0), (1, "NVIDIA B200", 1)])
    e.call(10, 11, 1, 100, 105, "cudaLaunchKernel_v7000")
    e.kernel(10, 0, 1, 110, 150)
    e.call(10, 11, 2, 200, 205, "cudaLaunchKernel_v7000")
    e.kernel(10, 1, 2, 210, 250)
    e.call(10, 11, 3, 300, 305, "cudaGetDevice_v3020")
    db = ingest(e, tmp_path)
    assert query(db, "SELECT rank, pid, device_id, device_name FROM ranks ORDER BY rank") == [
        (0, 10, 0, "NVIDIA H200"),
        (1, 10, 1, "NVIDIA B200"),
    ]
    assert query(db, "SELECT correlation_id, rank FROM launches ORDER BY 1") == [(1, 0), (2, 1), (3, 0)]
    assert query(db, "SELECT device_names FROM runs") == [(["NVIDIA B200", "NVIDIA H200"],)]


def test_kernel_fields_and_memcpy_names_like_the_pytorch_profiler(tmp_path: Path) -> None:
    e = Export()
    e.kernel(10, 0, 1, 100, 150, name="void at::native::vectorized_elementwise_kernel<4, float>(int, float)", node=77)
    e.memcpy(10, 0, 2, 200, 210, kind=1, src=0, dst=2)  # nsys memory kinds: 0 pageable, 1 pinned, 2 device
    e.memcpy(10, 0, 3, 300, 310, kind=8, src=2, dst=2)
    db = ingest(e, tmp_path)
    rows = query(db, "SELECT kind, name, short_name, category, grid, block, bytes, graph_node_id FROM gpu_activity")
    assert rows == [
        (
            "kernel",
            "void at::native::vectorized_elementwise_kernel<4, float>(int, float)",
            "vectorized_elementwise_kernel<4, float>",
            "compute",
            [1, 2, 3],
            [128, 1, 1],
            None,
            77,
        ),
        ("memcpy", "Memcpy HtoD (Pageable -> Device)", "HtoD", "memcpy", None, None, 64, None),
        ("memcpy", "Memcpy DtoD (Device -> Device)", "DtoD", "memcpy", None, None, 64, None),
    ]


def test_ranges_never_closed_end_at_the_trace_end(tmp_path: Path) -> None:
    """New exports leave `end` NULL; old ones close them at the session end. Either way: trace end, not closed.

    step:    [──────────────)                 closed
    open:          [──────────────────── ∞    end NULL (3.25) / session end (3.0)
    kernel:              [────────)           the last event: ends at 900
    """
    for schema in ("3.25.0", "3.0.0"):
        e = Export(schema=schema)
        open_end = None if schema == "3.25.0" else e.session_end
        e.range(10, 11, 100, 500, "step")
        e.range(10, 11, 300, open_end, "open")
        e.call(10, 11, 1, 400, 410, "cudaLaunchKernel_v7000")
        e.kernel(10, 0, 1, 600, 900)
        db = ingest(e, tmp_path / schema)
        assert query(db, "SELECT name, end_ns, closed FROM cpu_ranges ORDER BY 1") == [
            ("open", 900, False),
            ("step", 500, True),
        ], schema
        assert stats(db)["nvtx_ranges_never_closed"] == 1


def test_text_after_thousands_of_messageless_ranges_keeps_its_type(tmp_path: Path) -> None:
    """The ADBC driver types a column from its first rows: NVTX text that is NULL (ranges with a payload but no
    message) for the first 5000 rows and set afterwards must still arrive as text."""
    e = Export()
    e.nvtx.append((0, None, DOMAIN_CREATE, "NCCL", gtid(10, 11), None, 3))
    for i in range(5000):
        e.range(10, 11, 10 + 10 * i, 15 + 10 * i, None, domain=3)
    e.range(10, 11, 60_000, 60_010, registered="ncclGroupStart", domain=3)
    e.range(10, 11, 60_000, 60_010, "model.layers.0")
    db = ingest(e, tmp_path)
    assert query(db, "SELECT name, domain, count(*) FROM cpu_ranges GROUP BY ALL ORDER BY ALL") == [
        ("", "NCCL", 5000),
        ("model.layers.0", None, 1),
        ("ncclGroupStart", "NCCL", 1),
    ]


def test_marks_start_end_ranges_and_thread_of_start(tmp_path: Path) -> None:
    e = Export()
    e.range(10, 11, 100, None, "mark", event_type=MARK)
    e.range(10, 12, 200, 300, "async", event_type=START_END)
    db = ingest(e, tmp_path)
    assert query(db, "SELECT name, kind, start_ns, end_ns, closed, tid FROM cpu_ranges ORDER BY 1") == [
        ("async", "nvtx", 200, 300, True, 12),
        ("mark", "mark", 100, 100, True, 11),
    ]


@pytest.mark.parametrize("schema", ["3.0.0", "3.25.0"])
def test_graph_node_events_under_their_old_and_new_table_names(schema: str, tmp_path: Path) -> None:
    e = Export(schema=schema)
    e.sid("cudaGraphLaunch_v10000")
    e.graph_nodes += [(1, 1, gtid(10, 11), e.sid("cudaLaunchKernel"), 5, None), (2, 2, gtid(10, 11), 1, 6, 5)]
    e.call(10, 11, 1, 100, 105, "cudaGraphLaunch_v10000")
    e.kernel(10, 0, 1, 110, 120, node=6)
    e.kernel(10, 0, 1, 121, 130, node=7)
    db = ingest(e, tmp_path)
    assert stats(db)["graph_node_events"] == 2
    assert query(db, "SELECT count(*) FROM gpu_activity WHERE launch_id IS NOT NULL") == [(2,)]
    assert stats(db)["export_schema_version"] == (3.0 if schema == "3.0.0" else 3.25)


def test_whole_graph_replays_warn_that_their_kernels_are_missing(tmp_path: Path) -> None:
    e = Export()
    e.call(10, 11, 1, 100, 105, "cudaGraphLaunch_v10000")
    e.graph_replays.append((110, 500, 0, 7, 1, gtid(10, 0), 1))
    db = ingest(e, tmp_path)
    assert stats(db)["graph_replays_without_kernels"] == 1
    warnings = query(db, "SELECT description FROM ingest_stats WHERE name = 'warning' ORDER BY 1")
    assert any("--cuda-graph-trace=node" in w[0] for w in warnings)


def test_clock_anchor_of_old_and_new_exports(tmp_path: Path) -> None:
    """3.25: times on the target clock, zero = utcEpochNs - systemClockNs. 3.0: times from the session start."""
    for schema, anchor in (("3.25.0", 1_700_000_000_000_000_000 - 5_000_000_000), ("3.0.0", 1_700_000_000_000_000_000)):
        e = Export(schema=schema)
        e.range(10, 11, 100, 200, "r")
        db = ingest(e, tmp_path / schema)
        assert query(db, "SELECT clock_anchor_ns, trace_start_ns FROM runs") == [(anchor, 100)]


def test_text_that_is_not_utf8_is_kept_with_replacement_characters(tmp_path: Path) -> None:
    """SQLite does not check UTF-8, and NVTX takes any C string: one bad message must not fail the export."""
    e = Export()
    e.range(10, 11, 100, 200, "model.layers.0")
    path = e.write(tmp_path / "export.sqlite")
    with sqlite3.connect(path) as con:
        con.execute(
            "INSERT INTO NVTX_EVENTS VALUES (300, 400, 59, CAST(x'6c61796572ff' AS TEXT), ?, NULL, 0)", [gtid(10, 11)]
        )
    traceview.ingest([path], tmp_path / "run.db")
    assert query(tmp_path / "run.db", "SELECT name FROM cpu_ranges ORDER BY start_ns") == [
        ("model.layers.0",),
        ("layer\ufffd",),
    ]


def test_times_that_are_not_timestamps_are_dropped_and_counted(tmp_path: Path) -> None:
    """Text, 1e300 or ±2^63 where a time belongs: the row is dropped (time_out_of_range), the rest is kept."""
    e = Export()
    e.call(10, 11, 1, 100, 105, "cudaLaunchKernel_v7000")
    e.kernel(10, 0, 1, 110, 150)
    e.kernel(10, 0, 2, -(1 << 63), 150)
    e.kernel(10, 0, 3, 200, 1e300)
    e.call(10, 11, 4, "soon", 105, "cudaLaunchKernel_v7000")
    e.range(10, 11, 100, (1 << 63) - 1, "open")
    db = ingest(e, tmp_path)
    counts = stats(db)
    assert (counts["time_out_of_range.gpu_work"], counts["time_out_of_range.api_calls"]) == (2, 1)
    assert query(db, "SELECT correlation_id FROM gpu_activity") == [(1,)]
    assert query(db, "SELECT closed, end_ns FROM cpu_ranges") == [(False, 150)]
    assert query(db, "SELECT trace_end_ns - trace_start_ns FROM runs") == [(50,)]


def stray_values_export() -> Export:
    """20 launches, kernels and ranges; a text or a real where an integer belongs in 4 rows, after the first 4."""
    e = Export()
    for corr in range(1, 21):
        e.call(10, 11, corr, 100 * corr, 100 * corr + 5, "cudaLaunchKernel_v7000")
        e.kernel(10, 0, corr, 100 * corr + 10, 100 * corr + 50)
        e.range(10, 11, 100 * corr, 100 * corr + 60, f"r{corr}")
    e.kernels[12] = (*e.kernels[12][:2], "zero", *e.kernels[12][3:])  # deviceId text: no device
    e.kernels[15] = (e.kernels[15][0], 1650.5, *e.kernels[15][2:])  # end a real: dropped
    e.calls[9] = (*e.calls[9][:4], 2.5, e.calls[9][5])  # correlationId a real: no link
    e.nvtx[17] = (*e.nvtx[17][:2], "push", *e.nvtx[17][3:])  # eventType text: not a range
    return e


@pytest.mark.parametrize("batch_rows", [4, 65536])
def test_stray_values_after_the_first_batch_read_as_those_in_it(
    batch_rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are read from SQLite unchecked; a text or real where an integer belongs fails the driver's stream after
    its first batch (4 rows here), and the read goes on checked from that row: the same database as when the first
    batch holds them (the read is checked from the start)."""
    from traceview.ingest import nsys_export

    monkeypatch.setattr(nsys_export, "BATCH_ROWS", batch_rows)
    db = ingest(stray_values_export(), tmp_path)
    assert stats(db)["time_out_of_range.gpu_work"] == 1
    assert query(db, "SELECT count(*), count(device_id), count(launch_id) FROM gpu_activity") == [(19, 18, 18)]
    assert query(db, "SELECT count(*), count(correlation_id) FROM launches") == [(20, 19)]
    assert query(db, "SELECT count(*) FROM cpu_ranges") == [(19,)]


def test_target_clock_without_system_clock_column_is_told_by_the_data(tmp_path: Path) -> None:
    """An export without systemClockNs whose events lie past the session's duration is on the target clock: its
    zero is utcEpochNs - ANALYSIS_DETAILS.startTime, and ranges that end before stopTime are closed."""
    e = Export(schema="3.12.0", system_clock=False)
    e.range(10, 11, 6_000_000_000, 6_500_000_000, "step")
    e.range(10, 11, 6_100_000_000, None, "open")
    db = ingest(e, tmp_path)
    assert query(db, "SELECT clock_anchor_ns FROM runs") == [(1_700_000_000_000_000_000 - 5_000_000_000,)]
    assert query(db, "SELECT name, closed FROM cpu_ranges ORDER BY 1") == [("open", False), ("step", True)]


def test_graph_nodes_lead_replayed_kernels_to_the_layer_ranges_of_their_capture(tmp_path: Path) -> None:
    """--cuda-graph-trace=node: kernels carry the id of an instantiated node, cloned from a node created while
    capturing, inside model.layers.N. graph_nodes keeps one row per node, and segmentation uses it.

    capture  model.layers.0 [ n1  n2 ]   model.layers.1 [ n3  n4 ]    instantiate: 101..104 cloned from 1..4
    replays  cudaGraphLaunch -> kernels 101 102 103 104   (twice)
    """
    e = Export()
    e.range(10, 11, 1000, 1400, "model.layers.0")
    e.range(10, 11, 1500, 1900, "model.layers.1")
    creation, instantiate = e.sid("cudaLaunchKernel_v7000"), e.sid("cudaGraphInstantiate_v12000")
    for node, at in ((1, 1100), (2, 1200), (3, 1600), (4, 1700)):
        e.graph_nodes.append((at, at, gtid(10, 11), creation, node, None))
        e.graph_nodes.append((2100, 2100, gtid(10, 11), instantiate, 100 + node, None))
        e.graph_nodes.append((2101, 2101, gtid(10, 11), instantiate, 100 + node, node))
    for step, (corr, t) in enumerate(((50, 3000), (51, 5000))):
        e.range(10, 11, t - 10, t + 900, f"decode_step_{step}")
        e.call(10, 11, corr, t, t + 5, "cudaGraphLaunch_v10000")
        for i, node in enumerate((101, 102, 103, 104)):
            e.kernel(10, 0, corr, t + 100 + 100 * i, t + 150 + 100 * i, name=f"k{node}", node=node)
    db = ingest(e, tmp_path)
    assert query(db, "SELECT graph_node_id, original_graph_node_id, created_ns, name FROM graph_nodes ORDER BY 1") == [
        (1, None, 1100, "cudaLaunchKernel"),
        (2, None, 1200, "cudaLaunchKernel"),
        (3, None, 1600, "cudaLaunchKernel"),
        (4, None, 1700, "cudaLaunchKernel"),
        (101, 1, 2100, "cudaGraphInstantiate"),
        (102, 2, 2100, "cudaGraphInstantiate"),
        (103, 3, 2100, "cudaGraphInstantiate"),
        (104, 4, 2100, "cudaGraphInstantiate"),
    ]
    layers = "SELECT graph_node_id, list(DISTINCT layer) FROM gpu_activity GROUP BY 1 ORDER BY 1"
    assert query(db, layers) == [(101, [0]), (102, [0]), (103, [1]), (104, [1])]
