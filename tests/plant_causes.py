"""Planted causes: from a real PyTorch profiler (Kineto) trace, a pair of traces A and B whose layers differ by known
amounts, to prove that `traceview diff`'s why table recovers each of them.

    python tests/plant_causes.py sample_traces/eager.pt.trace.json.gz A.json B.json   # prints the truth as JSON

In every step, B differs from A only in these layers (PLAN):
- kernels_removed: one kernel (its name unique in the layer) is gone and the timeline closed up behind it;
- same_kernels: one kernel runs `slow_ns` longer, everything after it later by as much;
- idle_gaps: the gap before one kernel is `gap_ns` wider;
- exposed_comm: an all-reduce of `comm_ns` that in A runs on a side stream under a GEMM (hidden) runs in B on the
  GEMM's stream right after it (exposed);
- kernels_added: a new kernel of `added_ns` runs after one kernel.
Every other cause of these layers, and every cause of the other layers, is 0. Times are kept as exact integer ns
(read as Decimal, written with three decimals of µs, as Kineto writes them).
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

Event = dict[str, Any]
GPU_SIDE = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
LAUNCHES = {"cuda_runtime", "cuda_driver"}
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SIDE_STREAM = 99


@dataclass(frozen=True)
class Plan:
    """Which layer gets which change, and by how much (ns)."""

    removed_layer: int = 1
    slowed_layer: int = 2
    slow_ns: int = 5_000
    gap_layer: int = 3
    gap_ns: int = 7_000
    comm_layer: int = 5
    comm_ns: int = 3_000
    added_layer: int = 6
    added_ns: int = 2_000


PLAN = Plan()
Truth = dict[str, dict[int, dict[int, int]]]  # cause -> layer -> step -> ns (B - A)


def _ns(value: Any) -> int:
    return int(Decimal(str(value)) * 1000)


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        trace = json.load(f, parse_float=Decimal)
    for event in trace["traceEvents"]:
        if "ts" in event:
            event["ts"] = _ns(event["ts"])
        if "dur" in event:
            event["dur"] = _ns(event["dur"])
    return trace


def save(trace: dict[str, Any], path: Path) -> None:
    """Write with ts and dur as µs with three decimals (exact ns), the way Kineto writes them."""
    marked = copy.deepcopy(trace)
    for event in marked["traceEvents"]:
        for key in ("ts", "dur"):
            if key in event:
                event[key] = f"@{event[key] // 1000}.{event[key] % 1000:03d}@"
    text = re.sub(r'"@([0-9.]+)@"', r"\1", json.dumps(marked, default=str))
    path.write_text(text)


def layer_kernels(trace: dict[str, Any]) -> dict[tuple[int, int], list[Event]]:
    """(step, layer) -> its kernels in time order: a kernel belongs where its launch call lies
    (ProfilerStep#N and model.layers.N ranges on the launching thread)."""
    events = trace["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    steps = [(int(e["name"].split("#")[1]), e) for e in ranges if e["name"].startswith("ProfilerStep#")]
    layers = [(int(m.group(1)), e) for e in ranges if (m := re.fullmatch(r"model\.layers\.(\d+)", e["name"]))]
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") in LAUNCHES and "correlation" in e["args"]}
    found: dict[tuple[int, int], list[Event]] = defaultdict(list)
    for kernel in (e for e in events if e.get("cat") == "kernel"):
        call = launch.get(kernel["args"].get("correlation"))
        if call is None:
            continue
        step = next((n for n, r in steps if _inside(call, r)), None)
        layer = next((n for n, r in layers if _inside(call, r)), None)
        if step is not None and layer is not None:
            found[(step, layer)].append(kernel)
    return {key: sorted(kernels, key=lambda k: k["ts"]) for key, kernels in found.items()}


def _inside(event: Event, outer: Event) -> bool:
    return event["tid"] == outer["tid"] and outer["ts"] <= event["ts"] <= outer["ts"] + outer["dur"]


def shift(trace: dict[str, Any], after_ns: int, by_ns: int, inclusive: bool = False) -> None:
    """Move every GPU-side event that starts after `after_ns` (at or after, with `inclusive`) by `by_ns`; a GPU
    range that spans it grows."""
    for event in trace["traceEvents"]:
        gpu = event.get("cat") in GPU_SIDE or (event.get("cat") == "ac2g" and event.get("ph") == "f")
        if not gpu or "ts" not in event:
            continue
        if event["ts"] > after_ns or (inclusive and event["ts"] == after_ns):
            event["ts"] += by_ns
        elif "dur" in event and event["ts"] < after_ns < event["ts"] + event["dur"]:
            event["dur"] += by_ns


def _new_kernel(trace: dict[str, Any], like: Event, name: str, ts: int, dur: int, stream: int) -> None:
    """A kernel launched from a copy of `like`'s launch call (a new correlation id), at `ts` on `stream`."""
    events = trace["traceEvents"]
    correlation = max(e["args"]["correlation"] for e in events if "correlation" in e.get("args", {})) + 1
    call = next(
        e for e in events if e.get("cat") in LAUNCHES and e["args"].get("correlation") == like["args"]["correlation"]
    )
    events.append({**call, "args": {**call["args"], "correlation": correlation}})
    args = {**like["args"], "correlation": correlation, "stream": stream}
    events.append({**like, "name": name, "ts": ts, "dur": dur, "tid": stream, "args": args})


def _unique(kernels: list[Event], start: int) -> Event:
    names = [k["name"] for k in kernels]
    return next(k for k in kernels[start:] if names.count(k["name"]) == 1)


def plant(source: Path, out_a: Path, out_b: Path, plan: Plan = PLAN) -> Truth:
    """Write A and B from the trace `source`; return what B - A is, per cause, layer and step (ns)."""
    trace_a = load(source)
    found = layer_kernels(trace_a)
    gemms = {key: next(k for k in kernels[3:] if k["dur"] >= 2 * plan.comm_ns) for key, kernels in found.items()}
    for (_, layer), gemm in gemms.items():  # A: the all-reduce hidden under a GEMM, on a side stream
        if layer == plan.comm_layer:
            _new_kernel(trace_a, gemm, ALL_REDUCE, gemm["ts"], plan.comm_ns, SIDE_STREAM)
    trace_b = copy.deepcopy(trace_a)
    found = layer_kernels(trace_b)
    truth: Truth = defaultdict(lambda: defaultdict(dict))
    edits = []  # (time, edit): applied latest first, so that a shift never moves an anchor still to come
    for (step, layer), kernels in found.items():
        compute = [k for k in kernels if k["name"] != ALL_REDUCE]
        if layer == plan.removed_layer:
            gone = _unique(compute, 5)
            truth["kernels_removed"][layer][step] = -gone["dur"]
            edits.append((gone["ts"], ("remove", gone)))
        elif layer == plan.slowed_layer:
            truth["same_kernels"][layer][step] = plan.slow_ns
            edits.append((compute[8]["ts"], ("slow", compute[8])))
        elif layer == plan.gap_layer:
            truth["idle_gaps"][layer][step] = plan.gap_ns
            edits.append((compute[10]["ts"], ("gap", compute[10])))
        elif layer == plan.comm_layer:
            truth["exposed_comm"][layer][step] = plan.comm_ns
            comm = next(k for k in kernels if k["name"] == ALL_REDUCE)
            edits.append((comm["ts"], ("comm", comm)))
        elif layer == plan.added_layer:
            truth["kernels_added"][layer][step] = plan.added_ns
            edits.append((compute[12]["ts"], ("add", compute[12])))
    for _, (what, kernel) in sorted(edits, key=lambda e: -e[0]):
        _edit(trace_b, what, kernel, plan)
    save(trace_a, out_a)
    save(trace_b, out_b)
    return {cause: dict(layers) for cause, layers in truth.items()}


def _edit(trace: dict[str, Any], what: str, kernel: Event, plan: Plan) -> None:
    if what == "remove":
        trace["traceEvents"].remove(kernel)
        shift(trace, kernel["ts"], -kernel["dur"])
    elif what == "slow":
        kernel["dur"] += plan.slow_ns
        shift(trace, kernel["ts"], plan.slow_ns)
    elif what == "gap":
        shift(trace, kernel["ts"], plan.gap_ns, inclusive=True)
    elif what == "comm":  # off the side stream, onto the compute stream right after the GEMM it ran under
        gemm = max(
            (
                k
                for k in trace["traceEvents"]
                if k.get("cat") == "kernel" and k["ts"] == kernel["ts"] and k is not kernel
            ),
            key=lambda k: k["dur"],
        )
        shift(trace, gemm["ts"], plan.comm_ns)
        kernel.update(
            ts=gemm["ts"] + gemm["dur"], tid=gemm["tid"], args={**kernel["args"], "stream": gemm["args"]["stream"]}
        )
    elif what == "add":
        shift(trace, kernel["ts"], plan.added_ns)
        _new_kernel(
            trace, kernel, "planted_added_kernel", kernel["ts"] + kernel["dur"], plan.added_ns, kernel["args"]["stream"]
        )


if __name__ == "__main__":
    print(json.dumps(plant(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])), indent=1))
