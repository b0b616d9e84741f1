"""Synthetic decoder steps whose layers are known, for the segmentation tests.

A `Model` produces the kernel-name sequence of one step (prologue, layers, epilogue) together with the
layer of every kernel (None outside layers). `write_trace` turns steps of a model into a Kineto trace:
eager (one launch per kernel, optionally inside `model.layers.N` record_function ranges) or CUDA-graph
replay (one cudaGraphLaunch whose correlation all kernels share).

    model = Model(layers=6)
    names, truth = model.step()
    path = write_trace(tmp_path / "t.json.gz", model, steps=3, annotate=True)
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kineto_builder import KinetoTrace

GRAPH_NODE_BASE = 1000  # node id of a replay's i-th kernel: GRAPH_NODE_BASE + i
PROLOGUE = ("embedding_kernel",)
NORM = ("copy_float", "pow_kernel", "mean_reduce", "add_eps", "rsqrt_kernel", "mul_kernel", "copy_bf16", "mul_w")
ATTENTION = (
    *NORM,
    "gemm_qkv",
    "rope_kernel",
    "rope_kernel",
    "cache_copy",
    "cache_copy",
    "flash_attn_decode",
    "gemm_o",
    "residual_add",
)
MOE = (
    *NORM,
    "gemm_router",
    "softmax_kernel",
    "topk_kernel",
    "index_select",
    "bmm_kernel",
    "bmm_kernel",
    "silu_mul",
    "bmm_kernel",
    "sum_kernel",
    "gemm_shared_up",
    "silu_mul",
    "gemm_shared_down",
    "add_shared",
    "residual_add",
)
DENSE = (*NORM, "gemm_gate_up", "silu_mul", "gemm_down", "residual_add")
EXPERT = ("expert_gemm_up", "expert_act", "expert_gemm_down", "index_add")
EPILOGUE = (*NORM, "gemm_lm_head", "argmax_kernel", "copy_token", "add_position")


@dataclass(frozen=True)
class Model:
    """A decoder: `dense` dense layers then MoE layers (or all dense when moe is False), `layers` in all.

    expert_loop: eager MoE that loops over the experts hit, 1..4 per layer (varies by layer and step).
    extra_in: layer indices that launch one extra kernel (a copy) in the middle of their attention.
    fused_norm: vLLM style: each layer starts with a fused residual-add + norm kernel (the first layer
    with a plain norm), and the final norm is the fused kernel too.
    """

    layers: int = 6
    dense: int = 0
    moe: bool = True
    expert_loop: bool = False
    extra_in: tuple[int, ...] = ()
    fused_norm: bool = False
    seed: int = 0

    def layer(self, index: int, rng: random.Random) -> list[str]:
        """Kernel names of layer `index`."""
        attention = list(ATTENTION)
        if index in self.extra_in:
            attention.insert(10, "extra_copy")
        if self.fused_norm:
            attention = [("rms_norm" if index == 0 else "fused_add_rms_norm"), *attention[len(NORM) :]]
        if not self.moe or index < self.dense:
            return attention + list(DENSE)
        mlp = list(MOE)
        if self.expert_loop:
            hit = rng.randint(1, 4)
            mlp = mlp[: len(NORM) + 4] + list(EXPERT) * hit + mlp[-5:]
        return attention + mlp

    def step(self, step: int = 0) -> tuple[list[str], list[int | None]]:
        """(kernel names, layer of each kernel) of one step."""
        rng = random.Random(self.seed * 1000 + step)
        names: list[str] = list(PROLOGUE)
        truth: list[int | None] = [None] * len(PROLOGUE)
        for index in range(self.layers):
            kernels = self.layer(index, rng)
            names += kernels
            truth += [index] * len(kernels)
        epilogue = ["fused_add_rms_norm", *EPILOGUE[len(NORM) :]] if self.fused_norm else list(EPILOGUE)
        names += epilogue
        truth += [None] * len(epilogue)
        return names, truth


def random_names(count: int, vocabulary: int = 40, seed: int = 0) -> list[str]:
    """A kernel sequence with no structure at all."""
    rng = random.Random(seed)
    return [f"kernel_{rng.randrange(vocabulary)}" for _ in range(count)]


@dataclass
class StepTrace:
    """What write_trace wrote: per step, the kernel names and their true layers."""

    path: Path
    steps: list[tuple[list[str], list[int | None]]] = field(default_factory=list)

    def kernels_per_layer(self, step: int) -> dict[int, int]:
        counts: dict[int, int] = {}
        for layer in self.steps[step][1]:
            if layer is not None:
                counts[layer] = counts.get(layer, 0) + 1
        return counts


def write_trace(
    path: Path,
    model: Model | None = None,
    steps: int = 3,
    annotate: bool = False,
    graph: bool = False,
    profiler_steps: bool = True,
    sequences: Sequence[Sequence[str]] | None = None,
    step_name: str = "ProfilerStep#{step}",
    layer_name: str = "model.layers.{layer}",
    capture: bool = False,
    gpu_annotations: bool = False,
    layer_cat: str = "user_annotation",
    rank: int | None = None,
) -> StepTrace:
    """Write `steps` steps of `model` (or the given name `sequences`, one per step) as a Kineto trace.

    annotate: a `layer_name` record_function range around each layer's launches. graph: each step is one
    cudaGraphLaunch; with capture, the graph's capture is recorded first (annotated launches, no kernels).
    gpu_annotations: gpu_user_annotation ranges over each layer's kernels (and no CPU layer ranges).
    """
    trace = KinetoTrace()
    if rank is not None:
        trace.metadata["distributedInfo"] = {"rank": rank, "world_size": 2}
    out = StepTrace(path)
    if capture:
        assert model is not None
        names, truth = model.step(0)
        _emit(trace, names, truth, Emit(annotate=True, layer_name=layer_name, capture=True))
        trace.cpu_ts += 50
    for step in range(steps):
        if sequences is not None:
            names, truth = list(sequences[step]), [None] * len(sequences[step])
        else:
            assert model is not None
            names, truth = model.step(0 if capture else step)
        out.steps.append((names, truth))
        how = Emit(annotate and not graph, graph, layer_name, gpu=gpu_annotations, layer_cat=layer_cat)
        if profiler_steps:
            with trace.cpu_range(step_name.format(step=step)):
                _emit(trace, names, truth, how)
        else:
            _emit(trace, names, truth, how)
        trace.cpu_ts += 50
        trace.gpu_ts += 100
    trace.write(path)
    return out


@dataclass(frozen=True)
class Emit:
    """How one step's kernels are written."""

    annotate: bool = False
    graph: bool = False
    layer_name: str = "model.layers.{layer}"
    capture: bool = False
    gpu: bool = False
    layer_cat: str = "user_annotation"


def _emit(trace: KinetoTrace, names: list[str], truth: list[int | None], how: Emit) -> None:
    if how.graph:
        correlation = trace.launch("cudaGraphLaunch")
        for node, name in enumerate(names):
            trace.kernel(name, correlation, dur_us=2.0, **{"graph node id": GRAPH_NODE_BASE + node})
        return
    if how.gpu:
        _emit_gpu_annotated(trace, names, truth, how.layer_name)
        return
    i = 0
    while i < len(names):
        layer = truth[i]
        j = i
        while j < len(names) and truth[j] == layer:
            j += 1
        if how.annotate and layer is not None:
            with trace.cpu_range(how.layer_name.format(layer=layer), how.layer_cat):
                _launch_all(trace, names[i:j], how.capture)
        else:
            _launch_all(trace, names[i:j], how.capture)
        i = j


def _launch_all(trace: KinetoTrace, names: list[str], capture: bool) -> None:
    for name in names:
        if capture:
            trace.launch()  # recorded into the graph: no kernel runs
        else:
            trace.launch_kernel(name, dur_us=2.0)


def _emit_gpu_annotated(trace: KinetoTrace, names: list[str], truth: list[int | None], layer_name: str) -> None:
    """Kernels with gpu_user_annotation ranges over each layer's kernels on their stream."""
    open_layer: tuple[int, float] | None = None
    for name, layer in zip(names, truth, strict=True):
        if open_layer and open_layer[0] != layer:
            _gpu_range(trace, layer_name.format(layer=open_layer[0]), open_layer[1], trace.gpu_ts)
            open_layer = None
        trace.launch_kernel(name, dur_us=2.0)
        if layer is not None and open_layer is None:
            open_layer = (layer, trace.gpu_ts - 2.0)
    if open_layer:
        _gpu_range(trace, layer_name.format(layer=open_layer[0]), open_layer[1], trace.gpu_ts)


def _gpu_range(trace: KinetoTrace, name: str, start: float, end: float) -> None:
    trace.events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": start - 0.5,
            "dur": end - start + 1.0,
            "args": {"device": 0, "stream": 7},
        }
    )


# ---------------------------------------------------------------------------------------------------------
# Independent reference: kernels per (step, layer) counted in plain Python over a Kineto JSON trace.

LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime"}


def reference_layer_counts(path: Path, layer_regex: str = r"^model\.layers\.(\d+)$") -> dict[tuple[int, int], int]:
    """{(step, layer): kernels} from the JSON alone: a kernel's launch (same correlation id) lies inside a
    ProfilerStep range and inside the innermost layer range of its own thread (the one starting last)."""
    events = _events(path)
    pattern = re.compile(layer_regex)
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
    )
    layers: dict[tuple[Any, Any], list[tuple[float, float, int]]] = {}
    for e in events:
        match = pattern.search(e.get("name", "")) if e.get("cat") == "user_annotation" else None
        if match:
            layers.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], int(match.group(1))))
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    counts: dict[tuple[int, int], int] = {}
    for e in events:
        if e.get("cat") != "kernel" or e.get("args", {}).get("correlation") not in launches:
            continue
        launch = launches[e["args"]["correlation"]]
        t = launch["ts"]
        step = next((i for i, (lo, hi) in enumerate(steps) if lo <= t < hi), None)
        inside = [r for r in layers.get((launch["pid"], launch["tid"]), []) if r[0] <= t < r[1]]
        if step is None or not inside:
            continue
        layer = max(inside, key=lambda r: (r[0], -r[1]))[2]
        counts[(step, layer)] = counts.get((step, layer), 0) + 1
    return counts


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)["traceEvents"]


# ---------------------------------------------------------------------------------------------------------
# Layer shapes of other frameworks and models, as (names, truth) of one step.


def framework_step(kind: str, layers: int = 32, seed: int = 1) -> tuple[list[str], list[int | None]]:
    """One step of a decoder as another framework or model would run it (see FRAMEWORKS)."""
    rng = random.Random(seed)
    prologue, body, epilogue = FRAMEWORKS[kind]
    names, truth = list(prologue), [None] * len(prologue)
    for index in range(layers):
        kernels = body(index, rng)
        names += kernels
        truth += [index] * len(kernels)
    return names + list(epilogue), truth + [None] * len(epilogue)


def _vllm_tp(i: int, rng: random.Random) -> list[str]:
    # every GEMM the same cuBLAS kernel; two all-reduces and two fused add+norms per layer
    first = "rms_norm" if i == 0 else "fused_add_rms_norm"
    return [first, "gemm", "rotary", "reshape_and_cache", "paged_attention", "gemm", "allreduce",
            "fused_add_rms_norm", "gemm", "silu_and_mul", "gemm", "allreduce"]  # fmt: skip


def _trt_short(i: int, rng: random.Random) -> list[str]:
    return ["gemm", "mmha", "gemm_allreduce_norm", "gemm", "gemm_allreduce_norm"]  # five fused kernels


def _deepseek_tp(i: int, rng: random.Random) -> list[str]:
    attention = ["norm", "gemm", "gemm", "norm", "rope", "mla_attn", "gemm", "allreduce", "add_norm"]
    if i < 3:
        return [*attention, "gemm", "act", "gemm", "allreduce"]
    return [*attention, "router", "topk", "moe_align", "fused_moe", "fused_moe", "shared_gemm", "act", "gemm",
            "combine", "allreduce"]  # fmt: skip


def _mixtral_eager(i: int, rng: random.Random) -> list[str]:
    expert = ["index", "gemm", "act", "gemm", "gemm", "mul", "index_add"]
    head = ["norm", "gemm", "rope", "attn", "gemm", "add", "norm", "router", "softmax", "topk"]
    return head + expert * rng.choice([1, 2, 2, 2, 3]) + ["add"]


def _eager_generic(i: int, rng: random.Random) -> list[str]:
    # ATen kernels named alike (every elementwise op one name, every GEMM another): only the order tells
    return ["ew", "reduce", "ew", "ew", "gemm", "gemm", "gemm", "ew", "ew", "copy", "copy", "sdpa", "gemm", "ew",
            "ew", "reduce", "ew", "ew", "gemm", "gemm", "ew", "ew", "gemm", "ew"]  # fmt: skip


def _jamba(i: int, rng: random.Random) -> list[str]:
    mixer = ["norm", "gemm", "rope", "attn", "gemm", "add"] if i % 8 == 4 else ["norm", "gemm", "conv1d", "ssm",
                                                                              "gemm", "add"]  # fmt: skip
    return [*mixer, "norm", "gemm", "act", "gemm", "add"]


def _gemma2(i: int, rng: random.Random) -> list[str]:
    attention = "attn_local" if i % 2 == 0 else "attn_global"
    return ["norm", "gemm", "rope", attention, "gemm", "norm", "add", "norm", "gemm", "act", "gemm", "norm", "add"]


FRAMEWORKS = {
    "vllm tensor parallel, fused add+norm": (("embedding",), _vllm_tp,
                                            ("fused_add_rms_norm", "gemm", "allgather", "softmax", "sample")),
    "five fused kernels per layer": (("embedding", "norm"), _trt_short, ("gemm", "argmax")),
    "deepseek: 3 dense then MoE, tensor parallel": (("embedding",), _deepseek_tp, ("norm", "gemm", "sample")),
    "mixtral eager: 1-3 experts hit per layer": (("embedding",), _mixtral_eager, ("norm", "gemm", "argmax")),
    "eager with generic kernel names": (("index_select",), _eager_generic, ("ew", "reduce", "ew", "gemm", "argmax")),
    "jamba: attention every 8th layer, else mamba": (("embedding",), _jamba, ("norm", "gemm")),
    "gemma2: local and global attention alternate": (("embedding", "scale"), _gemma2,
                                                     ("norm", "gemm", "softcap", "argmax")),
}  # fmt: skip
