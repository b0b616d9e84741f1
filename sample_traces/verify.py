#!/usr/bin/env python3
"""Check the recorded sample traces with the standard library only.

Usage:  python sample_traces/verify.py [DIR]     (default: this file's folder)

For each Kineto trace (<path>.pt.trace.json.gz): kernel events, step and layer
annotations, and kernels per layer, where a kernel belongs to a layer when its
launch (a cuda_runtime / cuda_driver event with the same args.correlation) lies
inside the layer's user_annotation range on the same thread.  For each SQLite
export (<path>.sqlite): kernels, NVTX ranges, kernels per NVTX layer range
(launch = CUPTI_ACTIVITY_KIND_RUNTIME row with the same correlationId, which
holds driver-API launches such as cuLaunchKernel too), and graphNodeId.
"""

from __future__ import annotations

import bisect
import collections
import gzip
import json
import os
import re
import sqlite3
import sys

PATHS = ("eager", "compiled", "graph")
LAYER = re.compile(r"^model\.layers\.(\d+)$")
STEP_KINETO = re.compile(r"^ProfilerStep#(\d+)$")
STEP_NVTX = re.compile(r"^decode_step_(\d+)$")


def _assign(ranges, t):
    """ranges: sorted list of (start, end, key); return key of the range holding t."""
    i = bisect.bisect_right([r[0] for r in ranges], t) - 1
    if i >= 0 and ranges[i][0] <= t <= ranges[i][1]:
        return ranges[i][2]
    return None


def kineto(path):
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    cats = collections.Counter(e.get("cat") for e in ev)
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    memcpy = [e for e in ev if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    launches = {}
    api = collections.Counter()
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
    for k in kernels:
        le = launches.get(k["args"].get("correlation"))
        api[(le["cat"], le["name"]) if le else ("none", "no launch event")] += 1
    ann = [e for e in ev if e.get("cat") == "user_annotation"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ann if STEP_KINETO.match(e["name"]))
    layers = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ann if LAYER.match(e["name"]))
    per_layer = collections.Counter()
    per_layer_copy = collections.Counter()
    per_step = collections.Counter()
    for lst, counter in ((kernels, per_layer), (memcpy, per_layer_copy)):
        for k in lst:
            le = launches.get(k["args"].get("correlation"))
            if le is None:
                continue
            name = _assign(layers, le["ts"])
            counter[name or "(outside layers)"] += 1
    for k in kernels:
        le = launches.get(k["args"].get("correlation"))
        if le is not None:
            per_step[_assign(steps, le["ts"]) or "(outside steps)"] += 1
    fan = collections.Counter(k["args"].get("correlation") for k in kernels)
    graph_launch = [c for c, le in launches.items() if le["name"] == "cudaGraphLaunch"]
    # layer ranges inside the steps (should be none for graph)
    layers_in_steps = sum(1 for s in layers if _assign(steps, s[0]))
    return dict(
        cats=cats,
        kernels=len(kernels),
        memcpy=len(memcpy),
        api=api,
        steps=[s[2] for s in steps],
        n_layer_ranges=len(layers),
        layers_in_steps=layers_in_steps,
        per_layer=per_layer,
        per_layer_copy=per_layer_copy,
        per_step=per_step,
        graph_launch_fanout=[fan[c] for c in graph_launch],
    )


def nsys(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    q = lambda s, *a: con.execute(s, a).fetchall()  # noqa: E731
    tables = {r[0] for r in q("SELECT name FROM sqlite_master WHERE type='table'")}
    out = dict(kernels=q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0])
    out["memcpy"] = (
        q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0] if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables else 0
    )
    out["graph_node_kernels"] = q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL")[0][0]
    out["distinct_graph_nodes"] = q("SELECT count(DISTINCT graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    nv = q("""SELECT coalesce(n.text, s.value), n.start, n."end", n.globalTid
              FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id
              WHERE n."end" IS NOT NULL""")
    names = collections.Counter(r[0] for r in nv)
    out["nvtx"] = names
    layers = sorted((r[1], r[2], r[0], r[3]) for r in nv if r[0] and LAYER.match(r[0]))
    steps = sorted((r[1], r[2], r[0], r[3]) for r in nv if r[0] and STEP_NVTX.match(r[0]))
    rt = q("""SELECT k.correlationId, r.start, r.globalTid, s.value
              FROM CUPTI_ACTIVITY_KIND_KERNEL k
              JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
              JOIN StringIds s ON s.id = r.nameId""")
    out["api"] = collections.Counter(r[3] for r in rt)
    per_layer, per_step = collections.Counter(), collections.Counter()
    for _, t, _, _ in rt:
        per_layer[_assign([(a, b, n) for a, b, n, _ in layers], t) or "(outside layers)"] += 1
        per_step[_assign([(a, b, n) for a, b, n, _ in steps], t) or "(outside steps)"] += 1
    out["per_layer"], out["per_step"] = per_layer, per_step
    out["fanout"] = collections.Counter(r[0] for r in rt).most_common(1)
    return out


def per_layer_row(counter, n_steps):
    keys = sorted((k for k in counter if LAYER.match(k)), key=lambda k: int(LAYER.match(k).group(1)))
    cells = [f"{k.split('.')[-1]}:{counter[k] / n_steps:g}" for k in keys]
    rest = counter.get("(outside layers)", 0)
    return " ".join(cells) + f" | outside layers: {rest / n_steps:g}"


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for p in PATHS:
        f = os.path.join(d, f"{p}.pt.trace.json.gz")
        if not os.path.exists(f):
            continue
        r = kineto(f)
        n = max(1, len(r["steps"]))
        print(f"== Kineto {p}: {r['kernels']} kernels, {r['memcpy']} memcpy/memset, steps {r['steps']}")
        print(f"   categories: {dict(r['cats'])}")
        print(f"   kernels by launch API: {dict(r['api'])}")
        print(f"   layer ranges: {r['n_layer_ranges']} ({r['layers_in_steps']} inside steps)")
        print(f"   kernels per step: {dict(sorted(r['per_step'].items()))}")
        print(f"   kernels per layer per step: {per_layer_row(r['per_layer'], n)}")
        print(f"   memcpy per layer per step: {per_layer_row(r['per_layer_copy'], n)}")
        if r["graph_launch_fanout"]:
            print(f"   cudaGraphLaunch correlation ids -> kernels: {r['graph_launch_fanout']}")
    for p in PATHS:
        f = os.path.join(d, f"{p}.sqlite")
        if not os.path.exists(f):
            continue
        r = nsys(f)
        steps = sorted(k for k in r["nvtx"] if STEP_NVTX.match(k))
        n = max(1, len(steps))
        print(
            f"== nsys {p}: {r['kernels']} kernels, {r['memcpy']} memcpy, "
            f"{r['graph_node_kernels']} with graphNodeId ({r['distinct_graph_nodes']} distinct)"
        )
        print(f"   NVTX ranges: {dict(sorted(r['nvtx'].items()))}")
        print(f"   kernels by launch API: {dict(r['api'])}")
        print(f"   kernels per step: {dict(sorted(r['per_step'].items()))}")
        print(f"   kernels per layer per step: {per_layer_row(r['per_layer'], n)}")
        print(f"   largest fan-out of one correlation id: {r['fanout']}")


if __name__ == "__main__":
    main()
