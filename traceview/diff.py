"""Two runs compared layer by layer: kernels, microseconds, exposed communication, and kernel alignment.

Reads: the `steps`, `layers`, `gpu_activity` tables, the `layer_metrics` view and the `layer_kernel_time` macro
of two databases (or two runs of one database), as the SQL library's TEMP objects that db.connect installs on
every connection that reads (never the views and macros a database stores). Writes nothing. Pure: returns a `Diff`
of rows; output.py renders it. The kernel alignment is align.py's, the why table why.py's.

Pairing: only steady-state steps (not warm-up) of one phase are compared (decode when both have it);
layers pair by index and ranks by rank; every figure is a median across steps and ranks, with its spread, except
the why table's (why.py): means over the layer's instances, which add up.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from . import why as why_stage
from .align import Aligned, Status, align
from .errors import DatabaseError, UsageError
from .why import Instance, KernelTime

if TYPE_CHECKING:
    import duckdb

Row = dict[str, Any]
METRICS = ("kernels", "span_us", "busy_us", "comm_us", "exposed_comm_us")
TAIL = ("speedup", "instances_a", "instances_b")  # the last columns of a row of the layer or rank table


@dataclass(frozen=True)
class RunRef:
    """One side of a comparison: an open database and the run in it."""

    con: duckdb.DuckDBPyConnection
    run_id: int
    label: str
    where: str | None = None  # the database, as errors name it


@dataclass(frozen=True)
class Diff:
    """Everything `traceview diff` reports."""

    summary: Row
    layers: list[Row]
    kernels: list[Row]
    top_changes: list[Row]
    notes: list[str] = field(default_factory=list)
    by_rank: list[Row] = field(default_factory=list)
    why: list[Row] = field(default_factory=list)
    changes: list[Row] = field(default_factory=list)

    def as_json(self) -> Row:
        return {
            "summary": self.summary,
            "why": self.why,
            "layers": self.layers,
            "by_rank": self.by_rank,
            "changes": self.changes,
            "kernels": self.kernels,
            "top_changes": self.top_changes,
            "notes": self.notes,
        }


def resolve_run(con: duckdb.DuckDBPyConnection, label: str | None, where: str) -> RunRef:
    """The run labelled `label`, or the only/first run of the database."""
    rows = con.execute("SELECT run_id, label FROM runs ORDER BY run_id").fetchall()
    if not rows:
        raise DatabaseError(where, "the database holds no run", "ingest a trace into it first")
    if label is None:
        return RunRef(con, rows[0][0], rows[0][1], where)
    label = unicodedata.normalize("NFC", label)  # as ingest stores labels
    for run_id, run_label in rows:
        if run_label == label:
            return RunRef(con, run_id, run_label, where)
    raise DatabaseError(where, f"no run labelled {label!r}", "pick one of: " + ", ".join(r[1] for r in rows))


def compare(a: RunRef, b: RunRef) -> Diff:
    """Compare run b against run a (b is the candidate: speed-up > 1 means b is faster)."""
    notes: list[str] = []
    phase = _common_phase(a, b, notes)
    layers_a, layers_b = _layer_rows(a, phase), _layer_rows(b, phase)
    if not layers_a or not layers_b:
        empty = a if not layers_a else b
        raise DatabaseError(
            empty.where,
            f"no transformer layers were found in run {empty.label!r}",
            "run `traceview layers` on it to see why",
        )
    _note_layer_mismatch(a, b, layers_a, layers_b, notes)
    by_rank = _side_by_side(_medians(a, phase, ("layer", "rank")), _medians(b, phase, ("layer", "rank")))
    per_layer = _medians(a, phase, ("layer",)), _medians(b, phase, ("layer",))
    layer_table = _layer_table(_side_by_side(*per_layer, (*METRICS, "span_spread_us")), by_rank)
    summary = _summary(a, b, phase, (_medians(a, phase, ())[()], _medians(b, phase, ())[()]), layers_a, layers_b)
    _note_drafters(a, b, phase, summary, notes)
    times_a, times_b = _kernel_times(a, phase), _kernel_times(b, phase)
    shared = sorted(set(times_a) & set(times_b))
    alignments = {layer: _align_first(times_a[layer], times_b[layer]) for layer in shared}
    why = [why_stage.layer_why(layer, times_a[layer], times_b[layer], alignments[layer]) for layer in shared]
    representative = _representative_layer(*per_layer)
    summary["representative_layer"] = representative
    first_a, first_b = times_a.get(representative, [()])[0], times_b.get(representative, [()])[0]
    alignment = alignments.get(representative, [])
    kernels = alignment_rows(alignment, first_a, first_b)
    changes = change_rows(alignment, first_a, first_b)
    return Diff(summary, layer_table, kernels, _top_changes(a, b, phase), notes, by_rank, why, changes)


def _common_phase(a: RunRef, b: RunRef, notes: list[str]) -> str | None:
    phases_a, phases_b = _phases(a), _phases(b)
    for preferred in ("decode", "unknown", "prefill"):
        if preferred in phases_a and preferred in phases_b:
            if phases_a != phases_b:
                notes.append(
                    f"compared {preferred} steps only ({a.label}: {_join(phases_a)}; {b.label}: {_join(phases_b)})"
                )
            return preferred
    if phases_a or phases_b:
        notes.append(f"the runs share no step phase ({a.label}: {_join(phases_a)}; {b.label}: {_join(phases_b)})")
    return None


def _phases(ref: RunRef) -> set[str]:
    rows = ref.con.execute("SELECT DISTINCT phase FROM steps WHERE run_id = ? AND NOT warmup", [ref.run_id]).fetchall()
    return {r[0] for r in rows}


def _join(values: set[str]) -> str:
    return ", ".join(sorted(values)) or "none"


def _layer_rows(ref: RunRef, phase: str | None) -> list[Row]:
    """layer_metrics rows of steady-state steps of `phase` (all steady steps when phase is None)."""
    result = ref.con.execute(
        f"""
        SELECT m.rank, m.step, m.layer, m.kernels, m.span_us, m.busy_us, m.comm_us, m.exposed_comm_us, m.method
        FROM layer_metrics m JOIN steps s USING (run_id, rank, step)
        WHERE m.run_id = ? AND NOT s.warmup {"AND s.phase = ?" if phase else ""}
        ORDER BY m.layer, m.rank, m.step
        """,
        [ref.run_id, phase] if phase else [ref.run_id],
    )
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, r, strict=True)) for r in result.fetchall()]


def _by_layer(rows: Sequence[Row]) -> dict[int, list[Row]]:
    grouped: dict[int, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row["layer"], []).append(row)
    return grouped


def _medians(ref: RunRef, phase: str | None, keys: tuple[str, ...]) -> dict[tuple[Any, ...], Row]:
    """layer_metrics' instances in the steady steps of `phase` (all steady steps when None), grouped by `keys` (()
    for one group): their number, the median of each of METRICS and the spread of span, rounded by the SQL
    library's own rules (query figures.precision), so that CSV, JSON and the terminal show the same digits."""
    grouped = "".join(f"m.{key}, " for key in keys)
    result = ref.con.execute(
        f"""
        SELECT {grouped}count(*) AS instances, _median_count(m.kernels) AS kernels, _median_us(m.span_us) AS span_us,
               _median_us(m.busy_us) AS busy_us, _median_us(m.comm_us) AS comm_us,
               _median_us(m.exposed_comm_us) AS exposed_comm_us, _spread_us(m.span_us) AS span_spread_us
        FROM layer_metrics m JOIN steps s USING (run_id, rank, step)
        WHERE m.run_id = $run AND NOT s.warmup AND ($phase IS NULL OR s.phase = $phase)
        GROUP BY ALL
        """,
        {"run": ref.run_id, "phase": phase},
    )
    columns = [d[0] for d in result.description]
    rows = [dict(zip(columns, r, strict=True)) for r in result.fetchall()]
    return {tuple(row.pop(key) for key in keys): row for row in rows}


def _side_by_side(
    medians_a: dict[tuple[Any, ...], Row], medians_b: dict[tuple[Any, ...], Row], figures: Sequence[str] = METRICS
) -> list[Row]:
    """One row per group key (layer, or layer and rank) of either side: each of `figures` on A and on B, then TAIL:
    the span ratio and the instances on each side."""
    table = []
    for key in sorted(set(medians_a) | set(medians_b)):
        side_a, side_b = medians_a.get(key, {}), medians_b.get(key, {})
        row: Row = dict(zip(("layer", "rank"), key, strict=False))
        for figure in figures:
            row[f"{figure}_a"], row[f"{figure}_b"] = side_a.get(figure), side_b.get(figure)
        row["speedup"] = _ratio(row["span_us_a"], row["span_us_b"])
        row["instances_a"], row["instances_b"] = side_a.get("instances", 0), side_b.get("instances", 0)
        table.append(row)
    return table


def _note_drafters(a: RunRef, b: RunRef, phase: str | None, summary: Row, notes: list[str]) -> None:
    """Speculative decoding: the layers compared are the targets'; the drafter's cost per step is a line beside
    them (and `drafter_per_step` in the summary)."""
    drafters = [_drafter(ref, phase) for ref in (a, b)]
    if not any(drafters):
        return
    summary["drafter_per_step"] = drafters
    sides = [
        f"{d['passes']:g} passes, {d['kernels']:g} kernels, {d['busy_us']:g} µs busy" if d else "none" for d in drafters
    ]
    notes.append(
        f"speculative decoding: the layers are the target's; the drafter per step (medians): {sides[0]} → {sides[1]}"
    )


def _drafter(ref: RunRef, phase: str | None) -> Row | None:
    row = ref.con.execute(
        """SELECT _median_count(draft_passes), _median_count(draft_kernels), _median_us(draft_busy_us) FROM step_metrics
           WHERE run_id = ? AND NOT warmup AND draft_passes IS NOT NULL AND (? IS NULL OR phase = ?)""",
        [ref.run_id, phase, phase],
    ).fetchall()[0]
    return None if row[0] is None else {"passes": row[0], "kernels": row[1], "busy_us": row[2]}


def _note_layer_mismatch(a: RunRef, b: RunRef, rows_a: list[Row], rows_b: list[Row], notes: list[str]) -> None:
    count_a, count_b = len(_by_layer(rows_a)), len(_by_layer(rows_b))
    if count_a != count_b:
        notes.append(f"layer count differs: {a.label} has {count_a} layers per step, {b.label} has {count_b}")
    methods = {r["method"] for r in rows_a}, {r["method"] for r in rows_b}
    if methods[0] != methods[1]:
        notes.append(f"layers found by {_join(methods[0])} in {a.label}, by {_join(methods[1])} in {b.label}")


def _layer_table(per_layer: list[Row], by_rank: list[Row]) -> list[Row]:
    """One row per layer index: medians (and spread of span, across instances and ranks) on each side, where the
    ranks differ most, and the span ratio."""
    table = []
    for row in per_layer:
        ranks = [r for r in by_rank if r["layer"] == row["layer"]]
        figures = {k: v for k, v in row.items() if k not in TAIL}
        widest = {"rank_spread_a": widest_rank_spread(ranks, "a"), "rank_spread_b": widest_rank_spread(ranks, "b")}
        table.append({**figures, **widest, **{k: row[k] for k in TAIL}})
    return table


def widest_rank_spread(rank_rows: Sequence[Row], side: str) -> str | None:
    """Of one layer's per-rank medians on `side` (a or b): the figure whose ranks differ most, as
    `comm_us 2.50x` (max / min); None with fewer than two ranks. Same rule as the query layer_rank_spread."""
    if len(rank_rows) < 2:
        return None
    ratios = []
    for metric in ("busy_us", "comm_us", "exposed_comm_us", "span_us"):  # on a tie, the first
        values = [r[f"{metric}_{side}"] for r in rank_rows if r[f"{metric}_{side}"] is not None]
        if values and max(values) > 0:
            ratios.append((max(values) / max(min(values), 0.001), metric))
    if not ratios:
        return None
    ratio, metric = max(ratios, key=lambda pair: pair[0])
    return f"{metric} {ratio:.2f}x"


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _summary(
    a: RunRef, b: RunRef, phase: str | None, medians: tuple[Row, Row], rows_a: list[Row], rows_b: list[Row]
) -> Row:
    kernels, span, busy, exposed = (
        [side[m] for side in medians] for m in ("kernels", "span_us", "busy_us", "exposed_comm_us")
    )
    return {
        "a": a.label,
        "b": b.label,
        "phase": phase or "all",
        "layers_per_step": [len(_by_layer(rows_a)), len(_by_layer(rows_b))],
        "kernels_per_layer": kernels,
        "us_per_layer": span,
        "busy_us_per_layer": busy,
        "exposed_comm_us_per_layer": exposed,
        "speedup": _ratio(span[0], span[1]),
        "busy_speedup": _ratio(busy[0], busy[1]),
        "headline": headline(kernels, span, busy),
    }


def headline(kernels: Sequence[float | None], span: Sequence[float | None], busy: Sequence[float | None]) -> str:
    """`per layer: 23 → 13 kernels; span 130 → 69 µs (1.88x faster); busy 120 → 66 µs (1.82x faster)`.

    Span and busy side by side: in a host-bound run the span of a layer is mostly launch gaps, and only busy time
    (the union of its kernels) says what the GPU work itself gained.
    """
    return (
        f"per layer: {_num(kernels[0])} → {_num(kernels[1])} kernels; "
        f"span {_num(span[0])} → {_num(span[1])} µs ({_verdict(_ratio(span[0], span[1]))}); "
        f"busy {_num(busy[0])} → {_num(busy[1])} µs ({_verdict(_ratio(busy[0], busy[1]))})"
    )


def _verdict(ratio: float | None) -> str:
    if ratio is None:
        return "no timing"
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _representative_layer(layers_a: dict[tuple[Any, ...], Row], layers_b: dict[tuple[Any, ...], Row]) -> int:
    """The layer index present on both sides whose kernel count (median) is the most common one in A."""
    shared = sorted(set(layers_a) & set(layers_b)) or sorted(layers_a)
    counts = {key: layers_a.get(key, layers_b.get(key, {})).get("kernels") for key in shared}
    modal = statistics.mode(counts.values())
    typical = [key[0] for key in shared if counts[key] == modal]
    return typical[len(typical) // 2]


def _kernel_times(ref: RunRef, phase: str | None) -> dict[int, list[Instance]]:
    """Per layer index, its instances in the steady steps of `phase` (query layer_kernel_time), in order of rank
    and step: each the layer's kernels in order, with the time each owns and the idle gap it closes."""
    rows = ref.con.execute(
        f"""
        SELECT k.layer, k.rank, k.step, k.identity, k.short_name, k.category, k.start_ns, k.end_ns, k.own_ns,
               k.gap_ns, k.host_bound_ns, k.launch_bound_ns, k.queued_ns, k.in_graph_ns, k.unclassified_ns
        FROM layer_kernel_time(run := $run) AS k JOIN steps AS s USING (run_id, rank, step)
        WHERE k.run_id = $run AND NOT s.warmup {"AND s.phase = $phase" if phase else ""}
        ORDER BY k.layer, k.rank, k.step, k.position
        """,
        {"run": ref.run_id, **({"phase": phase} if phase else {})},
    ).fetchall()
    instances: dict[tuple[int, int, int], list[KernelTime]] = {}
    for layer, rank, step, identity, name, category, start, end, own, gap, *gaps in rows:
        kernel = KernelTime(identity, name, category, start, end, own, gap, tuple(gaps))
        instances.setdefault((layer, rank, step), []).append(kernel)
    by_layer: dict[int, list[Instance]] = {}
    for (layer, _, _), kernels in instances.items():
        by_layer.setdefault(layer, []).append(kernels)
    return by_layer


def _align_first(instances_a: Sequence[Instance], instances_b: Sequence[Instance]) -> list[Aligned]:
    """The alignment of the first instance of a layer in A with the first in B."""
    return align([k.identity for k in instances_a[0]], [k.identity for k in instances_b[0]])


def alignment_rows(alignment: Sequence[Aligned], seq_a: Instance, seq_b: Instance) -> list[Row]:
    """One row per kernel of A (with its B kernel when it has one) and per kernel only in B. The kernels of A fused
    into one kernel of B share it: its time is given on the group's first row only, so columns add up."""
    rows, shown = [], set()
    for record in alignment:
        a = seq_a[record.a] if record.a is not None else None
        b = seq_b[record.b] if record.b is not None else None
        rows.append(
            {
                "status": record.status.value,
                "kernel_a": a.name if a else None,
                "us_a": _duration_us(a),
                "kernel_b": b.name if b else None,
                "us_b": _duration_us(b) if record.b not in shown else None,
                "category": (b or a).category if (b or a) else None,
            }
        )
        shown.add(record.b)
    return rows


def _duration_us(kernel: KernelTime | None) -> float | None:
    return round((kernel.end_ns - kernel.start_ns) / 1e3, 3) if kernel else None


def change_rows(alignment: Sequence[Aligned], seq_a: Instance, seq_b: Instance) -> list[Row]:
    """The alignment without its kept kernels, grouped: the kernels fused into one kernel of B as one row
    (`12 elementwise kernels` → `triton_per_fused_..._1`), and kernels of one name and fate as one row."""
    groups: dict[tuple[str, object], list[Aligned]] = {}
    for record in alignment:
        if record.status is Status.kept:
            continue
        if record.status is Status.fused:
            key: object = record.b
        else:
            key = (
                seq_a[record.a].name if record.a is not None else None,
                seq_b[record.b].name if record.b is not None else None,
            )
        groups.setdefault((record.status.value, key), []).append(record)
    return [_change_row(status, records, seq_a, seq_b) for (status, _), records in groups.items()]


def _change_row(status: str, records: list[Aligned], seq_a: Instance, seq_b: Instance) -> Row:
    kernels_a = [seq_a[r.a] for r in records if r.a is not None]
    kernels_b = [seq_b[b] for b in dict.fromkeys(r.b for r in records if r.b is not None)]
    return {
        "change": status,
        "kernels_a": len(kernels_a),
        "kernel_a": kernel_group(kernels_a) if status == "fused" else (kernels_a[0].name if kernels_a else None),
        "us_a": round(sum(_duration_us(k) or 0 for k in kernels_a), 3) if kernels_a else None,
        "kernels_b": len(kernels_b),
        "kernel_b": kernels_b[0].name if kernels_b else None,
        "us_b": round(sum(_duration_us(k) or 0 for k in kernels_b), 3) if kernels_b else None,
    }


def kernel_group(kernels: Sequence[KernelTime]) -> str:
    """`12 elementwise kernels`, or `5 kernels: 3 elementwise, 2 reduce`: what a group of kernels is made of."""
    families = Counter(_family(k.name) for k in kernels)
    if len(families) == 1:
        return f"{len(kernels)} {next(iter(families))} kernels"
    return f"{len(kernels)} kernels: " + ", ".join(f"{n} {family}" for family, n in families.most_common())


def _family(name: str) -> str:
    """The kind of a kernel: its name before the template arguments, without vectorized_/unrolled_ or _kernel."""
    base = re.split(r"[<(]", name, maxsplit=1)[0]
    return re.sub(r"^(vectorized|unrolled)_|_kernel$", "", base) or name


def _top_changes(a: RunRef, b: RunRef, phase: str | None, limit: int = 10) -> list[Row]:
    """Kernels (by short name) whose time per step changed most, across the whole step."""
    per_step_a, per_step_b = _kernel_time_per_step(a, phase), _kernel_time_per_step(b, phase)
    rows = []
    for name in set(per_step_a) | set(per_step_b):
        us_a, us_b = per_step_a.get(name, (0.0, 0.0)), per_step_b.get(name, (0.0, 0.0))
        rows.append(
            {
                "kernel": name,
                "count_a": us_a[1],
                "count_b": us_b[1],
                "us_a": us_a[0],
                "us_b": us_b[0],
                "delta_us": round(us_b[0] - us_a[0], 3),
            }
        )
    rows.sort(key=lambda r: abs(r["delta_us"]), reverse=True)
    return rows[:limit]


def _kernel_time_per_step(ref: RunRef, phase: str | None) -> dict[str, tuple[float, float]]:
    """short_name -> (µs per step, kernels per step), averaged over the steady steps of all ranks."""
    rows = ref.con.execute(
        f"""
        WITH chosen AS (
            SELECT rank, step FROM steps WHERE run_id = $run AND NOT warmup {"AND phase = $phase" if phase else ""}
        )
        SELECT g.short_name, sum(g.end_ns - g.start_ns) / 1e3 / (SELECT count(*) FROM chosen),
               count(*) / (SELECT count(*) FROM chosen)
        FROM gpu_activity g JOIN chosen c ON g.rank = c.rank AND g.step = c.step
        WHERE g.run_id = $run AND g.kind = 'kernel'
        GROUP BY g.short_name
        """,
        {"run": ref.run_id, **({"phase": phase} if phase else {})},
    ).fetchall()
    return {r[0]: (round(r[1], 3), round(r[2], 2)) for r in rows}


def display_layers(diff: Diff) -> list[Row]:
    """The per-layer table for people: `A → B` cells, the speed-up and the spread of span across instances."""
    rows = []
    for layer in diff.layers:
        row: Row = {"layer": layer["layer"]}
        for metric in METRICS:
            row[metric] = f"{_num(layer[f'{metric}_a'])} → {_num(layer[f'{metric}_b'])}"
        row["speedup"] = f"{layer['speedup']:.2f}x" if layer["speedup"] else ""
        row["span_spread_us"] = f"{_num(layer['span_spread_us_a'])} / {_num(layer['span_spread_us_b'])}"
        row["instances"] = f"{layer['instances_a']} / {layer['instances_b']}"
        if layer["rank_spread_a"] or layer["rank_spread_b"]:
            row["rank_spread"] = f"{layer['rank_spread_a'] or '-'} / {layer['rank_spread_b'] or '-'}"
        rows.append(row)
    return rows


def display_ranks(diff: Diff) -> list[Row]:
    """The per-(layer, rank) table for people: `A → B` cells and the speed-up."""
    rows = []
    for entry in diff.by_rank:
        row: Row = {"layer": entry["layer"], "rank": entry["rank"]}
        for metric in METRICS:
            row[metric] = f"{_num(entry[f'{metric}_a'])} → {_num(entry[f'{metric}_b'])}"
        row["speedup"] = f"{entry['speedup']:.2f}x" if entry["speedup"] else ""
        row["instances"] = f"{entry['instances_a']} / {entry['instances_b']}"
        rows.append(row)
    return rows


class KernelRows(str, Enum):
    """Which rows of the kernel alignment `traceview diff` prints: the changes, grouped, or every kernel."""

    changed = "changed"
    all = "all"


def display_changes(diff: Diff, width: int) -> list[Row]:
    """The grouped changes for people: a count with each name (`2 × FillFunctor...`), names cut to fit `width`."""
    cut = _name_width(width)
    rows = []
    for change in diff.changes:
        rows.append(
            {
                "change": change["change"],
                "kernel_a": _cut(_counted(change["kernels_a"], change["kernel_a"], change["change"]), cut),
                "us_a": change["us_a"],
                "kernel_b": _cut(_counted(change["kernels_b"], change["kernel_b"], change["change"]), cut),
                "us_b": change["us_b"],
            }
        )
    return rows


def display_alignment(diff: Diff, width: int) -> list[Row]:
    """Every kernel of the representative layer (`--kernels all`), names cut to fit `width`."""
    cut = _name_width(width)
    return [{**r, "kernel_a": _cut(r["kernel_a"], cut), "kernel_b": _cut(r["kernel_b"], cut)} for r in diff.kernels]


def display_top_changes(diff: Diff, width: int) -> list[Row]:
    """The kernels whose time per step changed most, names cut to fit `width`."""
    return [{**row, "kernel": _cut(row["kernel"], max(24, width - 60))} for row in diff.top_changes]


def _name_width(width: int) -> int:
    """Characters for each of the two name columns of a `width`-wide table (the rest: status, µs, borders)."""
    return max(24, (width - 44) // 2)


def _counted(count: int, name: str | None, change: str) -> str | None:
    return f"{count} × {name}" if name is not None and count > 1 and change != "fused" else name


def _cut(name: str | None, width: int) -> str | None:
    return name if name is None or len(name) <= width else name[: width - 1] + "…"


class Metric(str, Enum):
    """What --fail-if-slower compares: a layer's span (first kernel start to last kernel end, launch gaps
    included) or its busy time (the union of its kernels: the GPU work itself)."""

    span = "span"
    busy = "busy"


SUMMARY_KEY = {Metric.span: "us_per_layer", Metric.busy: "busy_us_per_layer"}


def checked_percent(percent: float) -> float:
    """--fail-if-slower's PCT: a finite number above -100 (`nan` compared false with everything: the gate never
    failed)."""
    if not math.isfinite(percent) or percent <= -100:
        raise UsageError(
            None, f"bad --fail-if-slower {percent}", "give a percentage above -100, e.g. 5: B at most 5% slower than A"
        )
    return percent


def is_slower(diff: Diff, percent: float, metric: Metric = Metric.span) -> bool:
    """True when B's per-layer `metric` (median) exceeds A's by more than `percent` (for --fail-if-slower)."""
    a, b = diff.summary[SUMMARY_KEY[metric]]
    return a is not None and b is not None and b > a * (1 + percent / 100)


def gate_message(diff: Diff, percent: float, metric: Metric) -> str:
    """Why --fail-if-slower failed: `B is more than 10% slower per layer than A by busy time (88 → 120 µs)`."""
    a, b = diff.summary[SUMMARY_KEY[metric]]
    return (
        f"{diff.summary['b']} is more than {percent:g}% slower per layer than {diff.summary['a']} "
        f"by {metric.value} time ({_num(a)} → {_num(b)} µs)"
    )
