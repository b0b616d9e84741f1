"""How the time of traceview's name handling grows with a name's length, measured in a worker process.

`growth(prefix, unit, suffix)` times every name function of FUNCTIONS on `prefix + unit * k + suffix` of SIZES
characters (CPU seconds, the least of a few runs). tests/test_name_scaling.py runs it in a process it can stop:
a quadratic function would take hours on a name of a million characters.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from traceview.align import fused_operations, identity, similarity, words
from traceview.diff import kernel_group
from traceview.ingest.demangle import demangle
from traceview.ingest.kernel_names import short_kernel_name
from traceview.segment.annotation import parse_layer_name
from traceview.segment.family import kernel_family
from traceview.segment.steps import phase_of, step_numbers
from traceview.why import KernelTime

SIZES = (10_000, 100_000, 1_000_000)
REPEATS = (5, 3, 1)  # the least of these many runs at each size
# A linear function takes 10x the time on a name 10x longer, a quadratic one 100x: more than this fails.
LINEAR_MAX = 30.0

# Every function that reads a name from a trace, by what it reads.
FUNCTIONS: dict[str, Callable[[str], object]] = {
    "short_kernel_name": short_kernel_name,
    "demangle": lambda name: demangle([name]),  # the batch a run's names go to the system's demangler in
    "kernel_family": kernel_family,
    "identity": identity,  # diff's kernel alignment (align.py) and its kernel groups (diff.kernel_group)
    "words": words,
    "fused_operations": fused_operations,
    "similarity": lambda name: similarity(name, name[::-1]),
    "kernel_group": lambda name: kernel_group([KernelTime(name, name, "compute", 0, 1, 1, 0, (0,) * 5)] * 2),
    "parse_layer_name": parse_layer_name,
    "step_numbers": lambda name: step_numbers([name, name + "1"]),
    "phase_of": phase_of,
}


def name_of(prefix: str, unit: str, suffix: str, size: int) -> str:
    """`prefix`, then `unit` repeated, then `suffix`: `size` characters (the repeats cut to fit)."""
    middle = size - len(prefix) - len(suffix)
    return prefix + (unit * (middle // len(unit) + 1))[:middle] + suffix


def cpu_seconds(function: Callable[[str], object], name: str, repeats: int) -> float:
    """The least CPU time of `repeats` calls: CPU time, not wall time, so that other work on the machine counts
    less; the least, so that a pause (a collection, a cache flushed by a neighbour) does not count."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        function(name)
        best = min(best, time.process_time() - start)
    return best


def growth(prefix: str, unit: str, suffix: str) -> dict[str, list[float]]:
    """Per function, its CPU seconds at each of SIZES; a function whose time grew past LINEAR_MAX times from one
    size to the next is not timed at the next (it would not finish)."""
    times: dict[str, list[float]] = {}
    for label, function in FUNCTIONS.items():
        times[label] = []
        for size, repeats in zip(SIZES, REPEATS, strict=True):
            times[label].append(cpu_seconds(function, name_of(prefix, unit, suffix, size), repeats))
            if superlinear(times[label]):
                break
    return times


def superlinear(times: list[float]) -> bool:
    """Whether the last step grew past LINEAR_MAX times (a time under 100 µs counts as 100 µs: the timer's and
    the call's own noise)."""
    return len(times) > 1 and times[-1] / max(times[-2], 1e-4) > LINEAR_MAX
