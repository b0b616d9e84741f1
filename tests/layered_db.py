"""A small segmented database (written with synthetic.py): the input of the picture, report and export tests.

One run, one rank, two streams (compute on stream 7, communication on stream 13), STEPS steps (step 0 is
warm-up) of LAYERS layers each. Every layer instance has the same shape, in µs from the layer start
(scaled by `scale`, so a run built with scale 0.5 is exactly 2x faster per layer):

    stream 7  (compute):  k1 [0, 10)   k2 [12, 20)                     k3 [30, 40)
    stream 13 (comm):                       c1 [15, ............ 30)
                          span 40 = compute alone 23 + overlapped comm 5 + exposed comm 10 + idle 2

so per layer: kernels 4, span 40, busy 38, idle 2, compute 28, comm 15, overlap 5, exposed comm 10.
A step is a memcpy [0, 3) (prologue, no layer), LAYERS layers 5 µs apart starting at 5, and a memset of
2 µs after the last layer (epilogue); steps are 100 µs apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from synthetic import Kernel, add_kernels, database, segment

T0_NS = 1_700_000_000_000_000_000  # an epoch-like clock, as Kineto writes
LAYERS = 4
STEPS = 3
LAYER_US = 40
LAYER_GAP_US = 5
FIRST_LAYER_US = 5
STEP_GAP_US = 100
KERNELS_PER_LAYER = 4
# (stream, category, start µs, end µs, name) of one layer instance.
LAYER_SHAPE = (
    (7, "compute", 0, 10, "gemm_a"),
    (7, "compute", 12, 20, "gemm_b"),
    (13, "comm", 15, 30, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
    (7, "compute", 30, 40, "rmsnorm"),
)
# What layer_metrics should say of every layer instance, in µs (scale 1).
EXPECTED = {"span_us": 40, "busy_us": 38, "idle_us": 2, "compute_us": 28, "comm_us": 15, "overlap_us": 5}
EXPECTED["exposed_comm_us"] = EXPECTED["comm_us"] - EXPECTED["overlap_us"]


@dataclass(frozen=True)
class Built:
    """What the builder wrote, for tests to compare against."""

    path: Path
    label: str
    activities_per_step: int
    scale: float


def step_length_us(layers: int = LAYERS) -> int:
    return FIRST_LAYER_US + layers * LAYER_US + (layers - 1) * LAYER_GAP_US + 2


def step_kernels(step: int, scale: float = 1.0, layers: int = LAYERS) -> list[Kernel]:
    """The activities of one step: memcpy prologue, `layers` layer instances, memset epilogue."""
    step_start_us = step * (step_length_us(layers) + STEP_GAP_US)

    def ns(us: float) -> int:
        return T0_NS + round((step_start_us + us) * 1000 * scale)

    rows = [Kernel(ns(0), ns(3), "Memcpy HtoD", "memcpy", "memcpy", step=step)]
    for layer in range(layers):
        base = FIRST_LAYER_US + layer * (LAYER_US + LAYER_GAP_US)
        rows += [
            Kernel(ns(base + a), ns(base + b), name, category, stream_id=stream, step=step, layer=layer)
            for stream, category, a, b, name in LAYER_SHAPE
        ]
    last = FIRST_LAYER_US + layers * LAYER_US + (layers - 1) * LAYER_GAP_US
    rows.append(Kernel(ns(last), ns(last + 2), "Memset", "memset", "memset", step=step))
    return rows


def build(
    path: Path, label: str = "synthetic", scale: float = 1.0, method: str = "annotation", layers: int = LAYERS
) -> Built:
    """Write the database described in the module docstring to `path` (step 0 is warm-up), with `layers` layers."""
    con = database(path, runs=(label,))
    for step in range(STEPS):
        add_kernels(con, step_kernels(step, scale, layers))
    segment(con, warmup_steps=(0,), method=method, confidence=1.0 if method == "annotation" else 0.9)
    con.execute("UPDATE runs SET trace_start_ns = ?, device_names = ['NVIDIA H200']", [T0_NS])
    con.execute("CHECKPOINT")
    con.close()
    return Built(path, label, len(step_kernels(0, scale, layers)), scale)
