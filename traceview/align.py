"""Kernel alignment: two kernel sequences (one layer instance of run A, one of run B) -> what became of each kernel.

Reads and writes nothing: sequences of kernel identities in, `Aligned` records out. diff.py feeds it and uses the
result twice, to show what changed and to put each kernel's time in a cause (why.py).

The order of the passes is what keeps it honest:
1. identical identities are matched first: difflib.SequenceMatcher (an LCS of whole blocks) over the identities
   (the short name, ingest/kernel_names.py, with a generated kernel's trailing number folded) -> `kept`;
2. an identity left over on both sides (it changed place, e.g. a GEMM that now runs one kernel later) is paired
   in order -> `moved`;
3. a kernel of A left over is `fused` into a kernel of B only when that B kernel is named after the operations it
   fused (Inductor's `triton_poi_fused_add_mul_rsqrt_0`, any `*fused*` name) and one of them is an operation of
   the A kernel (`CUDAFunctorOnSelf_add` is an add), nearby (at most two matched kernels apart);
4. the rest, between the same two matched kernels, is paired by name similarity (difflib's ratio over the first
   SIMILAR_CHARS characters) -> `replaced`;
5. what is still left is `removed` (only in A) or `added` (only in B).
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

FUSION_REACH = 2  # how many matched kernels may lie between a fused kernel and the kernels it covers
SIMILAR = 0.5  # difflib ratio from which two leftover kernels between the same anchors count as one replaced
# Characters of each name that `similarity` compares: difflib's time grows with the product of the two lengths (a
# name of a million characters took hours), and real kernel names are shorter.
SIMILAR_CHARS = 1000
# Words of a kernel name that say nothing about the operation it performs.
_GENERIC = frozenset(
    [
        "kernel",
        "kernels",
        "cuda",
        "impl",
        "lambda",
        "float",
        "double",
        "half",
        "bfloat16",
        "bfloat",
        "int",
        "long",
        "unsigned",
        "char",
        "bool",
        "array",
        "void",
        "at",
        "native",
        "vectorized",
        "unrolled",
        "elementwise",
        "functor",
        "binary",
        "unary",
        "gpu",
        "nocast",
        "ops",
        "op",
        "on",
        "self",
        "with",
        "cast",
        "load",
        "store",
        "trivial",
        "offset",
        "calculator",
        "opaque",
        "type",
        "func",
        "wrapper",
        "t",
        "u",
        "ul",
        "ull",
        "tensor",
        "scalar",
        "small",
        "batched",
        "in",
        "place",
        "kv",
        "gt",
        "lt",
        "params",
        "strided",
        "triton",
        "poi",
        "per",
        "red",
        "tem",
        "for",
        "fused",
        "cutlass",
        "device",
        "global",
        "std",
        "sm",
    ]
)
# DOTALL: a newline in a name would stop `.` there, and every later `fused` would rescan the name (quadratic).
_FUSED_NAME = re.compile(r"fused_?(.*?)(?:_(?:\d+|#))?$", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")


class Status(str, Enum):
    """What became of a kernel between run A and run B."""

    kept = "kept"  # the same kernel, in the same place
    moved = "moved"  # the same kernel, in another place
    fused = "fused"  # kernels of A whose work a kernel of B, named after the operations it fused, now does
    replaced = "replaced"  # a different kernel of B in place of one of A (another implementation or name)
    removed = "removed"  # only in A
    added = "added"  # only in B


@dataclass(frozen=True)
class Aligned:
    """One kernel of A (`a`, an index into its sequence), of B (`b`), or a pair of them, and what became of it.

    A fused group shares its B kernel: one record per A kernel, each with the group's `b`."""

    status: Status
    a: int | None
    b: int | None


def identity(short_name: str) -> str:
    """The name kernels are lined up by: the short name, with the number that ends a generated kernel's name folded
    (triton_poi_fused_add_0 ~ triton_poi_fused_add_1: torch.compile numbers its kernels in order of creation).
    The same rule as the `identity` column of the query layer_kernel_time."""
    return re.sub(r"_\d+$", "_#", short_name)


def words(name: str) -> set[str]:
    """The operation words of a kernel name: split at punctuation and camel case, lower case, generic words and
    numbers dropped. `vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>>` -> {'add'}."""
    found = {w.lower() for part in re.split(r"[^A-Za-z]+", name) for w in _WORD.findall(part)}
    return {w for w in found if w not in _GENERIC and len(w) > 1}


def fused_operations(name: str) -> set[str]:
    """The operations a fused kernel is named after (`triton_per_fused__to_copy_add_mean_1` -> {'to', 'copy', 'add',
    'mean'}); empty for a kernel whose name does not say it fused anything."""
    match = _FUSED_NAME.search(name)
    if match is None:
        return set()
    return {w for w in match.group(1).lower().split("_") if w and not w.isdigit()}


def similarity(name_a: str, name_b: str) -> float:
    """difflib's ratio of two kernel names (1 for the same name), over their first SIMILAR_CHARS characters."""
    return difflib.SequenceMatcher(None, name_a[:SIMILAR_CHARS], name_b[:SIMILAR_CHARS]).ratio()


def align(names_a: Sequence[str], names_b: Sequence[str]) -> list[Aligned]:
    """Align two kernel sequences (identities, see `identity`); every index of each side appears exactly once."""
    matcher = difflib.SequenceMatcher(None, list(names_a), list(names_b), autojunk=False)
    kept = [(m.a + k, m.b + k) for m in matcher.get_matching_blocks() for k in range(m.size)]
    region_a, region_b = _regions(kept, len(names_a), 0), _regions(kept, len(names_b), 1)
    left_a = _left(range(len(names_a)), {a for a, _ in kept})
    left_b = _left(range(len(names_b)), {b for _, b in kept})
    moved = _pair_moved(names_a, names_b, left_a, left_b)
    left_a, left_b = _left(left_a, {a for a, _ in moved}), _left(left_b, {b for _, b in moved})
    fused = _fusions(_Leftovers(names_a, names_b, left_a, left_b, region_a, region_b))
    left_a = _left(left_a, {a for group in fused.values() for a in group})
    left_b = _left(left_b, set(fused))
    replaced = _similar_pairs(_Leftovers(names_a, names_b, left_a, left_b, region_a, region_b))
    records = [Aligned(Status.kept, a, b) for a, b in kept] + [Aligned(Status.moved, a, b) for a, b in moved]
    for b, group in fused.items():  # one A kernel under a fused kernel is a replacement, not a fusion
        records += [Aligned(Status.fused if len(group) > 1 else Status.replaced, a, b) for a in group]
    records += [Aligned(Status.replaced, a, b) for a, b in replaced]
    records += [Aligned(Status.removed, a, None) for a in _left(left_a, {a for a, _ in replaced})]
    records += [Aligned(Status.added, None, b) for b in _left(left_b, {b for _, b in replaced})]
    return in_order(records)


def _left(indices: Sequence[int] | range, taken: set[int]) -> list[int]:
    return [i for i in indices if i not in taken]


def _pair_moved(
    names_a: Sequence[str], names_b: Sequence[str], left_a: list[int], left_b: list[int]
) -> list[tuple[int, int]]:
    """Leftover kernels of one identity on both sides, paired in order (the k-th leftover of A with the k-th of B).
    A leftover never sits between the same two matched blocks as its twin: SequenceMatcher would have matched it."""
    waiting: dict[str, list[int]] = defaultdict(list)
    for j in left_b:
        waiting[names_b[j]].append(j)
    pairs = []
    for i in left_a:
        if waiting[names_a[i]]:
            pairs.append((i, waiting[names_a[i]].pop(0)))
    return pairs


def _regions(kept: list[tuple[int, int]], length: int, side: int) -> list[int]:
    """For each index of one side, the number of kept kernels before it: two leftovers with the same region lie
    between the same two matched kernels."""
    anchors = sorted(pair[side] for pair in kept)
    regions, count = [], 0
    for index in range(length):
        while count < len(anchors) and anchors[count] < index:
            count += 1
        regions.append(count)
    return regions


@dataclass(frozen=True)
class _Leftovers:
    """The kernels of each side not matched yet (indices), and for every kernel its region (`_regions`)."""

    names_a: Sequence[str]
    names_b: Sequence[str]
    left_a: list[int]
    left_b: list[int]
    region_a: list[int]
    region_b: list[int]

    def apart(self, i: int, j: int) -> int:
        """How many matched kernels lie between kernel i of A and kernel j of B."""
        return abs(self.region_a[i] - self.region_b[j])


def _fusions(rest: _Leftovers) -> dict[int, list[int]]:
    """Fused kernel of B -> the leftover A kernels it covers. Each A kernel goes to the covering kernel nearest to it
    (fewest matched kernels between them, then most shared operations, then nearest in relative position)."""
    operations = {j: fused_operations(rest.names_b[j]) for j in rest.left_b}
    candidates = [j for j in rest.left_b if operations[j]]
    groups: dict[int, list[int]] = defaultdict(list)
    for i in rest.left_a:
        ops_a = words(rest.names_a[i])
        best = min(
            (
                (rest.apart(i, j), -len(ops_a & operations[j]), _distance(i, j, rest.names_a, rest.names_b), j)
                for j in candidates
                if ops_a & operations[j] and rest.apart(i, j) <= FUSION_REACH
            ),
            default=None,
        )
        if best is not None:
            groups[best[-1]].append(i)
    return dict(groups)


def _distance(i: int, j: int, names_a: Sequence[str], names_b: Sequence[str]) -> float:
    return abs(i / max(len(names_a), 1) - j / max(len(names_b), 1))


def _similar_pairs(rest: _Leftovers) -> list[tuple[int, int]]:
    """Leftovers between the same two matched kernels, paired most similar first (difflib ratio >= SIMILAR)."""
    scored = sorted(
        (-similarity(rest.names_a[i], rest.names_b[j]), i, j)
        for i in rest.left_a
        for j in rest.left_b
        if rest.apart(i, j) == 0
    )
    pairs, used_a, used_b = [], set(), set()
    for score, i, j in scored:
        if -score >= SIMILAR and i not in used_a and j not in used_b:
            pairs.append((i, j))
            used_a.add(i)
            used_b.add(j)
    return pairs


def in_order(records: list[Aligned]) -> list[Aligned]:
    """Records in the order of A, each B-only record after the record that holds the B kernel before it."""
    with_a = sorted((r for r in records if r.a is not None), key=lambda r: r.a or 0)
    ordered: list[Aligned] = []
    pending = sorted((r for r in records if r.a is None), key=lambda r: r.b or 0)
    for record in with_a:
        while pending and record.b is not None and (pending[0].b or 0) < record.b:
            ordered.append(pending.pop(0))
        ordered.append(record)
    return ordered + pending
