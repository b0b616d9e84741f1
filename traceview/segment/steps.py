"""Steps: one model iteration each (a training step, one decode token), per rank.

Reads: cpu_ranges and the staged activity table `_seg_a`. Writes temp tables `_seg_steps(rank, step, name,
start_ns, end_ns, phase, warmup, method)` and `_seg_step_of(activity_id, step)`.

Where steps come from, first found per rank:
1. ranges matching `--step-pattern` (method `annotation`);
2. `ProfilerStep#N` (method `annotation`);
3. serving engines' step ranges: vLLM's `execute_..._context_N(...)_generation_M(...)`, SGLang's
   `step[DECODE bs=32]`, TensorRT-LLM's `_forward_step N` (method `engine`);
4. NVTX or record_function ranges with a step-like name: `decode_step_3`, `Decode/step_003`, `iteration 7`,
   `train_step:2` (method `annotation`);
5. the forward passes found from the layers of the kernel sequence (method `passes`, segment/passes.py): a step
   holds whole layers, one pass or a repetition of passes; one pass in the trace is one step;
6. the whole trace as one step (method `whole`), when no layer repeats.
A step range found by its name is an `annotation` whichever rule matched it, as layer ranges are (`layers.method`):
the step's name shows which. A range that holds several others (an outer profiler's ProfilerStep#0 around a
second profiler's steps) is not a step: the ranges inside are, and a warning says so. Of the other matching ranges,
one that another holds or overlaps from earlier is not a step (an engine's step range around its forward pass's
range is one step, the outer). A kernel belongs to the step whose CPU range
contains its launch call; a kernel without a launch, to the step whose GPU span contains its start. Steps carry
the trace's own numbers where the names hold them (ProfilerStep#7 is step 7), else 0, 1, 2, ...
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from ..db import execute_with
from . import passes
from .graph import GRAPH_LAUNCH

PROFILER_STEP = r"^ProfilerStep#\d+$"
# Serving engines' own step ranges: vLLM v1 `execute_context_1(888_788544)_generation_0(0)` and
# `execute_32_context_0(sq0sk0...)_generation_32(sq32sk32785...)` (requests and tokens in the parentheses), SGLang
# `step[DECODE bs=32]` / `step[EXTEND bs=15 toks=15360]`, TensorRT-LLM's executor `_forward_step 12: 1 ctx reqs,
# 3 gen reqs`, and `forward_batch 3` / `run_batch 3` names.
FRAMEWORK_STEPS = (
    r"^execute_(?:\d+_)?context_\d+\([\w.]*\)_generation_\d+\([\w.]*\)$"
    r"|^step\[[A-Z_]+(?: [^\]]*)?\]$"
    r"|^(?:\[\w+\] )?_?forward_step[ _]\d+(?::.*)?$"
    r"|^(?:sglang[_.:/ ])?(?:forward|run)_batch[_:#/ ]\d+$"
)
DEFAULT_STEP_PATTERN = (
    r"(?i)^(?:[\w ]*[_:/ #.-])?(?:step|iter|iteration)s?[_:#/ .-]*\d+$"
    r"|^(?:decode|prefill|train|training|forward|fwd|generate|generation)[_:#/ .-]*\d+$"
)
VLLM_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d{1,9})\([\w.]*\)_generation_(\d{1,9})\([\w.]*\)$")
# A step-like name's own number: the last one in it, of 10 digits at most (steps.step is an INTEGER).
STEP_NUMBER = re.compile(r"(?<!\d)(\d{1,10})\D*$")
WARMUP = re.compile(r"(?i)warm[-_ ]?up")
PREFILL = re.compile(r"(?i)prefill|context|extend|prompt")
DECODE = re.compile(r"(?i)decode|generat")


@dataclass(frozen=True)
class StepOutcome:
    """How steps were found on each rank, and how many."""

    steps: int
    methods: tuple[str, ...]
    holders: tuple[str, ...] = ()  # names of the step ranges not taken because they hold other step ranges


MAX_LAUNCH_DELAY_NS = 60 * 10**9  # GPU work that starts later than this after its launch call is left out of steps


def find_steps(con: duckdb.DuckDBPyConnection, run_id: int, step_pattern: str | None) -> StepOutcome:
    """Fill `_seg_steps` and `_seg_step_of` for every rank of the run: a few statements for all ranks together."""
    tiers = _tiers(step_pattern)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _seg_steps (rank INTEGER, step INTEGER, name VARCHAR, cpu_start BIGINT, "
        "cpu_end BIGINT, phase VARCHAR, warmup BOOLEAN, method VARCHAR)"
    )
    con.execute("CREATE OR REPLACE TEMP TABLE _seg_step_of (activity_id BIGINT, step INTEGER)")
    con.execute("CREATE OR REPLACE TEMP TABLE _seg_pass_drafts (activity_id BIGINT, draft_pass INTEGER)")
    ranks = [r[0] for r in con.execute("SELECT DISTINCT rank FROM _seg_a ORDER BY rank").fetchall()]
    annotated = _annotated_steps(con, run_id, tiers)
    from_kernels = _steps_from_kernels(con, [r for r in ranks if r not in annotated.method_of])
    _insert_steps(con, [*annotated.rows, *from_kernels.rows])
    _assign_by_launch(con)
    _drop_strays(con)
    count = con.execute("SELECT count(*) FROM _seg_steps").fetchall()[0][0]
    methods = {**annotated.method_of, **from_kernels.method_of}
    return StepOutcome(count, tuple(sorted(set(methods.values()))), annotated.holders)


StepRow = tuple[int, int, str | None, int | None, int | None, str, bool, str]
"""One row of `_seg_steps`: rank, step, name, cpu_start, cpu_end, phase, warmup, method."""


@dataclass(frozen=True)
class _RankSteps:
    """Steps found on some ranks: the `_seg_steps` rows and the method of each rank."""

    rows: list[StepRow]
    method_of: dict[int, str]
    holders: tuple[str, ...] = ()


def _tiers(step_pattern: str | None) -> list[tuple[str | None, str]]:
    """(pattern, method) in the order they are tried; the first is `--step-pattern` (None when not given)."""
    if step_pattern:
        re.compile(step_pattern)
    tiers = [(PROFILER_STEP, "annotation"), (FRAMEWORK_STEPS, "engine"), (DEFAULT_STEP_PATTERN, "annotation")]
    return [(step_pattern, "annotation"), *tiers]


def _annotated_steps(con: duckdb.DuckDBPyConnection, run_id: int, tiers: list[tuple[str | None, str]]) -> _RankSteps:
    """Per rank, the first tier whose pattern some range matches: its matching ranges as steps, less those that
    hold several others (the ranges inside are the steps) and those an earlier one holds or overlaps."""
    rows: list[StepRow] = []
    method_of: dict[int, str] = {}
    found = _step_ranges(con, run_id, [pattern for pattern, _ in tiers])
    holders = tuple(r[2] for r in found if r[5])
    taken = [r for r in found if not r[5]]
    for (rank, tier), group in itertools.groupby(taken, key=lambda r: (r[0], r[1])):
        ranges = [(name, start, end) for _, _, name, start, end, _ in group]
        method = tiers[tier][1]
        names = [r[0] for r in ranges]
        numbers = step_numbers(names) if method != "engine" else range(len(ranges))
        for number, (name, start, end) in zip(numbers, ranges, strict=True):
            rows.append((rank, number, name, start, end, phase_of(name), bool(WARMUP.search(name)), method))
        method_of[rank] = method
    return _RankSteps(rows, method_of, holders)


def _step_ranges(
    con: duckdb.DuckDBPyConnection, run_id: int, patterns: list[str | None]
) -> list[tuple[int, int, str, int, int, bool]]:
    """(rank, tier, name, start, end, holds) of the ranges of each rank's first tier that any range matches, by
    rank and start: those that hold another of them (`holds`, not steps), and the steps: the others that no earlier
    one overlaps. The patterns are tried on the distinct names (NVTX names repeat: 6.4 M ranges, 316 k names at
    1 GB)."""
    return con.execute(
        """
        WITH ranges AS (
            SELECT rank, name, start_ns, end_ns FROM cpu_ranges
            WHERE run_id = $run AND kind IN ('step', 'annotation', 'nvtx') AND end_ns > start_ns
              AND rank IN (SELECT DISTINCT rank FROM _seg_a)
        ), names AS (
            SELECT DISTINCT name FROM ranges
        ), tier_names AS (
            SELECT 0 AS tier, name FROM names WHERE regexp_matches(name, $p0)
            UNION ALL SELECT 1, name FROM names WHERE regexp_matches(name, $p1)
            UNION ALL SELECT 2, name FROM names WHERE regexp_matches(name, $p2)
            UNION ALL SELECT 3, name FROM names WHERE regexp_matches(name, $p3)
        ), matched AS (
            SELECT r.rank, t.tier, r.name, r.start_ns, r.end_ns FROM ranges r JOIN tier_names t USING (name)
        ), first_tier AS (
            SELECT * FROM matched QUALIFY tier = min(tier) OVER (PARTITION BY rank)
        ), holders AS (  -- ranges that hold two or more others (of other names, other bounds): not a step
            SELECT o.rank, o.start_ns, o.end_ns FROM first_tier o JOIN first_tier i
              ON i.rank = o.rank AND i.start_ns >= o.start_ns AND i.end_ns <= o.end_ns AND i.name <> o.name
                 AND (i.start_ns > o.start_ns OR i.end_ns < o.end_ns)
            GROUP BY ALL HAVING count(*) >= 2
        ), flagged AS (
            SELECT f.*, h.rank IS NOT NULL AS holds FROM first_tier f LEFT JOIN holders h USING (rank, start_ns, end_ns)
        ), ordered AS (
            SELECT *, max(end_ns) OVER (PARTITION BY rank ORDER BY start_ns, end_ns DESC ROWS BETWEEN UNBOUNDED
                                        PRECEDING AND 1 PRECEDING) AS reach
            FROM flagged WHERE NOT holds
        )
        SELECT rank, tier, name, start_ns, end_ns, false FROM ordered WHERE reach IS NULL OR reach <= start_ns
        UNION ALL SELECT rank, tier, name, start_ns, end_ns, true FROM flagged WHERE holds
        ORDER BY rank, start_ns, end_ns DESC
        """,
        {"run": run_id, **{f"p{i}": pattern for i, pattern in enumerate(patterns)}},
    ).fetchall()


def _insert_steps(con: duckdb.DuckDBPyConnection, rows: list[StepRow]) -> None:
    """Append `rows` to `_seg_steps`, by rank (each rank's steps in their order)."""
    rows = sorted(rows, key=lambda r: r[0])  # stable: a rank's steps stay in order
    columns = ["rank", "step", "name", "cpu_start", "cpu_end", "phase", "warmup", "method"]
    frame = pd.DataFrame(rows, columns=columns).astype({"cpu_start": "Int64", "cpu_end": "Int64"})
    execute_with(con, "_seg_steps_frame", frame, "INSERT INTO _seg_steps SELECT * FROM _seg_steps_frame")


def step_numbers(names: list[str]) -> list[int]:
    """The trace's own step numbers (ProfilerStep#7 -> 7, decode_step_3 -> 3) when every name carries a distinct
    one in increasing order, else 0, 1, 2, ..."""
    found = [STEP_NUMBER.search(name) for name in names]
    numbers = [int(m.group(1)) if m else -1 for m in found]
    increasing = all(a < b for a, b in itertools.pairwise(numbers))
    if numbers and increasing and numbers[0] >= 0 and numbers[-1] < 2**31:
        return numbers
    return list(range(len(names)))


def phase_of(name: str) -> str:
    """decode, prefill or unknown, as far as the step's name says (vLLM's batch composition included)."""
    vllm = VLLM_STEP.match(name)
    if vllm:
        contexts, generations = int(vllm.group(1)), int(vllm.group(2))
        if contexts and not generations:
            return "prefill"
        return "decode" if generations and not contexts else "unknown"
    if PREFILL.search(name) and not DECODE.search(name):
        return "prefill"
    if DECODE.search(name) and not PREFILL.search(name):
        return "decode"
    return "unknown"


def _assign_by_launch(con: duckdb.DuckDBPyConnection) -> None:
    """Kernels of annotated steps: by launch time in the step's CPU range, else by GPU time in its span."""
    con.execute(
        """
        INSERT INTO _seg_step_of
        SELECT a.activity_id, s.step
        FROM (SELECT * FROM _seg_a WHERE l_start IS NOT NULL) a
        ASOF JOIN (SELECT * FROM _seg_steps WHERE cpu_start IS NOT NULL) s
          ON a.rank = s.rank AND a.l_start >= s.cpu_start
        WHERE a.l_start < s.cpu_end
        """
    )
    con.execute(
        """
        INSERT INTO _seg_step_of
        WITH spans AS (
            SELECT a.rank, o.step, min(a.start_ns) AS lo, max(a.end_ns) AS hi
            FROM _seg_step_of o JOIN _seg_a a USING (activity_id) GROUP BY ALL
        )
        SELECT a.activity_id, s.step
        FROM (SELECT * FROM _seg_a WHERE activity_id NOT IN (SELECT activity_id FROM _seg_step_of)) a
        ASOF JOIN spans s ON a.rank = s.rank AND a.start_ns >= s.lo
        WHERE a.start_ns < s.hi
        """
    )


def _drop_strays(con: duckdb.DuckDBPyConnection) -> None:
    """Leave out of its step a kernel that ran far from the step's other kernels: one launched inside the step's
    range but run, say, half a second before the forward pass (an idle gap STRAY_GAP_FACTOR times the longest
    between the step's other kernels, which must be at least MIN_STEP_KERNELS) would make the step's span that
    long. Whatever the step's size, GPU work that started more than MAX_LAUNCH_DELAY_NS after its launch call (a
    clock jump, a damaged time: no queue holds work that long) is left out too, and so out of every layer."""
    con.execute(
        "DELETE FROM _seg_step_of WHERE activity_id IN (SELECT activity_id FROM _seg_a WHERE start_ns - l_start > ?)",
        [MAX_LAUNCH_DELAY_NS],
    )
    data = con.execute(
        """SELECT a.rank, o.step, a.activity_id, a.start_ns, a.end_ns
           FROM _seg_step_of o JOIN _seg_a a USING (activity_id)
           WHERE a.kind = 'kernel' ORDER BY a.rank, o.step, a.start_ns, a.activity_id"""
    ).fetchnumpy()
    ids = np.asarray(data["activity_id"], dtype=np.int64)
    if len(ids) == 0:
        return
    key = np.asarray(data["rank"], dtype=np.int64) * 2**32 + np.asarray(data["step"], dtype=np.int64)
    edges = np.flatnonzero(np.diff(key)) + 1
    start, end = np.asarray(data["start_ns"], dtype=np.int64), np.asarray(data["end_ns"], dtype=np.int64)
    strays = [
        ids[lo:hi][~passes.kept(start[lo:hi], end[lo:hi])]
        for lo, hi in itertools.pairwise([0, *edges, len(ids)])
        if hi - lo > passes.MIN_STEP_KERNELS
    ]
    drop = np.concatenate(strays) if strays else np.array([], dtype=np.int64)
    if len(drop):
        strays_frame = pd.DataFrame({"activity_id": drop})
        delete = "DELETE FROM _seg_step_of WHERE activity_id IN (SELECT activity_id FROM _seg_strays)"
        execute_with(con, "_seg_strays", strays_frame, delete)


def _steps_from_kernels(con: duckdb.DuckDBPyConnection, ranks: list[int]) -> _RankSteps:
    """Steps of ranks without step annotations: their forward passes (segment/passes.py), found on each rank's
    main stream (the one with most kernels); other streams, memory copies and sets join the step whose GPU span
    holds their start. Writes `_seg_step_of`; returns the `_seg_steps` rows."""
    data = con.execute(
        """
        WITH kernels AS (
            SELECT * FROM _seg_a WHERE kind = 'kernel' AND list_contains($ranks, rank)
        ), main AS (
            SELECT rank, stream_id FROM kernels GROUP BY rank, stream_id
            QUALIFY row_number() OVER (PARTITION BY rank ORDER BY count(*) DESC, stream_id NULLS LAST) = 1
        )
        SELECT k.rank, k.activity_id, k.code, k.start_ns, k.end_ns, k.inductor_number,
               CASE WHEN regexp_matches(k.l_name, $graph) THEN k.launch_id ELSE -1 END AS replay,
               CASE WHEN regexp_matches(k.l_name, $graph) THEN coalesce(k.graph_id, -1) ELSE -1 END AS graph
        FROM kernels k JOIN main m ON k.rank = m.rank AND k.stream_id IS NOT DISTINCT FROM m.stream_id
        ORDER BY k.rank, k.start_ns, k.activity_id
        """,
        {"ranks": ranks, "graph": GRAPH_LAUNCH},
    ).fetchnumpy()
    rank = np.asarray(data["rank"], dtype=np.int64)
    ids, codes = np.asarray(data["activity_id"], dtype=np.int64), np.asarray(data["code"], dtype=np.int64)
    start, end = np.asarray(data["start_ns"], dtype=np.int64), np.asarray(data["end_ns"], dtype=np.int64)
    replay = np.nan_to_num(np.asarray(data["replay"], dtype=float), nan=-1).astype(np.int64)
    numbers = np.asarray(data["inductor_number"], dtype=np.int64)
    graph = np.nan_to_num(np.asarray(data["graph"], dtype=float), nan=-1).astype(np.int64)
    edges = np.flatnonzero(np.diff(rank)) + 1
    rows: list[StepRow] = []
    method_of = dict.fromkeys(ranks, "whole")  # a rank without kernels: no step
    kept: list[np.ndarray] = []
    steps_of: list[np.ndarray] = []
    for lo, hi in itertools.pairwise([0, *edges, len(ids)] if len(ids) else []):  # one iteration per rank
        found = passes.find_passes(codes[lo:hi], start[lo:hi], end[lo:hi], replay[lo:hi], numbers[lo:hi], graph[lo:hi])
        keep = found.step_of != passes.NO_STEP
        kept.append(ids[lo:hi][keep])
        steps_of.append(found.step_of[keep])
        if found.draft_of is not None:
            _insert_drafts(con, ids[lo:hi], found.draft_of)
        method_of[int(rank[lo])] = found.method
        rows += [(int(rank[lo]), step, None, None, None, "unknown", False, found.method) for step in range(found.steps)]
    if kept:
        frame = pd.DataFrame({"activity_id": np.concatenate(kept), "step": np.concatenate(steps_of)})
        execute_with(con, "_seg_k_frame", frame, "INSERT INTO _seg_step_of SELECT * FROM _seg_k_frame")
        _join_by_span(con, ranks)
    return _RankSteps(rows, method_of)


def _insert_drafts(con: duckdb.DuckDBPyConnection, ids: np.ndarray, draft_of: np.ndarray) -> None:
    """`_seg_pass_drafts`: the drafter's kernels that the forward passes told apart, with their pass in the step."""
    mine = draft_of != passes.NO_DRAFT
    frame = pd.DataFrame({"activity_id": ids[mine], "draft_pass": draft_of[mine]})
    execute_with(con, "_seg_drafts_frame", frame, "INSERT INTO _seg_pass_drafts SELECT * FROM _seg_drafts_frame")


def _join_by_span(con: duckdb.DuckDBPyConnection, ranks: list[int]) -> None:
    """The other activities of `ranks` join the step of their rank whose GPU span holds their start."""
    con.execute(
        """
        INSERT INTO _seg_step_of
        WITH spans AS (
            SELECT a.rank, o.step, min(a.start_ns) AS lo, max(a.end_ns) AS hi
            FROM _seg_step_of o JOIN _seg_a a USING (activity_id) WHERE list_contains($ranks, a.rank) GROUP BY ALL
        )
        SELECT a.activity_id, s.step
        FROM (SELECT * FROM _seg_a WHERE list_contains($ranks, rank)
                AND activity_id NOT IN (SELECT activity_id FROM _seg_step_of)) a
        ASOF JOIN spans s ON a.rank = s.rank AND a.start_ns >= s.lo
        WHERE a.start_ns < s.hi
        """,
        {"ranks": ranks},
    )
