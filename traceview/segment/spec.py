"""Speculative decoding: in each step, the drafter's forward passes told apart from the target's verify pass.

Reads the staged step kernels `_seg_k` (with their integer name codes) and `_seg_pass_drafts` (the drafter that the
forward passes of a trace without step annotations told apart, segment/steps.py). Writes temp table
`_seg_draft_of(activity_id, draft_pass)`: the activities of the drafter, with its forward pass within the step.

A step of speculative decoding holds the drafter's passes (a draft model, an MTP head or the target's own first layers,
one pass per proposed token) and one verify pass of the target. Three sources, in order:
1. kernels launched inside an engine's drafting range (ENGINE_DRAFT_RANGES: vLLM v1), their passes told apart by
   their glue (passes.drafter_passes);
2. the drafter the forward passes of the whole trace told apart, when they made the steps (passes.find_passes);
3. else each step's own passes (passes.step_drafts): the pass of the most layers is the target's; passes of fewer
   layers are the drafter's. A step whose passes are all alike (a training step's forward and backward, two
   micro-batches) has no drafter, and neither has a run where fewer than half of the steps, or fewer than MIN_STEPS,
   show one (a prefill's runs of layers of several kinds look like passes).
Kernels of other streams, memory copies and sets join the drafter's pass whose GPU span holds their start.
"""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pandas as pd

from ..db import execute_with, has_rows
from . import passes

MIN_STEPS = 2  # steps that must show a drafter, and at least half of them, for the run to have one
SAMPLED = 5  # steps searched first, spread over the run
MIN_VERIFY_LAYERS = passes.MIN_TARGET_LAYERS  # layers of a target's verify pass at least
# vLLM v1 wraps each step's drafting in this record_function range (gpu_model_runner.py, propose_draft_token_ids:
# the EAGLE, MTP, draft-model and n-gram proposers alike; the target's verify is `gpu_model_runner: forward`).
# SGLang's speculative workers open no range of their own: their drafter is found from the kernels.
ENGINE_DRAFT_RANGES = ("gpu_model_runner: draft",)


def find_drafts(con: duckdb.DuckDBPyConnection, run_id: int) -> int:
    """Fill `_seg_draft_of`; the number of steps that hold a drafter. Kernels launched inside an engine's drafting
    range (ENGINE_DRAFT_RANGES) are the drafter's; the ranks whose steps are the verifies that the forward passes
    found (`_seg_pass_drafts`, segment/steps.py) keep the drafter those passes told apart; the others' steps are
    searched one by one."""
    _engine_drafts(con, run_id)
    known = con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _seg_known_drafts AS
        SELECT p.activity_id, p.draft_pass, k.rank, k.step FROM _seg_pass_drafts p JOIN _seg_k k USING (activity_id);
        SELECT count(DISTINCT (rank, step)) FROM _seg_known_drafts
        """
    ).fetchall()[0][0]
    data = con.execute(
        """
        WITH streams AS (
            SELECT rank, step, stream_id, count(*) AS n FROM _seg_k WHERE kind = 'kernel'
              AND rank NOT IN (SELECT rank FROM _seg_known_drafts) GROUP BY ALL
        ), main AS (
            SELECT rank, step, arg_max(stream_id, n) AS stream_id FROM streams GROUP BY ALL
        )
        SELECT k.rank, k.step, k.activity_id, k.code
        FROM _seg_k k JOIN main m
          ON k.rank = m.rank AND k.step = m.step AND k.stream_id IS NOT DISTINCT FROM m.stream_id
        WHERE k.kind = 'kernel'
        ORDER BY k.rank, k.step, k.start_ns, k.activity_id
        """
    ).fetchnumpy()
    ids, draft, steps = _drafts_of_steps(data)
    if steps < MIN_STEPS or steps < len(set(zip(data["rank"], data["step"], strict=True))) / 2:
        ids, draft, steps = ids[:0], draft[:0], 0  # a drafter runs at every step: a few passes alike are not one
    frame = pd.DataFrame({"activity_id": ids, "draft_pass": draft})
    execute_with(
        con,
        "_seg_draft_frame",
        frame,
        """CREATE OR REPLACE TEMP TABLE _seg_draft_of AS
           SELECT * FROM _seg_draft_frame UNION ALL SELECT activity_id, draft_pass FROM _seg_known_drafts""",
    )
    if steps or known:  # else no drafter: nothing to join (a pass over every activity, 0.5 CPU-s at 3 M)
        _join_by_span(con)
    return steps + known


def _engine_drafts(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Add to `_seg_pass_drafts` the kernels launched inside an engine's drafting range, each with its drafter pass
    in the step (passes.drafter_passes, on the kernels of the step's main stream in order). Without such ranges,
    nothing (their join with every kernel took 0.9 CPU-s at 3 M kernels for none)."""
    params = {"run": run_id, "names": list(ENGINE_DRAFT_RANGES)}
    if not has_rows(con, "SELECT 1 FROM cpu_ranges WHERE run_id = $run AND list_contains($names, name)", params):
        return
    data = con.execute(
        """
        WITH ranges AS (
            SELECT pid, tid, start_ns, end_ns FROM cpu_ranges WHERE run_id = $run AND list_contains($names, name)
        ), drafted AS (  -- kernels whose launch call is inside a drafting range of its thread
            SELECT DISTINCT k.rank, k.step, k.activity_id, k.code, k.stream_id, k.start_ns
            FROM _seg_k k JOIN ranges r ON k.l_pid = r.pid AND k.l_tid = r.tid AND k.l_start >= r.start_ns
                                       AND k.l_start < r.end_ns
            WHERE k.kind = 'kernel'
        ), main AS (
            SELECT rank, step, stream_id FROM drafted GROUP BY rank, step, stream_id
            QUALIFY row_number() OVER (PARTITION BY rank, step ORDER BY count(*) DESC, stream_id NULLS LAST) = 1
        )
        SELECT d.rank, d.step, d.activity_id, d.code FROM drafted d JOIN main m USING (rank, step, stream_id)
        ORDER BY d.rank, d.step, d.start_ns, d.activity_id
        """,
        params,
    ).fetchnumpy()
    ids, codes = np.asarray(data["activity_id"], dtype=np.int64), np.asarray(data["code"], dtype=np.int64)
    key = np.asarray(data["rank"], dtype=np.int64) * 2**32 + np.asarray(data["step"], dtype=np.int64)
    edges = [0, *(np.flatnonzero(np.diff(key)) + 1), len(ids)] if len(ids) else []
    draft = np.concatenate([passes.drafter_passes(codes[a:b]) for a, b in itertools.pairwise(edges)] or [ids[:0]])
    frame = pd.DataFrame({"activity_id": ids, "draft_pass": draft, "rank": np.asarray(data["rank"], dtype=np.int64)})
    execute_with(
        con,
        "_seg_engine_frame",
        frame,
        """
        -- the engine's ranges replace what the forward passes told apart on the same ranks
        DELETE FROM _seg_pass_drafts WHERE activity_id IN (
            SELECT activity_id FROM _seg_k WHERE rank IN (SELECT rank FROM _seg_engine_frame));
        INSERT INTO _seg_pass_drafts SELECT activity_id, draft_pass FROM _seg_engine_frame
        """,
    )


def _drafts_of_steps(data: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """The drafter's kernels of every step (identical steps solved once): their ids, passes, and how many steps
    hold a drafter. SAMPLED steps spread over the run are searched first: when none of them holds a drafter, no
    other step is searched (a run with a drafter has one in at least half of its steps)."""
    ids, codes = np.asarray(data["activity_id"], dtype=np.int64), np.asarray(data["code"], dtype=np.int64)
    key = np.asarray(data["rank"], dtype=np.int64) * 2**32 + np.asarray(data["step"], dtype=np.int64)
    edges = np.flatnonzero(np.diff(key)) + 1 if len(key) else np.array([], dtype=np.int64)
    bounds = list(itertools.pairwise([0, *edges, len(ids)])) if len(ids) else []
    cache: dict[bytes, np.ndarray | None] = {}

    def drafts(lo: int, hi: int) -> np.ndarray | None:
        digest = codes[lo:hi].tobytes()
        if digest not in cache:
            cache[digest] = passes.step_drafts(codes[lo:hi])
        return cache[digest]

    sample = [bounds[i] for i in np.linspace(0, len(bounds) - 1, min(SAMPLED, len(bounds))).astype(int)]
    if all(drafts(lo, hi) is None for lo, hi in sample):
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64), 0
    found = [(lo, hi, draft_of) for lo, hi in bounds if (draft_of := drafts(lo, hi)) is not None]
    mine = [draft_of != passes.NO_DRAFT for _, _, draft_of in found]
    kept_ids = [ids[lo:hi][m] for (lo, hi, _), m in zip(found, mine, strict=True)]
    kept_passes = [draft_of[m] for (_, _, draft_of), m in zip(found, mine, strict=True)]
    return np.concatenate(kept_ids), np.concatenate(kept_passes), len(found)


def _join_by_span(con: duckdb.DuckDBPyConnection) -> None:
    """The step's other activities (other streams, copies, sets) join the drafter's pass whose span holds their
    start."""
    con.execute(
        """
        INSERT INTO _seg_draft_of
        WITH spans AS (
            SELECT k.rank, k.step, d.draft_pass, min(k.start_ns) AS lo, max(k.end_ns) AS hi
            FROM _seg_draft_of d JOIN _seg_k k USING (activity_id) GROUP BY ALL
        )
        SELECT k.activity_id, s.draft_pass
        FROM (SELECT * FROM _seg_k WHERE activity_id NOT IN (SELECT activity_id FROM _seg_draft_of)) k
        ASOF JOIN spans s ON k.rank = s.rank AND k.step = s.step AND k.start_ns >= s.lo
        WHERE k.start_ns < s.hi
        """
    )
