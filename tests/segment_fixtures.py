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

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kineto_builder import KinetoTrace

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
) -> StepTrace:
    """Write `steps` steps of `model` (or the given name `sequences`, one per step) as a Kineto trace."""
    trace = KinetoTrace()
    out = StepTrace(path)
    for step in range(steps):
        if sequences is not None:
            names, truth = list(sequences[step]), [None] * len(sequences[step])
        else:
            assert model is not None
            names, truth = model.step(step)
        out.steps.append((names, truth))
        if profiler_steps:
            with trace.cpu_range(f"ProfilerStep#{step}"):
                _emit(trace, names, truth, annotate, graph)
        else:
            _emit(trace, names, truth, annotate, graph)
        trace.cpu_ts += 50
    trace.write(path)
    return out


def _emit(trace: KinetoTrace, names: list[str], truth: list[int | None], annotate: bool, graph: bool) -> None:
    if graph:
        correlation = trace.launch("cudaGraphLaunch")
        for name in names:
            trace.kernel(name, correlation, dur_us=2.0)
        return
    i = 0
    while i < len(names):
        layer = truth[i]
        j = i
        while j < len(names) and truth[j] == layer:
            j += 1
        if annotate and layer is not None:
            with trace.cpu_range(f"model.layers.{layer}"):
                for name in names[i:j]:
                    trace.launch_kernel(name, dur_us=2.0)
        else:
            for name in names[i:j]:
                trace.launch_kernel(name, dur_us=2.0)
        i = j
