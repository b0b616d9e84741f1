"""Two runs compared layer by layer: kernels, microseconds, exposed communication, and kernel alignment.

Reads: the `steps`, `layers`, `gpu_activity` tables and the `layer_metrics` view of two databases (or two
runs of one database). Writes nothing. Pure: returns a `Diff` of rows; output.py renders it.

Pairing: only steady-state steps (not warm-up) of one phase are compared (decode when both have it);
layers pair by index and ranks by rank; every figure is a median across steps and ranks, with its spread.
"""

from __future__ import annotations

import difflib
import math
import re
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from .errors import DatabaseError, UsageError

if TYPE_CHECKING:
    import duckdb

Row = dict[str, Any]
METRICS = ("kernels", "span_us", "busy_us", "comm_us", "exposed_comm_us")


@dataclass(frozen=True)
class RunRef:
    """One side of a comparison: an open database and the run in it."""

    con: duckdb.DuckDBPyConnection
    run_id: int
    label: str


@dataclass(frozen=True)
class Diff:
    """Everything `traceview diff` reports."""

    summary: Row
    layers: list[Row]
    kernels: list[Row]
    top_changes: list[Row]
    notes: list[str] = field(default_factory=list)
    by_rank: list[Row] = field(default_factory=list)

    def as_json(self) -> Row:
        return {
            "summary": self.summary,
            "layers": self.layers,
            "by_rank": self.by_rank,
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
        return RunRef(con, rows[0][0], rows[0][1])
    label = unicodedata.normalize("NFC", label)  # as ingest stores labels
    for run_id, run_label in rows:
        if run_label == label:
            return RunRef(con, run_id, run_label)
    raise DatabaseError(where, f"no run labelled {label!r}", "pick one of: " + ", ".join(r[1] for r in rows))


def compare(a: RunRef, b: RunRef) -> Diff:
    """Compare run b against run a (b is the candidate: speed-up > 1 means b is faster)."""
    notes: list[str] = []
    phase = _common_phase(a, b, notes)
    layers_a, layers_b = _layer_rows(a, phase), _layer_rows(b, phase)
    if not layers_a or not layers_b:
        empty = a.label if not layers_a else b.label
        raise DatabaseError(
            empty, "no transformer layers were found in this run", "run `traceview layers` on it to see why"
        )
    _note_layer_mismatch(a, b, layers_a, layers_b, notes)
    by_rank = _rank_table(layers_a, layers_b)
    layer_table = _layer_table(layers_a, layers_b, by_rank)
    summary = _summary(a, b, phase, layers_a, layers_b)
    representative = _representative_layer(layers_a, layers_b)
    kernels = align_kernels(_layer_kernels(a, phase, representative), _layer_kernels(b, phase, representative))
    summary["representative_layer"] = representative
    return Diff(summary, layer_table, kernels, _top_changes(a, b, phase), notes, by_rank)


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


def _median(rows: Sequence[Row], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(statistics.median(values)) if values else None


def _spread(rows: Sequence[Row], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(max(values) - min(values)) if values else None


def _note_layer_mismatch(a: RunRef, b: RunRef, rows_a: list[Row], rows_b: list[Row], notes: list[str]) -> None:
    count_a, count_b = len(_by_layer(rows_a)), len(_by_layer(rows_b))
    if count_a != count_b:
        notes.append(f"layer count differs: {a.label} has {count_a} layers per step, {b.label} has {count_b}")
    methods = {r["method"] for r in rows_a}, {r["method"] for r in rows_b}
    if methods[0] != methods[1]:
        notes.append(f"layers found by {_join(methods[0])} in {a.label}, by {_join(methods[1])} in {b.label}")


def _layer_table(rows_a: list[Row], rows_b: list[Row], by_rank: list[Row]) -> list[Row]:
    """One row per layer index: medians (and spread of span, across instances and ranks) on each side, and the
    span ratio."""
    by_a, by_b = _by_layer(rows_a), _by_layer(rows_b)
    table = []
    for layer in sorted(set(by_a) | set(by_b)):
        side_a, side_b = by_a.get(layer, []), by_b.get(layer, [])
        row: Row = {"layer": layer}
        for metric in METRICS:
            row[f"{metric}_a"] = _median(side_a, metric)
            row[f"{metric}_b"] = _median(side_b, metric)
        row["span_spread_us_a"] = _spread(side_a, "span_us")
        row["span_spread_us_b"] = _spread(side_b, "span_us")
        ranks = [r for r in by_rank if r["layer"] == layer]
        row["rank_spread_a"], row["rank_spread_b"] = widest_rank_spread(ranks, "a"), widest_rank_spread(ranks, "b")
        row["speedup"] = _ratio(row["span_us_a"], row["span_us_b"])
        row["instances_a"], row["instances_b"] = len(side_a), len(side_b)
        table.append(row)
    return table


def _rank_table(rows_a: list[Row], rows_b: list[Row]) -> list[Row]:
    """One row per (layer, rank): medians across that rank's steps on each side, and the span ratio."""
    keys = sorted({(r["layer"], r["rank"]) for r in rows_a} | {(r["layer"], r["rank"]) for r in rows_b})
    table = []
    for layer, rank in keys:
        side_a = [r for r in rows_a if r["layer"] == layer and r["rank"] == rank]
        side_b = [r for r in rows_b if r["layer"] == layer and r["rank"] == rank]
        row: Row = {"layer": layer, "rank": rank}
        for metric in METRICS:
            row[f"{metric}_a"], row[f"{metric}_b"] = _median(side_a, metric), _median(side_b, metric)
        row["speedup"] = _ratio(row["span_us_a"], row["span_us_b"])
        row["instances_a"], row["instances_b"] = len(side_a), len(side_b)
        table.append(row)
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


def _summary(a: RunRef, b: RunRef, phase: str | None, rows_a: list[Row], rows_b: list[Row]) -> Row:
    kernels = [_median(rows_a, "kernels"), _median(rows_b, "kernels")]
    span = [_median(rows_a, "span_us"), _median(rows_b, "span_us")]
    busy = [_median(rows_a, "busy_us"), _median(rows_b, "busy_us")]
    exposed = [_median(rows_a, "exposed_comm_us"), _median(rows_b, "exposed_comm_us")]
    return {
        "a": a.label,
        "b": b.label,
        "phase": phase or "all",
        "layers_per_step": [len(_by_layer(rows_a)), len(_by_layer(rows_b))],
        "kernels_per_layer": kernels,
        "us_per_layer": [round(v, 3) if v is not None else None for v in span],
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


def _representative_layer(rows_a: list[Row], rows_b: list[Row]) -> int:
    """The layer index present on both sides whose kernel count is the most common one in A."""
    by_a, by_b = _by_layer(rows_a), _by_layer(rows_b)
    shared = sorted(set(by_a) & set(by_b)) or sorted(by_a)
    counts = {layer: _median(by_a.get(layer, by_b.get(layer, [])), "kernels") for layer in shared}
    modal = statistics.mode(counts.values())
    typical = [layer for layer in shared if counts[layer] == modal]
    return typical[len(typical) // 2]


def _layer_kernels(ref: RunRef, phase: str | None, layer: int) -> list[Row]:
    """Kernel sequence of one instance of `layer`: the first steady step of the lowest rank."""
    rows = ref.con.execute(
        f"""
        WITH instance AS (
            SELECT l.rank, l.step FROM layers l JOIN steps s USING (run_id, rank, step)
            WHERE l.run_id = $run AND l.layer = $layer AND NOT s.warmup {"AND s.phase = $phase" if phase else ""}
            ORDER BY l.rank, l.step LIMIT 1
        )
        SELECT g.short_name, g.category, (g.end_ns - g.start_ns) / 1e3 AS us
        FROM gpu_activity g JOIN instance i ON g.rank = i.rank AND g.step = i.step
        WHERE g.run_id = $run AND g.layer = $layer AND g.kind = 'kernel'
        ORDER BY g.start_ns, g.activity_id
        """,
        {"run": ref.run_id, "layer": layer, **({"phase": phase} if phase else {})},
    ).fetchall()
    return [{"name": r[0], "category": r[1], "us": r[2]} for r in rows]


def normalize_kernel_name(name: str) -> str:
    """Name used to line kernels up: the short name, with the trailing number of a generated kernel folded
    (triton_poi_fused_add_0 ~ triton_poi_fused_add_1: torch.compile numbers its kernels in order of creation)."""
    return re.sub(r"_\d+$", "_#", name)


def _substitution_cost(a: str, b: str) -> float:
    if a == b:
        return 0.0
    return 1.0 - difflib.SequenceMatcher(None, a, b).ratio() * 0.5


def align_kernels(seq_a: Sequence[Row], seq_b: Sequence[Row]) -> list[Row]:
    """Edit-distance alignment of two kernel sequences (insert/delete cost 1, rename cost < 1).

    Each output row is `kept` (the same kernel: same short name, see ingest/kernel_names.py), `replaced` (a
    different kernel in the same place, e.g. a fused kernel standing for several eager ones), `fused_away` (only
    in A) or `new` (only in B).
    """
    names_a = [normalize_kernel_name(r["name"]) for r in seq_a]
    names_b = [normalize_kernel_name(r["name"]) for r in seq_b]
    n, m = len(names_a), len(names_b)
    cost = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        cost[i][0] = float(i)
    for j in range(1, m + 1):
        cost[0][j] = float(j)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i][j] = min(
                cost[i - 1][j] + 1.0,
                cost[i][j - 1] + 1.0,
                cost[i - 1][j - 1] + _substitution_cost(names_a[i - 1], names_b[j - 1]),
            )
    return _trace_back(cost, seq_a, seq_b, names_a, names_b)


def _trace_back(
    cost: list[list[float]], seq_a: Sequence[Row], seq_b: Sequence[Row], names_a: list[str], names_b: list[str]
) -> list[Row]:
    i, j = len(seq_a), len(seq_b)
    rows: list[Row] = []
    while i > 0 or j > 0:
        if i > 0 and j > 0:
            step = _substitution_cost(names_a[i - 1], names_b[j - 1])
            if abs(cost[i][j] - (cost[i - 1][j - 1] + step)) < 1e-9:
                status = "kept" if step == 0 else "replaced"
                rows.append(_aligned(status, seq_a[i - 1], seq_b[j - 1]))
                i, j = i - 1, j - 1
                continue
        if i > 0 and abs(cost[i][j] - (cost[i - 1][j] + 1.0)) < 1e-9:
            rows.append(_aligned("fused_away", seq_a[i - 1], None))
            i -= 1
        else:
            rows.append(_aligned("new", None, seq_b[j - 1]))
            j -= 1
    rows.reverse()
    return rows


def _aligned(status: str, a: Row | None, b: Row | None) -> Row:
    return {
        "status": status,
        "kernel_a": a["name"] if a else None,
        "us_a": round(a["us"], 3) if a else None,
        "kernel_b": b["name"] if b else None,
        "us_b": round(b["us"], 3) if b else None,
        "category": (b or a or {}).get("category"),
    }


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
