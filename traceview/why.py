"""Why a layer got faster or slower: its span delta split into named causes that add up exactly.

Reads nothing itself: diff.py hands it, per layer index, the kernels of every instance on each side (rows of the
query layer_kernel_time) and the alignment of one instance of each (align.py). Returns rows; output.py renders.

The accounting (queries/layers/kernel_time.sql says how each kernel's figures are found): every instant of a layer
instance's span goes to exactly one bucket. It is idle (a gap, owned by the kernel that closes it), or it is busy
and owned by exactly one kernel: the earliest-started non-comm kernel running then, else the earliest-started comm
kernel (exposed communication). So span = sum(own) + sum(gap) per instance, in integer ns. Each side's figure is
the mean over its instances (means add up; medians do not), and a cause is B's mean minus A's:

    idle_gaps         the gaps (split by what the host was doing: host_bound, launch_bound, queued, in_graph,
                      unclassified; see layer_kernel_time)
    exposed_comm      what comm kernels own: communication that no computation hides
    same_kernels      what kept and moved kernels own (the same kernel got faster, slower, or more hidden)
    kernels_fused     what fused kernels own in B minus what the kernels they fused owned in A
    kernels_replaced  the same, for one kernel in place of another
    kernels_removed   minus what kernels only in A owned
    kernels_added     what kernels only in B own

A kernel is lined up by its identity and its occurrence in the instance (the third `add` of the layer); the
alignment of the first instance of each side decides what became of it, and a kernel that instance lacks counts as
removed (in A) or added (in B).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .align import Aligned, Status

Row = dict[str, Any]
CAUSES = (
    "idle_gaps",
    "same_kernels",
    "kernels_fused",
    "kernels_replaced",
    "kernels_removed",
    "kernels_added",
    "exposed_comm",
)
GAP_KINDS = ("host_bound", "launch_bound", "queued", "in_graph", "unclassified")
_CAUSE_OF = {
    Status.kept: "same_kernels",
    Status.moved: "same_kernels",
    Status.fused: "kernels_fused",
    Status.replaced: "kernels_replaced",
    Status.removed: "kernels_removed",
    Status.added: "kernels_added",
}
_GAP_WORDS = {
    "host_bound": "host-bound",
    "launch_bound": "launch-bound",
    "queued": "queued on the GPU",
    "in_graph": "inside CUDA-graph replays: unclassified",
    "unclassified": "unclassified: no launch calls in the trace",
}
_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


@dataclass(frozen=True)
class KernelTime:
    """One kernel of a layer instance, as the query layer_kernel_time gives it (times in ns)."""

    identity: str
    name: str  # gpu_activity.short_name
    category: str
    start_ns: int
    end_ns: int
    own_ns: int
    gap_ns: int
    gaps: tuple[int, ...]  # gap_ns split as GAP_KINDS


Instance = Sequence[KernelTime]  # one layer instance, kernels in order (layer_kernel_time.position)


def keys(instance: Instance) -> list[tuple[str, int]]:
    """Each kernel's key: its identity and how many kernels of that identity came before it in the instance."""
    seen: Counter[str] = Counter()
    result = []
    for kernel in instance:
        result.append((kernel.identity, seen[kernel.identity]))
        seen[kernel.identity] += 1
    return result


@dataclass(frozen=True)
class _Side:
    """One side's totals over its instances, in ns: per cause, per gap kind, the span; and the instance count."""

    causes: Mapping[str, int]
    gap_kinds: Mapping[str, int]
    span_ns: int
    instances: int

    def mean(self, value: int) -> Fraction:
        return Fraction(value, self.instances)


def _side(instances: Sequence[Instance], cause_of: Mapping[tuple[str, int], str], unknown: str) -> _Side:
    causes: dict[str, int] = defaultdict(int)
    gap_kinds: dict[str, int] = defaultdict(int)
    span = 0
    for instance in instances:
        span += max(k.end_ns for k in instance) - min(k.start_ns for k in instance)
        for key, kernel in zip(keys(instance), instance, strict=True):
            cause = "exposed_comm" if kernel.category == "comm" else cause_of.get(key, unknown)
            causes[cause] += kernel.own_ns
            causes["idle_gaps"] += kernel.gap_ns
            for kind, part in zip(GAP_KINDS, kernel.gaps, strict=True):
                gap_kinds[kind] += part
    return _Side(causes, gap_kinds, span, len(instances))


def layer_why(
    layer: int, instances_a: Sequence[Instance], instances_b: Sequence[Instance], alignment: Sequence[Aligned]
) -> Row:
    """The why row of one layer index: mean span on each side, its delta and the causes (µs, B − A), the idle gaps
    by kind, the residual (0 when the causes add up), the alignment's kernel counts and one sentence.

    `alignment` aligns instances_a[0] with instances_b[0]."""
    keys_a, keys_b = keys(instances_a[0]), keys(instances_b[0])
    cause_a = {keys_a[r.a]: _CAUSE_OF[r.status] for r in alignment if r.a is not None}
    cause_b = {keys_b[r.b]: _CAUSE_OF[r.status] for r in alignment if r.b is not None}
    a = _side(instances_a, cause_a, "kernels_removed")
    b = _side(instances_b, cause_b, "kernels_added")
    deltas = {c: b.mean(b.causes.get(c, 0)) - a.mean(a.causes.get(c, 0)) for c in CAUSES}
    span_delta = b.mean(b.span_ns) - a.mean(a.span_ns)
    causes = rounded_parts(deltas)
    idle_kinds = {k: b.mean(b.gap_kinds.get(k, 0)) - a.mean(a.gap_kinds.get(k, 0)) for k in GAP_KINDS}
    row: Row = {
        "layer": layer,
        "instances_a": a.instances,
        "instances_b": b.instances,
        "span_a_us": _us(a.mean(a.span_ns)),
        "span_b_us": _us(b.mean(b.span_ns)),
        "span_delta_us": round(span_delta) / 1e3,
        "busy_delta_us": (round(span_delta) - causes["idle_gaps"]) / 1e3,
        "causes": {cause: ns / 1e3 for cause, ns in causes.items()},
        "idle_gaps_by_kind": {k: ns / 1e3 for k, ns in rounded_parts(idle_kinds, causes["idle_gaps"]).items()},
        "residual_us": _us(span_delta - sum(deltas.values(), Fraction(0))),
        "kernels": kernel_counts(alignment),
    }
    idle_side = a if deltas["idle_gaps"] < 0 else b
    row["sentence"] = sentence(row, _dominant_gap(idle_side))
    return row


def _us(ns: Fraction) -> float:
    return round(float(ns) / 1e3, 3)


def rounded_parts(parts: Mapping[str, Fraction], total: int | None = None) -> dict[str, int]:
    """Each part (ns) rounded to a whole ns, the roundings spread so that the parts add up to `total` (default:
    their rounded sum), largest remainders first: columns that add up to their total as printed."""
    rounded = {name: value.numerator // value.denominator for name, value in parts.items()}
    spare = (round(sum(parts.values(), Fraction(0))) if total is None else total) - sum(rounded.values())
    by_remainder = sorted(parts, key=lambda name: (parts[name] - rounded[name], name), reverse=spare > 0)
    for name in by_remainder[: abs(spare)]:
        rounded[name] += 1 if spare > 0 else -1
    return rounded


def kernel_counts(alignment: Sequence[Aligned]) -> Row:
    """Per status, the kernels of A and of B the alignment gave it: `{"fused": [40, 12], ...}`."""
    counts: Row = {}
    for status in Status:
        records = [r for r in alignment if r.status is status]
        a = len({r.a for r in records if r.a is not None})
        b = len({r.b for r in records if r.b is not None})
        if a or b:
            counts[status.value] = [a, b]
    return counts


def _dominant_gap(side: _Side) -> str:
    return max(GAP_KINDS, key=lambda kind: side.gap_kinds.get(kind, 0))


def sentence(row: Row, gap_kind: str) -> str:
    """`layer 4: 2,958 → 101 µs: −2,781 idle gaps (host-bound), −50 forty kernels fused into twelve`: the two
    largest causes, with their signs (µs, B − A)."""
    head = f"layer {row['layer']}: {_amount(row['span_a_us'])} → {_amount(row['span_b_us'])} µs"
    largest = sorted(((v, c) for c, v in row["causes"].items() if round(v) != 0), key=lambda p: -abs(p[0]))[:2]
    if not largest:
        return f"{head}: no change larger than 0.5 µs"
    words = [f"{_signed(value)} {_cause_words(cause, value, row['kernels'], gap_kind)}" for value, cause in largest]
    return f"{head}: " + ", ".join(words)


def _cause_words(cause: str, value: float, counts: Row, gap_kind: str) -> str:
    fused, replaced = counts.get("fused", [0, 0]), counts.get("replaced", [0, 0])
    return {
        "idle_gaps": f"idle gaps ({_GAP_WORDS[gap_kind]})",
        "same_kernels": f"same kernels {'faster' if value < 0 else 'slower'}",
        "kernels_fused": f"{_count(fused[0])} kernels fused into {_count(fused[1])}",
        "kernels_replaced": _kernels(replaced[0], "replaced"),
        "kernels_removed": _kernels(counts.get("removed", [0, 0])[0], "removed"),
        "kernels_added": _kernels(counts.get("added", [0, 0])[1], "added"),
        "exposed_comm": "communication hidden" if value < 0 else "more communication exposed",
    }[cause]


def _kernels(n: int, what: str) -> str:
    return f"{_count(n)} kernel{'s' * (n != 1)} {what}"


def _count(n: int) -> str:
    """A kernel count in words up to 99 (`forty-six`), so that it does not run into the µs before it."""
    if n < len(_ONES):
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10 - 2] + (f"-{_ONES[n % 10]}" if n % 10 else "")
    return f"{n:,}"


def _amount(us: float) -> str:
    return f"{us:,.0f}" if abs(us) >= 10 else f"{us:,.1f}"


def _signed(us: float) -> str:
    return ("−" if us < 0 else "+") + _amount(abs(us))


def display_why(rows: Sequence[Row]) -> list[Row]:
    """The why table for people: one row per layer, span A → B, its delta and each cause (µs, B − A)."""
    table = []
    for row in rows:
        shown: Row = {"layer": row["layer"], "span_us": f"{_amount(row['span_a_us'])} → {_amount(row['span_b_us'])}"}
        shown["delta_us"] = row["span_delta_us"]
        shown.update({cause: value for cause, value in row["causes"].items()})
        shown["residual_us"] = row["residual_us"]
        table.append(shown)
    return table
