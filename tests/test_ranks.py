"""Ranks are not hidden: `layers --by-rank`, `diff --by-rank`, and the median view saying how far ranks spread.

Built by construction: layered_db's layer on rank 0, and on rank 1 the same layer whose all-reduce runs 2.5x
longer (a rank that waits for its peer), so per layer (µs):

    rank 0:  compute [0,10) [12,20) [30,40)   comm [15, 30)    comm 15    exposed 10  span 40    busy 38
    rank 1:  compute [0,10) [12,20) [30,40)   comm [15, 52.5)  comm 37.5  exposed 22.5 span 52.5 busy 50.5

so the ranks differ most in communication: 37.5 / 15 = 2.50x (exposed 2.25x, busy 1.33x, span 1.31x).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import layered_db
import pytest
from synthetic import add_kernels, add_run, database, segment

import traceview

RANK_1_COMM_US = 37.5
PER_RANK = {
    0: {"comm_us": 15.0, "exposed_comm_us": 10.0, "span_us": 40.0, "busy_us": 38.0},
    1: {"comm_us": 37.5, "exposed_comm_us": 22.5, "span_us": 52.5, "busy_us": 50.5},
}


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


def two_rank_kernels(step: int, scale: float = 1.0) -> list:
    kernels = list(layered_db.step_kernels(step, scale))
    for k in layered_db.step_kernels(step, scale):
        if k.category == "comm":
            k = dataclasses.replace(k, end_ns=k.start_ns + round(RANK_1_COMM_US * 1000 * scale))
        kernels.append(dataclasses.replace(k, rank=1))
    return kernels


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run `base`, and run `faster` (every time halved) in one database; step 0 is warm-up."""
    path = tmp_path_factory.mktemp("ranks") / "ranks.db"
    con = database(path, runs=())
    for label, scale in (("base", 1.0), ("faster", 0.5)):
        run_id = add_run(con, label)
        for step in range(layered_db.STEPS):
            add_kernels(con, two_rank_kernels(step, scale), run_id=run_id)
        segment(con, run_id=run_id, warmup_steps=(0,))
    con.close()
    return path


def test_layers_by_rank_gives_each_ranks_medians(two_ranks: Path) -> None:
    result = run_cli("layers", two_ranks, "--run", "base", "--by-rank", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 2 * layered_db.LAYERS
    for row in rows:
        assert row["instances"] == layered_db.STEPS - 1 and row["kernels"] == layered_db.KERNELS_PER_LAYER
        for key, value in PER_RANK[row["rank"]].items():
            assert row[key] == pytest.approx(value), (row, key)


def test_the_median_view_says_how_far_ranks_spread(two_ranks: Path) -> None:
    result = run_cli("layers", two_ranks, "--run", "base")
    assert result.returncode == 0, result.stderr
    assert "rank_spread" in result.stdout
    assert result.stdout.count("comm_us 2.50x") == layered_db.LAYERS
    with traceview.connect(two_ranks) as con:
        spread = con.execute(
            "SELECT DISTINCT ranks, comm_min_us, comm_max_us, widest FROM layer_rank_spread WHERE run_id = 1"
        ).fetchall()
    assert spread == [(2, 15.0, 37.5, "comm_us 2.50x")]


def test_diff_by_rank(two_ranks: Path) -> None:
    result = run_cli("diff", two_ranks, "--a", "base", "--b", "faster", "--by-rank", "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    rows = document["by_rank"]
    assert sorted((r["layer"], r["rank"]) for r in rows) == [(la, r) for la in range(layered_db.LAYERS) for r in (0, 1)]
    for row in rows:
        assert row["comm_us_a"] == pytest.approx(PER_RANK[row["rank"]]["comm_us"])
        assert row["comm_us_b"] == pytest.approx(PER_RANK[row["rank"]]["comm_us"] / 2)
        assert row["speedup"] == pytest.approx(2.0)
    assert {(r["rank_spread_a"], r["rank_spread_b"]) for r in document["layers"]} == {
        ("comm_us 2.50x", "comm_us 2.50x")
    }
    table = run_cli("diff", two_ranks, "--a", "base", "--b", "faster", "--by-rank")
    assert "per layer and rank, A → B" in table.stdout and "comm_us 2.50x / comm_us 2.50x" in table.stdout
