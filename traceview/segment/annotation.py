"""Layers from annotations: CPU ranges (record_function, nn.Module scopes, NVTX) and GPU ranges whose name
identifies a transformer layer.

Reads: cpu_ranges, gpu_ranges and the staged activity table `_seg_a` (see segment/__init__.py). Writes
temp table `_seg_ann(activity_id, layer, name)`: the layer of every activity that an annotation places.

A kernel belongs to the innermost layer range that contains the CPU call that launched it, on the same
thread (launches.pid/tid/start_ns, runtime or driver API alike). Kernels left over (no launch, or launched
outside every layer range) are placed by GPU-side ranges (Kineto gpu_user_annotation): the innermost one
that contains the kernel's start on its stream. Sublayer ranges (`model.layers.7.self_attn`) name layer 7.

Nested ranges are flattened per lane (a thread, or a stream) into a timeline of "innermost open range"
events - a range's start opens it, its end reopens its parent - and each kernel takes the last event at or
before its time (an ASOF join): linear after sorting, with no per-kernel Python.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from ..db import execute_with, has_rows
from ..ingest import nesting

# `model.layers.7`, `layers.7`, `transformer.h.7`, `blocks.7`, `encoder.layer.7`, also inside vLLM's NVTX dict
# strings ({'Module': 'model.layers.7.self_attn', ...}); `TransformerBlock_7`, `layer_7`, `DecoderLayer 7`. An index
# has at most 9 digits (layers.layer is an INTEGER): a longer number names no layer.
DEFAULT_LAYER_PATTERN = (
    r"(?:^|[.\s'\"/:(\[])(?:layers?|h|blocks?|transformer_blocks|decoder_layers)[._](\d{1,9})(?=$|[.\s'\",/)\]:])"
    r"|(?:^|[\s'\"/:])(?:TransformerBlock|DecoderLayer|EncoderLayer|layer|block)[_ ](\d{1,9})(?=$|[\s'\",/)])"
)
# `nn.Module: Qwen3DecoderLayer_7`: a module scope whose class is a layer (the number counts instances).
MODULE_SCOPE = re.compile(r"^nn\.Module: (\w+?)_(\d{1,9})$")
MAX_INDEX_DIGITS = 9
# The dotted name a layer index ends, read backwards from the index: `model.layers.` of `... model.layers.7`.
_TOKEN_BEFORE = re.compile(r"[\w.]*")
LAYER_CLASS = re.compile(r"(Layer|Block)$")
NOT_LAYER_CLASS = re.compile(
    r"(?i)(moe|expert|experts|mlp|ffn|attention|attn|norm|embed|embedding|linear|conv)(block|layer)$"
)
RANGE_KINDS = ("annotation", "module", "nvtx")
# What every name that DEFAULT_LAYER_PATTERN or MODULE_SCOPE matches contains, as an RE2 pattern for DuckDB: a
# layer word, a separator and a digit (\p{Nd}, as Python's \d: any Unicode digit; a module scope's class ends in
# Layer or Block before `_N`). Only names that match it are parsed in Python (32 of 316 k in a 100 MB nsys export).
DEFAULT_CANDIDATE = r"(?:layer|block|Layer|Block|h)s?[._ ]\p{Nd}"
# Strings every match of DEFAULT_CANDIDATE contains: looked for first, as the regex costs ~190 ns a name (6.4 M NVTX
# ranges of the 1 GB nsys bench export: 1.2 CPU-s, 0.5 with these first).
CANDIDATE_PARTS = ("layer", "Layer", "block", "Block", "h.", "h_", "h ", "hs.", "hs_", "hs ")


@dataclass(frozen=True)
class LayerName:
    """What a range name says: the layer index, the stack it belongs to and a short label."""

    layer: int
    stack: str
    label: str


def parse_layer_name(name: str, pattern: re.Pattern[str] | None = None) -> LayerName | None:
    """The layer a range name identifies, or None. `pattern` (--layer-pattern) replaces the defaults;
    its first group that matched is the index (none: the stack's order in time decides, index -1)."""
    if pattern is not None:
        return _parse_custom(name, pattern)
    scope = MODULE_SCOPE.match(name)
    if scope:
        cls = scope.group(1)
        if LAYER_CLASS.search(cls) and not NOT_LAYER_CLASS.search(cls):
            return LayerName(int(scope.group(2)), f"nn.Module: {cls}", name)
        return None
    match = _DEFAULT.search(name)
    if match is None:
        return None
    group = 1 if match.group(1) is not None else 2
    index = int(match.group(group))
    head = name[: match.start(group)]
    token = _TOKEN_BEFORE.match(head[::-1]).group(0)[::-1]  # type: ignore[union-attr]  # `*` matches ''
    return LayerName(index, head[-60:], token + str(index))


_DEFAULT = re.compile(DEFAULT_LAYER_PATTERN)


def _parse_custom(name: str, pattern: re.Pattern[str]) -> LayerName | None:
    match = pattern.search(name)
    if match is None:
        return None
    groups = [g for g in match.groups() if g is not None]
    digits = next((g for g in groups if g.isdigit()), None)
    if digits is not None and len(digits) > MAX_INDEX_DIGITS:
        return None
    if digits is None:
        return LayerName(-1, "", match.group(0))
    return LayerName(int(digits), name[: match.start()] + pattern.pattern, match.group(0))


def layer_names_table(con: duckdb.DuckDBPyConnection, run_id: int, layer_pattern: str | None) -> int:
    """Temp table `_seg_names(name, layer, stack, label)` for the run's range names that identify a layer.

    Layer indices of several stacks (a vision tower and a language model) are offset so they do not collide:
    stacks in order of first appearance, each after the previous one's highest index.
    """
    pattern = re.compile(layer_pattern) if layer_pattern else None
    names = con.execute(
        f"""SELECT name, min(start_ns) FROM (
                SELECT name, start_ns FROM cpu_ranges WHERE run_id = $run AND kind IN {RANGE_KINDS}
                UNION ALL SELECT name, start_ns FROM gpu_ranges WHERE run_id = $run)
            -- a name that cannot name a layer is not read into Python (a custom pattern reads them all)
            WHERE $candidate IS NULL OR (({_has_candidate_part("name")}) AND regexp_matches(name, $candidate))
            GROUP BY name""",
        {"run": run_id, "candidate": None if pattern else DEFAULT_CANDIDATE},
    ).fetchall()
    parsed_names = ((n, first, parse_layer_name(n, pattern)) for n, first in names)
    # An index beyond the schema's INTEGER (model.layers.99999999999999999999) names no layer.
    rows = [(n, first, p) for n, first, p in parsed_names if p is not None and -(2**31) <= p.layer < 2**31]
    if any(not r[2].stack.startswith("nn.Module: ") for r in rows):
        rows = [r for r in rows if not r[2].stack.startswith("nn.Module: ")]  # module paths name layers better
    frame = pd.DataFrame(
        {
            "name": [r[0] for r in rows],
            "layer": _offset_stacks(rows),
            "stack": [r[2].stack for r in rows],
            "label": [r[2].label for r in rows],
        }
    )
    execute_with(
        con, "_seg_names_frame", frame, "CREATE OR REPLACE TEMP TABLE _seg_names AS SELECT * FROM _seg_names_frame"
    )
    return len(rows)


def _has_candidate_part(column: str) -> str:
    """SQL: whether `column` holds one of CANDIDATE_PARTS (each a plain word: no quote to escape)."""
    return " OR ".join(f"contains({column}, '{part}')" for part in CANDIDATE_PARTS)


def _offset_stacks(rows: list[tuple[str, int, LayerName]]) -> list[int]:
    """Layer index of each row: the parsed one, offset per stack; names without a number by first appearance."""
    unnumbered = sorted((start, name) for name, start, parsed in rows if parsed.layer < 0)
    order = {name: i for i, (_, name) in enumerate(unnumbered)}
    rows = [(n, s, LayerName(order[n], p.stack, p.label) if p.layer < 0 else p) for n, s, p in rows]
    first: dict[str, int] = {}
    top: dict[str, int] = {}
    families = _families({_stack_family(parsed.stack) for _, _, parsed in rows})
    for _, start, parsed in rows:
        family = families[_stack_family(parsed.stack)]
        first[family] = min(first.get(family, start), start)
        top[family] = max(top.get(family, -1), parsed.layer)
    offset: dict[str, int] = {}
    base = 0
    for family in sorted(first, key=lambda f: first[f]):
        offset[family] = base
        base += top[family] + 1
    return [parsed.layer + offset[families[_stack_family(parsed.stack)]] for _, _, parsed in rows]


def _families(stacks: set[str]) -> dict[str, str]:
    """Each stack's family: a stack that ends another one (`layers.` of `model.layers.`) is the same list."""
    out = {}
    for stack in stacks:
        longer = [s for s in stacks if s != stack and s.endswith(stack)]
        out[stack] = max(longer, key=len) if len(longer) == 1 else stack
    return out


def _stack_family(stack: str) -> str:
    """The layer list a name belongs to, the same whether seen as a plain module path (`model.layers.`) or
    inside a vLLM NVTX dict string (`{'Module': 'model.layers.`): the text after the last quote or space."""
    return re.split(r"[\s'\"(\[:/]", stack)[-1] or stack


def timelines(con: duckdb.DuckDBPyConnection, run_id: int) -> int:
    """`_seg_cpu_events` and `_seg_gpu_events`: the innermost layer range open on each thread and stream.
    Returns how many layer ranges were ignored because they enclose other layers (see `_drop_enclosing`)."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_lanes AS
        SELECT r.range_id, r.rank, r.pid AS lane_a, r.tid AS lane_b, r.start_ns, r.end_ns, n.layer, n.label
        FROM cpu_ranges r JOIN _seg_names n USING (name)
        WHERE r.run_id = $run AND r.kind IN ('annotation', 'module', 'nvtx') AND r.end_ns > r.start_ns
        """,
        {"run": run_id},
    )
    enclosing = _drop_enclosing(con)
    _flatten(con, "_seg_cpu_events")
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_lanes AS
        SELECT r.range_id, r.rank, r.device_id AS lane_a, r.stream_id AS lane_b, r.start_ns, r.end_ns, n.layer,
               n.label
        FROM gpu_ranges r JOIN _seg_names n USING (name)
        WHERE r.run_id = $run AND r.end_ns > r.start_ns
        """,
        {"run": run_id},
    )
    enclosing += _drop_enclosing(con)
    _flatten(con, "_seg_gpu_events")
    return enclosing


def _drop_enclosing(con: duckdb.DuckDBPyConnection) -> int:
    """Remove from `_seg_lanes` the ranges that enclose a range of another layer on the same lane: such a range is
    no layer (an NVTX `model.layers.0` left open across a CUDA graph capture, whose other layers were captured
    inside ranges of their own, would otherwise claim every replayed kernel). Returns how many were removed.

    A range encloses one of another layer when, among the lane's ranges that start at or after it, the earliest end
    of a layer other than its own is at or before its end. One sweep per lane, latest start first, keeps the
    earliest end so far and its layer, and the earliest end of any other layer (see `_earliest_other_end`); a
    self-join on the lane compared every pair of ranges of a lane (111 s for 98 k ranges per thread)."""
    data = con.execute(
        "SELECT range_id, rank, lane_a, lane_b, start_ns, end_ns, layer FROM _seg_lanes "
        "ORDER BY rank, lane_a, lane_b, start_ns DESC"
    ).fetchnumpy()
    n = len(data["range_id"])
    if n == 0:
        return 0
    start = np.asarray(data["start_ns"], dtype=np.int64)
    end = np.asarray(data["end_ns"], dtype=np.int64)
    layer = np.asarray(data["layer"], dtype=np.int64)
    lanes = nesting.thread_heads([data[c] for c in ("rank", "lane_a", "lane_b")], n)
    # every range compares with all the lane's ranges of its start: the figures after the last of them
    last_of_start = np.flatnonzero(np.append(lanes[1:] | (start[1:] != start[:-1]), True))
    at = last_of_start[np.searchsorted(last_of_start, np.arange(n))]
    enclosing = np.zeros(n, dtype=bool)
    for lo, hi in itertools.pairwise(np.append(np.flatnonzero(lanes), n)):  # one iteration per lane
        other_end = _earliest_other_end(end[lo:hi], layer[lo:hi], at[lo:hi] - lo)
        enclosing[lo:hi] = other_end <= end[lo:hi]
    removed = pa.table({"range_id": np.asarray(data["range_id"])[enclosing]})
    execute_with(
        con, "_seg_enclosing", removed, "DELETE FROM _seg_lanes WHERE range_id IN (SELECT range_id FROM _seg_enclosing)"
    )
    return int(enclosing.sum())


def _earliest_other_end(end: np.ndarray, layer: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per range, the earliest end among ranges 0..at[i] (the order of the sweep) of a layer other than its own
    (int64 max: none).

    Running along the sweep: `first` is the earliest end so far and `first_layer` the layer of the range that
    first reached it; `second` the earliest end of a layer other than `first_layer`. When a range of another
    layer sets a new earliest end, the old one becomes `second` (it was below every other); a range of
    `first_layer` leaves `second` as it is; any other range lowers it to its own end."""
    index = np.arange(len(end))
    first = np.minimum.accumulate(end)
    new_first = np.ones(len(end), dtype=bool)
    new_first[1:] = end[1:] < first[:-1]
    first_layer = layer[np.maximum.accumulate(np.where(new_first, index, 0))]
    none = np.iinfo(np.int64).max
    lowers = np.where(~new_first & (layer != first_layer), end, none)
    lowers[1:] = np.where(new_first[1:] & (first_layer[1:] != first_layer[:-1]), first[:-1], lowers[1:])
    second = np.minimum.accumulate(lowers)
    return np.where(first_layer[at] != layer, first[at], second[at])


def assign(con: duckdb.DuckDBPyConnection) -> None:
    """Fill `_seg_ann(activity_id, layer, name)` from CPU layer ranges, then GPU layer ranges (when there are any:
    finding the activities left to them takes a pass over all of them, ~1 CPU-s per 3 M)."""
    execute_with(
        con, "_seg_by_cpu", _by_launch_call(con), "CREATE OR REPLACE TEMP TABLE _seg_ann AS SELECT * FROM _seg_by_cpu"
    )
    if has_rows(con, "SELECT 1 FROM _seg_gpu_events WHERE layer IS NOT NULL"):
        con.execute(_BY_GPU)


def _by_launch_call(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """(activity_id, layer, name) of the activities whose launch call falls in a layer range: the last event of
    `_seg_cpu_events` at or before the call on its lane (rank, pid, tid; NULL matches NULL), when it names a layer.

    Each lane's events are in time order (one per instant), so the call's place among them is a binary search
    (numpy, per lane): for the 3 M kernels of the 1 GB nsys bench export 1.0 CPU-s, where the ASOF join took 2.4."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_lane_ids AS  -- each lane of the timeline, numbered from 0
        SELECT rank, lane_a, lane_b, (row_number() OVER (ORDER BY rank, lane_a, lane_b) - 1)::BIGINT AS lane
        FROM (SELECT DISTINCT rank, lane_a, lane_b FROM _seg_cpu_events)
        """
    )
    on_lane = "{0}.rank = l.rank AND {1} IS NOT DISTINCT FROM l.lane_a AND {2} IS NOT DISTINCT FROM l.lane_b"
    events = con.sql(
        f"""SELECT l.lane, e.t, e.layer, e.label FROM _seg_cpu_events e JOIN _seg_lane_ids l
            ON {on_lane.format("e", "e.lane_a", "e.lane_b")} ORDER BY l.lane, e.t"""
    ).to_arrow_table()
    calls = con.execute(
        f"""SELECT a.activity_id, a.l_start, l.lane FROM _seg_a a JOIN _seg_lane_ids l
            ON {on_lane.format("a", "a.l_pid", "a.l_tid")} WHERE a.l_start IS NOT NULL"""
    ).fetchnumpy()
    found = _last_at_or_before(
        events["lane"].to_numpy(), events["t"].to_numpy(), np.asarray(calls["lane"]), np.asarray(calls["l_start"])
    )
    placed = found >= 0
    placed[placed] = events["layer"].is_valid().to_numpy(zero_copy_only=False)[found[placed]]
    at = pa.array(found[placed])
    return pa.table(
        {
            "activity_id": np.asarray(calls["activity_id"])[placed],
            "layer": events["layer"].take(at),
            "name": events["label"].take(at),
        }
    )


def _last_at_or_before(event_lane: np.ndarray, event_t: np.ndarray, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each (lane, t), the index of the last event of that lane at or before t (-1: none); the events sorted by
    lane, then time, lanes numbered from 0."""
    lanes = int(max(event_lane.max(initial=-1), lane.max(initial=-1))) + 1
    order = np.argsort(lane, kind="stable")
    event_heads = np.searchsorted(event_lane, np.arange(lanes + 1))
    heads = np.searchsorted(lane[order], np.arange(lanes + 1))
    found = np.full(len(lane), -1, dtype=np.int64)
    for one, (lo, hi) in enumerate(itertools.pairwise(event_heads)):
        rows = order[heads[one] : heads[one + 1]]
        at = np.searchsorted(event_t[lo:hi], t[rows], side="right") - 1
        found[rows] = np.where(at >= 0, at + lo, -1)
    return found


# The activities no CPU layer range placed, by the GPU layer ranges of their stream.
_BY_GPU = """
        INSERT INTO _seg_ann
        SELECT a.activity_id, e.layer, e.label
        FROM (SELECT * FROM _seg_a WHERE activity_id NOT IN (SELECT activity_id FROM _seg_ann)) a
        ASOF JOIN _seg_gpu_events e
          ON a.rank = e.rank AND a.device_id IS NOT DISTINCT FROM e.lane_a
         AND a.stream_id IS NOT DISTINCT FROM e.lane_b AND a.start_ns >= e.t
        WHERE e.layer IS NOT NULL"""


def _flatten(con: duckdb.DuckDBPyConnection, events: str) -> None:
    """Turn the nested ranges of `_seg_lanes` into `events(rank, lane_a, lane_b, t, layer, label)`: from t on,
    the innermost open layer range of the lane is `layer` (NULL: none).

    Depth among the layer ranges of a lane: +1 at each start, -1 at each end (ends first at equal times,
    longer ranges first among equal starts); the parent is the latest range one level up that started no
    later. At equal times the last event wins: ends before starts, inner ends before outer ends, outer
    starts before inner starts.
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {events} AS
        WITH edges AS (
            SELECT rank, lane_a, lane_b, start_ns AS t, 1 AS delta, -end_ns AS tiebreak, range_id FROM _seg_lanes
            UNION ALL
            SELECT rank, lane_a, lane_b, end_ns, -1, NULL, NULL FROM _seg_lanes
        ), depth AS (
            SELECT range_id,
                   sum(delta) OVER (PARTITION BY rank, lane_a, lane_b ORDER BY t, delta, tiebreak, range_id
                                    ROWS UNBOUNDED PRECEDING) - 1 AS depth
            FROM edges
        ), ranges AS (
            SELECT l.*, greatest(d.depth, 0) AS depth FROM _seg_lanes l JOIN depth d USING (range_id)
        ), parents AS (
            SELECT c.range_id, p.range_id AS parent_id
            FROM ranges c ASOF LEFT JOIN ranges p
              ON c.rank = p.rank AND c.lane_a IS NOT DISTINCT FROM p.lane_a
             AND c.lane_b IS NOT DISTINCT FROM p.lane_b AND c.depth = p.depth + 1 AND c.start_ns >= p.start_ns
        ), raw AS (
            SELECT rank, lane_a, lane_b, start_ns AS t, range_id AS current, 2000 + depth AS ord FROM ranges
            UNION ALL
            SELECT r.rank, r.lane_a, r.lane_b, r.end_ns, p.parent_id, 1000 - r.depth
            FROM ranges r JOIN parents p USING (range_id)
        ), last AS (
            SELECT rank, lane_a, lane_b, t, arg_max_null(current, ord) AS current
            FROM raw GROUP BY rank, lane_a, lane_b, t
        )
        SELECT l.rank, l.lane_a, l.lane_b, l.t, r.layer, r.label
        FROM last l LEFT JOIN _seg_lanes r ON r.range_id = l.current
        """
    )
