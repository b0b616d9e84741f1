"""Layer ranges that enclose a range of another layer on their lane are dropped (segment/annotation.py
`_drop_enclosing`): checked against every pair of ranges on random lanes, with equal starts, equal ends and NULL
lanes."""

from __future__ import annotations

import random

import duckdb
import pytest

from traceview.segment.annotation import _drop_enclosing


def enclosing_by_pairs(rows: list[tuple]) -> set[int]:
    """Truth: ids of ranges with another range of another layer on the same lane inside them (ends included)."""
    return {
        o[0]
        for o in rows
        for i in rows
        if i[1:4] == o[1:4] and i[4] >= o[4] and i[5] <= o[5] and i[6] != o[6] and i[0] != o[0]
    }


@pytest.mark.parametrize("seed", range(40))
def test_drop_enclosing_matches_every_pair(seed: int) -> None:
    rnd = random.Random(seed)
    rows = []
    for range_id in range(rnd.randint(0, 60) if seed else 0):
        start = rnd.randint(0, 30)
        lane = (rnd.choice([0, 1]), rnd.choice([None, 5]), rnd.choice([None, 7, 8]))
        rows.append((range_id, *lane, start, start + rnd.randint(1, 12), rnd.randint(0, 3)))
    con = duckdb.connect()
    con.execute(
        "CREATE TEMP TABLE _seg_lanes (range_id BIGINT, rank INTEGER, lane_a BIGINT, lane_b BIGINT, start_ns BIGINT, "
        "end_ns BIGINT, layer INTEGER, label VARCHAR)"
    )
    for row in rows:
        con.execute("INSERT INTO _seg_lanes VALUES (?, ?, ?, ?, ?, ?, ?, 'x')", row)
    removed = _drop_enclosing(con)
    truth = enclosing_by_pairs(rows)
    kept = {r[0] for r in con.execute("SELECT range_id FROM _seg_lanes").fetchall()}
    assert removed == len(truth)
    assert kept == {r[0] for r in rows} - truth
