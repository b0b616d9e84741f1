"""Record traces that traceview segments exactly: each transformer layer wrapped in a record_function and
an NVTX range, each step marked, written as a PyTorch profiler trace ready for `traceview ingest`.

Needs the optional `torch` extra (`pip install traceview[torch]`); nothing else in traceview imports it.

    from traceview.capture import capture

    with capture(model, "decode.pt.trace.json.gz") as session:
        for token in range(8):
            with session.step():
                model(next_input)

Layers are the modules whose qualified name matches `layer_pattern` (default: `layers.N`, `h.N`,
`blocks.N`, `block.N`, `decoder.layers.N`), named after the module (`model.layers.7`). Works on CPU and GPU;
on GPU the NVTX ranges also show in Nsight Systems when the same code runs under `nsys profile`.

CUDA graphs: record_function and NVTX do not fire when a graph is replayed. Capture the graph inside a
`capture(...)` block: the launches recorded during capture sit inside the layer ranges, and traceview's
segmentation maps each replayed kernel to the layer of the launch at the same position of the capture.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

DEFAULT_LAYER_PATTERN = r"(^|\.)(layers|h|blocks|block)\.\d+$"


@dataclass
class CaptureSession:
    """Handle returned by `capture`: wrap each model iteration (one decode token) in `with session.step():`."""

    profiler: torch.profiler.profile
    layer_names: list[str] = field(default_factory=list)
    steps: int = 0

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """One step: a `ProfilerStep#N` range around the work inside the block, as torch.profiler names it."""
        with torch.profiler.record_function(f"ProfilerStep#{self.steps}"):
            yield
        self.steps += 1


def layer_modules(model: torch.nn.Module, layer_pattern: str = DEFAULT_LAYER_PATTERN) -> dict[str, torch.nn.Module]:
    """The model's transformer layers: submodules whose qualified name matches `layer_pattern`."""
    pattern = re.compile(layer_pattern)
    return {name: module for name, module in model.named_modules() if name and pattern.search(name)}


@contextlib.contextmanager
def annotate_layers(model: torch.nn.Module, layer_pattern: str = DEFAULT_LAYER_PATTERN) -> Iterator[list[str]]:
    """Wrap every layer's forward in a record_function and an NVTX range named after the module."""
    nvtx = torch.cuda.is_available()
    open_ranges: dict[str, list[Any]] = {}
    handles = []

    def enter(name: str) -> Any:
        def hook(_module: torch.nn.Module, _inputs: Any) -> None:
            scope = torch.profiler.record_function(name)
            scope.__enter__()
            open_ranges.setdefault(name, []).append(scope)
            if nvtx:
                torch.cuda.nvtx.range_push(name)

        return hook

    def leave(name: str) -> Any:
        def hook(_module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
            if nvtx:
                torch.cuda.nvtx.range_pop()
            open_ranges[name].pop().__exit__(None, None, None)

        return hook

    layers = layer_modules(model, layer_pattern)
    for name, module in layers.items():
        qualified = name if name.startswith("model.") else f"model.{name}"
        handles.append(module.register_forward_pre_hook(enter(qualified)))
        handles.append(module.register_forward_hook(leave(qualified)))
    try:
        yield list(layers)
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def capture(
    model: torch.nn.Module,
    path: str | Path,
    layer_pattern: str = DEFAULT_LAYER_PATTERN,
    record_shapes: bool = False,
) -> Iterator[CaptureSession]:
    """Profile `model` with its layers annotated; write the trace to `path` (.json or .json.gz) on exit."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with annotate_layers(model, layer_pattern) as names:
        profiler = torch.profiler.profile(activities=activities, record_shapes=record_shapes)
        with profiler:
            session = CaptureSession(profiler, names)
            yield session
    write_trace(profiler, Path(path))


def write_trace(profiler: torch.profiler.profile, path: Path) -> Path:
    """Export the profiler's Chrome trace to `path`, gzipped when the name ends in .gz."""
    if not path.name.endswith(".gz"):
        profiler.export_chrome_trace(str(path))
        return path
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(plain))
        with open(plain, "rb") as source, gzip.open(path, "wb") as target:
            shutil.copyfileobj(source, target)
    return path
