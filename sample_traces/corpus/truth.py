"""The truth for every bare trace of the corpus, from its annotated twin, with the standard library only.

Nothing here imports traceview: the truth must not come from the tool it checks.

For each twin trace every kernel gets (step, layer) from the twin's own annotations:
- step: the innermost step range (`decode_step_N`, `forward_step_N`, `prefill_step_0`) that contains the kernel's
  launch call on the launching thread;
- layer: the innermost `model.layers.N` range that contains the launch call; for a kernel replayed from a CUDA graph
  (one graph launch, many kernels) the layer range that was open when its node was captured: in Kineto the i-th
  kernel of a replay is the i-th kernel launch call made during the capture; in nsys the kernel's graph node (or
  the node it was cloned from) was created on a thread at a time inside a layer range.
The bare trace of the same model, mode and profiler runs the same kernels in the same order (checked: the sequence
of kernel names must be identical), so each bare kernel takes the label of the twin kernel at the same position.

`python truth.py [CORPUS_DIR]` writes truth.json there: per bare trace, per step, the kernel count of every layer and
the kernels outside layers.
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

STEP = re.compile(r"^(?:decode_step|forward_step|prefill_step|spec_step)_(\d+)$|^ProfilerStep#(\d+)$")
LAYER = re.compile(r"^(?:model|draft|mtp)\.layers\.(\d+)$|^nn\.Module: TransformerBlock_(\d+)$")
DRAFT = re.compile(r"^draft_pass_(\d+)$")  # one forward pass of a speculative drafter (sample_traces/spec)
CAPTURE = re.compile(r"^capture(?:_(\w+))?$")  # a CUDA graph capture; its suffix names the graph
REPLAY = re.compile(r"^replay_(\w+)$")  # a replay of the graph captured as capture_<suffix>
LAUNCH = re.compile(r"(?i)launchkernel")  # a kernel's launch call (runtime or driver API)


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel of a trace: its name, GPU start, and the labels the twin gives it."""

    name: str
    start: float
    step: int | None = None
    layer: int | None = None
    draft: int | None = None  # the drafter's forward pass within the step (speculative decoding), else None


@dataclass(frozen=True)
class Range:
    name: str
    start: float
    end: float


class Lanes:
    """Annotation ranges per thread; `innermost(thread, t, pattern)` is the shortest range matching pattern at t."""

    def __init__(self) -> None:
        self.by_thread: dict[object, list[Range]] = {}

    def add(self, thread: object, rng: Range) -> None:
        self.by_thread.setdefault(thread, []).append(rng)

    def innermost(self, thread: object, t: float, pattern: re.Pattern[str]) -> int | None:
        match = self.innermost_match(thread, t, pattern)
        return int(next(g for g in match.groups() if g is not None)) if match else None

    def innermost_match(self, thread: object, t: float, pattern: re.Pattern[str]) -> re.Match[str] | None:
        best: Range | None = None
        for r in self.by_thread.get(thread, ()):
            if (
                r.start <= t < r.end
                and pattern.match(r.name)
                and (best is None or r.end - r.start < best.end - best.start)
            ):
                best = r
        return pattern.match(best.name) if best else None

    def graph(self, thread: object, t: float, pattern: re.Pattern[str]) -> str:
        """The graph a capture or replay range at t names (its suffix; "" for a bare `capture`)."""
        match = self.innermost_match(thread, t, pattern)
        return (match.group(1) or "") if match else ""


# --- Kineto -------------------------------------------------------------------------------------------------------


def kineto_document(path: Path) -> dict | list:
    """A Kineto trace's JSON (.json or .json.gz) as loaded: its header and `traceEvents`, or a bare event list."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def kineto_events(path: Path) -> list[dict]:
    data = kineto_document(path)
    return data["traceEvents"] if isinstance(data, dict) else data


def kineto_kernels(path: Path) -> list[Kernel]:
    """Every kernel of a Kineto trace, in GPU start order, labelled by the annotations in the same file."""
    events = kineto_events(path)
    calls = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    lanes = Lanes()
    for e in events:
        if e.get("cat") in ("user_annotation", "python_function") and e.get("ph") == "X":
            lanes.add((e["pid"], e["tid"]), Range(e["name"], e["ts"], e["ts"] + e["dur"]))
    gpu = sorted(
        (e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"),
        key=lambda e: (e["ts"], e.get("args", {}).get("correlation", 0)),
    )
    captured = _kineto_capture_layers(events, calls, lanes, {e.get("args", {}).get("correlation") for e in gpu})
    replay_position: dict[int, int] = {}
    kernels = []
    for e in gpu:
        call = calls.get(e.get("args", {}).get("correlation"))
        step = layer = draft = None
        if call is not None:
            thread = (call["pid"], call["tid"])
            step = lanes.innermost(thread, call["ts"], STEP)
            layer = lanes.innermost(thread, call["ts"], LAYER)
            draft = lanes.innermost(thread, call["ts"], DRAFT)
            if "GraphLaunch" in call["name"]:
                position = replay_position.get(id(call), 0)
                replay_position[id(call)] = position + 1
                nodes = captured.get(lanes.graph(thread, call["ts"], REPLAY), [])
                layer = nodes[position] if position < len(nodes) else None
        kernels.append(Kernel(e["name"], e["ts"], step, layer, draft))
    return kernels


def _kineto_capture_layers(events: list[dict], calls: dict, lanes: Lanes, ran: set) -> dict[str, list[int | None]]:
    """Per captured graph (the suffix of its capture range), the layer of each kernel launch call made during its
    capture (a launch whose correlation ran nothing), in order. Kernels only: a graph's replay need not show every
    memory set its capture recorded (cuBLAS's split-K GEMMs in float32 record one more per layer than replays run)."""
    orphans = sorted(
        (c for c in calls.values() if LAUNCH.search(c["name"]) and c["args"]["correlation"] not in ran),
        key=lambda c: c["ts"],
    )
    graphs: dict[str, list[int | None]] = {}
    for c in orphans:
        thread = (c["pid"], c["tid"])
        graphs.setdefault(lanes.graph(thread, c["ts"], CAPTURE), []).append(lanes.innermost(thread, c["ts"], LAYER))
    return graphs


# --- nsys SQLite --------------------------------------------------------------------------------------------------


def plain(path: Path, workdir: Path | None = None) -> Path:
    """The file itself, or for an nsys export stored as .sqlite.xz its decompressed copy in `workdir`."""
    if path.suffix != ".xz":
        return path
    out = (workdir or Path(tempfile.mkdtemp())) / path.stem
    out.write_bytes(lzma.decompress(path.read_bytes()))
    return out


def open_sqlite(path: Path) -> sqlite3.Connection:
    """An nsys export (.sqlite or .sqlite.xz)."""
    return sqlite3.connect(plain(path))


def nsys_kernels(path: Path) -> list[Kernel]:
    """Every kernel of an nsys export, in GPU start order, labelled by its NVTX ranges."""
    con = open_sqlite(path)
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    lanes = Lanes()
    for start, end, text, text_id, tid in _rows(
        con,
        "NVTX_EVENTS",
        "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL",
    ):
        lanes.add(tid, Range(text if text is not None else strings.get(text_id, ""), start, end))
    calls = {
        corr: (start, tid)
        for corr, start, tid in con.execute("SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    }
    nodes = _node_origins(con)
    kernels = []
    for name_id, start, corr, node in con.execute(
        "SELECT demangledName, start, correlationId, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"
    ):
        step = layer = draft = None
        if corr in calls:
            t, tid = calls[corr]
            step = lanes.innermost(tid, t, STEP)
            layer = lanes.innermost(tid, t, LAYER)
            draft = lanes.innermost(tid, t, DRAFT)
        if node is not None and node in nodes:
            created, tid = nodes[node]
            layer = lanes.innermost(tid, created, LAYER)
        kernels.append(Kernel(strings.get(name_id, ""), start, step, layer, draft))
    return kernels


def _rows(con: sqlite3.Connection, table: str, sql: str) -> list[tuple]:
    """The rows of `sql`, or none when the export has no `table` (nsys leaves out empty tables)."""
    found = con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchall()
    return con.execute(sql).fetchall() if found[0][0] else []


def _node_origins(con: sqlite3.Connection) -> dict[int, tuple[int, int]]:
    """graph node id -> (creation time, thread) of the node it was first captured as."""
    rows = _rows(
        con,
        "CUDA_GRAPH_NODE_EVENTS",
        "SELECT graphNodeId, originalGraphNodeId, start, globalTid FROM CUDA_GRAPH_NODE_EVENTS",
    )
    first: dict[int, tuple[int | None, int, int]] = {}
    for node, original, start, tid in sorted(rows, key=lambda r: r[2]):
        known = first.get(node)
        # a node of an instantiated graph has one creation row naming the captured node it was cloned from
        first[node] = (known[0] if known and known[0] is not None else original, *(known or (None, start, tid))[1:])

    def origin(node: int) -> tuple[int, int]:
        seen = set()
        while first[node][0] is not None and first[node][0] in first and node not in seen:
            seen.add(node)
            node = first[node][0]
        return first[node][1], first[node][2]

    return {node: origin(node) for node in first}


# --- truth per bare trace -----------------------------------------------------------------------------------------


def kernels_of(path: Path) -> list[Kernel]:
    return nsys_kernels(path) if ".sqlite" in path.name else kineto_kernels(path)


def twin_of(bare: Path) -> Path:
    return bare.with_name(bare.name.replace("_bare", "_twin"))


def transfer(bare: list[Kernel], twin: list[Kernel]) -> list[Kernel]:
    """The twin's labels on the bare trace's kernels, position by position (the runs launch the same kernels).

    Both sequences are compared kernel by kernel (a capture inside the twin's range runs no kernel); any difference is
    an error. Kernels outside every step range of the twin (generate's sampling between forwards) have no step."""
    if len(twin) > len(bare):  # kernels the twin ran while it captured its graph, before its first step
        lead = next((i for i, k in enumerate(twin) if k.step is not None), 0)
        twin = twin[: lead - (len(twin) - len(bare))] + twin[lead:] if len(twin) - len(bare) <= lead else twin
    if [k.name for k in bare] != [k.name for k in twin]:
        raise ValueError(f"bare and twin kernels differ ({len(bare)} vs {len(twin)})")
    return [replace(t, name=b.name, start=b.start) for b, t in zip(bare, twin, strict=True)]


def per_step(kernels: list[Kernel]) -> list[dict]:
    """Per step, in order: its kernels, layer -> kernel count, the kernels outside every layer, and the kernels of
    each forward pass of a speculative drafter (draft_passes; their layers are not the step's layers)."""
    steps: dict[int, dict] = {}
    for k in kernels:
        if k.step is None:
            continue
        row = steps.setdefault(k.step, {"step": k.step, "kernels": 0, "layers": {}, "outside": 0, "draft_passes": {}})
        row["kernels"] += 1
        if k.draft is not None:
            row["draft_passes"][k.draft] = row["draft_passes"].get(k.draft, 0) + 1
        elif k.layer is None:
            row["outside"] += 1
        else:
            row["layers"][k.layer] = row["layers"].get(k.layer, 0) + 1
    out = []
    for step in sorted(steps):
        row = steps[step]
        row["layers"] = [row["layers"][i] for i in sorted(row["layers"])]
        passes = row.pop("draft_passes")
        if passes:
            row["draft_passes"] = [passes[i] for i in sorted(passes)]
        out.append(row)
    return out


def truth(bare: Path) -> list[dict]:
    """The true steps and layers of one bare trace of the corpus."""
    return per_step(transfer(kernels_of(bare), kernels_of(twin_of(bare))))


def one_step(kernels: list[Kernel]) -> list[Kernel]:
    """A trace of one forward pass: every kernel in step 0 (the vLLM prefill trace, whose step range the truth does
    not need)."""
    return [Kernel(k.name, k.start, 0, k.layer) for k in kernels]


def qwen3_norm_truth(path: Path, layers: int = 36) -> list[dict]:
    """SGLang's Qwen3-8B decode (graph replay, no layer ranges), counted from the model's structure: a Qwen3 layer
    runs two RMSNorms over the hidden size (its input norm, then the post-attention norm; aiter's
    `add_rmsnorm_quant_kernel` with 256 threads, the q/k norms use 64), the model one more (the final norm). Layer
    i therefore starts at the (2i)-th hidden-size norm of the forward pass and the last layer ends where the final
    norm (the (2L)-th) starts. The forward pass is the replay: the kernels of the one cudaGraphLaunch, and the
    argmax after it; the kernels before the replay (one ran half a second earlier) prepare the batch. A kernel that
    another launch call started during the replay (a `neg_kernel` on a second stream, beside layer 5) is in no
    layer: it belongs to the layer that launched it, and no layer did (README: Kernels on other streams)."""
    kernels, layer_of, first = _qwen3_norm_labels(path, layers)
    return per_step(
        [Kernel(e["name"], e["ts"], 0 if i >= first else None, layer_of.get(i)) for i, e in enumerate(kernels)]
    )


def qwen3_norm_layers(path: Path, layers: int = 36) -> list[int | None]:
    """The layer of every kernel of the SGLang trace in GPU start order (see qwen3_norm_truth)."""
    kernels, layer_of, _ = _qwen3_norm_labels(path, layers)
    return [layer_of.get(i) for i in range(len(kernels))]


def _qwen3_norm_labels(path: Path, layers: int) -> tuple[list[dict], dict[int, int], int]:
    events = kineto_events(path)
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    replay = max(
        {e["args"]["correlation"] for e in kernels}, key=lambda c: sum(e["args"]["correlation"] == c for e in kernels)
    )
    first = next(i for i, e in enumerate(kernels) if e["args"]["correlation"] == replay)
    norms = [i for i, e in enumerate(kernels) if "add_rmsnorm_quant_kernel" in e["name"] and "Li256E" in e["name"]]
    norms = [i for i in norms if i >= first]
    if len(norms) != 2 * layers + 1:
        raise ValueError(f"{path.name}: {len(norms)} hidden-size norms, expected {2 * layers + 1}")
    layer_of: dict[int, int] = {}
    for layer in range(layers):
        for i in range(norms[2 * layer], norms[2 * layer + 2]):
            if kernels[i]["args"]["correlation"] == replay:  # a kernel launched apart from the replay is no layer's
                layer_of[i] = layer
    return kernels, layer_of, first


def zoo_labels(path: Path) -> tuple[list[tuple[int | None, int | None]], str]:
    """A zoo label file (sample_traces/zoo/labels/*.json, written by record_zoo.py): the (step, layer) of every
    kernel in GPU start order, and the sha256 of the kernel names they belong to."""
    data = json.loads(path.read_text())
    labels: list[tuple[int | None, int | None]] = []
    for step, layer, count in data["runs"]:
        labels += [(step, layer)] * count
    return labels, data["names_sha256"]


def wrong_kernels(found: list[tuple[int | None, int | None]], true: list[tuple[int | None, int | None]]) -> int:
    """How many kernels a segmentation places wrongly: in another layer, or in a layer of another step (steps
    compared by their order). A kernel outside every layer is right when it is outside every layer: which step
    the host's work between forward passes belongs to is a convention no trace shows. A different number of
    steps counts as at least one wrong kernel."""
    if len(found) != len(true):
        return max(len(found), len(true))

    def ordinal(labels: list[tuple[int | None, int | None]]) -> tuple[list[int | None], int]:
        order: dict[int, int] = {}
        for step, layer in labels:
            if step is not None and layer is not None:
                order.setdefault(step, len(order))
        return [order.get(step) if step is not None else None for step, _ in labels], len(order)

    found_steps, found_count = ordinal(found)
    true_steps, true_count = ordinal(true)
    wrong = sum(
        1
        for f_layer, t_layer, f_step, t_step in zip(
            _layer_ordinals(found), _layer_ordinals(true), found_steps, true_steps, strict=True
        )
        if f_layer != t_layer or (t_layer is not None and f_step != t_step)
    )
    return max(wrong, int(found_count != true_count))


def _layer_ordinals(labels: list[tuple[int | None, int | None]]) -> list[int | None]:
    """Per kernel, its layer's place among the layers of its step that run kernels: a layer that runs none (Mllama's
    cross-attention layers when decoding text alone) is in no trace, so the layers after it are compared by place."""
    places: dict[int | None, dict[int, int]] = {}
    for step, layer in sorted({label for label in labels if label[1] is not None}, key=lambda x: (x[0] is None, x)):
        step_places = places.setdefault(step, {})
        step_places[layer] = len(step_places)
    return [None if layer is None else places[step][layer] for step, layer in labels]


def corpus_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*_bare*") if p.suffix in (".gz", ".xz", ".sqlite", ".json"))


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    table = {}
    for bare in corpus_files(root):
        try:
            table[str(bare.relative_to(root))] = truth(bare)
        except ValueError as exc:
            table[str(bare.relative_to(root))] = {"error": str(exc)}
            print(f"{bare.name}: {exc}", file=sys.stderr)
    (root / "truth.json").write_text(json.dumps(table, indent=1) + "\n")
    for name, steps in table.items():
        if isinstance(steps, dict):
            continue
        layers = {len(s["layers"]) for s in steps}
        counts = sorted({c for s in steps for c in s["layers"]})
        print(
            f"{name}: {len(steps)} steps, layers/step {layers}, kernels/layer {counts}, "
            f"outside {[s['outside'] for s in steps]}"
        )


if __name__ == "__main__":
    main()
