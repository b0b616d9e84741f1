"""Steps of a trace without step annotations: its forward passes, found from the layers (numpy, no database).

A step must hold whole layers, so layers come first: the layers of the whole kernel sequence (period.find_layers,
then again on long stretches it left uncovered - a prefill's layers are other kernels than a decode's), then the
forward passes: runs of back-to-back layers. A step is one forward pass, or one repetition of a pattern of them
(a draft model's pass and the target's, in speculative decoding); a trace of one forward pass is one step.

Between two passes lie the epilogue of one and the prologue of the next. The step boundary is cut there: where a
CUDA graph replay ends and the next begins, else at the longest GPU idle gap (the host's work between iterations).
Kernels far from every pass (a stray kernel half a second before, separated by an idle gap much longer than any
inside a pass) belong to no step.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from . import period

NO_STEP = -1
STRAY_GAP_FACTOR = 4.0  # an idle gap this many times the longest one inside the passes separates a stray kernel
OVERLONG = 1.4  # a layer this many times the median length holds more than a layer (expert loops vary less)
MIN_STEP_KERNELS = 10  # an annotated step needs this many kernels before one far from the rest is left out
MIN_STRETCH_LAYERS = 2  # an uncovered stretch is searched for layers of its own when it can hold this many
INNER_COVERAGE = 0.75  # share of a repeating unit its own layers cover for the unit to be a whole iteration


@dataclass(frozen=True)
class Passes:
    """Per kernel its step (NO_STEP outside every step), how many forward passes were found, and how."""

    step_of: np.ndarray
    steps: int
    forward_passes: int
    method: str

    @property
    def outside(self) -> int:
        return int(np.count_nonzero(self.step_of == NO_STEP))


def find_passes(codes: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, replay: np.ndarray) -> Passes:
    """Steps of one rank's kernel sequence (in GPU start order). `replay` is the CUDA graph replay of each kernel
    (its graph launch id, -1 when not replayed)."""
    n = len(codes)
    idle = _idle(start_ns, end_ns)
    runs, last_starts, typical = _runs(codes)
    if not runs:
        return Passes(np.zeros(n, dtype=np.int64), 1 if n else 0, 0, "whole")
    groups = _group(runs)
    step_of = np.full(n, NO_STEP, dtype=np.int64)
    ends = dict(zip(runs, last_starts, strict=True))
    # a pass's last layer may have been cut short (an expert loop's end looks like a layer's): the boundary is
    # searched from at least one typical layer after its start
    cuts = [
        _cut(idle, replay, min(max(a[-1][1], ends[a[-1]] + typical), b[0][0]), b[0][0])
        for a, b in itertools.pairwise(groups)
    ]
    threshold = STRAY_GAP_FACTOR * max(_longest_inside(idle, runs), 1)
    lo, hi = _first_kept(idle, groups[0][0][0], threshold), _end_kept(idle, groups[-1][-1][1], threshold)
    for step, (a, b) in enumerate(itertools.pairwise([lo, *cuts, hi])):
        step_of[a:b] = step
    return Passes(step_of, len(groups), len(runs), "passes")


def forward_passes(codes: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each forward pass: a run of back-to-back layers, in order."""
    return _runs(codes)[0]


def _runs(codes: np.ndarray) -> tuple[list[tuple[int, int]], list[int], int]:
    """The forward passes, the start of each one's last layer, and the median layer length. A "layer" much longer
    than the median has swallowed the stretch between two passes (an epilogue and the next prologue) and ends a
    run."""
    spans = _layers(codes, 0, len(codes))
    typical = int(np.median([b - a for a, b in spans])) if spans else 0
    runs: list[list[int]] = []
    for start, end in spans:
        if end - start > OVERLONG * typical:
            continue
        if runs and runs[-1][1] == start:
            runs[-1][1:] = [end, start]
        else:
            runs.append([start, end, start])
    return [(a, b) for a, b, _ in runs], [last for _, _, last in runs], typical


def _layers(codes: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """Layer spans in codes[lo:hi]: the best fit, then fits of their own in the long stretches it left (a prefill
    among decode steps). When the best repeating unit is a whole iteration (its instances hold layers of their
    own), its layers are those."""
    fit = period.find_layers(codes[lo:hi], kinds=False)
    if fit is None:
        return []
    spans = [(lo + s.start, lo + s.end) for s in fit.layers]
    typical = spans[len(spans) // 2]
    if _inner_layers(codes, *typical, {}):  # one instance tells whether the unit is a whole iteration
        cache: dict[bytes, list[tuple[int, int]]] = {}
        return sorted(itertools.chain.from_iterable(_inner_layers(codes, a, b, cache) for a, b in spans))
    found = list(spans)
    edges = [lo, *itertools.chain.from_iterable(spans), hi]
    for a, b in zip(edges[::2], edges[1::2], strict=True):  # the stretches between runs of layers
        if b - a >= MIN_STRETCH_LAYERS * fit.period and (a, b) != (lo, hi):
            found += _layers(codes, a, b)
    return sorted(found)


def _inner_layers(
    codes: np.ndarray, lo: int, hi: int, cache: dict[bytes, list[tuple[int, int]]]
) -> list[tuple[int, int]]:
    """The layers inside one instance of a repeating unit, when they cover most of it (a whole iteration: layers
    between a prologue and an epilogue; the experts of a layer's loop leave its attention out). Identical
    instances are solved once (`cache`, keyed by their kernels)."""
    key = codes[lo:hi].tobytes()
    if key not in cache:
        fit = period.find_layers(codes[lo:hi], kinds=False)
        good = fit is not None and fit.coverage >= INNER_COVERAGE and not _all_layers(codes[lo:hi])
        cache[key] = [(s.start, s.end) for s in fit.layers] if good else []
    return [(lo + a, lo + b) for a, b in cache[key]]


def _all_layers(unit: np.ndarray) -> bool:
    """Whether a unit is layers from end to end (layers of several kinds: three linear-attention layers and a full
    one) rather than a forward pass, whose prologue and epilogue are not layers: its layers, with those of other
    kinds found from boundary to boundary, leave no kernel out."""
    fit = period.find_layers(unit)
    return fit is not None and sum(s.end - s.start for s in fit.layers) == len(unit)


def _group(runs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Forward passes grouped into steps: the shortest repeating pattern of pass lengths (a draft and a target
    pass alternate in speculative decoding); passes that all look alike are a step each."""
    sizes = [b - a for a, b in runs]
    for m in range(1, len(runs) + 1):
        if all(_close(sizes[i], sizes[i % m]) for i in range(len(sizes))):
            return [runs[i : i + m] for i in range(0, len(runs), m)]
    return [runs]


def _close(a: int, b: int) -> bool:
    """Two forward passes of the same kind: lengths within a quarter (expert loops vary)."""
    return abs(a - b) <= 0.25 * max(a, b)


def _idle(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """GPU idle time before each kernel (0 for the first)."""
    idle = np.zeros(len(start_ns), dtype=np.int64)
    if len(start_ns) > 1:
        idle[1:] = np.maximum(start_ns[1:] - np.maximum.accumulate(end_ns)[:-1], 0)
    return idle


def _cut(idle: np.ndarray, replay: np.ndarray, lo: int, hi: int) -> int:
    """Where the step boundary falls between one pass's last layer (ending at kernel lo) and the next pass's first
    (starting at hi): at a change of CUDA graph replay if there is one, else at the longest idle gap."""
    candidates = np.arange(lo, hi + 1)
    changed = replay[candidates] != replay[candidates - 1]
    replayed = (replay[candidates] >= 0) | (replay[candidates - 1] >= 0)
    score = idle[candidates].astype(float) + np.where(changed & replayed, 1e18, 0.0)
    return int(candidates[np.argmax(score)])


def _longest_inside(idle: np.ndarray, runs: list[tuple[int, int]]) -> int:
    return max((int(idle[a + 1 : b].max()) for a, b in runs if b - a > 1), default=0)


def kept(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Which kernels of one annotated step (in GPU start order) stay in it: all but those at either end cut off
    from the others by an idle gap STRAY_GAP_FACTOR times the longest gap among the others."""
    idle = _idle(start_ns, end_ns)
    keep = np.ones(len(idle), dtype=bool)
    lo, hi = 0, len(idle)
    while hi - lo > MIN_STEP_KERNELS:
        inner = idle[lo + 2 : hi]  # the gaps between the kernels after the first
        if idle[lo + 1] > STRAY_GAP_FACTOR * max(int(inner.max(initial=0)), 1):
            keep[lo] = False
            lo += 1
        elif idle[hi - 1] > STRAY_GAP_FACTOR * max(int(idle[lo + 1 : hi - 1].max(initial=0)), 1):
            keep[hi - 1] = False
            hi -= 1
        else:
            break
    return keep


def _first_kept(idle: np.ndarray, first: int, threshold: float) -> int:
    """The first kernel of the first step: kernels before the first pass stay with it up to an idle gap longer
    than `threshold` (what comes before such a gap is a stray)."""
    far = np.flatnonzero(idle[1 : first + 1] > threshold) + 1
    return int(far[-1]) if len(far) else 0


def _end_kept(idle: np.ndarray, end: int, threshold: float) -> int:
    """One past the last kernel of the last step, likewise after the last pass."""
    far = np.flatnonzero(idle[end:] > threshold) + end
    return int(far[0]) if len(far) else len(idle)
