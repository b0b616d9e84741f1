"""Segmentation: every GPU activity of a run gets a step and, inside layers, a transformer layer index.

Reads: gpu_activity, launches, cpu_ranges, gpu_ranges of one run. Writes: `steps`, `layers`,
`gpu_activity.step` / `gpu_activity.layer` (NULL outside steps and layers), `kernel_busy` and `kernel_gaps`
(segment/busy.py: the interval figures the SQL library reads), and `ingest_stats` rows named `segment.*` that
say how steps and layers were found (the CLI shows them). Re-running replaces all of it.

Steps first (segment/steps.py), then the layers of each step by one method, recorded on every layer row:
- `annotation` (segment/annotation.py): CPU ranges named like a layer contain the launch call; GPU ranges
  by time on their stream;
- `graph` (segment/graph.py): kernels replayed from a CUDA graph take the layer of the node (or launch)
  that was recorded inside a layer range while the graph was captured;
- `period` (segment/period.py): the repeating unit of the kernel sequence, with a confidence; inferred.
`auto` picks, per step, annotation when it places at least half the step's kernels, else graph when it
does, else period; a step where period finds no repeating structure keeps whatever annotation found, or
gets no layers (it is never given invented ones).

segment/pipeline.py runs all of it; this module holds only the options and result types, so that the CLI
and `traceview.segment.report` load without numpy and pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


class Method(str, Enum):
    """How layers are found: auto picks the best available per step."""

    auto = "auto"
    annotation = "annotation"
    graph = "graph"
    period = "period"


@dataclass(frozen=True)
class SegmentOptions:
    """What the user asked of segmentation (`--method`, `--layer-pattern`, `--step-pattern`, and the layers per
    forward pass they know: `--layers N` or `--model-config`, named by `layers_from`)."""

    method: Method = Method.auto
    layer_pattern: str | None = None
    step_pattern: str | None = None
    layers: int | None = None
    layers_from: str = "--layers"


@dataclass(frozen=True)
class SegmentResult:
    """What segmentation found in one run."""

    run_id: int
    steps: int
    step_methods: tuple[str, ...]
    layers: int
    layers_per_step: float | None
    methods: tuple[str, ...]
    confidence: float | None
    notes: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def segment_run(con: duckdb.DuckDBPyConnection, run_id: int, options: SegmentOptions | None = None) -> SegmentResult:
    """Find steps and layers of run `run_id` and write them (inside the caller's transaction)."""
    from .pipeline import segment_run as run  # numpy and pandas load here, not with the CLI's options

    return run(con, run_id, options)
