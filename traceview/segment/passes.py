"""Steps of a trace without step annotations: its forward passes, found from the layers (numpy, no database).

A step must hold whole layers, so layers come first: the layers of the whole kernel sequence (period.find_layers,
then again on long stretches it left uncovered - a prefill's layers are other kernels than a decode's), then the
forward passes: runs of back-to-back layers. A step is one forward pass, or one repetition of a pattern of them
(a draft model's pass and the target's, in speculative decoding); a trace of one forward pass is one step.
Speculative decoding's passes are told apart by their glue (mixers.passes_after_glue): a step is a verify pass (the
most layers) and the drafter's passes before it, and which kernels are the drafter's is known from the same passes
(`Passes.draft_of`).

Between two passes lie the epilogue of one and the prologue of the next. The step boundary is cut there: where a
CUDA graph replay ends and the next begins, else at the longest GPU idle gap (the host's work between iterations),
searched where the glue stops looking like the trace's own epilogue and starts looking like its own prologue (a
host-bound trace idles as long before every kernel: _glue_range).
Kernels far from every pass (a stray kernel half a second before, separated by an idle gap much longer than any
inside a pass) belong to no step.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import mixers, period

NO_STEP = -1
NO_DRAFT = -1
STRAY_GAP_FACTOR = 4.0  # an idle gap this many times the longest one inside the passes separates a stray kernel
OVERLONG = 1.4  # a layer this many times the median length holds more than a layer (expert loops vary less)
MIN_STEP_KERNELS = 10  # an annotated step needs this many kernels before one far from the rest is left out
MIN_STRETCH_LAYERS = 2  # an uncovered stretch is searched for layers of its own when it can hold this many
INNER_COVERAGE = 0.75  # share of a repeating unit its own layers cover for the unit to be a whole iteration
MIN_TARGET_LAYERS = 4  # a target's verify pass runs at least this many layers (a layer's own parts repeat less)
MIN_GLUE = 3  # kernels between two forward passes at least: a final norm, the LM head, the next embedding
OWN_IN_GLUE = 2  # kinds of the step's own glue kernels (no layer runs them) that glue between two passes holds
FAR_LAYERS = 6  # kernels around runs of layers, in layers, that no prologue or epilogue is: a loop inside a layer
RARE_IN_LAYERS = 0.25  # a kernel fewer than this share of the layers found run is the glue's, not a layer's
MAX_UNIT_LAYERS = 8  # layers a unit of layers of several kinds holds at most (Jamba's: attention every eighth)
PASSES_COVERAGE = 0.5  # the same, when the unit is a drafter's passes and a target's


@dataclass(frozen=True)
class Passes:
    """Per kernel its step (NO_STEP outside every step), how many forward passes were found, and how."""

    step_of: np.ndarray
    steps: int
    forward_passes: int
    method: str
    draft_of: np.ndarray | None = None  # per kernel its drafter's pass in its step (NO_DRAFT: the target's), when
    # the passes told the drafter apart (speculative decoding), else None: spec.py looks for it step by step

    @property
    def outside(self) -> int:
        return int(np.count_nonzero(self.step_of == NO_STEP))


def find_passes(
    codes: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    replay: np.ndarray,
    numbers: np.ndarray | None = None,
    graph: np.ndarray | None = None,
) -> Passes:
    """Steps of one rank's kernel sequence (in GPU start order). `replay` is the CUDA graph replay of each kernel
    (its graph launch id, -1 when not replayed), `graph` the graph it replays (-1 when none); `numbers` Inductor's
    number of each kernel in its compiled graph (-1 for other kernels)."""
    n = len(codes)
    idle = _idle(start_ns, end_ns)
    opens = period.graph_openings(numbers) if numbers is not None else None
    numbered = numbers >= 0 if numbers is not None else None
    found = _by_graphs(codes, opens, numbered) or _runs(codes, {}, restarts=_restarts(replay, graph), opens=opens)
    if not found.runs:
        return Passes(np.zeros(n, dtype=np.int64), 1 if n else 0, 0, "whole")
    found = _replays_as_passes(codes, found, replay) or found
    mixed = _by_mixers(codes, found)
    found = mixed or found
    opened = _openings(codes, found)
    inside = _across_pass_insides(codes, found, replay)
    if len(inside.runs) == 1 < len(found.runs) and opened is None:  # every stretch between runs is inside a pass
        return Passes(np.zeros(n, dtype=np.int64), 1, 1, "whole")
    found = inside
    groups = _group(found.runs, found.counts)
    alike = len(groups) > 1 and _close(min(found.counts), max(found.counts))  # passes of one kind: no drafter
    if alike and _glue_of_loops(found) and opened is None:
        return Passes(np.zeros(n, dtype=np.int64), 1, 1, "whole")
    spec = None if alike else _speculative(codes, nested=mixed is None and len(groups) == 1)
    if spec and opened is not None and len(opened) < len(spec[1]):
        spec = None  # fewer passes open as the trace does than steps were found: no drafter's passes and verifies
    found, groups = spec or (found, groups)  # a drafter's passes and a target's verify: the steps are the verifies
    runs, last_starts = found.runs, found.last_starts
    step_of = np.full(n, NO_STEP, dtype=np.int64)
    threshold = _stray_gap(idle, start_ns, end_ns, runs)
    lo, hi = _first_kept(idle, groups[0][0][0], threshold), _end_kept(idle, groups[-1][-1][1], threshold)
    if opened is not None and not spec and not lo:  # each pass opens as the trace does
        opened = opened[opened < hi]
        step_of[:hi] = np.searchsorted(opened, np.arange(hi), side="right") - 1
        return Passes(step_of, len(opened), len(opened), "passes")
    typical = 0 if mixed and spec is None else found.typical
    ends = dict(zip(runs, last_starts, strict=True))
    # a pass's last layer may have been cut short (an expert loop's end looks like a layer's): the boundary is
    # searched from at least one typical layer after its start; layers found from their mixers end where they end
    opening, closing = codes[: groups[0][0][0]], codes[groups[-1][-1][1] :]
    cuts = [
        _cut(
            idle,
            replay,
            *_boundary_range(
                codes,
                a[-1][1],
                ends[a[-1]] + typical,
                _first_layer_start(codes, found.spans, a[-1][1], b[0][0]) if alike and replay[b[0][0]] < 0 else b[0][0],
                (opening, closing),
            ),
        )
        for a, b in itertools.pairwise(groups)
    ]
    for step, (a, b) in enumerate(itertools.pairwise([lo, *cuts, hi])):
        step_of[a:b] = step
    verify = dict(zip(runs, found.counts, strict=True)) if spec and spec[0].by_glue else None
    if verify and max(verify[r] for r in groups[-1]) < max(verify.values()):
        step_of[step_of == len(groups) - 1] = NO_STEP  # the drafter's passes after the last verify: for none here
        groups, cuts, hi = groups[:-1], cuts[:-1], cuts[-1]
    normed = {run: _with_final_norm(codes, run, ends[run]) for run in runs}
    draft_of = _drafts_by_step(codes, [lo, *cuts, hi], groups, verify, normed) if verify else None
    return Passes(step_of, len(groups), len(runs), "passes", draft_of)


def _openings(codes: np.ndarray, found: _Runs) -> np.ndarray | None:
    """Where each forward pass opens, when every pass opens as the trace does: each place the trace's first kernel
    (the embedding) recurs, when it is the glue's (fewer than RARE_IN_LAYERS of the layers found run it) and every
    stretch from one place to the next holds MIN_TARGET_LAYERS typical layers or more; else None. The glue between
    two passes is a few kernels against a layer's hundred, and when the layers change from step to step (a recurrent
    layer's scan over a growing state, a cuBLAS variant that changes with the cache) no repeating unit fits them all:
    the layers found swallow it, while the embedding still opens every pass."""
    at = np.flatnonzero(codes == codes[0])
    if len(at) < 2 or np.diff([*at.tolist(), len(codes)]).min() < MIN_TARGET_LAYERS * found.typical:
        return None
    seen = np.concatenate(([0], np.cumsum(codes == codes[0])))  # how many times it ran before each kernel
    bounds = np.array(found.spans, dtype=np.int64)
    running = np.count_nonzero(seen[bounds[:, 1]] > seen[bounds[:, 0]])  # the layers found that run it
    return at if running < RARE_IN_LAYERS * len(bounds) else None


def _own_ends(
    codes: np.ndarray, runs: list[tuple[int, int]], last_starts: list[int], replay: np.ndarray
) -> np.ndarray | None:
    """The trace's end kernels that the glue between two forward passes holds one of (what the trace opens with: the
    embedding, or the previous pass's sampling; what it ends with: the LM head), or None when every stretch between
    the runs can be glue. Of the trace's first and last kernel, those the runs never run are the evidence
    (a copy kernel that ends the trace and runs in every layer is in every stretch of a pass too); both, when the
    runs run both. A trace that ends inside a run has no epilogue: its first kernel alone is the evidence, and its
    runs are taken as they are when the runs run that kernel too. So are runs of CUDA graph replays."""
    if (replay[[a for a, _ in runs]] >= 0).any():
        return None
    to_the_end = runs[-1][1] >= len(codes)  # the last layer found runs to the trace's last kernel
    whole = [codes[a:b] for a, b in runs[:-1]] + [codes[runs[-1][0] : last_starts[-1] if to_the_end else runs[-1][1]]]
    ran = np.concatenate(whole)
    ended_inside = to_the_end and bool(np.isin(codes[-1], ran))  # the trace ends inside a pass: a layer's kernel
    ends = np.array([codes[0]] if ended_inside else [codes[0], codes[-1]])
    own = ends[~np.isin(ends, ran)]
    if not len(own):
        return None if ended_inside else ends
    return own


def _across_pass_insides(codes: np.ndarray, found: _Runs, replay: np.ndarray) -> _Runs:
    """The runs joined across each stretch that holds neither of the trace's own ends (_own_ends): a stretch inside
    one pass, such as a layer of another kind that the found unit steps over (a prefill's full-attention layer
    between runs of sliding ones; an indexer that every fourth layer runs more; the two layers after every two
    alike, the second a full-attention one, in a pass of three sliding-window layers to one full). Every stretch
    left between the runs holds one of the trace's ends: the glue between two passes."""
    if len(found.runs) < 2:
        return found
    own = _own_ends(codes, found.runs, found.last_starts, replay)
    if own is None:
        return found
    runs, last_starts, counts = [found.runs[0]], [found.last_starts[0]], [found.counts[0]]
    for run, last, count in zip(found.runs[1:], found.last_starts[1:], found.counts[1:], strict=True):
        if np.isin(own, codes[runs[-1][1] : run[0]]).any():  # glue between two passes
            runs.append(run)
            last_starts.append(last)
            counts.append(count)
        else:
            runs[-1], last_starts[-1], counts[-1] = (runs[-1][0], run[1]), last, counts[-1] + count
    return _Runs(runs, last_starts, counts, found.typical, found.spans, found.by_glue)


def _glue_of_loops(found: _Runs) -> bool:
    """Whether the stretches between the runs are FAR_LAYERS of their layers long or more and hold none of the
    layers found: no epilogue and prologue are, so the runs are a loop inside every layer (a per-token scan over a
    prefill) and the stretches the layers' own work around it (a drafter's passes between verify passes hold
    layers)."""
    starts, ends = np.array(found.spans, dtype=np.int64).T
    return all(
        b - a >= FAR_LAYERS * found.typical and not _overlapped(starts, ends, a, b)
        for (_, a), (b, _) in itertools.pairwise(found.runs)
    )


def _drafts_by_step(
    codes: np.ndarray,
    bounds: list[int],
    groups: list[list[tuple[int, int]]],
    counts: dict[tuple[int, int], int],
    normed: dict[tuple[int, int], tuple[int, int]],
) -> np.ndarray:
    """Per kernel its drafter's pass in its step (see step_drafts) when each step of [bounds[i], bounds[i+1]) holds
    the passes of `groups[i]`, the verify being the one of the most layers (`counts`); a drafter's pass reaches to
    the end of its final norm (`normed`)."""
    draft_of = np.full(len(codes), NO_DRAFT, dtype=np.int64)
    for (lo, hi), runs in zip(itertools.pairwise(bounds), groups, strict=True):
        local = [(normed[r][0] - lo, normed[r][1] - lo) for r in runs]
        verify = max(range(len(runs)), key=lambda i: counts[runs[i]])
        found = _draft_of(codes[lo:hi], local[verify], local[:verify] + local[verify + 1 :])
        if found is not None and len(runs) > 1:
            draft_of[lo:hi] = found
    return draft_of


def _speculative(codes: np.ndarray, nested: bool) -> tuple[_Runs, list[list[tuple[int, int]]]] | None:
    """The forward passes and steps of speculative decoding: from the passes told apart by their glue
    (_spec_passes) when that glue runs kernels of the step's own prologue and epilogue (_glued: a layer of another
    kind, full attention among linear-attention layers, is no glue between passes), else (`nested`) when the
    trace's repeating unit is a whole step (_nested_speculative)."""
    passes = _spec_passes(codes, targets=2)
    if passes is not None and not _glued(codes, passes):
        passes = None
    if passes is None:
        return _nested_speculative(codes) if nested else None
    found = _runs_of(passes, by_glue=True)
    return found, _verify_steps(found.runs, found.counts)


def _spec_passes(codes: np.ndarray, targets: int) -> list[list[tuple[int, int]]] | None:
    """The forward passes of a drafter and a target (each its layers), from the boundary context among the most
    frequent runs of three kernels whose passes, told apart by their glue (mixers.passes_after_glue), show a drafter
    (_drafter_shape, with at least `targets` verify passes) and explain the most kernels; else None."""
    return _best_passes(codes, lambda counts: _drafter_shape(counts, targets))


def _best_passes(
    codes: np.ndarray, shape: Callable[[list[int]], bool], opening: bool = False
) -> list[list[tuple[int, int]]] | None:
    """Of the forward passes told apart by their glue from each of the most frequent runs of three kernels
    (mixers.frequent_contexts, mixers.passes_after_glue, `opening` as there), those whose layers per pass have the
    `shape` and that explain the most kernels; else None."""
    best: list[list[tuple[int, int]]] | None = None
    for context in mixers.frequent_contexts(codes):
        found = mixers.passes_after_glue(codes, context, opening)
        if found and shape([len(layers) for layers in found]) and _kernels(found) > _kernels(best):
            best = found
    return best


def drafter_passes(codes: np.ndarray) -> np.ndarray:
    """Per kernel of a drafter's work in one step (an engine's drafting range: its kernels in order), its forward
    pass: the passes told apart by their glue (mixers.passes_after_glue), all of one number of layers, from the
    boundary context that explains the most kernels; each pass reaches back to the end of the one before (its final
    norm, _with_final_norm), the last one on to the end. One pass when none are told apart."""
    best = _best_passes(codes, lambda counts: len(set(counts)) == 1, opening=True)
    ends = [_with_final_norm(codes, (p[0][0], p[-1][1]), p[-1][0])[1] for p in (best or [])[:-1]]
    return np.searchsorted(np.asarray(ends, dtype=np.int64), np.arange(len(codes)), side="right").astype(np.int64)


def _kernels(passes: list[list[tuple[int, int]]] | None) -> int:
    return sum(mixers.covered(layers) for layers in passes or [])


def _drafter_shape(counts: list[int], targets: int) -> bool:
    """Layers per pass of a drafter and a target: at least `targets` passes of the most layers (at least
    MIN_TARGET_LAYERS), and the other passes, at least one, all of one smaller count (a drafter runs the same
    layers each time)."""
    most = max(counts)
    others = {c for c in counts if c < most}
    return most >= MIN_TARGET_LAYERS and counts.count(most) >= targets and len(others) == 1


def _verify_steps(runs: list[tuple[int, int]], counts: list[int]) -> list[list[tuple[int, int]]]:
    """Steps of speculative decoding: each verify pass (the most layers) and the drafter's passes before it, which
    proposed what it verifies; the drafter's passes after the last verify, if any, are a group of their own (whose
    tokens no verify in the trace checks: find_passes leaves them out of every step)."""
    ends = [i + 1 for i, count in enumerate(counts) if count == max(counts)]
    return [runs[a:b] for a, b in itertools.pairwise([0, *ends, *([len(runs)] if ends[-1] < len(runs) else [])])]


def _nested_speculative(codes: np.ndarray) -> tuple[_Runs, list[list[tuple[int, int]]]] | None:
    """The forward passes and steps of speculative decoding, when the trace's repeating unit is a whole step: a
    drafter's passes and a target's verify, whose layers are found inside it (nested). Taken when every step but
    the first and last shows a drafter (step_drafts), so that a trace of one forward pass stays one step."""
    found = _runs(codes, {}, short=1 / OVERLONG, nested=True)
    groups = _group(found.runs, found.counts) if found.runs else []
    inner = groups[1:-1] or groups
    if len(groups) < 2 or not all(step_drafts(codes[g[0][0] : g[-1][1]]) is not None for g in inner):
        return None
    return found, groups


@dataclass(frozen=True)
class _Runs:
    """The forward passes ([start, end) of each run of back-to-back layers), the start of each one's last layer,
    its number of layers, and the median layer length."""

    runs: list[tuple[int, int]]
    last_starts: list[int]
    counts: list[int]
    typical: int
    spans: list[tuple[int, int]]  # every layer span found, those left out of runs too
    by_glue: bool = False  # a drafter's passes and a target's told apart by their glue (_spec_passes)


def _by_graphs(codes: np.ndarray, opens: np.ndarray | None, numbered: np.ndarray | None) -> _Runs | None:
    """The forward passes of a model compiled layer by layer: the runs of back-to-back compiled graphs, when the
    layers found over the whole sequence are its graphs (period.by_graphs; the first call of a compiled layer may
    run another variant, whose kernels end the layers elsewhere than a later call's do); else None."""
    fit = period.find_layers(codes, opens=opens, numbered=numbered) if opens is not None and opens.any() else None
    if fit is None or not fit.graphs:
        return None
    spans = [(s.start, s.end) for s in fit.layers]
    runs = period.runs_of_spans(spans)
    found = [[s for s in spans if a <= s[0] < b] for a, b in runs]
    layers = int(np.median([len(p) for p in found]))
    return _runs_of(sorted(found + _graph_passes_beside(codes, opens, runs, layers)))


def _graph_passes_beside(
    codes: np.ndarray, opens: np.ndarray, runs: list[tuple[int, int]], layers: int
) -> list[list[tuple[int, int]]]:
    """The forward passes of another variant of the compiled layers in the stretches between the `runs` of graphs
    found (the first call, whose graphs run other kernels than the later calls' and so another period): a stretch
    whose own graphs are `layers` layers back to back."""
    found = []
    for a, b in _stretches(0, len(codes), runs):
        fit = period.find_layers(codes[a:b], opens=opens[a:b]) if opens[a:b].sum() >= layers else None
        spans = [(a + s.start, a + s.end) for s in fit.layers] if fit is not None and fit.graphs else []
        if len(spans) == layers and all(x[1] == y[0] for x, y in itertools.pairwise(spans)):
            found.append(spans)
    return found


def _by_mixers(codes: np.ndarray, found: _Runs) -> _Runs | None:
    """The forward passes from where the mixers of their layers open (segment/mixers.py: layers of any kinds,
    the glue between passes told apart from a layer of another kind), when that is unambiguous; else None."""
    passes = mixers.forward_passes(codes, found.spans)
    return None if passes is None else _runs_of(passes)


def _replays_as_passes(codes: np.ndarray, found: _Runs, replay: np.ndarray) -> _Runs | None:
    """When every "layer" found is one whole CUDA graph replay that holds layers of its own, the replays are the
    forward passes (a captured decode step: its prologue and epilogue inside the graph can be too large a share for
    the replay to read as a whole iteration, INNER_COVERAGE); else None."""
    if len(found.spans) < 2 or not all(_whole_replay(replay, a, b) for a, b in found.spans):
        return None
    inner: dict[bytes, list[tuple[int, int]]] = {}  # identical replays are solved once
    for a, b in found.spans:
        key = codes[a:b].tobytes()
        if key not in inner:
            fit = period.find_layers(codes[a:b])
            inner[key] = [(s.start, s.end) for s in fit.layers] if fit else []
        if not inner[key]:
            return None
    return _runs_of([[(a + x, a + y) for x, y in inner[codes[a:b].tobytes()]] for a, b in found.spans])


def _restarts(replay: np.ndarray, graph: np.ndarray | None) -> np.ndarray:
    """The kernels that begin a replay of the graph whose replay ran the kernel before (two passes of a captured
    step, or two layers of a captured layer: never one layer)."""
    if graph is None or len(replay) < 2:
        return np.array([], dtype=np.int64)
    new = (replay[1:] != replay[:-1]) & (replay[1:] >= 0) & (replay[:-1] >= 0) & (graph[1:] == graph[:-1])
    return np.flatnonzero(new) + 1


def _whole_replay(replay: np.ndarray, lo: int, hi: int) -> bool:
    """Whether kernels [lo, hi) are all the kernels of one graph replay."""
    graph = replay[lo]
    return bool(
        graph >= 0
        and (replay[lo:hi] == graph).all()
        and (lo == 0 or replay[lo - 1] != graph)
        and (hi == len(replay) or replay[hi] != graph)
    )


def _runs_of(passes: list[list[tuple[int, int]]], by_glue: bool = False) -> _Runs:
    """The runs of forward passes whose layers are known (each pass, its layers)."""
    spans = [span for layers in passes for span in layers]
    typical = int(np.median([b - a for a, b in spans]))
    runs = [(layers[0][0], layers[-1][1]) for layers in passes]
    return _Runs(
        runs, [layers[-1][0] for layers in passes], [len(layers) for layers in passes], typical, spans, by_glue
    )


def _runs(
    codes: np.ndarray,
    cache: dict[bytes, list[tuple[int, int]]],
    short: float = 0.0,
    nested: bool = False,
    restarts: np.ndarray | None = None,
    opens: np.ndarray | None = None,
) -> _Runs:
    """The forward passes. A "layer" much longer than the median has swallowed the stretch between two passes (an
    epilogue and the next prologue) and ends a run; so does a "layer" shorter than `short` times the median (a
    repeat in the host's glue between passes, such as sampling's kernels), and one that holds one of `restarts`
    (kernels where a graph's replay follows another replay of it: a layer does not run in two; a "layer" of many
    replays is a whole iteration, such as a drafter's passes and the target's). When looking for a
    drafter (`short` or `nested`), an overlong "layer" that holds layers of the median length is a drafter's whole
    pass: its layers count (between its prologue and its epilogue). `nested`: layers inside layers are searched
    (_layers). `opens` marks the first kernel of each compiled graph (layers compiled one by one are graphs)."""
    found = _layers(codes, 0, len(codes), cache, nested, opens)
    typical = int(np.median([b - a for a, b in found])) if found else 0
    if short or nested:  # repeats shorter than any layer (the glue's) do not make the typical length
        typical = int(np.median([n for a, b in found if (n := b - a) >= period.MIN_BLOCK] or [typical]))
        found = sorted(
            itertools.chain.from_iterable(_pass_layers(codes, a, b, typical, cache, nested) for a, b in found)
        )
    keep = np.array([short * typical <= b - a <= OVERLONG * typical for a, b in found], dtype=bool)
    if restarts is not None and len(restarts) and found:
        bounds = np.array(found)
        held = np.searchsorted(restarts, bounds[:, 1]) - np.searchsorted(restarts, bounds[:, 0], side="right")
        keep &= held != 1  # one pass's end and the next one's start; spans of many replays are whole iterations
    runs = _chain(found, keep)
    glued = _glue_inside(codes, found, runs) or _ends_inside(codes, found)
    if glued:
        found, keep = _without_glue(found, keep, glued)
        runs = _chain(found, keep)
    runs = _across_layer_gaps(codes, found, runs, typical)
    return _Runs([(a, b) for a, b, _, _ in runs], [r[2] for r in runs], [r[3] for r in runs], typical, found)


def _chain(found: list[tuple[int, int]], keep: np.ndarray) -> list[list[int]]:
    """Runs of back-to-back kept spans: [start, end, last span's start, spans]."""
    runs: list[list[int]] = []
    for (start, end), kept in zip(found, keep, strict=True):
        if not kept:
            continue
        if runs and runs[-1][1] == start:
            runs[-1][1:] = [end, start, runs[-1][3] + 1]
        else:
            runs.append([start, end, start, 1])
    return runs


def _across_layer_gaps(
    codes: np.ndarray, found: list[tuple[int, int]], runs: list[list[int]], typical: int
) -> list[list[int]]:
    """The runs with those joined that a stretch of kernels the found layers all run separates, when it is shorter
    than half a `typical` layer (a few kernels a layer of another variant runs more than the unit: one more
    expert's, in a MoE layer of another kind) or, when the runs hold different numbers of layers (no passes of one
    kind), when it opens and closes as most layers do (a layer of a kind the unit steps over: the full-attention
    layer after three sliding ones, in a prefill whose dense first layer leaves a short run). The glue between two
    passes holds the epilogue's and the next prologue's kernels (the LM head, the sampling, the embedding)."""
    if len(runs) < 2:
        return runs
    known = np.unique(np.concatenate([codes[a:b] for a, b in found]))
    alike = _close(min(r[3] for r in runs), max(r[3] for r in runs))  # passes of one kind: glue between them
    ends = period.layer_ends(codes, found)
    joined = [list(runs[0])]
    for run in runs[1:]:
        gap = codes[joined[-1][1] : run[0]]
        layer_like = len(gap) <= 2 * typical and period.ends_as_layers(gap, ends)
        if (2 * len(gap) < typical or (layer_like and not alike)) and np.isin(gap, known).all():
            joined[-1][1:] = [run[1], run[2], joined[-1][3] + run[3]]
        else:
            joined.append(list(run))
    return joined


def _glue_inside(codes: np.ndarray, found: list[tuple[int, int]], runs: list[list[int]]) -> dict[int, tuple[int, int]]:
    """Per span that holds the kernels found between two runs (an epilogue and the next prologue), where they are
    in it: a "layer" that ran on from one pass into the next, a few kernels longer than a layer (a small model's
    host-side glue). Kernels that most spans hold are a layer's own, not glue; a stretch between runs that a span
    covers is a layer left out of them, not glue."""
    starts = np.array([a for a, _ in found], dtype=np.int64)
    ends = np.array([b for _, b in found], dtype=np.int64)
    gaps = [(a, b) for (_, a, _, _), (b, _, _, _) in itertools.pairwise(runs) if b - a >= MIN_GLUE]
    glues = {codes[a:b].tobytes() for a, b in gaps if not _overlapped(starts, ends, a, b)}
    held: dict[int, tuple[int, int]] = {}
    if not glues:
        return held
    for glue in glues:
        gram = np.frombuffer(glue, dtype=codes.dtype)
        hits = period.occurrences(codes, gram)
        span = np.searchsorted(starts, hits, side="right") - 1
        inside = (span >= 0) & (hits + len(gram) <= ends[np.maximum(span, 0)])
        holding = dict(zip(span[inside].tolist(), hits[inside].tolist(), strict=True))
        if len(holding) * 2 < len(found):
            held |= {i: (hit, hit + len(gram)) for i, hit in holding.items()}
    return held


def _ends_inside(codes: np.ndarray, found: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Per span that is another span's kernels whole (else the span's before it: layers grow step by step) plus a
    block after them holding the trace's first or last kernel, where that block is (see _glue_inside): the glue
    between two passes that a pass's last layer swallowed when no stretch between runs shows it (a small model's
    epilogue and prologue, a few kernels against a layer's hundred, inside one run). The trace's ends are the
    evidence when fewer than half the spans run them (the previous step's sampling, the LM head), as the kernels of
    a layer's own are not."""
    if not found:
        return {}
    ends = np.unique(codes[[0, -1]])
    holds = np.array([np.isin(ends, codes[a:b]) for a, b in found])  # per span, per end kernel
    ends, holds = ends[holds.sum(axis=0) * 2 < len(found)], holds[:, holds.sum(axis=0) * 2 < len(found)]
    kinds = period.span_kinds(codes, found)
    held: dict[int, tuple[int, int]] = {}
    for i in np.flatnonzero(holds.any(axis=1)).tolist():  # the few spans that run an end kernel at all
        a, b = found[i]
        beside = found[i - 1] if i else found[min(1, len(found) - 1)]  # a layer of this pass
        whole = period.longest_kind_at(codes, a, kinds, b - a - 1) or beside[1] - beside[0]
        if whole < b - a and np.isin(ends, codes[a + whole : b]).any():
            held[i] = (a + whole, b)
    return held


def _overlapped(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> bool:
    """Whether a span (sorted, not overlapping) overlaps [lo, hi): then the stretch is a layer left out of the runs
    (of another kind or length), not glue."""
    i = int(np.searchsorted(ends, lo, side="right"))
    return i < len(starts) and starts[i] < hi


def _without_glue(
    found: list[tuple[int, int]], keep: np.ndarray, glued: dict[int, tuple[int, int]]
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The spans with the glue cut out of those that hold it: the end of one pass's last layer, the start of the next
    pass's first."""
    spans: list[tuple[int, int]] = []
    kept: list[bool] = []
    for i, (start, end) in enumerate(found):
        pieces = [(start, glued[i][0]), (glued[i][1], end)] if i in glued else [(start, end)]
        pieces = [(a, b) for a, b in pieces if b > a]
        spans += pieces
        kept += [bool(keep[i])] * len(pieces)
    return spans, np.array(kept, dtype=bool)


def _layers(
    codes: np.ndarray,
    lo: int,
    hi: int,
    cache: dict[bytes, list[tuple[int, int]]] | None = None,
    nested: bool = False,
    opens: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """Layer spans in codes[lo:hi]: the best fit, then fits of their own in the long stretches it left (a prefill
    among decode steps). When the best repeating unit is a whole iteration (its instances hold layers of their
    own), its layers are those; `nested`, they are found the same way inside each instance (a step of speculative
    decoding holds a drafter's passes, each holding layers)."""
    cache = {} if cache is None else cache
    fit = period.find_layers(codes[lo:hi], kinds=False)
    if fit is None:
        return []
    spans = [(lo + s.start, lo + s.end) for s in fit.layers]
    middle = _inner_layers(codes, *spans[len(spans) // 2], cache, nested, opens)
    if middle:  # one instance tells whether the unit is a whole iteration
        inner = itertools.chain.from_iterable(_inner_layers(codes, a, b, cache, nested, opens) for a, b in spans)
        return sorted([*inner, *_passes_beside(codes, (lo, hi), spans, middle, cache, nested, opens)])
    found = list(spans)
    for a, b in _stretches(lo, hi, spans):
        if b - a >= MIN_STRETCH_LAYERS * fit.period and (a, b) != (lo, hi):
            found += _layers(codes, a, b, cache, nested, opens)
    return sorted(found)


def _stretches(lo: int, hi: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of [lo, hi) that no span covers."""
    edges = [lo, *itertools.chain.from_iterable(spans), hi]
    return [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True) if b > a]


def _passes_beside(
    codes: np.ndarray,
    bounds: tuple[int, int],
    iterations: list[tuple[int, int]],
    middle: list[tuple[int, int]],
    cache: dict[bytes, list[tuple[int, int]]],
    nested: bool,
    opens: np.ndarray | None,
) -> list[tuple[int, int]]:
    """Layers of the stretches beside whole iterations that hold a forward pass of another variant (the first call
    of a compiled model runs other kernels than the later ones): layers back to back, as many as an iteration holds.
    Other stretches (a prologue, a sampler's kernels) give none."""
    typical = int(np.median([b - a for a, b in middle]))
    found: list[tuple[int, int]] = []
    for a, b in _stretches(*bounds, iterations):
        if b - a < len(middle) * typical // 2:
            continue
        layers = _layers(codes, a, b, cache, nested, opens)
        if len(layers) == len(middle) and all(x[1] == y[0] for x, y in itertools.pairwise(layers)):
            found += layers
    return found


def _inner_layers(
    codes: np.ndarray,
    lo: int,
    hi: int,
    cache: dict[bytes, list[tuple[int, int]]],
    nested: bool = False,
    opens: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """The layers inside one instance of a repeating unit, when they cover most of it (a whole iteration: layers
    between a prologue and an epilogue; the experts of a layer's loop leave its attention out) and do not fill it
    from end to end (the layers of a hybrid unit: three linear-attention layers and a full one) or are more than
    such a unit holds (MAX_UNIT_LAYERS: an instance out of phase with the passes, whose glue a layer took in, as
    MoE layers whose expert loops vary do) or the instance opens otherwise than its later layers (_opens_otherwise:
    with its embedding). `nested`: found
    by _layers inside the instance, and also taken when they are copies of one unit (a run of a drafter's passes)
    or cover PASSES_COVERAGE of an instance that is a whole step of speculative decoding (step_drafts: a drafter's
    passes and a target's). Identical instances are solved once (`cache`, keyed by their kernels)."""
    unit_opens = opens[lo:hi] if opens is not None and opens[lo:hi].any() else None
    key = codes[lo:hi].tobytes() + (unit_opens.tobytes() if unit_opens is not None else b"")
    if key not in cache:
        cache[key] = []  # an instance is not searched again while it is being searched
        cache[key] = _nested_inner(codes, lo, hi, cache) if nested else _inner(codes[lo:hi], unit_opens)
    return [(lo + a, lo + b) for a, b in cache[key]]


def _inner(unit: np.ndarray, opens: np.ndarray | None) -> list[tuple[int, int]]:
    """The layers of one instance (see _inner_layers); layers compiled one by one are its compiled graphs, however
    short a share of it (a compiled layer runs few kernels beside an eager prologue)."""
    fit = period.find_layers(unit, kinds=False, whole_pass=True)
    if (
        fit is not None
        and fit.coverage >= INNER_COVERAGE
        and (len(fit.layers) > MAX_UNIT_LAYERS or _opens_otherwise(unit, fit) or not _all_layers(unit))
    ):
        return [(s.start, s.end) for s in fit.layers]
    graphs = period.find_layers(unit, kinds=False, opens=opens) if opens is not None else None
    return [(s.start, s.end) for s in graphs.layers] if graphs is not None and graphs.graphs else []


def _nested_inner(
    codes: np.ndarray, lo: int, hi: int, cache: dict[bytes, list[tuple[int, int]]]
) -> list[tuple[int, int]]:
    inner = [(a - lo, b - lo) for a, b in _layers(codes, lo, hi, cache, nested=True)]
    covered = sum(b - a for a, b in inner) / max(hi - lo, 1)
    copies = len({codes[lo + a : lo + b].tobytes() for a, b in inner}) == 1 and len(inner) > 1
    good = (covered >= INNER_COVERAGE and (copies or not _all_layers(codes[lo:hi]))) or (
        covered >= PASSES_COVERAGE and step_drafts(codes[lo:hi]) is not None
    )
    return inner if good else []


def _opens_otherwise(unit: np.ndarray, fit: period.PeriodFit) -> bool:
    """Whether an instance opens with a kernel that none of its layers after the first opens with: a forward pass
    opens with its embedding, which its first layer took in when the layers found fill it (a dense first layer
    before MoE ones of many lengths); a unit of layers of several kinds opens with a layer's norm."""
    return int(unit[0]) not in {int(unit[s.start]) for s in fit.layers[1:]}


def _all_layers(unit: np.ndarray) -> bool:
    """Whether a unit is layers from end to end (layers of several kinds: three linear-attention layers and a full
    one) rather than a forward pass, whose prologue and epilogue are not layers: its layers, with those of other
    kinds found from boundary to boundary, leave no kernel out."""
    fit = period.find_layers(unit, halves=False, whole_pass=True)
    return fit is not None and sum(s.end - s.start for s in fit.layers) == len(unit)


def _group(runs: list[tuple[int, int]], counts: list[int]) -> list[list[tuple[int, int]]]:
    """Forward passes grouped into steps: the shortest repeating pattern of pass lengths (a drafter's passes and
    the target's alternate in speculative decoding); passes that all look alike are a step each. When the
    drafter's passes per step vary (acceptance changes them), each step holds one of the longest passes with the
    most layers (the target's verify) and the other passes next to it: before it when the trace opens with
    another pass, else after it."""
    sizes = [b - a for a, b in runs]
    for m in range(1, len(runs)):
        if all(_close(sizes[i], sizes[i % m]) for i in range(len(sizes))):
            return [runs[i : i + m] for i in range(0, len(runs), m)]
    targets = [i for i, size in enumerate(sizes) if _close(size, max(sizes)) and counts[i] == max(counts)]
    if len(targets) < 2 or len(targets) == len(runs):
        return [runs]
    after = [i + 1 for i in targets[:-1]]  # a step ends with its target pass, unless the trace opens with one
    edges = [*targets, len(runs)] if targets[0] == 0 else [0, *after, len(runs)]
    return [runs[a:b] for a, b in itertools.pairwise(edges)]


def step_drafts(codes: np.ndarray) -> np.ndarray | None:
    """Per kernel of one step (its main stream, in order), its drafter's forward pass (NO_DRAFT for the target's
    kernels), or None when the step shows no drafter. First from the passes told apart by their glue (_spec_passes:
    one verify, the pass of the most layers; the drafter's passes each reach to their final norm); else the step's
    forward passes are its runs of layers: the longest
    is the target's verify (when it has the most layers, at least MIN_TARGET_LAYERS, and no other pass is about as
    long); passes of fewer layers,
    all of one count, are the drafter's (runs of several counts are layers of several kinds). A drafter's passes
    that run back to back form one run whose "layers" are whole passes (each holds layers of its own): each is a
    pass. Between two passes lie an epilogue and a prologue (_whole_passes). The drafter's kernels reach from the
    step's start (or the end of the target's pass) to the end of its last
    pass before the target's (or the step's end); each pass takes the glue before it (its prologue), and the last
    one before the target's its epilogue as long as the others' (_epilogue)."""
    cache: dict[bytes, list[tuple[int, int]]] = {}
    found = _runs(codes, cache, short=1 / OVERLONG)
    spec = _spec_passes(codes, targets=1)
    counts = [len(layers) for layers in spec or []]
    if spec and counts.count(max(counts)) == 1 and _glued(codes, spec) and not _run_past(spec, counts, found):
        spans = [_with_final_norm(codes, (layers[0][0], layers[-1][1]), layers[-1][0]) for layers in spec]
        verify = counts.index(max(counts))
        return _draft_of(codes, spans[verify], spans[:verify] + spans[verify + 1 :])
    if len(found.runs) < 2:
        return None
    sizes = [b - a for a, b in found.runs]
    longest = sizes.index(max(sizes))
    most = found.counts[longest]
    if most < max(MIN_TARGET_LAYERS, *found.counts) or sum(_close(size, sizes[longest]) for size in sizes) > 1:
        return None
    target = found.runs[longest]
    drafts = [r for r, c in zip(found.runs, found.counts, strict=True) if c < most]
    if len({c for c in found.counts if c < most}) > 1:  # a drafter's passes run the same layers each time
        return None
    if not _whole_passes(codes, found):
        return None
    layer = (target[1] - target[0]) // most
    passes = list(itertools.chain.from_iterable(_draft_passes(codes, r, layer, cache) for r in drafts))
    return _draft_of(codes, target, passes)


def _draft_of(codes: np.ndarray, target: tuple[int, int], passes: list[tuple[int, int]]) -> np.ndarray | None:
    """Per kernel of a step's `codes`, its drafter's pass (NO_DRAFT for the target's), from the target's pass and
    the drafter's (each from its first layer's start to its last layer's end); see step_drafts."""
    n = len(codes)
    before = [b for _, b in passes if b <= target[0]]  # each pass reaches back to the previous one
    after = [a for a, _ in passes if a >= target[1]]  # each reaches on to the next one
    if before:  # the last pass before the target's keeps its epilogue
        drafts = [p for p in passes if p[1] <= target[0]]
        epilogue = max(_epilogue(drafts), _shared_epilogue(codes, drafts, target[0]))
        before[-1] = min(before[-1] + epilogue, target[0])
    draft_of = np.full(n, NO_DRAFT, dtype=np.int64)
    spans = [*itertools.pairwise([0, *before]), *itertools.pairwise([*after, n])]
    if not spans:
        return None
    for index, (a, b) in enumerate(spans):
        draft_of[a:b] = index
    return draft_of


def _glued(codes: np.ndarray, passes: list[list[tuple[int, int]]]) -> bool:
    """Whether between every two of the forward `passes` (each its layers) run a kernel of the step's own prologue
    (before the first pass) and one of its epilogue (after the last) that no layer runs: the glue between two passes
    holds the LM head or sampling, and the next embedding; the parts of MoE layers told apart as passes (an expert
    loop's GEMMs between copies of a loop) hold only kernels layers run, and a layer of a kind no other layer is
    (full attention among linear-attention layers) may share its rotary kernels with the prologue, not the LM
    head with the epilogue."""
    layers_run = {code for layers in passes for a, b in layers for code in codes[a:b].tolist()}
    first, last = passes[0][0][0], passes[-1][-1][1]
    before = _own_kernels(codes, (first, len(codes)), layers_run)
    after = _own_kernels(codes, (0, last), layers_run)
    glues = [set(codes[a[-1][1] : b[0][0]].tolist()) for a, b in itertools.pairwise(passes)]
    return all(glue & before and glue & after for glue in glues)


def _run_past(passes: list[list[tuple[int, int]]], counts: list[int], found: _Runs) -> bool:
    """Whether a run of layers the repeating unit found holds more layers than the verify pass (the pass of the
    most, `counts`) and runs on past its end by a layer or more: the verify is a forward pass's part, its "passes"
    after it the pass's later layers (MoE layers told apart by the routing between their expert loops). A drafter's
    passes before the verify may join its run, which then ends with the verify's last layer."""
    verify = passes[counts.index(max(counts))]
    return any(
        count > len(verify) and lo < verify[-1][1] and hi - verify[-1][1] >= found.typical
        for (lo, hi), count in zip(found.runs, found.counts, strict=True)
    )


def _own_kernels(codes: np.ndarray, layers: tuple[int, int], layers_run: set[int]) -> set[int]:
    """The kernels of a step's own prologue (before `layers`, from its first layer to its last) and epilogue (after
    them) that no layer runs (`layers_run`): the embedding, the LM head, sampling."""
    return (set(codes[: layers[0]].tolist()) | set(codes[layers[1] :].tolist())) - layers_run


def _whole_passes(codes: np.ndarray, found: _Runs) -> bool:
    """Whether the step's runs of layers are whole forward passes: between two of them lie one's epilogue and the
    next one's prologue, at least MIN_GLUE kernels (a final norm, the LM head, the next embedding), at least
    OWN_IN_GLUE kinds of them kernels of the step's own prologue or epilogue that no layer runs (sampling, the
    embedding: not the end of a MoE layer found in part, whose expert GEMMs vary with the tokens each expert takes
    and may be the LM head's tile variant), and no layer of MIN_BLOCK kernels or more (a dense layer between dense
    and MoE ones, left out of the runs for its length), and between two passes of the drafter (of fewer layers than
    the most) the same kernels each time (its sampling and embedding: not the rest of MoE layers found in part,
    whose expert loops differ)."""
    most = max(found.counts)
    own = _own_kernels(
        codes, (found.runs[0][0], found.runs[-1][1]), {c for a, b in found.spans for c in codes[a:b].tolist()}
    )
    drafter_glue = set()
    for ((_, end), (start, _)), pair in zip(
        itertools.pairwise(found.runs), itertools.pairwise(found.counts), strict=True
    ):
        inside = any(end <= a and b <= start and b - a >= period.MIN_BLOCK for a, b in found.spans)
        if start - end < MIN_GLUE or inside or len(own.intersection(codes[end:start].tolist())) < OWN_IN_GLUE:
            return False
        if max(pair) < most:
            drafter_glue.add(codes[end:start].tobytes())
    return len(drafter_glue) <= 1


def _with_final_norm(codes: np.ndarray, run: tuple[int, int], last_start: int) -> tuple[int, int]:
    """A forward pass from its first layer to the end of its final norm: the kernels after its last layer (from
    `last_start`) that repeat how that layer opens (its input norm), at most half a layer."""
    start, end = run
    size = min(end - last_start, len(codes) - end) // 2
    return start, end + _common(codes[end : end + size], codes[last_start : last_start + size])


def _shared_epilogue(codes: np.ndarray, drafts: list[tuple[int, int]], target: int) -> int:
    """The epilogue of the drafter's last pass before the target's (starting at `target`): what follows it and
    what follows the pass before it (up to the last one) open alike - LM head, sampling, the host's bookkeeping -
    until the target's prologue and the drafter's differ; less what both end alike with (a prologue the target
    shares with the drafter); 0 with one pass."""
    if len(drafts) < 2:
        return 0
    (_, prev_end), (last_start, last_end) = drafts[-2:]
    between, after = codes[prev_end:last_start], codes[last_end:target]
    return max(_common(between, after) - _common(between[::-1], after[::-1]), 0)


def _first_layer_start(codes: np.ndarray, spans: list[tuple[int, int]], lo: int, start: int) -> int:
    """Where a pass's first layer starts, the found one starting at `start` after glue from `lo`: as many kernels
    earlier as the glue ends with the found layer's own last kernels. A layer found out of phase ends with the next
    layer's opening (its input norm), and the pass's first layer then has its opening right before it, in what looks
    like glue; a step boundary searched there could cut the layer in two (an idle gap inside it, as where the cache
    grows). Only between eager passes of one kind (a replayed pass starts where its replay does, and a drafter's
    passes and a target's glue differ), and by less than half the layer (the glue ending with most of a layer is a
    drafter's pass, of another norm)."""
    span = next(((a, b) for a, b in spans if a == start), None)
    if span is None:
        return start
    shift = _common(codes[lo:start][::-1], codes[span[0] : span[1]][::-1])
    return start - shift if 2 * shift < span[1] - span[0] else start  # an opening, not a whole layer of another pass


def _common(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the common prefix of two code sequences."""
    size = min(len(a), len(b))
    same = a[:size] == b[:size]
    return size if same.all() else int(np.argmin(same))


def _epilogue(passes: list[tuple[int, int]]) -> int:
    """The kernels a drafter's pass runs after its last layer (final norm, LM head, sampling): what lies between its
    first two passes' layers, less what the first ran before its layers (from the step's start); 0 for one pass."""
    if len(passes) < 2:
        return 0
    return max(passes[1][0] - passes[0][1] - passes[0][0], 0)


def _draft_passes(
    codes: np.ndarray, run: tuple[int, int], layer: int, cache: dict[bytes, list[tuple[int, int]]]
) -> list[tuple[int, int]]:
    """The drafter's passes in one run: its units when each holds layers of its own of about the target's layer
    length `layer` (passes back to back), else the run as one pass."""
    units = _layers(codes, *run, cache)
    if len(units) > 1 and all(_of_length(_layers(codes, a, b, cache), layer) for a, b in units):
        return units
    return [run]


def _pass_layers(
    codes: np.ndarray, lo: int, hi: int, typical: int, cache: dict[bytes, list[tuple[int, int]]], nested: bool
) -> list[tuple[int, int]]:
    """An overlong span's layers when it holds layers of about the `typical` length covering at least
    PASSES_COVERAGE of it (a whole pass of a drafter, back to back with its next one), else the span."""
    if hi - lo <= OVERLONG * typical:
        return [(lo, hi)]
    inner = _layers(codes, lo, hi, cache, nested)
    covered = sum(b - a for a, b in inner) >= PASSES_COVERAGE * (hi - lo)
    return inner if covered and _of_length(inner, typical) else [(lo, hi)]


def _of_length(layers: list[tuple[int, int]], length: int) -> bool:
    """Several layers, each about `length` kernels long."""
    return len(layers) > 1 and all(_close(b - a, length) for a, b in layers)


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


def _boundary_range(
    codes: np.ndarray, end: int, searched_from: int, start: int, ends: tuple[np.ndarray, np.ndarray]
) -> tuple[int, int]:
    """Where the step boundary may fall between a pass whose last layer ends at `end` and the next pass, starting at
    `start` (`_glue_range`; `ends`: the trace's opening and closing). The glue from `end` on, when `_glue_range`
    places the boundary in it (it is as long as the trace's own epilogue and prologue together, or opens and ends
    as they do); else from `searched_from` on (the last layer found may have been cut short, and the rest of it is
    no glue)."""
    opening, closing = ends
    whole = _glue_range(codes, end, start, opening, closing)
    if whole != (end, start):
        return whole
    return _glue_range(codes, min(max(end, searched_from), start), start, opening, closing)


def _glue_range(codes: np.ndarray, lo: int, hi: int, opening: np.ndarray, closing: np.ndarray) -> tuple[int, int]:
    """Where the step boundary may fall in the glue codes[lo:hi] between two passes: one pass's epilogue, then the
    next one's prologue. When the glue is as long as the trace's own epilogue (`closing`, after its last pass) and
    prologue (`opening`, before its first pass) together, the boundary is between them. Else, when it opens as the
    trace's epilogue does and ends as its prologue does and the two matches cover it, the boundary lies where they
    meet or overlap; else anywhere in it."""
    glue = codes[lo:hi]
    if len(closing) + len(opening) == len(glue):
        return lo + len(closing), lo + len(closing)
    head, tail = _common(glue, closing), _common(glue[::-1], opening[::-1])
    return (hi - tail, lo + head) if head + tail >= len(glue) else (lo, hi)


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


def _stray_gap(idle: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, runs: list[tuple[int, int]]) -> float:
    """An idle gap longer than this leaves the kernels beyond it at either end of the trace out of every step:
    STRAY_GAP_FACTOR times the longest one inside the passes, and as long as the shortest pass lasts (a stall before
    the first GEMM of a pass, cuBLAS loading its kernel, is shorter: its prologue stays)."""
    shortest = min(int(end_ns[b - 1] - start_ns[a]) for a, b in runs)
    return max(STRAY_GAP_FACTOR * max(_longest_inside(idle, runs), 1), shortest)


def _first_kept(idle: np.ndarray, first: int, threshold: float) -> int:
    """The first kernel of the first step: kernels before the first pass stay with it up to an idle gap longer
    than `threshold` (what comes before such a gap is a stray)."""
    far = np.flatnonzero(idle[1 : first + 1] > threshold) + 1
    return int(far[-1]) if len(far) else 0


def _end_kept(idle: np.ndarray, end: int, threshold: float) -> int:
    """One past the last kernel of the last step, likewise after the last pass."""
    far = np.flatnonzero(idle[end:] > threshold) + end
    return int(far[0]) if len(far) else len(idle)
