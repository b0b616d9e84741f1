"""Steps of many ranks are found in a fixed number of statements, not a few per rank (issue 18: 3000 small
per-rank files spent 34 of 67 CPU-s in 7 statements per rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

import traceview
from traceview.segment import segment_run


class CountingConnection:
    """A DuckDB connection that counts the statements run through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        self.statements += 1
        return self.con.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)


def write_ranks(folder: Path, ranks: int) -> Path:
    """Per-rank files of 2 steps of 3 kernels each; even ranks annotate them as ProfilerStep#7 and #8."""
    folder.mkdir()
    for rank in range(ranks):
        events = []
        for step in range(2):
            t0 = 1000 + step * 500
            if rank % 2 == 0:
                events.append(
                    f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{7 + step}", "pid": 1, "tid": 1, '
                    f'"ts": {t0}, "dur": 400}}'
                )
            for k in range(3):
                corr, ts = 1 + step * 10 + k, t0 + 10 + k * 100
                events.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "k{k}", "pid": 0, "tid": 7, "ts": {ts + 5}, "dur": 50, '
                    f'"args": {{"device": 0, "stream": 7, "correlation": {corr}}}}}'
                )
                events.append(
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
                    f'"ts": {ts}, "dur": 2, "args": {{"correlation": {corr}}}}}'
                )
        head = f'"distributedInfo": {{"rank": {rank}, "world_size": {ranks}}}'
        (folder / f"rank-{rank}.pt.trace.json").write_text(f'{{{head}, "traceEvents": [{", ".join(events)}]}}')
    return folder


def statements_and_steps(tmp_path: Path, ranks: int) -> tuple[int, list[tuple[int, int, str]]]:
    db = tmp_path / f"{ranks}.db"
    traceview.ingest([write_ranks(tmp_path / f"ranks{ranks}", ranks)], db)
    with duckdb.connect(str(db)) as con:
        counting = CountingConnection(con)
        con.execute("BEGIN")
        segment_run(counting, 1)  # type: ignore[arg-type]
        steps = con.execute("SELECT rank, step, method FROM steps ORDER BY rank, step").fetchall()
        con.execute("ROLLBACK")
    return counting.statements, steps


def test_segmentation_runs_as_many_statements_for_many_ranks_as_for_two(tmp_path: Path) -> None:
    few, few_steps = statements_and_steps(tmp_path, 2)
    many, many_steps = statements_and_steps(tmp_path, 40)
    assert many == few  # before: 56 statements for 2 ranks, 74 for 6, ~4.5 more per rank
    # even ranks: their ProfilerStep numbers; odd ranks: one forward pass (two layers of k0 k1 k2) is one step
    one_pair = [(0, 7, "annotation"), (0, 8, "annotation"), (1, 0, "passes")]
    assert few_steps == one_pair
    assert many_steps == [(r + rank, step, method) for rank in range(0, 40, 2) for r, step, method in one_pair]
