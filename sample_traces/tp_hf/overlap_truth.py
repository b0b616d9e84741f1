"""Per rank, step and layer: communication, computation, their overlap and the exposed communication, counted from
the raw traces with the standard library only. Nothing here imports traceview: these figures check it.

Sources: a folder of per-rank Kineto traces (`rank-R.pt.trace.json.gz`; the rank from `distributedInfo`, else the
file's place in name order), one Kineto file, or an nsys SQLite export (`.sqlite`, `.sqlite.xz`) holding every rank's
process (one rank per (GPU, process), in order of GPU then process id).

- Kernels: Kineto `cat: kernel` events; nsys `CUPTI_ACTIVITY_KIND_KERNEL` rows. Times in integer ns: Kineto's
  microseconds are read as decimals (json `parse_float=Decimal`), never as floats.
- Comm kernels: NCCL/RCCL kernels and collective kernels by name (`COMM`); every other kernel is compute.
- Step and layer of a kernel: the innermost step range (`decode_step_N`, `prefill_step_N`, `ProfilerStep#N`, ...) and
  `model.layers.N` range that contains its launch call on the launching thread (truth.py's patterns; correlation ids
  and threads are kept per process, since an nsys export holds several). A kernel replayed from a CUDA graph takes the
  layer of its capture: in Kineto the i-th kernel of a replay that of the i-th launch made during the capture (a
  launch whose correlation ran nothing), in nsys that of the thread and time its graph node was first created.
- A bare trace (`*_bare*`) takes its twin's labels (`*_twin*`) position by position, rank by rank, in launch order
  (truth.transfer: the same kernel names in the same order).

Per (rank, step, layer), over the kernels labelled with it: comm = length of the union of the comm kernels'
[start, end) intervals, compute = the same for the compute kernels, overlap = length of the intersection of the two
unions, exposed = comm - overlap.

`python overlap_truth.py SOURCE...` prints one JSON line per layer instance.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sqlite3
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "corpus"))
import truth  # ../corpus/truth.py: range patterns, Lanes, the bare <- twin transfer, .sqlite.xz

COMM = re.compile(
    r"(?i)nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|multimem|nvshmem"
)
Interval = tuple[int, int]


@dataclass(frozen=True)
class Kernel:
    """One kernel: its rank, name, [start, end) in ns, the correlation id of its launch (a graph replay's kernels
    share one), and the step and layer its launch was made in."""

    rank: int
    name: str
    start: int
    end: int
    launch: int
    step: int | None
    layer: int | None

    def launch_order(self) -> tuple[int, int]:
        """Its place in the order the process launched its kernels (within a graph replay, GPU start order)."""
        return self.launch, self.start


@dataclass(frozen=True)
class LayerFigures:
    """One layer instance: its kernels and the ns of comm, compute, their overlap and the exposed comm."""

    rank: int
    step: int
    layer: int
    kernels: int
    comm_ns: int
    compute_ns: int
    overlap_ns: int
    exposed_comm_ns: int


# --- interval arithmetic ------------------------------------------------------------------------------------------


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Disjoint, sorted intervals covering exactly the given ones."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(disjoint: list[Interval]) -> int:
    return sum(end - start for start, end in disjoint)


def intersection_length(a: list[Interval], b: list[Interval]) -> int:
    """Length of the intersection of two sorted lists of disjoint intervals (one walk over both)."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return total


def layer_figures(kernels: Iterable[Kernel]) -> list[LayerFigures]:
    """The figures of every layer instance (kernels outside a step or a layer count nowhere)."""
    groups: dict[tuple[int, int, int], list[Kernel]] = {}
    for k in kernels:
        if k.step is not None and k.layer is not None:
            groups.setdefault((k.rank, k.step, k.layer), []).append(k)
    rows = []
    for (rank, step, layer), members in sorted(groups.items()):
        comm = union((k.start, k.end) for k in members if COMM.search(k.name))
        compute = union((k.start, k.end) for k in members if not COMM.search(k.name))
        overlap = intersection_length(comm, compute)
        rows.append(
            LayerFigures(
                rank, step, layer, len(members), length(comm), length(compute), overlap, length(comm) - overlap
            )
        )
    return rows


# --- labels -------------------------------------------------------------------------------------------------------


def label(lanes: truth.Lanes, thread: object, t: object) -> tuple[int | None, int | None]:
    """(step, layer) of a call made on `thread` at time `t`: the innermost ranges of each kind around it."""
    return lanes.innermost(thread, t, truth.STEP), lanes.innermost(thread, t, truth.LAYER)


# --- Kineto -------------------------------------------------------------------------------------------------------


def ns(microseconds: Decimal) -> int:
    """Kineto's microseconds (3 decimals) as integer ns, exactly."""
    return int((microseconds * 1000).to_integral_value())


def kineto_document(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh, parse_float=Decimal)
    return data if isinstance(data, dict) else {"traceEvents": data}


def correlation_of(event: dict) -> int:
    return event.get("args", {}).get("correlation", 0)


def kineto_kernels(path: Path, fallback_rank: int = 0) -> list[Kernel]:
    """The kernels of one rank's Kineto trace, in GPU start order, labelled by the annotations in the same file; the
    rank from `distributedInfo`, else `fallback_rank`."""
    document = kineto_document(path)
    rank = int((document.get("distributedInfo") or {}).get("rank", fallback_rank))
    events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    calls = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    lanes = truth.Lanes()
    for e in events:
        if e.get("cat") in ("user_annotation", "python_function"):
            lanes.add((e["pid"], e["tid"]), truth.Range(e["name"], e["ts"], e["ts"] + e["dur"]))
    gpu = sorted(
        (e for e in events if e.get("cat") == "kernel"),
        key=lambda e: (e["ts"], e.get("args", {}).get("correlation", 0)),
    )
    ran = {correlation_of(e) for e in gpu}
    captured = [  # the layer of each launch made during a graph capture (its correlation ran no kernel)
        lanes.innermost((c["pid"], c["tid"]), c["ts"], truth.LAYER)
        for c in sorted(calls.values(), key=lambda c: c["ts"])
        if truth.LAUNCH.search(c["name"]) and c["args"]["correlation"] not in ran
    ]
    replayed: dict[int, int] = {}  # graph launch correlation -> kernels of its replay seen so far
    kernels = []
    for e in gpu:
        correlation = correlation_of(e)
        call = calls.get(correlation)
        step = layer = None
        if call is not None:
            step, layer = label(lanes, (call["pid"], call["tid"]), call["ts"])
            if "GraphLaunch" in call["name"]:
                position = replayed.get(correlation, 0)
                replayed[correlation] = position + 1
                layer = captured[position] if position < len(captured) else None
        kernels.append(Kernel(rank, e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), correlation, step, layer))
    return kernels


def kineto_folder_kernels(folder: Path) -> list[Kernel]:
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [k for i, f in enumerate(files) for k in kineto_kernels(f, i)]


# --- nsys SQLite --------------------------------------------------------------------------------------------------


def pid_of(global_id: int) -> int:
    """The process id inside an nsys globalTid / globalPid."""
    return (global_id >> 24) & 0xFFFFFF


def nsys_kernels(path: Path, workdir: Path | None = None) -> list[Kernel]:
    """Every kernel of an nsys export (all its processes), in GPU start order, labelled by its NVTX ranges."""
    con = sqlite3.connect(f"file:{truth.plain(path, workdir)}?mode=ro", uri=True)
    strings = dict(con.execute("SELECT id, value FROM StringIds").fetchall())
    lanes = truth.Lanes()
    nvtx = truth._rows(
        con,
        "NVTX_EVENTS",
        "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NOT NULL",
    )
    for start, end, text, text_id, tid in nvtx:
        lanes.add(tid, truth.Range(text if text is not None else strings.get(text_id, ""), start, end))
    calls = {
        (pid_of(tid), correlation): (start, tid)
        for correlation, start, tid in con.execute(
            "SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        ).fetchall()
    }
    nodes = graph_node_origins(con)
    rows = con.execute(
        "SELECT globalPid, deviceId, demangledName, start, end, correlationId, graphNodeId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, correlationId"
    ).fetchall()
    ranks = {place: rank for rank, place in enumerate(sorted({(device, pid_of(gpid)) for gpid, device, *_ in rows}))}
    kernels = []
    for gpid, device, name_id, start, end, correlation, node in rows:
        step = layer = None
        if (pid_of(gpid), correlation) in calls:
            t, tid = calls[(pid_of(gpid), correlation)]
            step, layer = label(lanes, tid, t)
        if node is not None and (pid_of(gpid), node) in nodes:
            created, tid = nodes[(pid_of(gpid), node)]
            layer = lanes.innermost(tid, created, truth.LAYER)
        rank = ranks[(device, pid_of(gpid))]
        kernels.append(Kernel(rank, strings.get(name_id, ""), start, end, correlation or 0, step, layer))
    con.close()
    return kernels


def graph_node_origins(con: sqlite3.Connection) -> dict[tuple[int, int], tuple[int, int]]:
    """(process, graph node id) -> (time, thread) of the creation of the node it was first captured as: an
    instantiated graph's node has a creation row naming the captured node it was cloned from."""
    rows = truth._rows(
        con,
        "CUDA_GRAPH_NODE_EVENTS",
        "SELECT globalTid, graphNodeId, originalGraphNodeId, start FROM CUDA_GRAPH_NODE_EVENTS ORDER BY start",
    )
    created: dict[tuple[int, int], tuple[int, int]] = {}  # (process, node) -> (time, thread) of its first row
    cloned_from: dict[tuple[int, int], tuple[int, int]] = {}  # (process, node) -> (process, node it was cloned from)
    for tid, node, original, start in rows:  # a node's first row may not name its original yet, a later one does
        key = (pid_of(tid), node)
        created.setdefault(key, (start, tid))
        if original is not None:
            cloned_from.setdefault(key, (key[0], original))

    def origin(key: tuple[int, int]) -> tuple[int, int]:
        seen = {key}
        while cloned_from.get(key) in created and cloned_from[key] not in seen:
            key = cloned_from[key]
            seen.add(key)
        return created[key]

    return {key: origin(key) for key in created}


# --- sources ------------------------------------------------------------------------------------------------------


def source_kernels(source: Path, workdir: Path | None = None) -> list[Kernel]:
    if source.is_dir():
        return kineto_folder_kernels(source)
    if ".sqlite" in source.name:
        return nsys_kernels(source, workdir)
    return kineto_kernels(source)


def twin_of(bare: Path) -> Path:
    """The annotated twin of a bare trace: `_bare` -> `_twin` in its name, an nsys export compressed or not."""
    twin = bare.with_name(bare.name.replace("_bare", "_twin"))
    plain = twin.with_suffix("") if twin.suffix == ".xz" else twin
    for candidate in (twin, plain, plain.with_name(plain.name + ".xz")):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{bare}: no annotated twin {twin.name} beside it")


def with_twin_labels(bare: list[Kernel], twin: list[Kernel]) -> list[Kernel]:
    """The bare kernels, each with the step and layer of the twin's kernel at its place on the same rank, in launch
    order (GPU start order can differ between two runs where a collective on its own stream races the compute)."""
    out = []
    for rank in sorted({k.rank for k in bare}):
        mine = sorted((k for k in bare if k.rank == rank), key=Kernel.launch_order)
        theirs = sorted((k for k in twin if k.rank == rank), key=Kernel.launch_order)
        labels = truth.transfer(
            [truth.Kernel(k.name, k.start) for k in mine],
            [truth.Kernel(k.name, k.start, k.step, k.layer) for k in theirs],
        )
        out += [replace(k, step=t.step, layer=t.layer) for k, t in zip(mine, labels, strict=True)]
    return out


def labelled_kernels(source: Path, workdir: Path | None = None) -> list[Kernel]:
    """The kernels of a source with their true labels: its own annotations, or for a bare trace its twin's."""
    kernels = source_kernels(source, workdir)
    if "_bare" in source.name:
        kernels = with_twin_labels(kernels, source_kernels(twin_of(source), workdir))
    return kernels


def step_order(figures: Iterable[LayerFigures]) -> dict[tuple[int, int], int]:
    """(rank, step number) -> the step's place among that rank's steps (0, 1, ...)."""
    per_rank: dict[int, list[int]] = {}
    for f in figures:
        steps = per_rank.setdefault(f.rank, [])
        if f.step not in steps:
            bisect.insort(steps, f.step)
    return {(rank, step): i for rank, steps in per_rank.items() for i, step in enumerate(steps)}


def main() -> None:
    for arg in sys.argv[1:]:
        for row in layer_figures(labelled_kernels(Path(arg))):
            print(json.dumps({"source": arg, **row.__dict__}))


if __name__ == "__main__":
    main()
