"""Layers from where their mixers open, whatever their kinds (numpy, no database).

Every decoder layer is a token mixer (attention, linear attention, convolution, SSM) and a channel mixer (an MLP or
experts), each behind a norm and a residual add. Where two found layers meet, the last kernel of one (the residual
add) and the first two of the next (the input norm) are the boundary context; in a pre-norm stack the same context
also opens every channel mixer, and the final norm after the last layer. So the context cuts a forward pass into
halves, a token-mixing half and a channel-mixing half in turn, whatever kind each layer is: dense or MoE, linear or
full attention, sliding or global. The repeating unit of the kernel sequence (`period.py`) cannot see these
structures when the kinds alternate in long patterns or a lone layer differs; the halves can.

For one sequence (a step, or a whole trace):
1. *Marks*: every occurrence of the boundary context. The pieces between consecutive marks are halves, except a
   piece that holds the glue between two forward passes (the epilogue: final norm, LM head, sampling; the next
   prologue: embedding; then the next pass's first token mixer, which has no residual add before it). Such a
   piece holds the kernels that only the glue runs: those of the sequence's own prologue (before the first mark)
   and epilogue (after the last) that pieces of no more than two contents run (`_glue_pieces`), or that recur
   together in the same few pieces, alike to each other (the glue's first token mixer changes from pass to pass as
   the cache grows, so with many passes the glue is many contents); a piece alike to a glue piece is glue too.
2. *Passes*: the marks between two glue pieces. A pass of L layers has 2L marks: the opening of each channel
   mixer, of each layer after the first, and of the final norm.
3. *Layers*: from every second mark; the first layer starts where its token mixer does, inside the glue before
   the pass: the glue ends with a copy of one of the pass's token-mixing halves.
When neighbouring pieces are identical, each piece is a whole layer (post-norm or parallel blocks: one mark per
layer after the first); the last mark opens the final norm or the last layer, and whole layers are alike in length.
The result is taken only when it is unambiguous: an even number of marks in every pass of halves, each pass's first
layer found as an exact copy, no piece that is a token-mixing half in one place and a channel-mixing half in
another, and at least as many layers as the spans it started from, explaining nearly as many kernels.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

GLUE_CONTENTS = 2  # a kernel run by pieces of more contents than this is a layer's, not the glue's
GLUE_SHARE = 0.5  # a piece holding this share of the glue's own kernels is the glue between two passes
GLUE_ALIKE = 0.9  # a piece with this share of its kernels in common with a glue piece is glue too
NEAR_COVERAGE = 0.98  # share of the spans' layer-like kernels an answer must explain
WHOLE_LONGEST = 1.4  # a whole layer this many times the median length holds more than a layer
MAX_CONTEXTS = 40  # boundary contexts tried (layers found out of phase start some kernels early or late)
# how far from a found layer's start its true start is looked for, nearest first (one or two kernels into the norm,
# the most common, first)
SHIFTS = (0, -1, -2, 1, 2, -3, 3, -4, 4, -5, 5, -6, 6, -7, 7, -8, 8)
MAX_FAR_CONTEXTS = 200  # contexts tried farther away, up to FAR_REACH, when none of the near ones answers
FAR_REACH = 0.5  # of the median found layer: how far a start is looked for when its layers are found out of phase
MAX_TRIGRAMS = 24  # the most frequent runs of three kernels tried as the boundary context when no layers give it
MIN_GLUE = 3  # kernels of its own a piece holds before a pass's first token mixer to be the glue: final norm, LM
# head, embedding


def forward_passes(codes: np.ndarray, spans: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]] | None:
    """Per forward pass of `codes`, its layers ([start, end) offsets), from the first of the boundary contexts around
    the found `spans` (most common first; farther ones when no near one answers: `_far_contexts`) whose marks give an
    unambiguous answer that explains as much as the spans: as many layers or more, and nearly as many of their
    kernels that are a layer's (NEAR_COVERAGE: spans may hold some of the glue, and an edge span the prologue:
    kernels that no layer of the answer runs do not count); else None (see the module's docstring)."""
    near = boundary_contexts(codes, spans)[:MAX_CONTEXTS]
    for context in itertools.chain(near, itertools.islice(_far_contexts(codes, spans, set(near)), MAX_FAR_CONTEXTS)):
        found = _from_marks(codes, [int(m) for m in marks_of(codes, context)])
        layers = [span for layers in found or [] for span in layers]
        if found and len(layers) >= len(spans) and covered(layers) >= NEAR_COVERAGE * _layer_like(codes, spans, layers):
            return found
    return None


def _layer_like(codes: np.ndarray, spans: Sequence[tuple[int, int]], layers: list[tuple[int, int]]) -> int:
    """Kernels of `spans` whose kernel some of `layers` also runs."""
    ran = np.unique(np.concatenate([codes[a:b] for a, b in layers]))
    return sum(int(np.isin(codes[a:b], ran).sum()) for a, b in spans)


def _from_marks(codes: np.ndarray, marks: list[int]) -> list[list[tuple[int, int]]] | None:
    if len(marks) < 4:
        return None
    pieces = [*itertools.pairwise(marks), (marks[-1], len(codes))]
    contents = [codes[a:b].tobytes() for a, b in pieces]
    glue = _glue_pieces(codes, marks, contents[:-1])
    whole = any(a == b for a, b in itertools.pairwise(contents))  # whole layers back to back, not halves
    befores = [(0, marks[0]), *(pieces[i] for i in glue)]  # what precedes each pass's first mark
    lasts = [*glue, len(marks) - 1]  # the last mark of a pass of halves opens its final norm
    owns = [marks[i : j + 1] for i, j in zip([0, *(i + 1 for i in glue)], lasts, strict=True)]
    out = []
    for before, own, last in zip(befores, owns, lasts, strict=True):
        layers = _whole_layers(codes, before, own, pieces[last]) if whole else _layers_of_halves(codes, before, own)
        if layers is None:
            return None
        out.append(layers)
    return out if whole or _halves_agree(codes, owns) else None


def _layers_of_halves(codes: np.ndarray, before: tuple[int, int], own: list[int]) -> list[tuple[int, int]] | None:
    """The layers of a pass of halves: 2L marks (each channel mixer, each layer after the first, the final norm);
    the first layer starts with a copy of one of the pass's token-mixing halves."""
    if len(own) % 2 or len(own) < 4:
        return None
    start = _ends_with_copy(codes, before, _contents(codes, own[1::2], own[2::2]))
    return None if start is None else list(itertools.pairwise([start, *own[1:-1:2], own[-1]]))


def _whole_layers(
    codes: np.ndarray, before: tuple[int, int], own: list[int], after: tuple[int, int]
) -> list[tuple[int, int]] | None:
    """The layers of a pass whose pieces are whole layers (post-norm or parallel blocks: one mark per layer after
    the first): the first layer is a copy of one of them at the end of what precedes the pass; the last mark opens
    either the final norm or the last layer, when what follows it opens with a copy of one. Whole layers are alike
    in length: a piece much longer than the typical one holds the glue of passes not told apart (no answer)."""
    sizes = np.diff(own)
    if len(sizes) and sizes.max() > WHOLE_LONGEST * np.median(sizes):
        return None
    layers = _contents(codes, own[:-1], own[1:])
    start = _ends_with_copy(codes, before, layers)
    if start is None or not layers:
        return None
    bounds = [start, *own]
    last = next((len(c) // codes.itemsize for c in layers if codes[after[0] : after[1]].tobytes().startswith(c)), 0)
    if last:
        bounds.append(after[0] + last)
    return list(itertools.pairwise(bounds)) if len(bounds) > 2 else None


def _halves_agree(codes: np.ndarray, passes: list[list[int]]) -> bool:
    """No piece is a token-mixing half in one place and a channel-mixing half in another."""
    token = set().union(*(_contents(codes, own[1::2], own[2::2]) for own in passes))
    channel = set().union(*(_contents(codes, own[0::2], own[1::2]) for own in passes))
    return not token & channel


def covered(spans: Iterable[tuple[int, int]]) -> int:
    """Kernels in layers (spans)."""
    return sum(b - a for a, b in spans)


def _contents(codes: np.ndarray, starts: list[int], ends: list[int]) -> set[bytes]:
    return {codes[a:b].tobytes() for a, b in zip(starts, ends, strict=False)}


def boundary_context(codes: np.ndarray, spans: Sequence[tuple[int, int]]) -> tuple[int, int, int] | None:
    """The most common (last kernel, first kernel, second kernel) where two found layers meet."""
    contexts = boundary_contexts(codes, spans, meeting=True)
    return contexts[0] if contexts else None


def boundary_contexts(
    codes: np.ndarray, spans: Sequence[tuple[int, int]], meeting: bool = False
) -> list[tuple[int, int, int]]:
    """The (last kernel, first kernel, second kernel) around the start of found layers, most common first: where two
    found layers meet, then (unless `meeting`) where the others start and up to 8 kernels (SHIFTS) before or after
    the starts, nearest first (a layer found out of phase: some kernels into its norm, or holding the residual add
    and other kernels of the layer before it)."""
    ordered = sorted(spans)
    met = [b for (_, end), (b, _) in itertools.pairwise(ordered) if end == b]
    tiers = [met] if meeting else [met, *([a + shift for a, _ in ordered] for shift in SHIFTS)]
    out: list[tuple[int, int, int]] = []
    for starts in tiers:
        out += [context for context in _contexts_at(codes, starts) if context not in out]
    return out


def _contexts_at(codes: np.ndarray, starts: Iterable[int]) -> list[tuple[int, int, int]]:
    """The (last kernel, first kernel, second kernel) around each of `starts` inside `codes`, most common first."""
    at = np.fromiter(starts, dtype=np.int64)
    at = at[(at > 0) & (at < len(codes) - 1)]
    seen = Counter(zip(codes[at - 1].tolist(), codes[at].tolist(), codes[at + 1].tolist(), strict=True))
    return [context for context, _ in seen.most_common()]


def _far_contexts(
    codes: np.ndarray, spans: Sequence[tuple[int, int]], tried: set[tuple[int, int, int]]
) -> Iterator[tuple[int, int, int]]:
    """The contexts around the found layers' starts from beyond SHIFTS up to FAR_REACH of their median length, nearest
    first, those `tried` left out, made as they are asked for: layers found out of phase by a block that opens both
    of a layer's halves alike (hyper-connections: each half opens with the same mixing of the residual streams before
    its norm), so that no near context marks them."""
    if not spans:
        return
    reach = int(FAR_REACH * np.median([b - a for a, b in spans]))
    starts = np.array(sorted(a for a, _ in spans))
    seen = set(tried)
    for shift in (x for k in range(max(SHIFTS) + 1, reach + 1) for x in (-k, k)):
        for context in _contexts_at(codes, starts + shift):
            if context not in seen:
                seen.add(context)
                yield context


def marks_of(codes: np.ndarray, context: tuple[int, int, int]) -> np.ndarray:
    """Positions j where codes[j-1:j+2] is the boundary context."""
    if len(codes) < 3:
        return np.array([], dtype=np.int64)
    hit = (codes[:-2] == context[0]) & (codes[1:-1] == context[1]) & (codes[2:] == context[2])
    return np.flatnonzero(hit) + 1


def _glue_pieces(codes: np.ndarray, marks: list[int], contents: list[bytes]) -> list[int]:
    """Indexes of the pieces that hold the glue between two forward passes: at least GLUE_SHARE of the kernels of
    the sequence's own prologue (before its first mark, less the first layer's half) and epilogue (after its last
    mark) that are not a layer's. A layer's kernels are run by pieces of more than GLUE_CONTENTS contents; the glue
    between passes is one content, or two when the first pass's prologue differs."""
    seen = Counter(code for content in set(contents) for code in set(np.frombuffer(content, dtype=np.int64).tolist()))
    ordinary = {code for code, count in seen.items() if count > GLUE_CONTENTS}
    prologue = codes[: _ends_with_copy(codes, (0, marks[0]), set(contents)) or marks[0]]  # less the first layer's
    ends = [*prologue.tolist(), *codes[marks[-1] :].tolist()]
    ordinary -= _recurring_together(codes, marks, [code for code in ends if code in ordinary])
    own = Counter(code for code in ends if code not in ordinary)
    if not own:
        return []
    kinds = np.array(sorted(own), dtype=np.int64)
    limit = np.array([own[int(k)] for k in kinds])
    pairs, counts = _in_pieces(codes, marks, kinds)
    shared = np.bincount(
        pairs // len(kinds), weights=np.minimum(counts, limit[pairs % len(kinds)]), minlength=len(marks) - 1
    )
    glue = [int(i) for i in np.flatnonzero(shared >= GLUE_SHARE * limit.sum())]
    return _with_alike(codes, contents, glue)


def _in_pieces(codes: np.ndarray, marks: list[int], kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of the sorted `kinds` of kernel each piece between the first and the last mark runs, and how often:
    distinct piece * len(kinds) + kind, and the count of each."""
    inner = codes[marks[0] : marks[-1]]
    at = np.flatnonzero(np.isin(inner, kinds))
    piece = np.searchsorted(marks, at + marks[0], side="right") - 1
    return np.unique(piece * len(kinds) + np.searchsorted(kinds, inner[at]), return_counts=True)


def _recurring_together(codes: np.ndarray, marks: list[int], candidates: list[int]) -> set[int]:
    """Of the sequence's end kernels that pieces of many contents run (`candidates`, with repeats), those that are the
    glue's all the same: with more than three passes the glue's kernels are run by as many contents as a layer's
    (see _with_alike). The glue's kernels recur together, in each of the same few pieces, which are alike: the set of
    pieces that runs the most of the candidates, when it is at most a quarter of the pieces (a pass holds four marks
    or more) and its pieces are alike."""
    if not candidates:
        return set()
    kinds = np.array(sorted(set(candidates)), dtype=np.int64)
    pairs, _ = _in_pieces(codes, marks, kinds)
    pieces_of: dict[int, frozenset[int]] = {int(code): frozenset() for code in kinds}
    for kind in np.unique(pairs % len(kinds)):
        pieces_of[int(kinds[kind])] = frozenset((pairs[pairs % len(kinds) == kind] // len(kinds)).tolist())
    together, _ = max(
        Counter(pieces_of[code] for code in candidates).items(), key=lambda item: (item[1], -len(item[0]))
    )
    if not together or 4 * len(together) > len(marks) - 1:
        return set()
    first, *others = (np.sort(codes[marks[i] : marks[i + 1]]) for i in sorted(together))
    if not all(_alike(first, other) for other in others):
        return set()
    return {code for code, pieces in pieces_of.items() if pieces == together}


def _with_alike(codes: np.ndarray, contents: list[bytes], glue: list[int]) -> list[int]:
    """The glue pieces and every piece alike to one of them (GLUE_ALIKE of its kernels, counted with repeats, in
    common): the glue holds the next pass's first token mixer, whose kernels change as the cache grows, so with more
    than three passes the glue's own kernels are run by as many contents as a layer's, and only some glue pieces
    hold enough of the kernels only the glue runs. `contents`: each piece's kernels, as bytes."""
    if not glue:
        return glue
    found = {contents[i] for i in glue}
    sorted_found = [np.sort(np.frombuffer(content, dtype=codes.dtype)) for content in found]
    alike = found | {
        content
        for content in set(contents) - found
        if any(_alike(np.sort(np.frombuffer(content, dtype=codes.dtype)), other) for other in sorted_found)
    }
    return [i for i, content in enumerate(contents) if content in alike]


def _alike(a: np.ndarray, b: np.ndarray) -> bool:
    """Two sorted kernel sequences share GLUE_ALIKE of the longer one's kernels, counted with repeats."""
    longest = max(len(a), len(b))
    if min(len(a), len(b)) < GLUE_ALIKE * longest:
        return False
    values = np.union1d(a, b)
    common = np.minimum(
        np.searchsorted(a, values, "right") - np.searchsorted(a, values, "left"),
        np.searchsorted(b, values, "right") - np.searchsorted(b, values, "left"),
    )
    return int(common.sum()) >= GLUE_ALIKE * longest


def _ends_with_copy(codes: np.ndarray, before: tuple[int, int], copies: set[bytes]) -> int | None:
    """Where a pass's first layer starts: the stretch before its first mark (the glue, or the sequence's
    prologue) ends with one of `copies` (the longest that fits), which is the first layer or its token mixer."""
    lo, hi = before
    for length in sorted({len(copy) // codes.itemsize for copy in copies}, reverse=True):
        if length <= hi - lo and codes[hi - length : hi].tobytes() in copies:
            return hi - length
    return None


def frequent_contexts(codes: np.ndarray) -> list[tuple[int, int, int]]:
    """The MAX_TRIGRAMS most frequent runs of three kernels that recur at least four times (two passes of a layer,
    two marks each), most frequent first: the boundary context is among them when no found layers give it (a
    drafter's passes and a target's hide the layer from the repeating unit)."""
    if len(codes) < 3:
        return []
    trigrams = np.stack([codes[:-2], codes[1:-1], codes[2:]], axis=1)
    distinct, first, counts = np.unique(trigrams, axis=0, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))[:MAX_TRIGRAMS]
    return [(int(a), int(b), int(c)) for a, b, c in distinct[order[counts[order] >= 4]]]


def in_loop(context: tuple[int, int, int]) -> bool:
    """Whether a run of three kernels read as a boundary context (a layer's last kernel, the next one's first two)
    lies inside a loop of one or two kernels (an expert loop: GEMM, reduction, GEMM): its first kernel comes back
    as its second or third. A layer closes with its residual add and opens with its norm, whose kernels differ."""
    return context[0] in (context[1], context[2])


def passes_after_glue(
    codes: np.ndarray, context: tuple[int, int, int], opening: bool = False
) -> list[list[tuple[int, int]]] | None:
    """Per forward pass of `codes`, its layers of halves (see the module's docstring), the passes told apart by
    their glue rather than by the kernels of the sequence's own prologue and epilogue (the glue between a drafter's
    passes and a target's differs from place to place): a piece is the glue before a pass when it ends with a copy
    of another piece - the pass's first token mixer, where no residual add precedes the input norm and so no mark
    is - after at least MIN_GLUE kernels of its own, or, when no copy ends it, where the first layer's norm opens
    (_with_openings: a one-layer drafter). A pass may hold a single layer (an MTP head). Pieces before the
    first glue are no pass. `opening`: the sequence opens with a pass (a drafter's work in one step), so its first
    piece, the pass's prologue and first token mixer, is glue and a copy (one-layer passes repeat no other piece).
    None when a pass has an odd number of marks or the halves disagree."""
    marks = [int(m) for m in marks_of(codes, context)]
    if len(marks) < 4:
        return None
    pieces = [(0, marks[0]), *itertools.pairwise(marks), (marks[-1], len(codes))]
    copies = {codes[a:b].tobytes() for a, b in pieces[0 if opening else 1 : -1]}
    ends = _with_openings(
        codes, pieces, [_ends_with_copy(codes, (a + MIN_GLUE, b), copies) for a, b in pieces], context
    )
    starts = [0 if opening else ends[0], *ends[1:]]
    glue = [i for i, start in enumerate(starts) if start is not None and i < len(marks)]  # a pass follows it
    owns = [marks[g:h] for g, h in zip(glue, [*glue[1:], len(marks)], strict=False)]
    if not owns or any(len(own) % 2 for own in owns) or not _halves_agree(codes, owns):
        return None
    return [list(itertools.pairwise([starts[g], *own[1:-1:2], own[-1]])) for g, own in zip(glue, owns, strict=True)]


def _with_openings(
    codes: np.ndarray, pieces: list[tuple[int, int]], ends: list[int | None], context: tuple[int, int, int]
) -> list[int | None]:
    """`ends` (where a copy of another piece ends each glue piece, None for a piece that is no glue) completed
    where no copy ends a piece: a one-layer drafter's token mixer repeats no other piece, so its glue is found from
    where the pass's first layer opens (_opening). The glue's own kernels are those of the sequence's epilogue
    (after its last mark: the LM head, sampling) and of its prologue before the first norm opens (embedding)."""
    opens = _norm_openings(codes, 0, pieces[0][1], context)
    own = set(codes[pieces[-1][0] :].tolist()) | set(codes[: opens[0] if len(opens) else 0].tolist())
    return [
        _opening(codes, piece, after, context, own) if end is None else end
        for end, (piece, after) in zip(ends, itertools.pairwise([*pieces, (0, 0)]), strict=True)
    ]


def _opening(
    codes: np.ndarray, piece: tuple[int, int], after: tuple[int, int], context: tuple[int, int, int], own: set
) -> int | None:
    """Where a pass's first layer opens inside a glue piece: the first kernels of the boundary context (the input
    norm's) with no residual add before them, after MIN_GLUE kernels or more that hold one of the glue's `own`
    that the layer does not run - its token mixer, the rest of the piece, nor its channel mixer, the piece `after`
    (a norm inside a token mixer, as Qwen3's or MLA's, opens after kernels of the layer's own); else None."""
    lo, hi = piece
    hits = _norm_openings(codes, lo + MIN_GLUE, hi, context)
    if not len(hits):
        return None
    start = int(hits[0])
    layer = set(codes[start:hi].tolist()) | set(codes[after[0] : after[1]].tolist())
    return start if any(c in own and c not in layer for c in codes[lo:start].tolist()) else None


def _norm_openings(codes: np.ndarray, lo: int, hi: int, context: tuple[int, int, int]) -> np.ndarray:
    """Positions in [lo, hi - 1) where a norm opens (the boundary context's last two kernels) with no residual add
    (its first) before it."""
    at = np.arange(lo, hi - 1)
    after_add = (codes[np.maximum(at - 1, 0)] == context[0]) & (at > 0)
    return at[(codes[at] == context[1]) & (codes[at + 1] == context[2]) & ~after_add]
