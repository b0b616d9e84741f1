"""The why table: planted causes recovered to the ns, and causes that add up on every real pair of sample traces."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import plant_causes
import pytest
from conftest import SAMPLES

import traceview
import traceview.api
from traceview import sqllib
from traceview.why import CAUSES

TOLERANCE_US = 0.01


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, plant_causes.Truth]:
    out = tmp_path_factory.mktemp("planted")
    truth = plant_causes.plant(SAMPLES / "eager.pt.trace.json.gz", out / "a.json", out / "b.json")
    for side in "ab":
        traceview.ingest([out / f"{side}.json"], out / f"{side}.db")
    return out / "a.db", out / "b.db", truth


def expected_us(truth: plant_causes.Truth, db: Path) -> dict[tuple[int, str], float]:
    """(layer, cause) -> the planted change, µs: the mean over the steps the diff compares (not warm-up)."""
    with duckdb.connect(str(db), read_only=True) as con:
        steps = {r[0] for r in con.execute("SELECT step FROM steps WHERE NOT warmup").fetchall()}
    return {
        (layer, cause): statistics.mean(ns for step, ns in per_step.items() if step in steps) / 1e3
        for cause, layers in truth.items()
        for layer, per_step in layers.items()
    }


def test_planted_causes_are_recovered(planted: tuple[Path, Path, plant_causes.Truth]) -> None:
    a, b, truth = planted
    expected = expected_us(truth, a)
    assert {cause for _, cause in expected} == {
        "kernels_removed",
        "same_kernels",
        "idle_gaps",
        "exposed_comm",
        "kernels_added",
    }
    why = traceview.api.diff(a, b).why
    assert [row["layer"] for row in why] == list(range(8))
    for row in why:
        for cause in CAUSES:
            planted_us = expected.get((row["layer"], cause), 0.0)
            assert row["causes"][cause] == pytest.approx(planted_us, abs=TOLERANCE_US), (row["layer"], cause)
        assert row["residual_us"] == 0


def test_communication_moved_off_the_compute_stream_is_hidden(planted: tuple[Path, Path, plant_causes.Truth]) -> None:
    a, b, _ = planted
    row = traceview.api.diff(b, a).why[plant_causes.PLAN.comm_layer]
    assert row["causes"]["exposed_comm"] == pytest.approx(-plant_causes.PLAN.comm_ns / 1e3, abs=TOLERANCE_US)
    assert "communication hidden" in row["sentence"]


@pytest.fixture(scope="module")
def sample_dbs(ingested: Callable[[Path], Path]) -> dict[str, Path]:
    sources = {
        f"{mode}{suffix}": SAMPLES / f"{mode}{ext}"
        for mode in ("eager", "compiled", "graph")
        for suffix, ext in (("", ".pt.trace.json.gz"), ("_nsys", ".sqlite"))
    }
    return {name: ingested(source) for name, source in sources.items()}


PAIRS = [
    ("eager", "compiled"),
    ("eager", "graph"),
    ("compiled", "graph"),
    ("eager_nsys", "graph_nsys"),
    ("eager", "eager_nsys"),
    ("compiled", "compiled_nsys"),
    ("graph", "graph_nsys"),
]


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_causes_add_up_on_every_real_pair(sample_dbs: dict[str, Path], a: str, b: str) -> None:
    why = traceview.api.diff(sample_dbs[a], sample_dbs[b]).why
    assert len(why) == 8
    for row in why:
        assert row["residual_us"] == 0
        assert sum(row["causes"].values()) == pytest.approx(row["span_delta_us"], abs=1e-9)
        assert row["span_b_us"] - row["span_a_us"] == pytest.approx(row["span_delta_us"], abs=0.002)
        assert row["busy_delta_us"] == pytest.approx(row["span_delta_us"] - row["causes"]["idle_gaps"], abs=1e-9)
        assert sum(row["idle_gaps_by_kind"].values()) == pytest.approx(row["causes"]["idle_gaps"], abs=1e-9)


def test_spans_are_the_layer_metrics_means(sample_dbs: dict[str, Path]) -> None:
    why = traceview.api.diff(sample_dbs["eager"], sample_dbs["graph"]).why
    for side, db in (("a", sample_dbs["eager"]), ("b", sample_dbs["graph"])):
        with duckdb.connect(str(db), read_only=True) as con:
            means = dict(
                con.execute(
                    "SELECT layer, avg(span_us) FROM layer_metrics JOIN steps USING (run_id, rank, step)"
                    " WHERE NOT warmup GROUP BY layer"
                ).fetchall()
            )
        assert {r["layer"]: r[f"span_{side}_us"] for r in why} == pytest.approx(means, abs=0.001)


def test_graph_replays_from_kineto_and_nsys_differ_by_almost_nothing(sample_dbs: dict[str, Path]) -> None:
    """Two recordings of the same CUDA-graph replay (Kineto and nsys): no cause reaches 1.5 µs of a ~100 µs layer,
    and the alignment keeps every kernel."""
    result = traceview.api.diff(sample_dbs["graph"], sample_dbs["graph_nsys"])
    assert all(abs(v) < 1.5 for row in result.why for v in row["causes"].values())
    assert not result.changes and {r["status"] for r in result.kernels} == {"kept"}


def test_eager_to_graph_is_idle_gaps_first(sample_dbs: dict[str, Path]) -> None:
    why = traceview.api.diff(sample_dbs["eager"], sample_dbs["graph"]).why
    for row in why:
        largest = min(row["causes"], key=lambda cause: row["causes"][cause])
        assert largest == "idle_gaps" and "idle gaps (host-bound)" in row["sentence"]
        assert row["causes"]["kernels_fused"] < 0 and row["kernels"]["fused"][0] > row["kernels"]["fused"][1]


def test_the_query_gives_the_same_table(tmp_path: Path) -> None:
    """layer_why over two runs of one database: the figures of the CLI's why list; its removed and added kernels
    hold what the CLI's alignment splits into fused, replaced, removed and added."""
    db = tmp_path / "both.db"
    for label, name in (("eager", "eager.pt.trace.json.gz"), ("graph", "graph.pt.trace.json.gz")):
        traceview.ingest([SAMPLES / name], db, traceview.IngestOptions(label=label))
    why = {r["layer"]: r for r in traceview.api.diff(db, label_a="eager", label_b="graph").why}
    with duckdb.connect(str(db), read_only=True) as con:
        sqllib.ensure_installed(con)
        result = con.execute("FROM layer_why(run_a := 'eager', run_b := 'graph')")
        columns = [d[0] for d in result.description]
        rows = [dict(zip(columns, r, strict=True)) for r in result.fetchall()]
    assert len(rows) == len(why) == 8
    for row in rows:
        cli = why[row["layer"]]
        assert row["residual_us"] == pytest.approx(0, abs=1e-6)
        for column in ("span_delta_us", "busy_delta_us"):
            assert row[column] == pytest.approx(cli[column], abs=0.002)
        for cause in ("idle_gaps", "exposed_comm"):
            assert row[f"{cause}_us"] == pytest.approx(cli["causes"][cause], abs=0.002)
        kernels = sum(
            cli["causes"][c]
            for c in ("same_kernels", "kernels_fused", "kernels_replaced", "kernels_removed", "kernels_added")
        )
        assert row["same_kernels_us"] + row["kernels_removed_us"] + row["kernels_added_us"] == pytest.approx(
            kernels, abs=0.005
        )


def test_json_why_list(planted: tuple[Path, Path, plant_causes.Truth]) -> None:
    a, b, _ = planted
    result = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "diff", str(a), str(b), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    why = json.loads(result.stdout)["why"]
    assert len(why) == 8
    for row in why:
        assert {"layer", "span_delta_us", "busy_delta_us", "causes"} <= set(row)
        assert set(row["causes"]) == set(CAUSES)
        assert sum(row["causes"].values()) == pytest.approx(row["span_delta_us"], abs=1e-9)


def test_identical_runs_print_no_kernel_rows(planted: tuple[Path, Path, plant_causes.Truth]) -> None:
    a, _, _ = planted
    out = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "diff", str(a), str(a)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert "kernels kept" in out and "│ kept" not in out
    assert out.count("no change larger than 0.5 µs") == 8
