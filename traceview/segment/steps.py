"""Steps: one model iteration each (a training step, one decode token), per rank.

Reads: cpu_ranges and the staged activity table `_seg_a`. Writes temp tables `_seg_steps(rank, step, name,
start_ns, end_ns, phase, warmup, method)` and `_seg_step_of(activity_id, step)`.

Where steps come from, first found per rank:
1. ranges matching `--step-pattern` (method `pattern`);
2. `ProfilerStep#N` (method `annotation`);
3. vLLM's `execute_context_N(T)_generation_M(T)` and SGLang-style step annotations (method `annotation`);
4. NVTX or record_function ranges with a step-like name: `decode_step_3`, `Decode/step_003`, `iteration 7`,
   `train_step:2` (method `pattern`);
5. the repetition of the whole kernel sequence (method `period`): the rarest kernel that comes back at
   regular intervals marks one step, and each step starts at the longest GPU idle gap before it;
6. the whole trace as one step (method `whole`).
Among matching ranges only the outermost count. A kernel belongs to the step whose CPU range contains its
launch call; a kernel without a launch, to the step whose GPU span contains its start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from . import period

PROFILER_STEP = r"^ProfilerStep#\d+$"
FRAMEWORK_STEPS = (
    r"^execute_context_\d+\(\d+\)_generation_\d+\(\d+\)$|^(?:sglang[_.:/ ])?(?:forward|run)_batch[_:#/ ]\d+$"
)
DEFAULT_STEP_PATTERN = (
    r"(?i)^(?:[\w ]*[_:/ #.-])?(?:step|iter|iteration)s?[_:#/ .-]*\d+$"
    r"|^(?:decode|prefill|train|training|forward|fwd|generate|generation)[_:#/ .-]*\d+$"
)
VLLM_STEP = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
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
    count = con.execute("SELECT count(*) FROM _seg_steps").fetchall()[0][0]
    return StepOutcome(count, tuple(sorted(methods)))


def _tiers(step_pattern: str | None) -> list[tuple[str, str]]:
    tiers = [(PROFILER_STEP, "annotation"), (FRAMEWORK_STEPS, "annotation"), (DEFAULT_STEP_PATTERN, "pattern")]
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
            "step": range(len(ranges)),
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


def phase_of(name: str) -> str:
    """decode, prefill or unknown, as far as the step's name says (vLLM's batch composition included)."""
    vllm = VLLM_STEP.match(name)
    if vllm:
        contexts, generations = int(vllm.group(1)), int(vllm.group(3))
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


def _steps_from_kernels(con: duckdb.DuckDBPyConnection, rank: int) -> str:
    """Steps of a rank without step annotations: the repetition of its kernel sequence, else the whole."""
    data = con.execute(
        """SELECT activity_id, code, start_ns, end_ns FROM _seg_a WHERE rank = ? AND kind = 'kernel'
           ORDER BY start_ns, activity_id""",
        [rank],
    ).fetchnumpy()
    ids = np.asarray(data["activity_id"], dtype=np.int64)
    if len(ids) == 0:
        return "whole"
    bounds = repeated_steps(np.asarray(data["code"]), np.asarray(data["start_ns"]), np.asarray(data["end_ns"]))
    method = "period" if bounds is not None else "whole"
    if bounds is None:
        bounds = np.array([[0, len(ids)]])
    step_of = np.full(len(ids), -1, dtype=np.int64)
    for step, (lo, hi) in enumerate(bounds):  # one slice per step
        step_of[lo:hi] = step
    frame = pd.DataFrame({"activity_id": ids[step_of >= 0], "step": step_of[step_of >= 0]})
    con.register("_seg_k_frame", frame)
    con.execute("INSERT INTO _seg_step_of SELECT * FROM _seg_k_frame")
    con.unregister("_seg_k_frame")
    # memcpy/memset and other-stream work fall in the GPU span of a step
    con.execute(
        """
        INSERT INTO _seg_step_of
        WITH spans AS (
            SELECT o.step, min(a.start_ns) AS lo, max(a.end_ns) AS hi
            FROM _seg_step_of o JOIN _seg_a a USING (activity_id) WHERE a.rank = $rank GROUP BY ALL
        )
        SELECT a.activity_id, s.step
        FROM (SELECT * FROM _seg_a WHERE rank = $rank AND kind <> 'kernel') a
        ASOF JOIN spans s ON a.start_ns >= s.lo
        WHERE a.start_ns < s.hi
        """,
        {"rank": rank},
    )
    con.execute(
        "INSERT INTO _seg_steps SELECT ?, step, NULL, NULL, NULL, 'unknown', FALSE, ? FROM range(?) t(step)",
        [rank, method, len(bounds)],
    )
    return method


def _offset(marks: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, gap: int) -> int:
    """Kernels between a step's start and its anchor: the offset with the longest median idle time before it."""
    idle = np.zeros(len(start_ns))
    idle[1:] = start_ns[1:] - np.maximum.accumulate(end_ns)[:-1]
    at = marks[:, None] - np.arange(max(gap, 1))[None, :]
    scores = np.where(at >= 0, idle[np.clip(at, 0, None)], np.nan)
    median = np.nanmedian(np.where(np.isnan(scores).all(axis=0), 0, scores), axis=0)
    return int(np.argmax(median))


def repeated_steps(codes: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray | None:
    """[start, end) kernel indices of each repetition of the whole sequence, or None when it does not repeat.

    The anchor is the regular code with the longest median gap that still covers most of the sequence
    (count x gap >= 80% of it): the step's rarest kernel (embedding, sampling). Each step then starts the same
    number of kernels before its anchor: the offset where the GPU idles longest, in the median over steps
    (the host work between iterations).
    """
    codes = period.dense(codes)
    stats = period.code_stats(codes)
    n = len(codes)
    ok = (stats.count >= 2) & (stats.regular_share >= 0.75) & (stats.count * stats.median_gap >= 0.8 * n)
    ok &= stats.median_gap >= 2
    if not ok.any():
        return None
    anchor = int(np.flatnonzero(ok)[np.argmax(stats.median_gap[ok])])
    marks = np.flatnonzero(codes == anchor)
    starts = np.clip(marks - _offset(marks, start_ns, end_ns, int(stats.median_gap[anchor])), 0, n)
    bounds = np.stack([starts, np.append(starts[1:], n)], axis=1)
    unit = codes[bounds[1, 0] : bounds[1, 1]] if len(bounds) > 1 else codes[bounds[0, 0] : bounds[0, 1]]
    precision, recall = period.similarity(codes, bounds, unit)
    if len(bounds) < 2 or np.median(precision) < 0.8 or np.median(recall) < 0.8:
        return None
    return bounds
