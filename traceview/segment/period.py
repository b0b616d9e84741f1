"""Layers from the repetition of the kernel sequence, when no annotation names them (numpy, no per-kernel loop).

Input: one step's kernels as integer codes (one code per distinct kernel name), in launch order on the
step's main stream. Output: the layer instances as index ranges into that sequence, with a confidence.

The algorithm, near-linear in the number of kernels:
1. *Candidate periods.* For every code, the gaps between its consecutive occurrences. A code that runs once
   per layer has gaps equal to the layer length (the period) for all layers of one kind, so the median gap
   of every "regular" code (most gaps close to its median) is a candidate period.
2. *Anchor.* For a candidate period P, the anchor is the regular code with that median gap that runs in the
   most layers (a few dense first layers share the attention kernels with the MoE layers that follow).
   Each anchor occurrence marks one layer; the kernels between two occurrences are one layer, so the
   kernel count of a layer does not depend on where exactly its boundary falls.
3. *Phase.* The unit is the most common anchor-to-anchor segment. The layer starts `d` kernels before its
   anchor, where `d` is how far the unit's tail keeps matching backwards before the first layer's anchor
   (the prologue - embedding - does not look like the end of a layer): the leftmost extension of the
   repetition.
4. *Acceptance.* A segment is a layer when its kernels and the unit's share most of their multiset
   (precision and recall at least 1/2): MoE routing that varies, one extra kernel all pass; the epilogue
   (final norm, LM head, sampling) and the prologue do not. A layer of another kind (a dense layer before
   MoE ones) passes when it opens like the unit and a layer follows it; such layers before the first anchor
   are found by searching the unit's opening kernels backwards. Without two identical layers, the layers
   must also follow the unit's kernel order (pairs of consecutive kernels), or nothing is said to repeat.
5. *Choice.* Among candidates covering nearly as many kernels as the best, the shortest period whose
   consecutive layers agree (common opening + closing kernels over the longer layer, 0.85 on average); else
   the best coverage x agreement. Half layers (attention, then MLP) and expert blocks disagree with their
   neighbours; a unit of two alternating layers agrees better than one layer, but one layer agrees enough.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from . import mixers

MIN_LAYERS = 2
REGULAR_TOLERANCE = 0.25  # a gap within 25% of the code's median gap counts as regular
REGULAR_SHARE = 0.5  # share of a code's gaps that must be regular
ACCEPT_PRECISION = 0.5  # share of the segment's kernels found in the unit
ACCEPT_RECALL = 0.5  # share of the unit's kernels found in the segment
OTHER_KIND_RECALL = 0.25  # the same, for a layer of another kind that opens like the unit
AGREEING = 0.85  # mean agreement of consecutive layers that makes a fit trustworthy
NEAR_TIE = 0.9  # a shorter period wins when it covers at least this share of the best coverage
MAX_CANDIDATES = 12  # a prefill among decode steps can hold a dozen shorter regular periods
MIN_COVERAGE = 0.2
EXACT_OR_CONFIDENT = 0.8  # without two identical layers, the mean confidence a fit needs
ACCEPT_EDGE = 0.9  # share of an edge layer's kernels that found layers also run
HINTED_EDGE = 0.6  # the same, when the user's layer count says layers are missing
MAX_PHASES = 4  # plausible phases tried, earliest first (the spill of a final norm is rarely wider)
SPLIT_ALIKE = 0.75  # multiset similarity of the parts of a unit that holds several layers of alternating kinds
MIN_BLOCK = 8  # the fewest kernels of a layer repeated at the start of a unit of several layers
EXTENSION_REACH = 2  # phases after the leftmost extension tried beside the latest ones (_phases)
MIXERS_SHARE = 0.75  # of the layers' kernels the layers found from their mixers explain (not a loop inside them)
NORM_CASTS = 2  # dtype casts a norm may open with (to its weight's dtype, then to float32)
MAX_NORMS = 4  # norms a layer holds at most (_norm_period)
MAX_GRAPH_KINDS = 4  # compiled graphs a unit of layers of several kinds holds at most (_graphs_of_kinds)
NEAR_NORM = 2  # kernels from the first found layer's start to a norm that make it open with that norm (a cast)
# kernels of the block that closes a layer with its residual add, when the unit's phase put it at the next layer's
# opening, up to its add: the add and the multiply that weighs the output (hyper-connections), each with up to
# NORM_CASTS casts
CLOSING_BLOCK = 2 + 2 * NORM_CASTS
NORM_SHARE = 0.75  # of the layers whose nearest norm kernel is at one offset from their start, to move them there
# kernels a layer's channel-mixer norm may repeat of its opening: an eager RMSNorm computed in float32 with its casts
# (8 kernels) and one or two projections after it, alike at small sizes
NORM_REPEAT = 10
EXTENDED_MIN = 8  # the fewest kernels of a layer kind that extends_another looks for inside longer kinds
EXTENDED_BY = 4  # kernels before or after it that make a longer kind another kind extended
GRAPH_REACH = 3  # kernels between a found layer's start and its compiled graph's first kernel (Inductor's reorder)


@dataclass(frozen=True)
class LayerSpan:
    """One inferred layer instance: kernels [start, end) of the sequence, and how well it matches the unit."""

    start: int
    end: int
    confidence: float


@dataclass(frozen=True)
class PeriodFit:
    """The layers found in one sequence: the repeating unit's length, coverage and mean confidence."""

    layers: tuple[LayerSpan, ...]
    period: int
    coverage: float
    confidence: float
    agreement: float = 1.0
    alike: float = 1.0
    graphs: bool = False  # the layers are the compiled graphs (by_graphs)


@dataclass(frozen=True)
class _CodeStats:
    """Per code: occurrences, median gap between consecutive occurrences, share of regular gaps."""

    count: np.ndarray
    median_gap: np.ndarray
    regular_share: np.ndarray
    first: np.ndarray


def find_layers(
    codes: np.ndarray,
    min_layers: int = MIN_LAYERS,
    families: np.ndarray | None = None,
    kinds: bool = True,
    edges: bool = True,
    expected: int | None = None,
    halves: bool = True,
    opens: np.ndarray | None = None,
    graphs: bool = False,
    whole_pass: bool = False,
    numbered: np.ndarray | None = None,
) -> PeriodFit | None:
    """The best layer segmentation of `codes`, or None when nothing repeats at least `min_layers` times.
    `families` (one id per kernel, segment/family.py) tells which different kernels are variants of one operation:
    a first layer that opens with a variant of the others' opening kernel is cut where they are. With `kinds`
    false, a unit of several layers of different sizes stays whole (segment/passes.py wants parts of one size). With
    `edges`, layers the unit left out at the edges and in gaps are added (`with_edge_layers`). `expected` is the
    number of layers of a forward pass the user gave (`toward_count`). With `halves`, the layers of every forward pass
    are found again from where their mixers open (`by_mixers`) when that gives an unambiguous answer. `opens` (one
    flag per kernel) marks the first kernel of each compiled graph: layers compiled one by one are those graphs
    (`by_graphs`; with `graphs`, whatever the phase of the layers found: another step's were the graphs);
    `numbered` (one flag per kernel) marks the kernels Inductor numbers, which tell where a graph ends. With
    `whole_pass`, `codes` is one step, which ends with its forward pass's final norm and LM head (`_ends_in_part`)."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    if len(codes) < 2 * min_layers:
        return None
    codes = dense(codes)
    fits = _fits(codes, min_layers, families, whole_pass)
    best = choose(fits)
    if families is not None and (best is None or len(best.layers) <= min_layers):  # few or no layers alike by name
        by_family = _fits(dense(families), min_layers, None, whole_pass)
        other = choose(by_family)
        if other is not None and (
            best is None or (len(other.layers) > len(best.layers) and other.coverage >= NEAR_TIE * best.coverage)
        ):
            fits, best = by_family, other
    if best is None and opens is not None and opens.any():
        return _graphs_alone(codes, opens, families, min_layers, numbered)
    if best is None:
        return None
    if opens is not None and opens.any() and _adrift_of_graphs(_bounds(best.layers), np.flatnonzero(opens)):
        best = _graphs_alone(codes, opens, families, min_layers, numbered) or best
    best = _in_whole_phase(codes, fits, best) if whole_pass else best
    fit = split_alternating(codes, best, kinds)
    fit = with_edge_layers(codes, fit) if edges else fit
    fit = by_mixers(codes, fit) if kinds and edges and halves else fit
    fit = by_graphs(codes, fit, opens, graphs, families, numbered) if opens is not None and opens.any() else fit
    return toward_count(codes, fit, expected) if expected else fit


def _fits(codes: np.ndarray, min_layers: int, families: np.ndarray | None, whole_pass: bool) -> list[PeriodFit]:
    """The fit of each candidate period (a layer of another kind's confidence counts kernels by family: see
    _accepted)."""
    stats = code_stats(codes)
    kin = codes if families is None else dense(families)
    return [
        fit
        for period in candidate_periods(stats)
        if (fit := _fit(codes, stats, period, min_layers, kin, families, whole_pass))
    ]


def norm_openings(codes: np.ndarray, norms: np.ndarray, casts: np.ndarray) -> np.ndarray:
    """Per kernel, whether a norm opens there: a norm kernel (`norms`), or the dtype casts (`casts`) right before
    it where that norm's kernel mostly comes after one: a norm that computes in float32 casts its input first
    (OLMo's LayerNorm; Mamba's block casts to the norm's dtype, then the norm to float32: up to NORM_CASTS casts),
    and the layer opens with the first of as many casts as that norm's kernel mostly follows. A cast that only
    sometimes comes before the norm is not its own (the rotary embedding's casts at the end of the prologue)."""
    at = np.flatnonzero(norms)
    before = casts_before(at, casts & ~norms)
    kinds, kind_of = np.unique(codes[at], return_inverse=True)
    after_cast = np.bincount(kind_of, weights=before > 0, minlength=len(kinds))
    own = after_cast * 2 > np.bincount(kind_of, minlength=len(kinds))
    usual = np.array([_most_common(before[kind_of == k]) for k in range(len(kinds))], dtype=np.int64)
    opens = np.zeros(len(norms), dtype=bool)
    opens[at - np.minimum(before, usual[kind_of]) * own[kind_of]] = True  # a cast more than usual is another's
    return opens


def casts_before(at: np.ndarray, casts: np.ndarray) -> np.ndarray:
    """Per position `at`, how many dtype casts (`casts`, one flag per kernel) come right before it, up to
    NORM_CASTS."""
    before = np.zeros(len(at), dtype=np.int64)
    for back in range(1, NORM_CASTS + 1):
        before += (before == back - 1) & (at >= back) & casts[np.maximum(at - back, 0)]
    return before


def at_norms(codes: np.ndarray, fit: PeriodFit | None, norms: np.ndarray | None) -> PeriodFit | None:
    """The layers moved to open with their input norm, where the kernel names say which kernels are norms (`norms`,
    one flag per kernel where a norm opens: norm_openings). A pre-norm layer opens with its norm and ends with its
    residual add. The repeating unit cannot tell that from a neighbouring phase when the trace's prologue ends like
    a layer (the add of the position embedding, the same kernel as the residual add) or its epilogue opens like one:
    the found layers then open a few kernels off the norm. When most layers (NORM_SHARE) have their nearest norm at
    the same offset from their start, less than half a layer away, they move by that offset (`_moved_to_norms`), and
    a first layer found starting late opens at its own norm (`_from_first_norm`). Layers of one norm each found out
    of phase, and pre-norm layers found so far out of phase that their nearest norm is their channel mixer's (the
    first found layer opens far from every norm), are the stretches between every k-th norm, k the norms a found
    layer mostly holds (`_between_norms`). The answer must be a pre-norm stack: its first layer opens with a norm and
    a norm follows its last (the final norm). In a post-norm stack each layer ends with its norm and the first opens
    with none before it: its layers stay as found."""
    if fit is None or norms is None or not norms.any() or not fit.layers:
        return fit
    found = [(s.start, s.end) for s in fit.layers]
    median = int(np.median([b - a for a, b in found]))
    at = np.flatnonzero(norms)
    held = _norms_in(found, at)
    every = _most_common(held)
    candidates = [_between_norms(found[0][0], at, median, len(codes)) if (held == 1).all() else None]
    candidates += [_moved_to_norms(found, norms, median)]
    starts = np.array([a for a, _ in found])
    post_norm = norms[np.maximum(starts - 1, 0)].mean() >= NORM_SHARE  # each layer closes with its norm
    first_far = _distance_to(at, starts[:1])[0] > NEAR_NORM  # a pre-norm stack's first layer opens with its norm
    if (held == every).mean() >= NORM_SHARE and first_far and not post_norm:  # found out of phase
        candidates += [_between_norms(found[0][0], at, median, len(codes), every)]
    if not post_norm and _half_left_out(codes, found, int(at[0]), median):
        candidates.insert(0, _opening_as_the_first(codes, found, at))
    if (held == 0).mean() >= NORM_SHARE and (k := _norm_period(codes, at)):  # a loop inside a layer
        own = at[(len(at) - 1) % k :]  # k norms a layer and the final norm; a norm before them is the embedding's
        candidates += [_between_norms(own[0], own, int(np.median(np.diff(own[::k]))), len(codes), k)]
    for bounds in candidates:
        if bounds is None:
            continue
        bounds[0] = _from_first_norm(bounds[0], at, median)
        bounds = _with_layer_before(bounds, at, median)
        first, end = bounds[0][0], bounds[-1][1]
        if bounds == found:
            return fit
        if norms[first] and end < len(codes) and norms[end]:
            return _refit(codes, fit, bounds)
    return fit


def _half_left_out(codes: np.ndarray, found: list[tuple[int, int]], first_norm: int, median: int) -> bool:
    """Whether the stretch from the step's first norm to the first found layer is half a `median` layer or more
    and runs nearly only kernels the layers run (ACCEPT_EDGE): the first layer's first half, left out by layers
    found a half out of phase (sandwich norms: a norm before and after each mixer, so both phases open with a norm
    and close with a residual add)."""
    if found[0][0] - first_norm < median // 2:
        return False
    known = np.unique(np.concatenate([codes[a:b] for a, b in found]))
    return bool(np.isin(codes[first_norm : found[0][0]], known).mean() >= ACCEPT_EDGE)


def _opening_as_the_first(
    codes: np.ndarray, found: list[tuple[int, int]], norms: np.ndarray
) -> list[tuple[int, int]] | None:
    """Layers that open where the block the step's first norm (positions `norms`) opens with runs (MIN_BLOCK
    kernels or more, until the channel mixer's norm and what follows it no longer match: the first layer's input
    norm and the start of its token mixer), to the last norm (the final norm), when that block runs once before the
    first found layer and once in each found layer: layers found a half out of phase (_half_left_out) each hold one
    opening of a whole layer. None otherwise."""
    first, length = int(norms[0]), MIN_BLOCK
    places = _places_of(codes, codes[first : first + length])
    while len(places) > len(found) + 1 and length < (found[0][1] - found[0][0]) // 2:  # a norm opens each mixer
        length += 1
        places = _places_of(codes, codes[first : first + length])
    starts = np.array([a for a, _ in found])
    per_layer = np.searchsorted(places, [b for _, b in found]) - np.searchsorted(places, starts)
    if len(places) != len(found) + 1 or places[0] != first or (per_layer != 1).any() or norms[-1] <= places[-1]:
        return None
    return [(int(a), int(b)) for a, b in itertools.pairwise([*places, norms[-1]])]


def _norms_in(spans: list[tuple[int, int]], norms: np.ndarray) -> np.ndarray:
    """Per span, how many of the sorted positions `norms` lie in it."""
    starts, ends = np.array(spans).T
    return np.searchsorted(norms, ends) - np.searchsorted(norms, starts)


def _between_norms(
    first: int, norms: np.ndarray, median: int, length: int, every: int = 1
) -> list[tuple[int, int]] | None:
    """Layers that hold `every` norms each, found out of phase: the stretches between every `every`-th norm
    (positions `norms`) from the first within half a `median` layer of `first` (where the first found layer starts)
    to the step's last norm, the final norm, which less than half a layer follows (the LM head); None when that
    leaves fewer than two layers, the last norm is a layer's (a step of `length` kernels), or the norms are not
    `every` a layer and the final one. One norm each: a parallel block (attention and MLP behind one norm: GPT-J,
    Falcon, Cohere); two: a pre-norm layer found half a layer late."""
    taken = norms[norms >= first - median // 2]
    if every < 1 or len(taken) <= 2 or 2 * (length - taken[-1]) >= median or (len(taken) - 1) % every:
        return None  # a pre-norm stack holds `every` norms a layer and the final norm; a post-norm one, no final norm
    taken = taken[::every]
    if len(taken) <= 2:
        return None
    return [(int(a), int(b)) for a, b in itertools.pairwise(taken)]


def _norm_period(codes: np.ndarray, norms: np.ndarray) -> int:
    """The norms a layer holds, read from the stretches between consecutive norms (positions `norms`): the fewest
    k (up to MAX_NORMS) for which the stretch after a norm runs kernel for kernel what the stretch after the k-th
    next norm runs, for most norms (NORM_SHARE); 0 when no k does. One: a block of one mixer (Mamba) or a parallel
    block; two: a token mixer's and a channel mixer's norm."""
    stretches = [codes[a:b].tobytes() for a, b in itertools.pairwise(norms)]
    for k in range(1, MAX_NORMS + 1):
        same = [x == y for x, y in zip(stretches, stretches[k:], strict=False)]
        if same and np.mean(same) >= NORM_SHARE:
            return k
    return 0


def _moved_to_norms(found: list[tuple[int, int]], norms: np.ndarray, median: int) -> list[tuple[int, int]] | None:
    """The layers `found` with those whose nearest norm is at the most common offset moved by it, and those whose
    nearest norm is nearer on the same side moved to it (a MoE layer whose end varies; the others stay); None when
    fewer than NORM_SHARE of them have it there, or it is half a layer away or more. Layers that met still meet,
    and the last one ends at the norm nearest its moved end within that offset that leaves it as long as a `median`
    layer give or take the offset (the final norm is the epilogue's; a norm that would leave it half a layer is its
    own: a post-norm stack)."""
    at = np.flatnonzero(norms)
    starts = np.array([a for a, _ in found])
    i = np.searchsorted(at, starts)
    before, after = at[np.clip(i - 1, 0, len(at) - 1)], at[np.clip(i, 0, len(at) - 1)]
    offsets = np.where(np.abs(after - starts) < np.abs(starts - before), after, before) - starts
    values, counts = np.unique(offsets, return_counts=True)
    delta = int(values[np.argmax(counts)])
    if counts.max() < NORM_SHARE * len(starts) or 2 * abs(delta) >= median:
        return None
    # a layer that opens with its norm already stays; one whose norm is nearer on the same side moves to it
    nearer = (offsets * delta > 0) & (np.abs(offsets) < abs(delta))
    shift = np.where((offsets == delta) | nearer, offsets, 0).tolist()
    moved = [(a + d, b + d) for (a, b), d in zip(found, shift, strict=True)]
    met = [x[1] == y[0] for x, y in itertools.pairwise(found)]
    ends = [following[0] if meets else b for (_, b), following, meets in zip(moved, moved[1:], met, strict=False)]
    moved = [(a, b) for (a, _), b in zip(moved, [*ends, moved[-1][1]], strict=True)]
    last_start, last_end = moved[-1]
    as_long = np.abs(at - last_start - median) <= abs(delta)  # a last layer as long as the others, give or take
    near = at[(np.abs(at - last_end) <= abs(delta)) & as_long] if shift[-1] else at[:0]
    if len(near):  # the final norm: the norm nearest the last layer's moved end, as far off as the layers were
        moved[-1] = (last_start, int(near[np.argmin(np.abs(near - last_end))]))
    return [(max(a, 0), min(b, len(norms))) for a, b in moved]


def _with_layer_before(bounds: list[tuple[int, int]], norms: np.ndarray, median: int) -> list[tuple[int, int]]:
    """The layers with one of another kind before the first (a dense layer before MoE ones, folded into the
    prologue): the stretch before the first layer that opens with a norm (positions `norms`) and holds as many as
    the layers mostly do (two or more: the token mixer's and the channel mixer's), or two where they hold more (MoE
    layers that close with a norm after their experts, a dense one that does not), at least a quarter of a `median`
    layer long, with kernels of the prologue left before it."""
    held, first = _most_common(_norms_in(bounds, norms)), bounds[0][0]
    before = norms[norms < first]
    for k in dict.fromkeys((held, 2)) if held >= 2 else ():
        if len(before) >= k and before[-k] > 0 and 4 * (first - before[-k]) >= median:
            return [(int(before[-k]), first), *bounds]
    return bounds


def _from_first_norm(first: tuple[int, int], norms: np.ndarray, median: int) -> tuple[int, int]:
    """The first layer from its own norm when it was found starting late, shorter than the others (at the norm of
    its channel mixer, or after it): the last norm (positions `norms`) before its start, when that makes it no
    longer than a `median` layer. A first layer found from the step's first kernel opens at its first norm: what
    runs before it is the prologue (the embedding, which the first layer took in when the layers found fill a whole
    pass)."""
    start, end = first
    before = norms[norms < start]
    if start == 0 and len(inside := norms[norms < end]) and inside[0] > 0:
        return int(inside[0]), end
    if not len(before) or end - before[-1] > median:
        return first
    return int(before[-1]), end


def with_edge_copies(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with the layers that lie right before its first layer or right after its last and repeat a found
    layer kernel for kernel: a layer of a kind the unit holds fewer times (the full-attention layer that closes a
    pass of three sliding ones to one full one) is left out at the edge when the pass ends inside a unit. Before
    the first layer, the copies are looked for the same way in the reversed sequence."""
    if fit is None or not fit.layers:
        return fit
    spans, n = _bounds(fit.layers), len(codes)
    layers = [codes[a:b] for a, b in spans]
    after = _copies_after(codes, spans[-1][1], layers)
    reversed_before = _copies_after(codes[::-1], n - spans[0][0], [layer[::-1] for layer in layers])
    before = [(n - b, n - a) for a, b in reversed(reversed_before)]
    if not before and not after:
        return fit
    return _refit(codes, fit, [*before, *spans, *after])


def with_closing_block(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with its last layer run on to the end of the block most other layers close with, each up to where
    the next one opens (`usual_edge`), where its last EXTENDED_BY kernels and the kernels after it end that
    block: MoE layers that close with a norm and a residual add after their experts (AX-K1's; the unit left that
    block between the layers) had the last one end at the experts' add, the block taken for the pass's final norm,
    which has no residual add after it."""
    if fit is None or len(fit.layers) < 3:
        return fit
    spans = _bounds(fit.layers)
    block = usual_edge([codes[a:c] for (a, _), (c, _) in itertools.pairwise(spans)], last=True)
    a, b = spans[-1]
    if len(block) < EXTENDED_BY or np.array_equal(codes[b - EXTENDED_BY : b], block[-EXTENDED_BY:]):
        return fit
    for more in range(1, min(len(block) - EXTENDED_BY, len(codes) - b) + 1):
        if np.array_equal(codes[b - EXTENDED_BY : b + more], block[-EXTENDED_BY - more :]):
            return _refit(codes, fit, [*spans[:-1], (a, b + more)])
    return fit


def with_first_layer_whole(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with every boundary after the first layer's start moved on by d kernels, where the layers meet, the
    first is d kernels shorter than the later ones mostly are, and every later layer opens with the d kernels that
    follow the last one, which the first does not open with: the unit was found out of phase by a block (Persimmon's
    MLP half: its post-attention LayerNorm opened each found layer, as the input LayerNorm does), which closes the
    layer before. The first layer, which opens where the prologue ends, was cut short, and the last one's block was
    left to the epilogue. A first layer of another kind (dense before MoE) opens with the later ones' opening
    block, and the final norm, not a layer's closing block, follows the last."""
    if fit is None or len(fit.layers) < 3:
        return fit
    spans = _bounds(fit.layers)
    (first, second), end = spans[0], spans[-1][1]
    d = _most_common([b - a for a, b in spans[1:]]) - (second - first)
    if d < 1 or end + d > len(codes) or any(b != c for (_, b), (c, _) in itertools.pairwise(spans)):
        return fit
    block = codes[end : end + d]
    opened = np.mean([np.array_equal(codes[a : a + d], block) for a, _ in spans[1:]])
    if opened < NORM_SHARE or np.array_equal(codes[first : first + d], block):
        return fit
    return _refit(codes, fit, list(itertools.pairwise([first, *(a + d for a, _ in spans[1:]), end + d])))


def usual_edge(layers: Sequence[np.ndarray], last: bool) -> np.ndarray:
    """The longest run of last kernels (`last`) or first kernels that at least half of `layers` end or open with
    (layers of the kind most are: the MoE layers after a few dense ones)."""
    block = layers[0][:0]
    for length in range(1, min(len(layer) for layer in layers) + 1):
        edges = (layer[-length:] if last else layer[:length] for layer in layers)
        edge, count = collections.Counter(edge.tobytes() for edge in edges).most_common(1)[0]
        if 2 * count < len(layers):
            break
        block = np.frombuffer(edge, dtype=layers[0].dtype)
    return block


def in_phase_with(
    codes: np.ndarray, fit: PeriodFit | None, opening: np.ndarray, closing: np.ndarray
) -> PeriodFit | None:
    """The fit with each layer moved to open with `opening` and the last to close with `closing` (the kernels most
    layers of the other steps open and close with: `usual_edge`), where none opens so: a step whose layers the
    repeating unit found out of phase (its expert loops made a unit of another phase), which the other steps'
    layers place. Each layer moves to the nearest place within half a median layer where the first EXTENDED_MIN
    kernels of `opening` run (its norm: what follows differs where a layer's routing does), the last
    ends after the last place `closing` ends before its end or half a layer past it (the final norm has no residual
    add); the fit stays where a layer has no such place or the moved layers would not follow one another."""
    if fit is None or not fit.layers or min(len(opening), len(closing)) < EXTENDED_BY:
        return fit
    spans = _bounds(fit.layers)
    places = _places_of(codes, opening[:EXTENDED_MIN])
    if np.isin([a for a, _ in spans], places).any():
        return fit
    reach = int(np.median([b - a for a, b in spans])) // 2
    starts = [_nearest(places, a, reach) for a, _ in spans]
    if None in starts:
        return fit
    ends = _places_of(codes, closing) + len(closing)
    last = ends[(ends > starts[-1]) & (ends <= spans[-1][1] + reach)]
    if not len(last) or any(b <= a for a, b in itertools.pairwise([*starts, last[-1]])):
        return fit
    return _refit(codes, fit, list(itertools.pairwise([*starts, int(last[-1])])))


def _nearest(places: np.ndarray, at: int, reach: int) -> int | None:
    """The one of the sorted `places` nearest to `at`, if within `reach`."""
    near = places[np.abs(places - at) <= reach]
    return int(near[np.argmin(np.abs(near - at))]) if len(near) else None


def _places_of(codes: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Where in `codes` the kernels `block` run, in order."""
    if len(codes) < len(block):
        return np.zeros(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(codes, len(block))
    return np.flatnonzero((windows == block).all(axis=1))


def with_gaps_as_layers(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with each stretch between two found layers that is layer-like taken as a layer: a layer of a kind
    the unit holds once (the full-attention layer after three sliding ones), which the unit's period steps over.
    A stretch is layer-like when it is half a median layer or longer and opens and closes with the kernels most
    layers open and close with (their input norm, their residual add); a block that is only part of a layer (a
    shared attention block that feeds the layer's own input) closes otherwise."""
    if fit is None or len(fit.layers) < 3:
        return fit
    spans = _bounds(fit.layers)
    median = int(np.median([b - a for a, b in spans]))
    ends = layer_ends(codes, spans)
    gaps = [
        (a, b)
        for (_, a), (b, _) in itertools.pairwise(spans)
        if 2 * (b - a) >= median and ends_as_layers(codes[a:b], ends)
    ]
    return _refit(codes, fit, sorted(spans + gaps)) if gaps else fit


def with_known_cuts(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with the boundary between two neighbouring layers that are each the only one of their kind moved
    to where both become kinds other layers are, kernel for kernel: a boundary placed where the unit's phase put
    it, between layers of kinds the unit does not hold (the last dense layer before the MoE ones, cut inside the
    first MoE layer; two dense layers before MoE ones cut at a norm inside the attention of the second, a third
    dense layer found whole). Moved only where exactly one place does that. First, a layer that is two layers of
    kinds other layers are, kernel for kernel, is cut in two (`_known_halves`)."""
    if fit is None or len(fit.layers) < 3:
        return fit
    fit = _known_halves(codes, fit)
    spans = _bounds(fit.layers)
    kinds = collections.Counter(codes[a:b].tobytes() for a, b in spans)
    known = set(kinds)  # a part of the kind of one other layer makes two of it
    lengths = {len(kind) // codes.itemsize for kind in known}
    moved = list(spans)
    for i, ((a, b), (c, d)) in enumerate(itertools.pairwise(spans)):
        if b != c or moved[i] != (a, b) or kinds[codes[a:b].tobytes()] > 1 or kinds[codes[c:d].tobytes()] > 1:
            continue  # apart, moved with the layer before, or of a kind other layers are
        cuts = [cut for cut in _cuts_into_known(codes, (a, d), known, lengths) if cut != b]
        if len(cuts) == 1:
            moved[i], moved[i + 1] = (a, cuts[0]), (cuts[0], d)
    if moved == spans:
        return fit
    return _refit(codes, fit, moved)


def _known_halves(codes: np.ndarray, fit: PeriodFit) -> PeriodFit:
    """The fit with each layer of a kind no other layer is cut in two where exactly one place makes both parts
    kinds other layers are, kernel for kernel: two layers of kinds found elsewhere, left as one (the last dense
    layer and the first layer after it, when the step opens with a variant of its attention)."""
    spans = _bounds(fit.layers)
    kinds = collections.Counter(codes[a:b].tobytes() for a, b in spans)
    known = {kind for kind, count in kinds.items() if count >= 2}
    lengths = {len(kind) // codes.itemsize for kind in known}
    cut: list[tuple[int, int]] = []
    for a, b in spans:
        cuts = _cuts_into_known(codes, (a, b), known, lengths) if kinds[codes[a:b].tobytes()] == 1 else []
        cut += [(a, cuts[0]), (cuts[0], b)] if len(cuts) == 1 else [(a, b)]
    return fit if len(cut) == len(spans) else _refit(codes, fit, cut)


def _cuts_into_known(codes: np.ndarray, span: tuple[int, int], known: set[bytes], lengths: set[int]) -> list[int]:
    """Where the kernels `span` split into two parts of `known` kinds (kernel sequences, `lengths` long)."""
    a, b = span
    return [
        a + n
        for n in lengths
        if b - a - n in lengths and codes[a : a + n].tobytes() in known and codes[a + n : b].tobytes() in known
    ]


def with_residual_adds_closing(
    codes: np.ndarray, fit: PeriodFit | None, adds: np.ndarray, casts: np.ndarray
) -> PeriodFit | None:
    """The fit with every boundary moved on by d kernels where the layers meet, most of them (NORM_SHARE) open with
    the same block of d kernels that ends with a residual add (`adds`, one flag per kernel: an eager elementwise add;
    at most CLOSING_BLOCK kernels up to it) and the dtype cast right after it (`casts`: casts that open no norm; the
    sum cast back to the activations' dtype), every layer after the first does, and the same block follows the last
    layer: a pre-norm layer closes with its residual add, so the block closes the layer before. The unit's phase put
    it at the opening where the layer before ends as the layers do (hyper-connections weigh the layer's output, then
    add the residual streams, in float32 when the activations are half precision, and open the next layer with a
    projection before its norm; a dense first layer ends that way too). The first layer opens d kernels on too when
    its block ends with an add there (the block, or the prologue's position-embedding add: what ran before it ends
    there); a layer of another kind left out at the edges is then looked for again (with_edge_layers)."""
    if fit is None or len(fit.layers) < 3:
        return fit
    spans = _bounds(fit.layers)
    end = spans[-1][1]
    if any(b != c for (_, b), (c, _) in itertools.pairwise(spans)):
        return fit
    for add in range(1, min(CLOSING_BLOCK, len(codes) - end) + 1):
        if not adds[end + add - 1]:
            continue
        cast = int(end + add < len(casts) and casts[end + add])
        for d in dict.fromkeys((add + cast, add)):  # with the cast after the add, else without
            block = codes[end : end + d]
            opened = [np.array_equal(codes[a : a + d], block) for a, _ in spans]
            if np.mean(opened) >= NORM_SHARE and all(opened[1:]):
                first = spans[0][0] + d * int(adds[spans[0][0] + add - 1])
                starts = [first, *(a + d for a, _ in spans[1:])]
                bounds = list(itertools.pairwise([*starts, end + d]))
                return with_edge_layers(dense(codes), _refit(codes, fit, bounds))
    return fit


def as_single_mixer_blocks(
    codes: np.ndarray, fit: PeriodFit | None, opens: np.ndarray, adds: np.ndarray
) -> PeriodFit | None:
    """The fit with every layer cut into its residual blocks, where the blocks cannot pair into layers of a token
    mixer and a channel mixer. A residual block opens with a norm right after the residual add that closes the
    block before (`opens`: norm openings, `adds`: residual adds; one flag per kernel) and runs one mixer. Layers of
    two blocks (a token mixer's and a channel mixer's) alternate two classes of block kinds; when the step's
    sequence of block kinds cannot be split into two classes that alternate (a kind that follows itself, or an odd
    cycle: Mamba, MoE, Mamba, MoE, Mamba, attention, MoE), its blocks are not halves of layers but layers of one
    mixer each (Nemotron-H's), which the repeating unit paired or grouped, leaving some out between its layers and
    at its edges (with_edge_copies). Only where the found layers pair the blocks one way here and another there
    (`_mispaired`): layers that always pair them one way are the unit's, whatever blocks they hold (a norm on q and
    k after the rotary embedding's add opens a "block", three a layer; so does a norm after a MoE layer's experts)."""
    if fit is None or len(fit.layers) < 2:
        return fit
    spans = _bounds(fit.layers)
    first, end = spans[0][0], spans[-1][1]
    inner = np.flatnonzero(opens[first + 1 : end] & adds[first : end - 1]) + first + 1
    cuts = [first, *inner.tolist(), end]
    if len(cuts) - 1 <= len(spans) or not set(a for a, _ in spans) <= set(cuts):
        return fit
    blocks = list(itertools.pairwise(cuts))
    kinds = [codes[a:b].tobytes() for a, b in blocks]
    if _two_classes(kinds) or not _mispaired(blocks, kinds, spans):
        return fit
    return with_edge_copies(codes, _refit(codes, fit, blocks))


def _mispaired(blocks: list[tuple[int, int]], kinds: list[bytes], spans: list[tuple[int, int]]) -> bool:
    """Whether a block kind that opens a found layer (`spans`), or lies between two, also runs after the first
    block of a layer between the first and the last (whose edges may hold another kind's blocks): the found
    layers paired the blocks one way here and another way there. Layers of a token and a channel mixer always pair
    them one way; a norm and a residual add after a MoE layer's experts, left between the layers, never runs after
    a layer's first block (AX-K1's)."""
    opening = {a for a, _ in spans}
    inner = {a for a, _ in spans[1:-1]}
    layer_of = np.searchsorted([a for a, _ in spans], [a for a, _ in blocks], side="right") - 1
    outside = [a >= spans[i][1] for (a, _), i in zip(blocks, layer_of, strict=True)]
    openers = {k for (a, _), k, out in zip(blocks, kinds, outside, strict=True) if a in opening or out}
    followers = {
        k
        for (a, _), k, i, out in zip(blocks, kinds, layer_of, outside, strict=True)
        if not out and a not in opening and spans[i][0] in inner
    }
    return bool(openers & followers)


def _two_classes(kinds: list[bytes]) -> bool:
    """Whether the kinds in sequence `kinds` split into two classes such that neighbours are of different classes
    (a two-colouring of the graph of neighbouring kinds)."""
    colour: dict[bytes, int] = {kinds[0]: 0}
    for a, b in itertools.pairwise(kinds):
        if a == b:
            return False
        expected = 1 - colour[a]
        if colour.setdefault(b, expected) != expected:
            return False
    return True


def with_blocks_before_their_layers(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with a block found at the end of a layer moved to the start of the next one: where a found layer is
    a kind other layers are, whole, plus a block of EXTENDED_BY kernels or more after it that opens as the layers
    open (their first kernel, at most NEAR_NORM kernels in), the block opens the next layer (Zamba's shared
    attention block, which concatenates the embedding to its input before its norm, runs before the Mamba layer it
    belongs to; the unit's phase put it after the Mamba layer before). A layer opens with its norm: what follows a
    whole layer's residual add and opens with a norm is the next layer's."""
    if fit is None or len(fit.layers) < 3:
        return fit
    spans = _bounds(fit.layers)
    opening, _ = layer_ends(codes, spans)
    kinds = span_kinds(codes, spans)
    moved = list(spans)
    for i, ((a, b), (c, d)) in enumerate(itertools.pairwise(spans)):
        whole = longest_kind_at(codes, a, kinds, b - a - EXTENDED_BY) if b == c and moved[i] == (a, b) else 0
        if whole and opening in codes[a + whole : a + whole + NEAR_NORM + 1]:
            moved[i], moved[i + 1] = (a, a + whole), (a + whole, d)
    if moved == spans:
        return fit
    return _refit(codes, fit, moved)


def with_doubled_opening(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with its first layer opening one kernel earlier when the kernel right before it is the kernel the
    layers open with (two norms back to back): a block's own norm before its input norm (RWKV's first block
    normalises the embedding, `ln0`, then opens as every block does). A model's own embedding norm is as likely
    kernel for kernel; pipeline's doubt names both readings."""
    if fit is None or len(fit.layers) < 2:
        return fit
    spans = _bounds(fit.layers)
    (first, end), opening = spans[0], layer_ends(codes, spans)[0]
    if first == 0 or codes[first - 1] != opening or codes[first] != opening:
        return fit
    return _refit(codes, fit, [(first - 1, end), *spans[1:]])


def without_kernels_between(codes: np.ndarray, fit: PeriodFit | None) -> PeriodFit | None:
    """The fit with the few kernels (fewer than EXTENDED_BY) after a layer inside the pass left out of it, where the
    layer is a kind other layers are, whole, plus those kernels: the model's own work between two layer calls (RWKV
    halves its hidden state every few blocks), which no layer runs there."""
    if fit is None or len(fit.layers) < 3:
        return fit
    spans = _bounds(fit.layers)
    kinds = span_kinds(codes, spans)
    trimmed = list(spans)
    for i in range(1, len(spans) - 1):  # a first layer's extra kernels are its own; the last one's, the epilogue's
        (a, b), following = spans[i], spans[i + 1][0]
        whole = longest_kind_at(codes, a, kinds, b - a - 1, shortest=b - a - EXTENDED_BY + 1) if b == following else 0
        if whole:
            trimmed[i] = (a, a + whole)
    if trimmed == spans:
        return fit
    return _refit(codes, fit, trimmed)


def span_kinds(codes: np.ndarray, spans: Sequence[tuple[int, int]]) -> dict[bytes, int]:
    """The kinds of the layers `spans` (their kernels, as bytes) and each one's length."""
    return {codes[a:b].tobytes(): b - a for a, b in spans}


def longest_kind_at(codes: np.ndarray, start: int, kinds: dict[bytes, int], longest: int, shortest: int = 1) -> int:
    """The length of the longest layer kind (`kinds`: span_kinds), `shortest` to `longest` kernels, that the codes
    run whole from `start` on; 0 when none does."""
    return max(
        (n for kind, n in kinds.items() if shortest <= n <= longest and codes[start : start + n].tobytes() == kind),
        default=0,
    )


def layer_ends(codes: np.ndarray, spans: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """The kernels most of the layers `spans` open and close with (their input norm, their residual add)."""
    return _most_common([codes[a] for a, _ in spans]), _most_common([codes[b - 1] for _, b in spans])


def ends_as_layers(stretch: np.ndarray, ends: tuple[int, int]) -> bool:
    """Whether a stretch of kernels opens and closes as layers do (`ends`: layer_ends)."""
    return len(stretch) > 0 and (int(stretch[0]), int(stretch[-1])) == ends


def _most_common(values: Sequence[int] | np.ndarray) -> int:
    """The value that occurs most often (the smallest of those tied)."""
    kinds, counts = np.unique(np.asarray(values), return_counts=True)
    return int(kinds[np.argmax(counts)])


def _copies_after(codes: np.ndarray, at: int, layers: list[np.ndarray]) -> list[tuple[int, int]]:
    """The spans from `at` on that repeat one of `layers` back to back (the longest that fits, each time)."""
    codes = np.ascontiguousarray(codes)
    copies = {np.ascontiguousarray(layer).tobytes() for layer in layers}
    found: list[tuple[int, int]] = []
    while length := _longest_copy(codes, at, copies, 0):
        found.append((at, at + length))
        at += length
    return found


def graph_openings(numbers: np.ndarray) -> np.ndarray:
    """Per kernel, whether it is the first kernel of a compiled graph: Inductor's number 0, and the next kernel that
    Inductor numbers otherwise is its number 1 (a kernel whose code is the first one's, such as a second identical
    norm, is named like it later in the graph, and the numbers after it go on)."""
    numbered = np.flatnonzero(numbers > 0)
    zeros = np.flatnonzero(numbers == 0)
    following = np.searchsorted(numbered, zeros)
    known = following < len(numbered)
    zeros = zeros[known][numbers[numbered[following[known]]] == 1]
    opens = np.zeros(len(numbers), dtype=bool)
    opens[zeros - _extern_opening(numbers, zeros)] = True
    return opens


def _extern_opening(numbers: np.ndarray, zeros: np.ndarray) -> int:
    """How many kernels Inductor does not number (extern kernels: a cuBLAS matmul) open each compiled graph before
    its kernel 0 (`zeros`): the most common count of them between a graph's kernel 0 and the kernel the graph before
    numbered, where at most GRAPH_REACH lie there (a post-norm layer opens with its query projection); 0 when graphs
    follow graphs with no such kernel. The first graph after eager kernels opens the same way."""
    extern = np.zeros(len(zeros), dtype=np.int64)
    ended = np.zeros(len(zeros), dtype=bool)  # a numbered kernel lies at most GRAPH_REACH kernels before
    for back in range(1, GRAPH_REACH + 2):
        at = zeros - back
        inside = (at >= 0) & ~ended & (extern == back - 1)
        numbered = inside & (numbers[np.maximum(at, 0)] >= 0)
        ended |= numbered
        extern += inside & ~numbered
    counts = np.bincount(extern[ended], minlength=1)
    return int(np.argmax(counts)) if ended.any() else 0


def by_graphs(
    codes: np.ndarray,
    fit: PeriodFit,
    opens: np.ndarray,
    force: bool = False,
    families: np.ndarray | None = None,
    numbered: np.ndarray | None = None,
) -> PeriodFit:
    """Layers compiled one by one (regional compilation: `torch.compile` on each decoder layer): every layer is one
    compiled graph, whatever its kind, from its graph's first kernel (Inductor numbers a graph's kernels from 0,
    and may run a kernel of the layer before its norm) to the next graph's. Taken when most found layers start at
    most GRAPH_REACH kernels from a graph's first kernel: the layers and the graphs are in phase (in a model compiled
    whole, graphs hold many layers; cut at the attention, as vLLM does, they start mid-layer). The graphs are taken
    within each run of found layers, with the graphs that run up to where the run begins (`_graph_before`); the last
    of a run ends where the found run ends, or where an earlier graph of the same kernels does, or as the others
    close, and graphs right after it that repeat an earlier one are layers too; a graph runs to the next one's
    opening when it ends a little before it (`_to_next_graph`), and the pass's last graph ends as all the pass's
    graphs close. With `force`, the graphs are taken whatever the phase (the caller
    knows the run's layers are its graphs). So are they where the found layers are units of a few graphs of several
    kinds (`_graphs_of_kinds`), whatever their phase. `numbered`: find_layers'."""
    spans = _bounds(fit.layers)
    marks = np.flatnonzero(opens)
    if _pieces_of_layers(codes, spans, marks):
        return fit
    near = _distance_to(marks, np.array([a for a, _ in spans])) <= GRAPH_REACH
    if not force and int(near.sum()) * 2 <= len(spans) and not _graphs_of_kinds(spans, marks):
        return fit
    layers: list[tuple[int, int]] = []
    median = int(np.median([b - a for a, b in spans]))
    openings = set(marks.tolist())
    for lo, hi in runs_of_spans(spans):
        taken = layers[-1][1] if layers else 0  # graphs after a run may have reached into this one
        inside = marks[(marks >= max(lo - GRAPH_REACH, taken)) & (marks < hi)].tolist()
        if inside and hi > taken:
            before = _graph_before(marks, inside[0], taken, median)
            layers += _ends_as_copies(codes, list(itertools.pairwise([*before, *inside, hi])), openings, numbered)
    if not layers:
        return fit
    layers = _ended_at_numbered(_to_next_graph(layers, openings), numbered, marks)
    layers = _ends_as_copies(codes, layers, openings, numbered)
    layers = _without_glue_after(codes, layers)
    return dataclasses.replace(fit if layers == spans else _fit_of(codes, layers, families), graphs=True)


def _to_next_graph(graphs: list[tuple[int, int]], openings: set[int]) -> list[tuple[int, int]]:
    """The graphs with one that ends before the next graph opens, by no more kernels than it holds, ended there:
    inside a forward pass a graph runs until the next one opens (the run of layers found before it ended short of
    it, or the layers found were halves of MoE layers whose expert loops differ in length)."""
    return [
        (a, c if b < c <= 2 * b - a and c in openings else b)
        for (a, b), (c, _) in itertools.pairwise([*graphs, (-1, -1)])
    ]


def _graphs_alone(
    codes: np.ndarray,
    opens: np.ndarray,
    families: np.ndarray | None,
    min_layers: int,
    numbered: np.ndarray | None = None,
) -> PeriodFit | None:
    """Layers compiled one by one when no period fits: MoE layers that run a GEMM per expert hit are of as many
    lengths as the experts' counts, so no unit repeats. Each compiled graph is a layer, the last ending as the others
    close (`_ends_as_copies`), when there are at least `min_layers` graphs, they are not pieces of layers (graph
    breaks), and they cover most of the step (the rest is its eager prologue and epilogue) and share most of their
    kernels by family (consecutive graphs at least SPLIT_ALIKE alike)."""
    marks = np.flatnonzero(opens)
    if len(marks) < min_layers:
        return None
    graphs = _ended_at_numbered(list(itertools.pairwise([*marks.tolist(), len(codes)])), numbered, marks)
    spans = _ends_as_copies(codes, graphs, set(marks.tolist()), numbered)
    if _pieces_of_layers(codes, spans, marks):
        return None
    fit = dataclasses.replace(_fit_of(codes, spans, families), graphs=True)
    kin = codes if families is None else dense(families)
    return fit if fit.coverage >= 1 - 1 / min_layers and alike(kin, fit.layers) >= SPLIT_ALIKE else None


def _ended_at_numbered(
    spans: list[tuple[int, int]], numbered: np.ndarray | None, marks: np.ndarray
) -> list[tuple[int, int]]:
    """The compiled graphs `spans` each ended after its last kernel that Inductor numbers (`numbered`) before the
    next graph opens (`marks`), when most graphs (NORM_SHARE) end with such a kernel right before the next opening:
    a numbered kernel is its graph's, so a graph found short runs on to its last one (a run of layers found out of
    phase ended mid-graph), and more than GRAPH_REACH kernels after it are eager glue (a forward pass's final norm,
    LM head and sampling, the next pass's embedding), where a graph's own extern kernels after its last numbered
    one are a GEMM or two (a down projection that adds the residual)."""
    if numbered is None or len(marks) < 2 or numbered[marks[1:] - 1].mean() < NORM_SHARE:
        return spans
    last = np.flatnonzero(numbered)
    following = marks[np.minimum(np.searchsorted(marks, [a for a, _ in spans], side="right"), len(marks) - 1)]
    following = np.where(following > [a for a, _ in spans], following, len(numbered))
    before = np.searchsorted(last, following) - 1  # the last numbered kernel before the next graph opens
    ends = np.where(before >= 0, last[np.maximum(before, 0)] + 1, 0)
    return [
        (a, int(end) if a < end and (end > b or end < b - GRAPH_REACH) else b)
        for (a, b), end in zip(spans, ends, strict=True)
    ]


def _passes_of_graphs(spans: list[tuple[int, int]], marks: np.ndarray) -> bool:
    """Whether most found layers (NORM_SHARE) hold more compiled graphs (openings `marks`) than a unit of layers of a
    few kinds does (MAX_GRAPH_KINDS): the unit found is a forward pass of layers compiled one by one (MoE layers of
    many lengths, which no unit of layers repeats)."""
    held = np.searchsorted(marks, [b for _, b in spans]) - np.searchsorted(marks, [a for a, _ in spans])
    return len(spans) > 0 and float((held > MAX_GRAPH_KINDS).mean()) >= NORM_SHARE


def _adrift_of_graphs(spans: list[tuple[int, int]], marks: np.ndarray) -> bool:
    """Whether the found layers are not the compiled graphs' (openings `marks`) but drift across them: most found
    layers hold more graphs than a unit of layers of a few kinds does (`_passes_of_graphs`), or the found layers open
    at offsets from the graph opened last before them that differ (fewer than NORM_SHARE of them within GRAPH_REACH of
    their median). Layers compiled one by one whose lengths vary (MoE layers whose expert loops run a GEMM per expert
    hit) are no repeating unit: one found for them opens wherever its period falls, where each layer is a graph.
    Layers found in phase with their graphs, and graphs that cut every layer at one place (vLLM's, at the attention),
    keep one offset."""
    if _passes_of_graphs(spans, marks):
        return True
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    last = np.searchsorted(marks, starts, side="right") - 1
    offsets = starts[last >= 0] - marks[last[last >= 0]]
    if len(offsets) < MIN_LAYERS:
        return False
    return float((np.abs(offsets - np.median(offsets)) <= GRAPH_REACH).mean()) < NORM_SHARE


def _without_glue_after(codes: np.ndarray, graphs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The graphs with each one that is the only one of its kernels and opens as a kind other graphs are, kernel for
    kernel, ended where that kind ends: the stretch after it up to the next graph's opening is eager glue (a
    pass's epilogue and the next one's prologue, where a run of graphs found over many passes runs on)."""
    kinds = collections.Counter(codes[a:b].tobytes() for a, b in graphs)
    copies = {kind for kind, count in kinds.items() if count >= 2}
    ended = []
    for a, b in graphs:
        length = _longest_copy(codes, a, copies, b - a) if kinds[codes[a:b].tobytes()] == 1 else b - a
        ended.append((a, a + min(length, b - a)))
    return ended


def _graph_before(marks: np.ndarray, first: int, after: int, median: int) -> list[int]:
    """The openings of the compiled graphs that run, one after the other, up to where a run of graph layers begins
    (at `first`), each opening after `after` (the run before) and no longer than two `median` layers: layers the
    run's unit left out (a dense first layer compiled on its own, a MoE layer whose experts made it longer than the
    unit); an eager prologue has no graph."""
    before = marks[(marks < first) & (marks >= after)].tolist()
    taken: list[int] = []
    end = first
    while before and end - before[-1] <= 2 * median:
        end = before.pop()
        taken.insert(0, int(end))
    return taken


def _pieces_of_layers(codes: np.ndarray, spans: list[tuple[int, int]], marks: np.ndarray) -> bool:
    """Whether the compiled graphs are pieces of layers, not layers: most found layers hold graphs that open with
    more than MAX_GRAPH_KINDS different kernels. A layer's graph breaks (a MoE layer's routing run eagerly) cut it
    into graphs that each open otherwise, where the layers of a unit, each a graph, are of a few kinds, and the
    layers of one kind open alike."""
    openings = [len(set(codes[marks[(marks >= a) & (marks < b)]].tolist())) for a, b in spans]
    return bool(openings) and _most_common(openings) > MAX_GRAPH_KINDS


def _graphs_of_kinds(spans: list[tuple[int, int]], marks: np.ndarray) -> bool:
    """Whether most found layers (NORM_SHARE) hold as many graph openings (positions `marks`), two to MAX_GRAPH_KINDS: a
    unit of layers of several kinds (a dense and a MoE layer), each compiled as a graph of its own, found out of
    phase with the graphs (a first call of the compiled layers runs other kernels than later calls, so the offsets
    may differ from one pass to the next). Graphs cut at the attention (vLLM) open once a layer; a forward pass
    holds its layers' graphs, more than a few."""
    held = np.searchsorted(marks, [b for _, b in spans]) - np.searchsorted(marks, [a for a, _ in spans])
    usual = _most_common(held)
    return 2 <= usual <= MAX_GRAPH_KINDS and (held == usual).mean() >= NORM_SHARE


def _distance_to(marks: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per position of `at`, the distance to the nearest of the sorted, non-empty `marks`."""
    i = np.searchsorted(marks, at)
    after = marks[np.minimum(i, len(marks) - 1)]
    before = marks[np.maximum(i - 1, 0)]
    return np.minimum(np.abs(after - at), np.abs(at - before))


def runs_of_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches that consecutive spans cover without a gap."""
    runs: list[list[int]] = []
    for a, b in spans:
        if runs and runs[-1][1] == a:
            runs[-1][1] = b
        else:
            runs.append([a, b])
    return [(a, b) for a, b in runs]


def _ends_as_copies(
    codes: np.ndarray, spans: list[tuple[int, int]], marks: set[int], numbered: np.ndarray | None = None
) -> list[tuple[int, int]]:
    """The graphs of one run with its last one ending as the longest earlier graph whose kernels it repeats exactly
    (the run's end was found for the common unit, and the last layer may be of another kind), then the graphs that
    open right after it and repeat an earlier graph exactly, or run most of an earlier graph's kernels
    (`_graph_like_earlier`): a last layer the run left out, of another kind, or a MoE layer whose expert loop ran
    another number of GEMMs. When no earlier graph repeats exactly, the last one ends as the others close
    (`_closed_as_others`)."""
    copies = {codes[a:b].tobytes() for a, b in spans[:-1]}
    a = spans[-1][0]
    length = _longest_copy(codes, a, copies, 0) or _closed_as_others(codes, spans, marks, numbered)
    spans = [*spans[:-1], (a, a + length)]
    copies.add(codes[slice(*spans[-1])].tobytes())
    while spans[-1][1] in marks and (
        length := _longest_copy(codes, spans[-1][1], copies, 0) or _graph_like_earlier(codes, spans, marks, numbered)
    ):
        spans.append((spans[-1][1], spans[-1][1] + length))
    return spans


def _graph_like_earlier(
    codes: np.ndarray, spans: list[tuple[int, int]], marks: set[int], numbered: np.ndarray | None
) -> int:
    """Length of the compiled graph that opens where `spans` end, ended as they close (`_closed_as_others`), when it
    shares at least SPLIT_ALIKE of its kernels (as multisets, over the longer one's length) with one of them; else 0.
    """
    start = spans[-1][1]
    length = _closed_as_others(codes, [*spans, (start, start)], marks, numbered)
    if length <= 0:
        return 0
    k = int(codes.max()) + 1
    graph = np.bincount(codes[start : start + length], minlength=k)
    like = any(_shared_share(graph, np.bincount(codes[a:b], minlength=k)) >= SPLIT_ALIKE for a, b in spans)
    return length if like else 0


def _closed_as_others(
    codes: np.ndarray, spans: list[tuple[int, int]], marks: set[int], numbered: np.ndarray | None
) -> int:
    """Length of a run's last graph ended before the next graph opens: after its last kernel that Inductor numbers
    (`numbered`), when every earlier graph ends with one (a numbered kernel is its graph's, and what follows the last
    one is the eager epilogue's); else within a quarter more than the longest earlier graph, after the last kernel
    that closes earlier graphs and runs nowhere else in them (Inductor's last fused kernel; not an extern GEMM, which
    runs all through a layer and in the LM head); else as found. Compiled graphs close alike, and the run's end,
    found for the common unit, can cut the last one short of its last experts or run it into the eager epilogue."""
    a, b = spans[-1]
    following = min([len(codes), *(m for m in marks if m > a)])
    if numbered is not None and len(spans) > 1 and all(numbered[end - 1] for _, end in spans[:-1]):
        ends = np.flatnonzero(numbered[a + 1 : following])
    else:
        longest = max(end - start for start, end in spans[:-1]) if len(spans) > 1 else 0
        inner = {int(code) for start, end in spans[:-1] for code in codes[start : end - 1]}
        closers = np.array(sorted({int(codes[end - 1]) for _, end in spans[:-1]} - inner), dtype=codes.dtype)
        ends = np.flatnonzero(np.isin(codes[a + 1 : min(following, a + longest + longest // 4)], closers))
    return int(ends[-1]) + 2 if len(ends) else b - a


def _longest_copy(codes: np.ndarray, start: int, copies: set[bytes], otherwise: int) -> int:
    """Length of the longest of `copies` that the kernels from `start` repeat, or `otherwise`."""
    found = [len(c) // codes.itemsize for c in copies if codes[start : start + len(c) // codes.itemsize].tobytes() == c]
    return max(found, default=otherwise)


def by_mixers(codes: np.ndarray, fit: PeriodFit) -> PeriodFit:
    """The layers of every forward pass in `codes` from where their mixers open (segment/mixers.py), when that
    gives an unambiguous answer; else the fit. The boundary contexts are searched around the fit's layers, then
    around the layers inside them (a unit of several layers found out of phase); an answer that explains less than
    MIXERS_SHARE of the fit's kernels is a loop inside the layers (an SSM's scan). A layer's confidence is the share
    of its kernels that other layers also run."""
    found = _bounds(fit.layers)
    passes = mixers.forward_passes(codes, found) or mixers.forward_passes(codes, _inner_bounds(codes, found))
    spans = [span for layers in passes or [] for span in layers]
    if not spans or spans == found or mixers.covered(spans) < MIXERS_SHARE * mixers.covered(found):
        return fit
    return _fit_of(codes, spans)


def verify_pass(codes: np.ndarray, fit: PeriodFit | None, min_layers: int) -> PeriodFit | None:
    """The layers of a target's verify pass (a step's kernels less its drafter's, which leave some of the drafter's
    glue before it) from where its mixers open: of the answers that are one whole pass of at least `min_layers`
    layers (mixers.passes_after_glue, from the boundary contexts around the fit's layers or the most frequent runs
    of three kernels), the one that explains the most kernels; else the fit. A whole pass is preferred to the
    repeating unit's layers, which the glue left before the pass can make half layers or swallow."""
    codes = dense(np.ascontiguousarray(codes, dtype=np.int64))
    contexts = [*mixers.boundary_contexts(codes, _bounds(fit.layers) if fit else [])[:MAX_CANDIDATES]]
    contexts += [c for c in mixers.frequent_contexts(codes) if c not in contexts]
    spans: list[tuple[int, int]] = []
    for context in contexts:
        passes = mixers.passes_after_glue(codes, context)
        if (
            passes
            and len(passes) == 1
            and len(passes[0]) >= min_layers
            and mixers.covered(passes[0]) > mixers.covered(spans)
        ):
            spans = passes[0]
    return _fit_of(codes, spans) if spans else fit


def _refit(codes: np.ndarray, fit: PeriodFit, spans: list[tuple[int, int]]) -> PeriodFit:
    """A fit of the layers `spans` of `codes` (a step's raw codes) that keeps whether `fit`'s layers are graphs."""
    return dataclasses.replace(_fit_of(dense(np.ascontiguousarray(codes, dtype=np.int64)), spans), graphs=fit.graphs)


def _fit_of(codes: np.ndarray, spans: list[tuple[int, int]], families: np.ndarray | None = None) -> PeriodFit:
    """A fit of the layers `spans`, each layer's confidence the share of its kernels that other layers also run (a
    kernel of the same family, with `families`: one id per kernel)."""
    shares = _shared_shares(codes if families is None else dense(families), spans)
    layers = tuple(LayerSpan(a, b, share) for (a, b), share in zip(spans, shares, strict=True))
    median = int(np.median([b - a for a, b in spans]))
    confidence = float(np.mean([s.confidence for s in layers]))
    return PeriodFit(
        layers, median, mixers.covered(spans) / len(codes), confidence, agreement(codes, layers), alike(codes, layers)
    )


def _bounds(spans: Sequence[LayerSpan]) -> list[tuple[int, int]]:
    return sorted((s.start, s.end) for s in spans)


def _inner_bounds(codes: np.ndarray, found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The layers inside each found unit, when it holds several (a hybrid unit: three linear-attention layers and a
    full one, found as one unit out of phase with its layers): where they meet, the mixers' boundary context is."""
    inner: dict[bytes, list[tuple[int, int]]] = {}
    out = []
    for a, b in found:
        key = codes[a:b].tobytes()
        if key not in inner:
            fit = find_layers(codes[a:b], kinds=False, halves=False)
            inner[key] = _bounds(fit.layers) if fit else []
        out += [(a + x, a + y) for x, y in inner[key]]
    return out


def _shared_shares(codes: np.ndarray, spans: list[tuple[int, int]]) -> list[float]:
    """Per layer, the share of its kernels whose kernel another layer also runs (one pass over the layers)."""
    layer = np.concatenate([np.full(b - a, i) for i, (a, b) in enumerate(spans)])
    code = np.concatenate([codes[a:b] for a, b in spans])
    pairs = np.unique(np.stack([code, layer]), axis=1)  # each (kernel, layer) once
    kinds, layers_per_kind = np.unique(pairs[0], return_counts=True)
    shared = layers_per_kind[np.searchsorted(kinds, code)] > 1
    return [round(float(x), 4) for x in np.bincount(layer, weights=shared) / np.bincount(layer)]


def toward_count(codes: np.ndarray, fit: PeriodFit, expected: int) -> PeriodFit:
    """The fit made to hold `expected` layers per forward pass (a multiple of it: a step of several passes), when
    the boundaries allow it: each found layer split into k at its boundaries where `expected` is k times the
    count (a unit of several layers left whole), missing layers at the edges taken more readily, surplus ones
    at the ends (an epilogue taken for a layer) left out. Otherwise the fit as found; the caller says so."""
    spans = sorted(fit.layers, key=lambda s: s.start)
    count = len(spans)
    if not count or count % expected == 0:
        return fit
    if expected % count == 0:
        spans = _split_each(codes, spans, expected // count)
    elif count < expected:
        spans = sorted(with_edge_layers(codes, fit, accept=HINTED_EDGE).layers, key=lambda s: s.start)
    else:
        spans = _most_alike_run(spans, expected)
    if len(spans) % expected:
        return fit
    covered = sum(s.end - s.start for s in spans)
    return PeriodFit(
        tuple(spans), fit.period, covered / len(codes), fit.confidence, agreement(codes, spans), alike(codes, spans)
    )


def _split_each(codes: np.ndarray, spans: list[LayerSpan], k: int) -> list[LayerSpan]:
    """Each span cut into k layers at its boundaries (every g-th of the marks inside it, g = marks + 1 over k)."""
    first = codes[spans[0].start : spans[0].end]
    context = mixers.boundary_context(codes, _bounds(spans)) or (_unit_context(first) if len(first) >= 3 else None)
    if context is None:
        return spans
    marks = mixers.marks_of(codes, context)
    out = []
    for span in spans:
        inner = marks[np.searchsorted(marks, span.start, side="right") : np.searchsorted(marks, span.end)]
        if (len(inner) + 1) % k:
            return spans
        group = (len(inner) + 1) // k
        bounds = [span.start, *(int(m) for m in inner[group - 1 :: group][: k - 1]), span.end]
        out += [LayerSpan(a, b, span.confidence) for a, b in itertools.pairwise(bounds)]
    return out


def _unit_context(unit: np.ndarray) -> tuple[int, int, int]:
    """The boundary context of a unit that starts where a layer starts: its last kernel, then its first two."""
    return int(unit[-1]), int(unit[0]), int(unit[1])


def _most_alike_run(spans: list[LayerSpan], expected: int) -> list[LayerSpan]:
    """Of more layers than expected, the `expected` consecutive ones most like the unit (highest confidence):
    what was taken for a layer at an end is left out."""
    if len(spans) < expected:
        return spans
    scores = np.convolve([s.confidence for s in spans], np.ones(expected), mode="valid")
    first = int(np.argmax(scores))
    return spans[first : first + expected]


def choose(fits: list[PeriodFit]) -> PeriodFit | None:
    """The shortest period among the fits whose consecutive layers agree (kernel by kernel, aligned at their
    starts or ends) and that cover nearly as much as the best (a fit whose layers are longer than its period, its
    unit's copies joined, counts their median length; of layers as long, the fit whose layers agree best); else
    the best coverage x agreement (or x the share of kernels consecutive layers have in common, when higher).

    Half layers (attention, then MLP) cover as much as layers but disagree with their neighbours; a unit of
    two layers (local and global attention) agrees better than one layer, but one layer agrees enough.
    """
    fits = [f for f in fits if f.coverage >= MIN_COVERAGE]
    if not fits:
        return None
    best = max(f.coverage for f in fits)
    agreeing = [f for f in fits if f.agreement >= AGREEING and f.coverage >= NEAR_TIE * best]
    if agreeing:  # by the length of its layers: a short unit's copies may have been joined into longer layers
        return min(agreeing, key=lambda f: (max(f.period, round(_median_length(f))), -f.agreement, -f.coverage))
    # layers whose expert loops differ in length disagree at their ends but share most of their kernels; expert
    # blocks agree perfectly but cover only the loops
    return max(fits, key=lambda f: (f.coverage * max(f.agreement, f.alike), -f.period))


def split_alternating(codes: np.ndarray, fit: PeriodFit, kinds: bool = True) -> PeriodFit:
    """A unit of k layers of alternating kinds (local and global attention, k = 2..4) split into its layers; with
    `kinds`, first where its boundary context comes back (`boundary_cuts`: layers of any kinds), then a unit of
    repeats of one layer and one layer of another size (`_repeated_opening_cuts`).

    The unit splits where its opening kernels (the input norm: three or two) come back at about j/k of its
    length and the parts
    are alike (multiset similarity at least SPLIT_ALIKE, within a quarter of each other's length): two layers that
    differ in a few attention kernels are alike; an attention half and an MLP half, which also open with a norm,
    are not. Every layer of the fit is cut at the same offsets (its own length scaled, snapped to the nearest
    opening), so each alternating layer becomes one layer."""
    whole = [s for s in fit.layers if s.end - s.start == fit.period]
    if not whole:
        return fit
    unit = codes[whole[0].start : whole[0].end]
    boundaries = boundary_cuts(unit) if kinds else None
    if boundaries:
        context = _unit_context(unit)
        return _split(codes, fit, boundaries, lambda span: boundary_cuts(codes[span.start : span.end], context))
    repeated = _repeated_opening_cuts(unit) if kinds else None
    if repeated is not None:
        return _split(codes, fit, repeated)
    for k in (2, 3, 4):
        for gram in (3, 2):  # the layers of a unit may open alike for fewer kernels than the unit's own opening
            head = unit[: min(gram, len(unit))]
            cuts = _cuts(unit, _closing_hits(unit, head) - len(head), k)
            if cuts is not None:
                return _split(codes, fit, cuts)
    return fit


def holds_repeat(layer: np.ndarray) -> bool:
    """Whether one found layer looks like several: a block as long as a quarter of it that opens it (or closes it)
    comes back inside it, from a quarter to three quarters of the way, for more than NORM_REPEAT kernels. A layer's
    own norms repeat for a few kernels (its channel mixer's norm and first projection repeat its input norm and
    first projection), an expert loop does not open or close the layer; two layers sharing their attention (a dense
    and a MoE layer) or their MLP (linear and full attention) left as one do."""
    length = len(layer)
    need = max(NORM_REPEAT + 1, length // 4)
    for j in range(length // 4, 3 * length // 4 + 1):
        if _run(layer[: length - j] == layer[j:]) >= need or _run(layer[:j][::-1] == layer[::-1][:j]) >= need:
            return True
    return False


def extends_another(layers: Sequence[np.ndarray]) -> bool:
    """Whether one kind of found layer is another kind found whole plus a block of EXTENDED_BY kernels or more
    before or after it: that block is a layer of its own, or part of the layer beside it, placed by a guess (a
    shared attention block before a Mamba layer, a scan step, a pass's last layer holding the final norm). Layers of
    different kinds share a part (their attention or their MLP), never the whole of one of them."""
    kinds = {np.asarray(layer, dtype=np.int64).tobytes(): len(layer) for layer in layers if len(layer) >= EXTENDED_MIN}
    by_length: dict[int, set[bytes]] = {}
    for kind, length in kinds.items():
        by_length.setdefault(length, set()).add(kind)
    step = np.dtype(np.int64).itemsize
    for kind, length in kinds.items():
        for shorter, same_length in by_length.items():
            if shorter <= length - EXTENDED_BY and (
                kind[: shorter * step] in same_length or kind[(length - shorter) * step :] in same_length
            ):
                return True
    return False


def _run(equal: np.ndarray) -> int:
    """Length of the leading run of True."""
    return int(np.argmin(equal)) if not equal.all() else len(equal)


def boundary_cuts(unit: np.ndarray, context: tuple[int, int, int] | None = None) -> list[int] | None:
    """Offsets of the layer boundaries inside a unit that holds several layers, or None (one layer).

    Every decoder layer has one token mixer and one channel mixer, each behind a norm and a residual add. The
    unit starts where a layer starts, so its boundary context - its last kernel (the residual add) followed by
    its first two (the input norm) - is where layers meet. Inside the unit the same context marks either a
    layer boundary or, in a pre-norm layer, the norm before its channel mixer: the pieces between the marks are
    then halves, a token-mixing half and a channel-mixing half in turn, and a layer is two of them.
    - Two neighbouring pieces that are identical are whole layers (a token-mixing half is never followed by the
      same half): every mark is a layer boundary (post-norm and parallel-block layers, whose channel mixer has
      no norm of its own; LFM2's convolution layers before an attention one). A piece much longer than the
      identical ones holds layers that open otherwise (a post-norm layer opens with its own token mixer): it is
      also cut after each occurrence of their closing kernels.
    - Otherwise the pieces are halves: from the unit's start, every second mark is a layer boundary (dense and
      MoE layers in turn, linear and full attention, sliding and full attention).
    An odd number of halves, or only two, is one layer. A `context` given is another unit's (a layer of another
    length cut where the unit's layers meet). A layer's residual add is not its norm's first kernel: a unit whose
    last kernel is its first or its second starts inside a loop of one or two kernels (an expert loop), not where a
    layer starts (mixers.in_loop)."""
    length = len(unit)
    context = context or _unit_context(unit)
    if length < 4 or mixers.in_loop(context):
        return None
    marks = [int(j) for j in mixers.marks_of(unit, context)]
    if not marks:
        return None
    bounds = [0, *marks, length]
    pieces = [unit[a:b].tobytes() for a, b in itertools.pairwise(bounds)]
    if any(a == b for a, b in zip(pieces, pieces[1:] + pieces[:1], strict=True)):
        return _closing_cuts(unit, bounds, pieces)
    if len(pieces) % 2 == 0 and len(pieces) >= 4:
        return sorted(marks[1::2] + _after_channel_copies(bounds, pieces))
    return None


def _after_channel_copies(bounds: list[int], pieces: list[bytes]) -> list[int]:
    """Where a channel-mixing half much longer than the others opens with an exact copy of the most common one, a
    cut after that copy: the rest is a layer that opens otherwise (a post-norm layer opens with its own token
    mixer, and a full-attention one's differs from the linear-attention ones' before it), its kernels run on into
    the half before it."""
    halves = pieces[1::2]
    common = max(set(halves), key=halves.count)
    size = len(common) // np.dtype(np.int64).itemsize
    return [
        a + size
        for a, piece in zip(bounds[1::2], halves, strict=True)
        if piece != common and len(piece) >= 1.5 * len(common) and piece.startswith(common)
    ]


def _closing_cuts(unit: np.ndarray, bounds: list[int], pieces: list[bytes]) -> list[int]:
    """Every mark, and inside a piece at least 1.5 times as long as the most common piece, a cut after each
    occurrence of that piece's last three kernels (the layers it holds close like it)."""
    common = max(set(pieces), key=lambda p: (pieces.count(p), len(p)))
    size = next(b - a for (a, b), p in zip(itertools.pairwise(bounds), pieces, strict=True) if p == common)
    tail = unit[bounds[pieces.index(common) + 1] - 3 : bounds[pieces.index(common) + 1]]
    cuts = set(bounds[1:-1])
    for (a, b), piece in zip(itertools.pairwise(bounds), pieces, strict=True):
        if piece != common and b - a >= 1.5 * size:
            cuts.update(int(i) for i in _closing_hits(unit[a:b], tail) + a if a + size // 2 <= i <= b - size // 2)
    return sorted(cuts)


def with_edge_layers(codes: np.ndarray, fit: PeriodFit, accept: float | None = None) -> PeriodFit:
    """The fit with the layers it left out at its edges and in its gaps, found where layers meet.

    Where two found layers meet, the kernels around the boundary (the last kernel of one, the first two of the
    next) are the boundary context; it also marks, inside each layer of a pre-norm stack, the norm before the
    channel mixer. A layer that the repeating unit could not place (a lone dense layer before MoE ones, the last
    layer of a stack that ends in the middle of its unit, a layer of another kind between two found ones) is
    then the stretch from one boundary to the next: two marks on when each found layer holds one mark inside,
    one mark on when it holds none. Such a stretch is taken only when it looks like a layer: between a third and
    three times the typical layer's length, its kernels nearly all (ACCEPT_EDGE) among those of found layers, and
    on the left, opening like the found layers."""
    spans = sorted(fit.layers, key=lambda s: s.start)
    context = mixers.boundary_context(codes, _bounds(spans))
    if context is None:
        return fit
    marks = mixers.marks_of(codes, context)
    starts = np.array([s.start for s in spans])
    inside = np.searchsorted(marks, [s.end for s in spans]) - np.searchsorted(marks, starts, side="right")
    step = {0: 1, 1: 2}.get(int(np.median(inside)))
    if step is None:
        return fit
    typical = float(np.median([s.end - s.start for s in spans]))
    known = _run_by(codes, _bounds(spans))

    def known_share(a: int, b: int) -> float:
        return float(np.mean(known[codes[a:b]]))

    def layer_like(a: int, b: int) -> bool:
        return typical / 3 <= b - a <= 3 * typical and known_share(a, b) >= (accept or ACCEPT_EDGE)

    spans = [
        _trimmed(span, marks, step, layer_like) if holds > step - 1 else span
        for span, holds in zip(spans, inside, strict=True)
    ]
    found: list[LayerSpan] = []
    for left, right in itertools.pairwise(spans):  # gaps between found layers
        if left.end < right.start:
            found += _layers_between(marks, left.end, right.start, step, layer_like, known_share)
    end = spans[-1].end
    while (nxt := _next_layer(marks, end, step)) is not None and layer_like(end, nxt):
        found.append(LayerSpan(end, nxt, round(known_share(end, nxt), 4)))
        end = nxt
    start, opening = (
        spans[0].start,
        usual_edge([codes[s.start : _next_layer(marks, s.start, 1) or s.end] for s in spans], last=False),
    )
    while prev := [p for p in _previous_layer(codes, marks, context, opening, start, step) if layer_like(p, start)]:
        found.append(LayerSpan(prev[0], start, round(known_share(prev[0], start), 4)))
        start = prev[0]
    if not found and spans == sorted(fit.layers, key=lambda s: s.start):
        return fit
    layers = tuple(sorted([*spans, *found], key=lambda s: s.start))
    covered = sum(s.end - s.start for s in layers)
    return PeriodFit(
        layers, fit.period, covered / len(codes), fit.confidence, agreement(codes, layers), alike(codes, layers)
    )


def _trimmed(span: LayerSpan, marks: np.ndarray, step: int, layer_like: Callable[[int, int], bool]) -> LayerSpan:
    """A layer that holds more boundaries than a layer does ends at its `step`-th (it swallowed the final norm and
    what follows: an epilogue, or the next forward pass's prologue)."""
    inner = marks[np.searchsorted(marks, span.start, side="right") : np.searchsorted(marks, span.end)]
    if len(inner) < step or not layer_like(span.start, int(inner[step - 1])):
        return span
    return LayerSpan(span.start, int(inner[step - 1]), span.confidence)


def _layers_between(
    marks: np.ndarray,
    start: int,
    end: int,
    step: int,
    layer_like: Callable[[int, int], bool],
    known_share: Callable[[int, int], float],
) -> list[LayerSpan]:
    """Layers filling [start, end) from boundary to boundary, when every one of them looks like a layer."""
    inner = marks[np.searchsorted(marks, start, side="right") : np.searchsorted(marks, end)]
    bounds = [start, *(int(m) for m in inner), end]
    if start == end or (len(bounds) - 1) % step:
        return []
    cuts = bounds[::step]
    pieces = list(itertools.pairwise(cuts))
    if not all(layer_like(a, b) for a, b in pieces):
        return []
    return [LayerSpan(a, b, round(known_share(a, b), 4)) for a, b in pieces]


def _next_layer(marks: np.ndarray, start: int, step: int) -> int | None:
    """End of a layer that starts at `start` (a boundary): `step` marks on."""
    later = marks[np.searchsorted(marks, start, side="right") :]
    return int(later[step - 1]) if len(later) >= step else None


def _previous_layer(
    codes: np.ndarray, marks: np.ndarray, context: tuple[int, int, int], opening: np.ndarray, end: int, step: int
) -> list[int]:
    """Where a layer that ends at `end` may start, most likely first: `step` boundaries back, or - the first layer
    of a forward pass has no residual add before it - where the longest start of the block most layers open with up
    to their next boundary (`opening`: usual_edge) last runs before its last boundary, or where the layer's opening
    (the context's two kernels) does (a two-kernel opening may run again inside the layer: a projection GEMM and its
    split-K reduction)."""
    earlier = marks[: np.searchsorted(marks, end)]
    if len(earlier) < step - 1:
        return []
    before = int(earlier[-(step - 1)]) if step > 1 else end
    starts = [int(earlier[-step])] if len(earlier) >= step else []
    if before < 2:
        return starts
    pair = np.flatnonzero((codes[: before - 1] == context[1]) & (codes[1:before] == context[2]))
    prefix = _longest_prefix_in(codes[:before], opening)
    block = _places_of(codes[:before], prefix) if len(prefix) > 2 else pair[:0]  # longer than the pair, or none
    return [*starts, *(int(places[-1]) for places in (block, pair) if len(places))]


def _longest_prefix_in(codes: np.ndarray, block: np.ndarray) -> np.ndarray:
    """The longest start of `block` that runs somewhere in `codes` (a first layer opens as the others do up to
    where its own kinds differ: its attention runs its own indexer), by bisection: a start that runs somewhere
    holds shorter ones that do."""
    lo, hi = 0, len(block)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(_places_of(codes, block[:mid])) else (lo, mid - 1)
    return block[:lo]


def _repeated_opening_cuts(unit: np.ndarray) -> list[int] | None:
    """Offsets cutting a unit that opens with r >= 2 identical blocks and ends with one block of another kind
    (LFM2's convolution layers before an attention one, sliding-window layers before a full-attention one; their
    sizes differ, so `_cuts` cannot find them), or None.

    The block is the shortest prefix that repeats right after itself; it must hold at least MIN_BLOCK kernels, and
    the last block as many, and between half and three times a block. The last block need not open like the others:
    compiled layers of another kind open with other fused kernels (the input norm fused with what follows it, or a
    kernel Inductor runs before the norm). Blocks that close with a kernel the last block runs inside it, not at its
    end, are a layer's own pieces, not layers (Qwen3's input norm, q norm and k norm, each before a GEMM that batch 1
    in float16 runs with the kernel of the layer's other projections): layers close alike (their residual add), or,
    compiled, each kind with a fused kernel of its own."""
    length = len(unit)
    for block in range(MIN_BLOCK, (length - MIN_BLOCK) // 2 + 1):
        if not np.array_equal(unit[:block], unit[block : 2 * block]):
            continue
        copies = 2
        while (copies + 1) * block <= length and np.array_equal(
            unit[:block], unit[copies * block : (copies + 1) * block]
        ):
            copies += 1
        closing, last = unit[block - 1], unit[copies * block :]
        if closing != last[-1] and closing in last:
            continue
        rest = length - copies * block
        return (
            [block * j for j in range(1, copies + 1)] if rest >= MIN_BLOCK and block / 2 <= rest <= 3 * block else None
        )
    return None


def _cuts(unit: np.ndarray, opens: np.ndarray, k: int) -> list[int] | None:
    """Offsets cutting `unit` into k alike parts at openings near j/k of its length, or None."""
    length = len(unit)
    cuts = []
    for j in range(1, k):
        near = opens[np.abs(opens - j * length / k) <= length / (4 * k)]
        if not len(near):
            return None
        cuts.append(int(near[np.argmin(np.abs(near - j * length / k))]))
    bounds = [0, *cuts, length]
    parts = [unit[a:b] for a, b in itertools.pairwise(bounds)]
    sizes = [len(p) for p in parts]
    if min(sizes) < 2 or max(sizes) > 1.25 * min(sizes):
        return None
    k = int(unit.max()) + 1
    if any(
        _shared_share(np.bincount(a, minlength=k), np.bincount(b, minlength=k)) < SPLIT_ALIKE
        for a, b in itertools.pairwise(parts)
    ):
        return None
    return cuts


def _split(
    codes: np.ndarray,
    fit: PeriodFit,
    cuts: list[int],
    own_cuts: Callable[[LayerSpan], list[int] | None] | None = None,
) -> PeriodFit:
    """Every layer of the fit cut at the unit's `cuts`, scaled to its length; with `own_cuts`, a layer cut where its
    own kernels say (a layer of another length: two layers of another kind than the unit's), where they do."""
    layers = []
    whole = next((s for s in fit.layers if s.end - s.start == fit.period), None)
    for span in fit.layers:
        scale = (span.end - span.start) / fit.period
        own = own_cuts(span) if own_cuts is not None and span.end - span.start != fit.period else None
        own = own if own is not None else _prefix_cuts(codes, whole, span, cuts)
        offsets = own if own is not None else [round(c * scale) for c in cuts]
        bounds = [span.start, *(span.start + c for c in offsets), span.end]
        layers += [LayerSpan(a, b, span.confidence) for a, b in itertools.pairwise(bounds) if b > a]
    period = round(fit.period / (len(cuts) + 1))
    return PeriodFit(
        tuple(layers), period, fit.coverage, fit.confidence, agreement(codes, layers), alike(codes, layers)
    )


def _prefix_cuts(codes: np.ndarray, whole: LayerSpan | None, span: LayerSpan, cuts: list[int]) -> list[int] | None:
    """The unit's `cuts` inside `span`, unscaled, when the span is shorter than the unit (`whole`, a span one unit
    long) and runs kernel for kernel as its start: a stack that ends in the middle of its unit (Gemma 2 with an odd
    layer count ends with a lone sliding-window layer); else None."""
    length = span.end - span.start
    if whole is None or length >= whole.end - whole.start:
        return None
    if not np.array_equal(codes[span.start : span.end], codes[whole.start : whole.start + length]):
        return None
    return [c for c in cuts if c < length]


def dense(codes: np.ndarray) -> np.ndarray:
    """Renumber codes 0..k-1 so that per-code arrays stay small."""
    _, inverse = np.unique(codes, return_inverse=True)
    return inverse.astype(np.int64)


def code_stats(codes: np.ndarray) -> _CodeStats:
    """Occurrence counts, median gaps and regularity of every code (sorting, no Python loop over kernels)."""
    k = int(codes.max()) + 1 if len(codes) else 0
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    count = np.bincount(codes, minlength=k)
    first = np.full(k, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    same = sorted_codes[1:] == sorted_codes[:-1]
    gap_code = sorted_codes[1:][same]
    gaps = (order[1:] - order[:-1])[same]
    by = np.lexsort((gaps, gap_code))
    gap_code, gaps = gap_code[by], gaps[by]
    n_gaps = np.bincount(gap_code, minlength=k)
    starts = np.concatenate(([0], np.cumsum(n_gaps)[:-1]))
    median_gap = np.zeros(k, dtype=np.int64)
    has = n_gaps > 0
    median_gap[has] = gaps[starts[has] + n_gaps[has] // 2]
    near = np.abs(gaps - median_gap[gap_code]) <= REGULAR_TOLERANCE * median_gap[gap_code]
    regular = np.bincount(gap_code[near], minlength=k)
    share = np.divide(regular, n_gaps, out=np.zeros(k), where=has)
    return _CodeStats(count, median_gap, share, first)


def candidate_periods(stats: _CodeStats) -> list[int]:
    """Median gaps of regular codes, most supported first (support: kernels of the codes that share it)."""
    regular = (stats.count >= 2) & (stats.regular_share >= REGULAR_SHARE) & (stats.median_gap >= 2)
    if not regular.any():
        return []
    periods, inverse = np.unique(stats.median_gap[regular], return_inverse=True)
    support = np.bincount(inverse, weights=stats.count[regular])
    ranked = periods[np.argsort(-support, kind="stable")]
    return [int(p) for p in ranked[:MAX_CANDIDATES]]


def _fit(
    codes: np.ndarray,
    stats: _CodeStats,
    period: int,
    min_layers: int,
    kin: np.ndarray,
    families: np.ndarray | None = None,
    whole_pass: bool = False,
) -> PeriodFit | None:
    anchor = _anchor(codes, stats, period)
    if anchor is None:
        return None
    marks = np.flatnonzero(codes == anchor)
    unit_start, unit_len, copies = _unit(codes, marks, period)
    unit = codes[unit_start : unit_start + unit_len]
    marks = _without_strays(codes, marks, unit)
    # the phase that makes most whole layers (layers of another kind before the first included; in a whole pass, a
    # last layer that is part of one running into the epilogue does not count: _ends_in_part), with fewest not
    # one unit long (a layer cut out of phase runs on into the glue between two passes), whose unit-long layers
    # run one sequence (_copies_alike: none opens with prologue kernels), covering most kernels; a plausible one
    # before the leftmost extension, one whose first layer opens with a variant of the unit's first kernel before
    # others; one where most layers open with the same kernel (a dense first layer opens like the others: not with
    # the embedding's last kernel); most like the unit (a dense layer that begins with the embedding is less so);
    # then the earliest
    spans, rotated = max(
        ((*_layers_at(codes, marks, unit, shift, kin), rank) for shift, rank in _phases(codes, marks, unit, families)),
        key=lambda r: (
            len(r[0]) - (whole_pass and _ends_in_part(codes, r[0], len(unit))),
            -sum(_off_unit(s, len(unit)) for s in r[0]),  # not one unit long: glue swallowed
            _copies_alike(kin, r[0], len(unit)),  # its unit-long layers one sequence (by family): no glue in one
            sum(s.end - s.start for s in r[0]),
            r[2],
            _opening_alike(codes, r[0], r[1]),
            sum(s.confidence for s in r[0]),
        ),
    )[:2]
    if len(spans) < min_layers:
        return None
    spans = _without_foreign_openings(codes, spans, rotated, families)
    covered = sum(s.end - s.start for s in spans)
    confidence = float(np.mean([s.confidence for s in spans]))
    if copies < 2 and _order_confidence(codes, spans, rotated) < EXACT_OR_CONFIDENT:
        return None  # no two layers are identical and their kernels do not follow each other alike
    return PeriodFit(
        tuple(spans), unit_len, covered / len(codes), confidence, agreement(codes, spans), alike(codes, spans)
    )


def _in_whole_phase(codes: np.ndarray, fits: list[PeriodFit], best: PeriodFit) -> PeriodFit:
    """`best`, or when its last layer ends in part (_ends_in_part: a phase that took the second part of a layer,
    with the epilogue, for a layer) the choice among the fits of layers as long as its own that do not: the same
    layers in their whole phase, found from another anchor kernel (a GEMM variant that both the layer's first
    projection and its output projection run)."""
    if not _ends_in_part(codes, list(best.layers), best.period):
        return best
    length = _median_length(best)
    whole = [
        fit
        for fit in fits
        if abs(_median_length(fit) - length) <= 1 and not _ends_in_part(codes, list(fit.layers), fit.period)
    ]
    return choose(whole) or best


def _median_length(fit: PeriodFit) -> float:
    return float(np.median([s.end - s.start for s in fit.layers]))


def _ends_in_part(codes: np.ndarray, spans: list[LayerSpan], unit: int) -> bool:
    """Whether the last layer is part of a layer that runs to the step's last kernel: a forward pass ends with its
    final norm and LM head after its last layer, so a phase whose last layer reaches the end without being one unit
    long took the second part of a layer, with the epilogue, for a layer (its first layer is then the first part). A
    whole unit that reaches the end is left to the later steps: a kernel the model runs between some layers (RWKV's
    rescale) moves the layers after it by one, and the last one then holds the LM head's first kernel."""
    return bool(spans) and spans[-1].end == len(codes) and _off_unit(spans[-1], unit)


def _copies_alike(kin: np.ndarray, spans: list[LayerSpan], unit: int) -> bool:
    """Whether a phase's layers one unit long run one sequence of kernels, told by family (`kin`: a first layer that
    opens with a variant of the others' norm is one of them). Gemma 2 with an odd layer count ends with a lone
    sliding-window layer; a phase opening in the prologue made as many layers, one of them with prologue kernels for
    its first ones, and covered more."""
    whole = {kin[s.start : s.end].tobytes() for s in spans if not _off_unit(s, unit)}
    return len(whole) == 1


def _off_unit(span: LayerSpan, unit: int) -> bool:
    """Whether a layer is not one unit long (a kernel more or less is a variant's)."""
    return abs(span.end - span.start - unit) > 1


def _without_foreign_openings(
    codes: np.ndarray, spans: list[LayerSpan], rotated: np.ndarray, families: np.ndarray | None
) -> list[LayerSpan]:
    """The first layer of each run without its first kernel when that kernel is of another family than the unit's
    first one and the unit's second kernel follows it: the layer lacks the kernel the others open with (the first
    layer has no residual to cast or add, its input being the embedding's), and that kernel is the prologue's.
    A first kernel of the same family (a plain norm where the others fuse the residual add) stays."""
    if families is None or len(rotated) < 2:
        return spans
    family_of = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
    family_of[codes] = families
    out = list(spans)
    for i, span in enumerate(spans):
        first = span.start
        if (i and spans[i - 1].end == first) or span.end - first < 3:
            continue
        if codes[first + 1] == rotated[1] and family_of[codes[first]] != family_of[rotated[0]]:
            out[i] = LayerSpan(first + 1, span.end, span.confidence)
    return out


def _opening_alike(codes: np.ndarray, spans: list[LayerSpan], rotated: np.ndarray) -> int:
    """How many layers open with the rotated unit's first kernel, or lacking it, with its second (a first layer has
    no residual to cast or add: its input is the embedding's)."""
    second = rotated[1] if len(rotated) > 1 else rotated[0]
    return sum(
        int(
            codes[s.start] == rotated[0]
            or (codes[s.start] == second and (s.start == 0 or codes[s.start - 1] != rotated[0]))
        )
        for s in spans
        if s.end > s.start
    )


def _without_strays(codes: np.ndarray, marks: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """The anchor's occurrences without those that come sooner than one unit after or before another and sit
    among other kernels than in the unit: the same kernel in a prologue or epilogue (a position update in
    generate(), which can come most of a unit after the last layer's anchor). A dense layer before MoE layers, or
    a MoE layer that ran fewer experts, is short too, but its anchor has the unit's neighbours. So is a pass's first
    layer after the glue, whose anchor the unit runs from (_opens_unit) when the occurrences it is near are strays
    too (the final norm of the pass before; not an anchor that occurs twice in a layer, among its neighbours)."""
    if len(marks) <= MIN_LAYERS:
        return marks
    short = np.diff(marks) < len(unit)
    near_short = np.concatenate([[False], short]) | np.concatenate([short, [False]])
    among = np.array(
        [not near or _among_unit_neighbours(codes, int(m), unit) for m, near in zip(marks, near_short, strict=True)]
    )
    near_kept = np.concatenate([[False], short & among[:-1]]) | np.concatenate([short & among[1:], [False]])
    keep = among | np.array(
        [not near and _opens_unit(codes, int(m), unit) for m, near in zip(marks, near_kept | among, strict=True)]
    )
    kept = marks[keep]
    return kept if len(kept) >= MIN_LAYERS else marks


def _opens_unit(codes: np.ndarray, mark: int, unit: np.ndarray) -> bool:
    """Whether the unit runs from `mark` on, position by position as consecutive layers agree (AGREEING: a matmul
    of another variant in another step): the anchor of a pass's first layer, which the glue before it (the previous
    pass's epilogue, this one's prologue) leaves among other kernels."""
    ahead = codes[mark : mark + len(unit)]
    return len(ahead) == len(unit) and float(np.mean(ahead == unit)) >= AGREEING


def _among_unit_neighbours(codes: np.ndarray, mark: int, unit: np.ndarray, width: int = 2) -> bool:
    """Whether the kernels around `mark` (`width` each side, one may differ) are those around the unit's anchor."""
    if len(unit) <= 2 * width:
        return True
    context = np.concatenate([unit[-width:], unit[1 : width + 1]])
    idx = mark + np.concatenate([np.arange(-width, 0), np.arange(1, width + 1)])
    inside = (idx >= 0) & (idx < len(codes))
    same = inside & (codes[np.clip(idx, 0, len(codes) - 1)] == context)
    return int(same.sum()) >= len(context) - 1


def _layers_at(
    codes: np.ndarray, marks: np.ndarray, unit: np.ndarray, shift: int, kin: np.ndarray
) -> tuple[list[LayerSpan], np.ndarray]:
    """The layers when each starts `shift` kernels before its anchor, and the unit rotated to start there.

    Layers of another kind before the first layer are left to `_extend_left`; `kin` is what their confidence counts
    kernels by (see _accepted)."""
    rotated = np.roll(unit, shift)
    bounds = _trim(codes, _segments(codes, _snapped(codes, marks - shift, rotated), rotated), rotated)
    spans = _accepted(codes, _whole_unit_copies(codes, bounds, rotated), rotated, kin)
    spans = _whole_copies(codes, _extend_left(codes, spans, rotated, kin) + spans, len(rotated))
    return _unit_long_before_other(codes, spans, rotated), rotated


def _unit_long_before_other(codes: np.ndarray, spans: list[LayerSpan], unit: np.ndarray) -> list[LayerSpan]:
    """The spans with a layer shorter than the unit, followed by one that matches the unit poorly, made one unit
    long where the unit-long stretch from its start matches the unit nearly whole (EXACT_OR_CONFIDENT, both ways);
    the layer after keeps the rest. The anchor also runs in a layer of another kind (a Mamba layer's MLP block runs
    in an attention layer too), and a layer started from it there cut the layer before it short: half a Mamba
    layer, then its other half with the attention layer."""
    out = list(spans)
    for i in range(len(out) - 1):
        layer, after = out[i], out[i + 1]
        end = layer.start + len(unit)
        if layer.end != after.start or not layer.end < end < after.end or after.confidence >= EXACT_OR_CONFIDENT:
            continue
        precision, recall = similarity(codes, np.array([(layer.start, end), (end, after.end)]), unit)
        if min(precision[0], recall[0]) >= EXACT_OR_CONFIDENT:
            out[i] = LayerSpan(layer.start, end, round(float(precision[0]), 4))
            out[i + 1] = LayerSpan(end, after.end, round(float(precision[1]), 4))
    return out


def alike(codes: np.ndarray, spans: list[LayerSpan] | tuple[LayerSpan, ...]) -> float:
    """Mean over consecutive layers of the kernels they share (as multisets) over the longer one's length."""
    if len(spans) < 2:
        return 1.0
    k = int(codes.max()) + 1
    counts = [np.bincount(codes[s.start : s.end], minlength=k) for s in spans]
    return float(np.mean([_shared_share(a, b) for a, b in itertools.pairwise(counts)]))


def _shared_share(a: np.ndarray, b: np.ndarray) -> float:
    """The kernels two stretches share (as multisets: per-code counts `a`, `b`) over the longer one's length."""
    return float(np.minimum(a, b).sum() / max(a.sum(), b.sum(), 1))


def agreement(codes: np.ndarray, spans: list[LayerSpan] | tuple[LayerSpan, ...]) -> float:
    """Mean over consecutive layers of (common opening + common closing kernels) / the longer one's length.

    A layer with one more routed expert than its neighbour still agrees on everything else; half layers
    (attention, then MLP) or an expert block next to a whole layer do not.
    """
    if len(spans) < 2:
        return 1.0
    starts = np.array([s.start for s in spans])
    ends = np.array([s.end for s in spans])
    a_start, b_start, a_end, b_end = starts[:-1], starts[1:], ends[:-1], ends[1:]
    m = np.minimum(a_end - a_start, b_end - b_start)
    longer = np.maximum(a_end - a_start, b_end - b_start)
    pair = np.repeat(np.arange(len(m)), m)
    t = np.arange(int(m.sum())) - np.repeat(np.concatenate(([0], np.cumsum(m)[:-1])), m)
    head = _first_false(codes[a_start[pair] + t] == codes[b_start[pair] + t], pair, t, m)
    tail = _first_false(codes[a_end[pair] - 1 - t] == codes[b_end[pair] - 1 - t], pair, t, m)
    return float(np.mean(np.minimum(head + tail, m) / np.maximum(longer, 1)))


def _first_false(equal: np.ndarray, pair: np.ndarray, t: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Per pair, the first position where `equal` is False (m when it never is)."""
    first = m.copy()
    np.minimum.at(first, pair[~equal], t[~equal])
    return first


def _anchor(codes: np.ndarray, stats: _CodeStats, period: int) -> int | None:
    """The code marking each layer for this period: most gaps near the period, fewest short gaps."""
    close = np.abs(stats.median_gap - period) <= REGULAR_TOLERANCE * period
    ok = close & (stats.count >= 2) & (stats.regular_share >= REGULAR_SHARE)
    candidates = np.flatnonzero(ok)
    if len(candidates) == 0:
        return None
    best, best_key = None, None
    for code in candidates:  # a handful of codes, not kernels
        gaps = np.diff(np.flatnonzero(codes == code))
        good = int(np.count_nonzero((gaps >= period // 2) & (gaps <= 2 * period)))
        short = int(np.count_nonzero(gaps < period // 2))
        key = (good - 2 * short, int(stats.count[code]), -int(stats.first[code]))
        if best_key is None or key > best_key:
            best, best_key = int(code), key
    return best


def _unit(codes: np.ndarray, marks: np.ndarray, period: int) -> tuple[int, int, int]:
    """Start, length and copies of the most common anchor-to-anchor segment (the unit, anchor first);
    among equally common lengths, the one nearest the candidate period (the median gap)."""
    gaps = np.diff(marks)
    values, counts = np.unique(gaps, return_counts=True)
    length = int(max(zip(counts, -np.abs(values - period), values, strict=True))[2])
    seen: dict[bytes, list[int]] = {}
    for i in np.flatnonzero(gaps == length):  # one entry per layer
        seen.setdefault(codes[marks[i] : marks[i] + length].tobytes(), []).append(int(marks[i]))
    starts = max(seen.values(), key=len)
    return starts[0], length, len(starts)


def _phases(
    codes: np.ndarray, marks: np.ndarray, unit: np.ndarray, families: np.ndarray | None = None
) -> list[tuple[int, int]]:
    """How many kernels before its anchor a layer may start, earliest first, each with a rank: 2 when it makes
    whole layers at both ends thanks to a first layer that opens with a variant of the unit's first kernel, 1 when
    it makes whole layers, 0 when it is only the leftmost extension of the repetition.

    Every phase cuts the layers between the first and the last alike (a rotation of the unit), so only the ends
    decide. For each phase d, the first layer (from the first anchor that opens a unit-long layer) and the last
    layer are compared kernel by kernel with the unit rotated to start d kernels before its anchor; the phases
    matching most are all plausible (a prologue, or a layer of another kind, that ends like a layer; an epilogue
    that starts like one). The caller keeps the one that finds most layers (a dense layer before MoE layers is
    only found when its opening is cut like theirs; the leftmost extension of the repetition is tried too), and
    among those the earliest boundary (largest d): the
    epilogue of a pre-norm transformer opens with the final norm, the same kernels as a layer's opening norm, so
    kernels that could belong to either side go after the last layer.
    A first layer's first kernel that occurs nowhere else (a first norm with no residual to add) is not held
    against it. Layers whose length varies (an expert loop) cannot be compared kernel by kernel: for them, the
    leftmost extension of the repetition.
    """
    length = len(unit)
    if length < 2:
        return [(0, 1)]
    gaps = np.diff(marks)
    whole = np.flatnonzero(gaps == length)
    extension = _phase_by_extension(codes, marks, unit)
    if len(whole) and np.any(np.abs(gaps[whole[0] :] - length) > 1):  # layer lengths vary after the first whole one
        return [(extension, 1)]
    first = int(marks[whole[0]]) if len(whole) else int(marks[0])
    last = int(marks[-1])
    d = np.arange(length)
    position = np.arange(length)
    rotated = unit[(position[None, :] - d[:, None]) % length]  # rotated[d] starts d kernels before the anchor
    variant = _variant_first(codes, first - d, rotated[:, 0], families)
    score = (
        _matches(codes, _snapped(codes, first - d, rotated), rotated)
        + _matches(codes, _snapped(codes, last - d, rotated), rotated)
        + variant
    )
    plausible = [int(d) for d in np.flatnonzero(score == score.max())[::-1]]
    # when the repetition's leftmost extension is not plausible, the plausible phases just after it are tried too:
    # the first layer lacks a kernel that the others open with (a residual cast, its input being the embedding's)
    tried = plausible[:MAX_PHASES] + [d for d in plausible[MAX_PHASES:] if 0 < d - extension <= EXTENSION_REACH]
    found = [(d, 1 + int(variant[d])) for d in tried]
    return found if extension in tried else [*found, (extension, 0)]


def _variant_first(
    codes: np.ndarray, starts: np.ndarray, expected: np.ndarray, families: np.ndarray | None
) -> np.ndarray:
    """Per phase, 1 where the first layer's first kernel is not the unit's but of its family."""
    if families is None:
        return np.zeros(len(starts), dtype=np.int64)
    family_of = np.zeros(int(codes.max()) + 1, dtype=np.int64)
    family_of[codes] = families
    at = np.clip(starts, 0, len(codes) - 1)
    return ((starts >= 0) & (codes[at] != expected) & (families[at] == family_of[expected])).astype(np.int64)


def _snapped(codes: np.ndarray, starts: np.ndarray, rotated: np.ndarray, reach: int = 2) -> np.ndarray:
    """Per start, the nearest position within `reach` kernels where the layer opens like its rotated unit (first
    two kernels): a layer of another kind with a kernel more or less before its anchor (a mask in full attention)
    still opens with the unit's norm. The start itself when there is none."""
    if rotated.shape[-1] < 2 or len(codes) < 2:
        return starts
    rotated = np.broadcast_to(rotated, (len(starts), rotated.shape[-1]))
    snapped, found = starts.copy(), np.zeros(len(starts), dtype=bool)
    for shift in sorted(range(-reach, reach + 1), key=abs):
        at = starts + shift
        inside = (at >= 0) & (at + 1 < len(codes))
        opens = inside & (codes[np.clip(at, 0, len(codes) - 2)] == rotated[:, 0])
        opens &= codes[np.clip(at + 1, 0, len(codes) - 1)] == rotated[:, 1]
        take = opens & ~found
        snapped[take], found = at[take], found | opens
    return snapped


def _matches(codes: np.ndarray, starts: np.ndarray, rotated: np.ndarray) -> np.ndarray:
    """Per phase, how many kernels from `starts[d]` equal rotated[d] position by position (outside the sequence:
    no match; a start before the sequence: -1, never chosen)."""
    length = rotated.shape[1]
    idx = starts[:, None] + np.arange(length)[None, :]
    inside = (idx >= 0) & (idx < len(codes))
    equal = inside & (codes[np.clip(idx, 0, len(codes) - 1)] == rotated)
    return np.where(starts >= 0, equal.sum(axis=1), -1)


def _phase_by_extension(codes: np.ndarray, marks: np.ndarray, unit: np.ndarray) -> int:
    """The phase of layers whose length varies (MoE expert loops): the leftmost extension of the repetition.

    From the first anchor that opens a layer-sized stretch (not a stray occurrence in the prologue), count
    how far the kernels before it keep matching the unit's tail backwards (capped below one unit): the
    prologue (embedding) does not look like the end of a layer.
    """
    length = len(unit)
    if length < 2:
        return 0
    gaps = np.diff(marks)
    real = np.flatnonzero((gaps >= length // 2) & (gaps <= 2 * length))
    first = int(marks[real[0]]) if len(real) else int(marks[0])
    back = first - 1 - np.arange(length - 1)
    equal = (back >= 0) & (codes[np.clip(back, 0, None)] == unit[::-1][: length - 1])
    return length - 1 if equal.all() else int(np.argmin(equal))


def _segments(codes: np.ndarray, starts: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """[start, end) of each candidate layer: from one start to the next; the last one up to the end of
    the unit's closing kernels that follow it (a layer longer or shorter than the unit), else one unit."""
    starts = np.clip(starts, 0, len(codes))
    last = int(starts[-1])
    ends = np.append(starts[1:], _last_end(codes, last, unit))
    keep = ends > starts
    return np.stack([starts[keep], ends[keep]], axis=1)


def _last_end(codes: np.ndarray, start: int, unit: np.ndarray) -> int:
    """End of the last layer: after the unit's closing kernels nearest one unit after its start (a unit of two
    layers that end alike closes twice)."""
    length = len(unit)
    hits = _closing_hits(codes[start : start + 2 * length], _closing(unit))
    inside = hits[hits > length // 2]
    if not len(inside):
        return min(start + length, len(codes))
    return start + int(inside[np.argmin(np.abs(inside - length))])


def _closing_hits(codes: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """Positions just after each occurrence of `tail` in `codes`."""
    if len(codes) < len(tail):
        return np.array([], dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(codes, len(tail))
    return np.flatnonzero((windows == tail[None, :]).all(axis=1)) + len(tail)


def similarity(codes: np.ndarray, bounds: np.ndarray, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment: multiset overlap with the unit over the segment's size (precision) and the unit's (recall)."""
    unit_codes, unit_counts = np.unique(unit, return_counts=True)
    lengths = bounds[:, 1] - bounds[:, 0]
    seg_id = np.repeat(np.arange(len(bounds)), lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    idx = np.arange(int(lengths.sum())) - np.repeat(offsets - bounds[:, 0], lengths)
    pos = np.searchsorted(unit_codes, codes[idx])
    pos = np.clip(pos, 0, len(unit_codes) - 1)
    in_unit = unit_codes[pos] == codes[idx]
    k = len(unit_codes)
    table = np.bincount(seg_id[in_unit] * k + pos[in_unit], minlength=len(bounds) * k).reshape(len(bounds), k)
    shared = np.minimum(table, unit_counts[None, :]).sum(axis=1)
    precision = shared / np.maximum(lengths, 1)
    recall = shared / len(unit)
    return precision, recall


def _accepted(codes: np.ndarray, bounds: np.ndarray, unit: np.ndarray, kin: np.ndarray) -> list[LayerSpan]:
    """The segments that are layers: alike in kernels to the unit, or - a layer of another kind, such as a
    dense layer before MoE ones - opening like the unit and directly followed by a layer. A layer's confidence is
    its match to the unit (precision); a layer of another kind, whose match is poor by nature (a dense MLP where the
    unit runs experts), has the share of its kernels whose kind (`kin`: the kernels' families, so that a compiled
    dense layer's own fusions, which Inductor names for the operations they fuse, count) the layers alike run."""
    if len(bounds) == 0:
        return []
    precision, recall = similarity(codes, bounds, unit)
    alike = (precision >= ACCEPT_PRECISION) & (recall >= ACCEPT_RECALL)
    opens = _opening_match(codes, bounds[:, 0], unit) >= max(3, len(_opening(unit)))
    other_kind = opens & (precision >= ACCEPT_PRECISION) & (recall >= OTHER_KIND_RECALL)
    ok = alike.copy()
    for i in range(len(bounds) - 2, -1, -1):  # one step per layer, walking back from the end
        ok[i] |= other_kind[i] and ok[i + 1] and bounds[i, 1] == bounds[i + 1, 0]
    known = _run_by(kin, bounds[alike])
    return [
        LayerSpan(int(s), int(e), round(float(p if same else np.mean(known[kin[s:e]])), 4))
        for (s, e), p, good, same in zip(bounds, precision, ok, alike, strict=True)
        if good
    ]


def _run_by(codes: np.ndarray, bounds: Sequence[tuple[int, int]] | np.ndarray) -> np.ndarray:
    """Per kernel code, whether one of the stretches `bounds` of `codes` runs it."""
    known = np.zeros(int(codes.max()) + 1, dtype=bool)
    for start, end in bounds:
        known[codes[start:end]] = True
    return known


def _order_confidence(codes: np.ndarray, spans: list[LayerSpan], unit: np.ndarray) -> float:
    """Mean share of each layer's consecutive kernel pairs found in the unit: kernels in the same order, not
    merely the same kernels (long stretches of unrelated kernels share their multiset, not their pairs)."""
    if len(unit) < 2:
        return 0.0
    k = int(codes.max()) + 1
    pairs = codes[:-1] * k + codes[1:]
    unit_pairs = unit[:-1] * k + unit[1:]
    bounds = np.array([[s.start, max(s.start, s.end - 1)] for s in spans])
    precision, _ = similarity(pairs, bounds, unit_pairs)
    return float(np.mean(precision))


def _opening_match(codes: np.ndarray, starts: np.ndarray, unit: np.ndarray, longest: int = 16) -> np.ndarray:
    """For each start, how many kernels from there equal the unit's first kernels (up to `longest`)."""
    k = min(longest, len(unit))
    idx = starts[:, None] + np.arange(k)[None, :]
    equal = (idx < len(codes)) & (codes[np.clip(idx, 0, len(codes) - 1)] == unit[None, :k])
    return np.where(equal.all(axis=1), k, np.argmin(equal, axis=1))


def _extend_left(codes: np.ndarray, spans: list[LayerSpan], unit: np.ndarray, kin: np.ndarray) -> list[LayerSpan]:
    """Layers of another kind right before the first layer (DeepSeek's dense first layers), walked backwards: each
    starts at an occurrence of the unit's opening kernels, the one whose stretch up to the next layer is most like
    the unit (precision x recall: a norm inside the layer gives too little, two layers too much). The very first
    layer may open with another kernel (a norm with no residual to add, where the others fuse the previous
    layer's add): its opening is matched without its first kernel. Each has the share of its kernels that the
    layers after it run as its confidence (see _accepted)."""
    if not spans or spans[0].start == 0:
        return []
    head = _opening(unit)
    found: list[LayerSpan] = []
    end = spans[0].start
    for hits in (occurrences(codes[:end], head), occurrences(codes[:end], head[1:]) - 1):
        while (layer := _best_layer_before(codes, hits, end, unit)) is not None:
            found.insert(0, layer)
            end = layer.start
    known = _run_by(kin, _bounds(spans))
    return [dataclasses.replace(f, confidence=round(float(np.mean(known[kin[f.start : f.end]])), 4)) for f in found]


def occurrences(codes: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """Positions where `gram` occurs in `codes`."""
    if len(gram) == 0 or len(codes) < len(gram):
        return np.array([], dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(codes, len(gram))
    return np.flatnonzero((windows == gram[None, :]).all(axis=1))


def _best_layer_before(codes: np.ndarray, hits: np.ndarray, end: int, unit: np.ndarray) -> LayerSpan | None:
    starts = hits[(hits >= 0) & (hits < end) & (hits >= end - 2 * len(unit))]
    if not len(starts):
        return None
    precision, recall = similarity(codes, np.stack([starts, np.full(len(starts), end)], axis=1), unit)
    ok = (precision >= ACCEPT_PRECISION) & (recall >= OTHER_KIND_RECALL)
    if not ok.any():
        return None
    best = int(np.argmax(np.where(ok, precision * recall, -1)))
    return LayerSpan(int(starts[best]), int(end), round(float(precision[best]), 4))


def _opening(unit: np.ndarray, longest: int = 8) -> np.ndarray:
    """The shortest prefix of the unit (at least 2 kernels) that occurs only once in the cyclic unit."""
    for m in range(2, min(longest, len(unit)) + 1):
        if _unique_in_cycle(unit, unit[:m]):
            return unit[:m]
    return unit[: min(longest, len(unit))]


def _closing(unit: np.ndarray, longest: int = 8) -> np.ndarray:
    """The shortest suffix of the unit (at least 2 kernels) that occurs only once in the cyclic unit."""
    for m in range(2, min(longest, len(unit)) + 1):
        if _unique_in_cycle(unit, unit[-m:]):
            return unit[-m:]
    return unit[-min(longest, len(unit)) :]


def _unique_in_cycle(unit: np.ndarray, gram: np.ndarray) -> bool:
    cyclic = np.concatenate([unit, unit[: len(gram) - 1]])
    windows = np.lib.stride_tricks.sliding_window_view(cyclic, len(gram))
    return int((windows == gram[None, :]).all(axis=1).sum()) == 1


def _whole_copies(codes: np.ndarray, spans: list[LayerSpan], unit: int) -> list[LayerSpan]:
    """Move the boundary between two touching layers later where that makes the first one, of another length than
    the unit (`unit` kernels), an exact copy of another such layer: the dense layers before the MoE ones, whose
    first starts by its anchor, which can put it on the norm that ends the dense layer before (sandwich norms).
    Repeated until nothing moves: a copy made by one move is one the layers before it can be matched to (a run of
    dense layers found each half a layer late, when their MLP half opens as their attention half does)."""
    out = list(spans)
    for _ in range(len(spans)):
        moved = _copies_moved_once(codes, out, unit)
        if moved == out:
            break
        out = moved
    return out


def _copies_moved_once(codes: np.ndarray, spans: list[LayerSpan], unit: int) -> list[LayerSpan]:
    contents = {codes[s.start : s.end].tobytes() for s in spans if s.end - s.start != unit}
    lengths = sorted({s.end - s.start for s in spans} - {unit})
    out = list(spans)
    for i in range(len(out) - 1):
        layer, after = out[i], out[i + 1]
        if layer.end != after.start or layer.end - layer.start == unit:
            continue
        for length in (n for n in lengths if layer.end < layer.start + n < after.end):
            if codes[layer.start : layer.start + length].tobytes() in contents:
                end = layer.start + length
                out[i], out[i + 1] = (
                    LayerSpan(layer.start, end, layer.confidence),
                    LayerSpan(end, after.end, after.confidence),
                )
                break
    return out


def _whole_unit_copies(codes: np.ndarray, bounds: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Move the boundary between two touching segments later where that makes the first one an exact copy of the
    unit: a layer of another kind after it (a full-attention layer among sliding ones, without the mask kernels in
    its middle) has its anchor nearer its start, and its start, put one unit-offset before the anchor, lands in the
    layer before (on a norm that ends it, as sandwich norms do)."""
    length = len(unit)
    out = bounds.copy()
    for i in np.flatnonzero(bounds[:-1, 1] - bounds[:-1, 0] < length):  # only the short ones
        start, end = out[i]
        if (
            end == out[i + 1, 0]
            and start + length < out[i + 1, 1]
            and np.array_equal(codes[start : start + length], unit)
        ):
            out[i, 1] = out[i + 1, 0] = start + length
    return out


def _trim(codes: np.ndarray, bounds: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """End a segment longer than the unit after the occurrence of the unit's closing kernels in it nearest one
    unit from its start.

    Keeps a layer from swallowing an epilogue and the next iteration's prologue (or a stretch of other work).
    """
    length = len(unit)
    hits = _closing_hits(codes, _closing(unit))
    out = bounds.copy()
    for i in np.flatnonzero(bounds[:, 1] - bounds[:, 0] > length):  # only the overlong ones
        start, end = bounds[i]
        inside = hits[(hits > start + length // 2) & (hits <= end)]
        if len(inside):
            out[i, 1] = inside[np.argmin(np.abs(inside - start - length))]
        elif end - start > 2 * length and codes[start + length - 1] == unit[-1]:
            out[i, 1] = start + length  # a variant of the unit (another matmul kernel before its last), then glue
    return out
