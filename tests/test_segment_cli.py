"""`traceview layers` and `traceview segment`: exit codes, stdout per format, one stderr line per error."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from segment_fixtures import Model, random_names, write_trace

import traceview


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def layered_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("layers")
    trace = write_trace(tmp / "t.json.gz", Model(layers=4, dense=1), steps=3, graph=True)
    traceview.ingest([trace.path], tmp / "run.db")
    return tmp / "run.db"


def test_layers_json_is_one_object_per_instance(layered_db: Path) -> None:
    done = cli("layers", layered_db, "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 3 * 4
    keys = {"rank", "step", "layer", "kernels", "span_us", "busy_us", "comm_us", "overlap_us", "exposed_comm_us"}
    assert keys | {"method"} <= set(rows[0])
    assert [r["kernels"] for r in rows[:4]] == [28, 38, 38, 38]
    assert {r["method"] for r in rows} == {"period"}
    assert "inferred" in done.stderr


def test_layers_table_and_csv(layered_db: Path) -> None:
    table = cli("layers", layered_db)
    assert table.returncode == 0 and table.stderr == ""
    assert "layers found by period" in table.stdout and "per step" in table.stdout
    rows = list(csv.DictReader(io.StringIO(cli("layers", layered_db, "-f", "csv").stdout)))
    assert len(rows) == 12 and rows[0]["layer"] == "0"


def test_segment_reruns_with_a_forced_method(layered_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    copy.write_bytes(layered_db.read_bytes())
    done = cli("segment", copy, "--method", "period", "-f", "json")
    assert done.returncode == 0, done.stderr
    assert {k: json.loads(done.stdout)[0][k] for k in ("layers", "step_method", "layer_method")} == {
        "layers": 12,
        "step_method": "annotation",
        "layer_method": "period",
    }


def test_a_forced_method_that_finds_no_layers_is_refused_and_keeps_the_layers(layered_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    copy.write_bytes(layered_db.read_bytes())
    before = cli("layers", copy, "-f", "json").stdout
    done = cli("segment", copy, "--method", "annotation", "-f", "json")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: {copy}: --method annotation found no layers in run t (no layers found: no kernel ran inside a layer "
        "range (model.layers.N, or --layer-pattern)) — the layers found before are kept; try --method auto or another "
        "method"
    ]
    assert cli("layers", copy, "-f", "json").stdout == before != "[]"


def test_no_structure_is_said_not_invented(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", sequences=[random_names(300, seed=s) for s in range(2)], steps=2)
    traceview.ingest([trace.path], tmp_path / "run.db")
    done = cli("layers", tmp_path / "run.db")
    assert done.returncode == 0
    assert "no repeating kernel structure in 2 step(s): no layers written" in done.stdout
    assert "per layer" not in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("layers", "missing.db"), "no such database"),
        (("segment", "missing.db"), "no such database"),
    ],
)
def test_errors_are_one_stderr_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = cli(*args[:1], tmp_path / args[1], *args[2:])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr and done.stderr.startswith("error: ")


def test_unknown_run_label_is_one_stderr_line(layered_db: Path) -> None:
    done = cli("layers", layered_db, "--run", "nope")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "no run labelled 'nope'" in done.stderr
