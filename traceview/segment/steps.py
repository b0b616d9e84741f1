"""Steps: one model iteration each (a training step, one decode token), per rank.

Reads: cpu_ranges and the staged activity table `_seg_a`. Writes temp tables `_seg_steps(rank, step, name,
start_ns, end_ns, phase, warmup, method)` and `_seg_step_of(activity_id, step)`.

Where steps come from, first found per rank:
1. ranges matching `--step-pattern` (method `pattern`);
2. `ProfilerStep#N` (method `annotation`);
3. serving engines' step ranges: vLLM's `execute_..._context_N(...)_generation_M(...)`, SGLang's
   `step[DECODE bs=32]`, TensorRT-LLM's `_forward_step N` (method `engine`);
4. NVTX or record_function ranges with a step-like name: `decode_step_3`, `Decode/step_003`, `iteration 7`,
   `train_step:2` (method `pattern`);
5. the forward passes found from the layers of the kernel sequence (method `passes`, segment/passes.py): a step
   holds whole layers, one pass or a repetition of passes; one pass in the trace is one step;
6. the whole trace as one step (method `whole`), when no layer repeats.
Among matching ranges only the outermost count. A kernel belongs to the step whose CPU range contains its
launch call; a kernel without a launch, to the step whose GPU span contains its start. Steps carry the trace's
own numbers where the names hold them (ProfilerStep#7 is step 7), else 0, 1, 2, ...
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

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
VLLM_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d+)\([\w.]*\)_generation_(\d+)\([\w.]*\)$")
STEP_NUMBER = re.compile(r"(\d+)\D*$")  # a step-like name's own number: the last one in it
WARMUP = re.compile(r"(?i)warm[-_ ]?up")
PREFILL = re.compile(r"(?i)prefill|context|extend|prompt")
DECODE = re.compile(r"(?i)decode|generat")


@dataclass(frozen=True)
class StepOutcome:
    """How steps were found on each rank, and how many."""

    steps: int
    methods: tuple[str, ...]


def find_steps(con: duckdb.DuckDBPyConnection, run_id: int, step_pattern: str | None) -> StepOutcome:
    """Fill `_seg_steps` and `_seg_step_of` for every rank of the run."""
    tiers = _tiers(step_pattern)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _seg_steps (rank INTEGER, step INTEGER, name VARCHAR, cpu_start BIGINT, "
        "cpu_end BIGINT, phase VARCHAR, warmup BOOLEAN, method VARCHAR)"
    )
    con.execute("CREATE OR REPLACE TEMP TABLE _seg_step_of (activity_id BIGINT, step INTEGER)")
    ranks = [r[0] for r in con.execute("SELECT DISTINCT rank FROM _seg_a ORDER BY rank").fetchall()]
    methods = set()
    for rank in ranks:
        methods.add(_rank_steps(con, run_id, rank, tiers))
    _assign_by_launch(con)
    _drop_strays(con)
    count = con.execute("SELECT count(*) FROM _seg_steps").fetchall()[0][0]
    return StepOutcome(count, tuple(sorted(methods)))


def _tiers(step_pattern: str | None) -> list[tuple[str, str]]:
    tiers = [(PROFILER_STEP, "annotation"), (FRAMEWORK_STEPS, "engine"), (DEFAULT_STEP_PATTERN, "pattern")]
    if step_pattern:
        re.compile(step_pattern)
        tiers.insert(0, (step_pattern, "pattern"))
    return tiers


def _rank_steps(con: duckdb.DuckDBPyConnection, run_id: int, rank: int, tiers: list[tuple[str, str]]) -> str:
    for pattern, method in tiers:
        ranges = _outermost(con, run_id, rank, pattern)
        if ranges:
            _insert_ranges(con, rank, ranges, method)
            return method
    return _steps_from_kernels(con, rank)


def _outermost(con: duckdb.DuckDBPyConnection, run_id: int, rank: int, pattern: str) -> list[tuple[str, int, int]]:
    """(name, start, end) of the ranges matching `pattern` that no earlier matching range overlaps."""
    return con.execute(
        """
        WITH m AS (
            SELECT name, start_ns, end_ns FROM cpu_ranges
            WHERE run_id = $run AND rank = $rank AND kind IN ('step', 'annotation', 'nvtx')
              AND end_ns > start_ns AND regexp_matches(name, $pattern)
        ), ordered AS (
            SELECT *, max(end_ns) OVER (ORDER BY start_ns, end_ns DESC ROWS BETWEEN UNBOUNDED PRECEDING
                                        AND 1 PRECEDING) AS reach
            FROM m
        )
        SELECT name, start_ns, end_ns FROM ordered WHERE reach IS NULL OR reach <= start_ns ORDER BY start_ns
        """,
        {"run": run_id, "rank": rank, "pattern": pattern},
    ).fetchall()


def _insert_ranges(con: duckdb.DuckDBPyConnection, rank: int, ranges: list[tuple[str, int, int]], method: str) -> None:
    frame = pd.DataFrame(
        {
            "rank": rank,
            "step": step_numbers([r[0] for r in ranges]) if method != "engine" else range(len(ranges)),
            "name": [r[0] for r in ranges],
            "cpu_start": [r[1] for r in ranges],
            "cpu_end": [r[2] for r in ranges],
            "phase": [phase_of(r[0]) for r in ranges],
            "warmup": [bool(WARMUP.search(r[0])) for r in ranges],
            "method": method,
        }
    )
    con.register("_seg_steps_frame", frame)
    con.execute("INSERT INTO _seg_steps SELECT * FROM _seg_steps_frame")
    con.unregister("_seg_steps_frame")


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
    long."""
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
        con.register("_seg_strays", pd.DataFrame({"activity_id": drop}))
        con.execute("DELETE FROM _seg_step_of WHERE activity_id IN (SELECT activity_id FROM _seg_strays)")
        con.unregister("_seg_strays")


def _steps_from_kernels(con: duckdb.DuckDBPyConnection, rank: int) -> str:
    """Steps of a rank without step annotations: its forward passes (segment/passes.py), found on its main stream
    (the one with most kernels); other streams, memory copies and sets join the step whose GPU span holds their
    start."""
    data = con.execute(
        """
        WITH main AS (
            SELECT stream_id FROM _seg_a WHERE rank = $rank AND kind = 'kernel'
            GROUP BY stream_id ORDER BY count(*) DESC, stream_id NULLS LAST LIMIT 1
        )
        SELECT activity_id, code, start_ns, end_ns,
               CASE WHEN regexp_matches(l_name, $graph) THEN launch_id ELSE -1 END AS replay
        FROM _seg_a WHERE rank = $rank AND kind = 'kernel' AND stream_id IS NOT DISTINCT FROM (FROM main)
        ORDER BY start_ns, activity_id
        """,
        {"rank": rank, "graph": GRAPH_LAUNCH},
    ).fetchnumpy()
    ids = np.asarray(data["activity_id"], dtype=np.int64)
    if len(ids) == 0:
        return "whole"
    found = passes.find_passes(
        np.asarray(data["code"], dtype=np.int64),
        np.asarray(data["start_ns"], dtype=np.int64),
        np.asarray(data["end_ns"], dtype=np.int64),
        np.nan_to_num(np.asarray(data["replay"], dtype=float), nan=-1).astype(np.int64),
    )
    keep = found.step_of != passes.NO_STEP
    frame = pd.DataFrame({"activity_id": ids[keep], "step": found.step_of[keep]})
    con.register("_seg_k_frame", frame)
    con.execute("INSERT INTO _seg_step_of SELECT * FROM _seg_k_frame")
    con.unregister("_seg_k_frame")
    con.execute(
        """
        INSERT INTO _seg_step_of
        WITH spans AS (
            SELECT o.step, min(a.start_ns) AS lo, max(a.end_ns) AS hi
            FROM _seg_step_of o JOIN _seg_a a USING (activity_id) WHERE a.rank = $rank GROUP BY ALL
        )
        SELECT a.activity_id, s.step
        FROM (SELECT * FROM _seg_a WHERE rank = $rank
                AND activity_id NOT IN (SELECT activity_id FROM _seg_step_of)) a
        ASOF JOIN spans s ON a.start_ns >= s.lo
        WHERE a.start_ns < s.hi
        """,
        {"rank": rank},
    )
    con.execute(
        "INSERT INTO _seg_steps SELECT ?, step, NULL, NULL, NULL, 'unknown', FALSE, ? FROM range(?) t(step)",
        [rank, found.method, found.steps],
    )
    return found.method
