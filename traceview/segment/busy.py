"""Busy time and idle gaps of the kernels of each rank, step and layer instance, computed once per segmentation.

Reads: the kernels of one run in `gpu_activity` (kind = 'kernel'), with the step and layer segmentation wrote.
Writes: `kernel_busy` (one row per scope instance: a rank's whole trace, a step, a layer instance) and
`kernel_gaps` (the idle gaps between a step's or a layer instance's merged kernels), replacing the run's rows.
The SQL library reads these tables instead of sorting every kernel interval at each query.

The figures are those of the library's interval macros (comm_breakdown, interval_gaps), computed by one sort
per scope: order the kernels of each instance by start; each kernel adds to the union of the instance the part
of it that ends after every earlier kernel of the instance (their running maximum end, the "reach"), and opens
a gap when it starts after that reach. The same pass over the comm kernels, the compute kernels and both
together gives the comm and compute unions and their intersection: comm + compute - (comm or compute). Kernels
that fuse a collective with computation (category fused_comm) are in neither class: their union is its own figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from ..db import execute_with

# Scopes: the partition columns of each and the flags its kernels must have; and whose idle gaps are kept.
SCOPES = {
    "rank": (("rank",), ()),
    "step": (("rank", "step"), ("in_step",)),
    "layer": (("rank", "step", "layer"), ("in_step", "in_layer")),
    "draft": (("rank", "step"), ("in_step", "in_draft")),  # a speculative drafter's kernels of a step
}
GAP_SCOPES = ("step", "layer")
# Above this many ns of summed instance spans, the reach is computed group by group (no int64 offsets).
_OFFSET_LIMIT = 2.0**62


@dataclass(frozen=True)
class _Sorted:
    """The kernels of one scope, ordered by instance then start; `first` marks each instance's first kernel."""

    keys: dict[str, np.ndarray]
    start: np.ndarray
    end: np.ndarray
    is_comm: np.ndarray
    is_compute: np.ndarray
    is_fused: np.ndarray
    group: np.ndarray
    first: np.ndarray


def record(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Replace the run's rows of kernel_busy and kernel_gaps with those of its kernels as segmented now."""
    con.execute("DELETE FROM kernel_busy WHERE run_id = ?", [run_id])
    con.execute("DELETE FROM kernel_gaps WHERE run_id = ?", [run_id])
    kernels = _kernels(con, run_id)
    for scope, (keys, flags) in SCOPES.items():
        rows = _sorted(kernels, keys, flags)
        if not len(rows.start):
            continue
        busy, gaps = _measure(rows)
        _insert(con, "kernel_busy", busy, run_id, scope)
        if scope in GAP_SCOPES:
            _insert(con, "kernel_gaps", gaps, run_id, scope)


def _kernels(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, np.ndarray]:
    data = con.execute(
        """
        SELECT rank, coalesce(step, 0) AS step, coalesce(layer, 0) AS layer, step IS NOT NULL AS in_step,
               layer IS NOT NULL AS in_layer, coalesce(role = 'draft', false) AS in_draft, start_ns, end_ns,
               category = 'comm' AS is_comm, category = 'compute' AS is_compute, category = 'fused_comm' AS is_fused
        FROM gpu_activity WHERE run_id = ? AND kind = 'kernel'
        """,
        [run_id],
    ).fetchnumpy()
    return {name: np.asarray(values) for name, values in data.items()}


def _sorted(kernels: dict[str, np.ndarray], keys: tuple[str, ...], flags: tuple[str, ...]) -> _Sorted:
    """The kernels with every flag of `flags` (those of an instance of the scope with `keys`), in order of (keys,
    start)."""
    keep = np.ones(len(kernels["start_ns"]), dtype=bool)
    for flag in flags:
        keep &= kernels[flag]
    names = (*keys, "start_ns", "end_ns", "is_comm", "is_compute", "is_fused")
    picked = {name: kernels[name] if keep.all() else kernels[name][keep] for name in names}
    order = np.lexsort((picked["start_ns"], *(picked[k] for k in reversed(keys))))
    columns = {name: values[order] for name, values in picked.items()}
    same = np.ones(len(order) - 1 if len(order) else 0, dtype=bool)
    for key in keys:
        same &= columns[key][1:] == columns[key][:-1]
    first = np.concatenate(([True], ~same)) if len(order) else same
    return _Sorted(
        keys={k: columns[k] for k in keys},
        start=columns["start_ns"],
        end=columns["end_ns"],
        is_comm=columns["is_comm"],
        is_compute=columns["is_compute"],
        is_fused=columns["is_fused"],
        group=np.cumsum(first) - 1,
        first=first,
    )


def _measure(rows: _Sorted) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per instance: kernels, extent and union lengths; and the gaps between its merged kernels."""
    heads = np.flatnonzero(rows.first)
    added, reach = _cover(rows.first, rows.start, rows.end)
    either = rows.is_comm | rows.is_compute
    lengths = {
        "busy_ns": added,
        "comm_ns": _cover_subset(rows, rows.is_comm),
        "compute_ns": _cover_subset(rows, rows.is_compute),
        "fused_comm_ns": _cover_subset(rows, rows.is_fused),
    }
    both = added if either.all() else _cover_subset(rows, either)
    sums = {name: np.add.reduceat(values, heads) for name, values in lengths.items()}
    busy = pd.DataFrame(
        {
            **{k: v[heads] for k, v in rows.keys.items()},
            "kernels": np.diff(np.append(heads, len(rows.start))),
            "first_start_ns": rows.start[heads],
            "last_end_ns": np.maximum.reduceat(rows.end, heads),
            **sums,
            "overlap_ns": sums["comm_ns"] + sums["compute_ns"] - np.add.reduceat(both, heads),
        }
    )
    opens = ~rows.first & (rows.start > reach)
    gaps = pd.DataFrame(
        {**{k: v[opens] for k, v in rows.keys.items()}, "start_ns": reach[opens], "end_ns": rows.start[opens]}
    )
    return busy, gaps


def _cover_subset(rows: _Sorted, members: np.ndarray) -> np.ndarray:
    """What each member kernel adds to the union of the members of its instance (0 for the others)."""
    added = np.zeros(len(rows.start), dtype=np.int64)
    if members.any():
        group = rows.group[members]
        first = np.ones(len(group), dtype=bool)
        first[1:] = group[1:] != group[:-1]
        added[members] = _cover(first, rows.start[members], rows.end[members])[0]
    return added


def _cover(first: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(what each kernel adds to its instance's union, the reach before it: its own start for a first kernel).

    Rows are ordered by instance, then start; `first` marks the first row of each instance."""
    reach = np.empty_like(end)
    reach[1:] = _running_max(first, end)[:-1]
    reach[first] = start[first]
    return np.maximum(end - np.maximum(start, reach), 0), reach


def _running_max(first: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Running maximum of `end` within each instance (rows ordered by instance).

    Each instance's times are shifted past the previous instance's, so one cumulative maximum over all rows
    never carries an end into the next instance; when the shifted times could overflow int64, pandas
    computes it instance by instance."""
    heads = np.flatnonzero(first)
    counts = np.diff(np.append(heads, len(end)))
    low, high = np.minimum.reduceat(end, heads), np.maximum.reduceat(end, heads)
    if (high.astype(np.float64) - low.astype(np.float64) + 1).sum() >= _OFFSET_LIMIT:
        return pd.Series(end).groupby(np.repeat(np.arange(len(heads)), counts), sort=False).cummax().to_numpy()
    span = high - low + 1
    low, before = np.repeat(low, counts), np.repeat(np.cumsum(span) - span, counts)
    return np.maximum.accumulate(end - low + before) - before + low


def _insert(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame, run_id: int, scope: str) -> None:
    insert = f"INSERT INTO {table} BY NAME SELECT ? AS run_id, ? AS scope, * FROM _seg_busy_frame"
    execute_with(con, "_seg_busy_frame", frame, insert, [run_id, scope])
