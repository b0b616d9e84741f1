"""The truth's own rules (sample_traces/corpus/truth.py, standard library only), on traces built by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "sample_traces" / "corpus"))

import truth  # noqa: E402 - sample_traces/corpus/truth.py


def test_layers_are_compared_by_their_place_among_the_layers_that_run_kernels() -> None:
    """Mllama decoding text alone: its cross-attention layers (3, 8, ...) run no kernel, so no trace shows them and
    the layers after one are compared by place; a layer found merged with the next is still wrong."""
    true = [(0, None), (0, 0), (0, 1), (0, 3), (0, 3), (0, 4), (0, None)]
    found = [(0, None), (0, 0), (0, 1), (0, 2), (0, 2), (0, 3), (0, None)]
    assert truth.wrong_kernels(found, true) == 0
    merged = [(0, None), (0, 0), (0, 1), (0, 2), (0, 2), (0, 2), (0, None)]
    assert truth.wrong_kernels(merged, true) == 1


def _event(name: str, cat: str, ts: float, dur: float, **args: object) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}


def test_a_replays_kernels_take_the_layers_of_the_kernel_launches_its_capture_made(tmp_path: Path) -> None:
    """A CUDA graph replay runs one launch's kernels, each the i-th kernel launch its capture made: its layer is the
    layer range open at that launch. In float32 cuBLAS's split-K GEMMs make a memory-set call during capture that the
    replays do not show (GPT-2: one more per layer), so memory sets and copies do not count, or every layer after
    the first would take one kernel of the next."""
    events = [
        _event("capture", "user_annotation", 0, 100),
        _event("model.layers.0", "user_annotation", 1, 40),
        _event("cudaLaunchKernel", "cuda_runtime", 2, 1, correlation=1),
        _event("cudaMemsetAsync", "cuda_runtime", 3, 1, correlation=2),
        _event("cudaLaunchKernel", "cuda_runtime", 4, 1, correlation=3),
        _event("model.layers.1", "user_annotation", 50, 40),
        _event("cudaLaunchKernel", "cuda_runtime", 51, 1, correlation=4),
        _event("cudaLaunchKernel", "cuda_runtime", 52, 1, correlation=5),
        _event("decode_step_0", "user_annotation", 200, 100),
        _event("cudaGraphLaunch", "cuda_runtime", 201, 1, correlation=9),
        *(_event(f"k{i}", "kernel", 210 + 10 * i, 5, correlation=9, stream=7) for i in range(4)),
    ]
    path = tmp_path / "twin.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert [(k.step, k.layer) for k in truth.kineto_kernels(path)] == [(0, 0), (0, 0), (0, 1), (0, 1)]
