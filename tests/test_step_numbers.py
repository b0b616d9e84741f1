"""One step numbering in every command: `steps.step`, whatever numbers a trace uses (here 3, 4, 5).

`ingest --steps`, `overlap --steps`, `plot --step`, `layers`, `export` and `diff` all speak of the same
numbers, and a selection that matches no step is one line on stderr with exit code 2 (never an empty result
with exit 0, never an empty run written).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import layered_db
import pytest
from kineto_builder import KinetoTrace
from synthetic import add_kernels, database, segment

import traceview

STEPS = (3, 4, 5)  # the trace's own numbers: not 0-based


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceview.cli", *map(str, args)], capture_output=True, text=True, check=False
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0]


@pytest.fixture(scope="module")
def numbered_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """layered_db's steps (4 layers with an all-reduce each), numbered 3, 4, 5; step 3 is warm-up."""
    path = tmp_path_factory.mktemp("steps") / "run.db"
    con = database(path)
    for index, step in enumerate(STEPS):
        add_kernels(con, [dataclasses.replace(k, step=step) for k in layered_db.step_kernels(index)])
    segment(con, warmup_steps=(3,))
    con.execute("UPDATE runs SET trace_start_ns = ?", [layered_db.T0_NS])
    con.execute("CHECKPOINT")
    con.close()
    return path


def test_layers_and_export_show_the_steps_numbers(numbered_db: Path, tmp_path: Path) -> None:
    report = traceview.api.layers(numbered_db)
    assert sorted({row["step"] for row in report.per_step}) == list(STEPS)
    traceview.api.export(numbered_db, tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert sorted(e["args"]["step"] for e in events if e.get("cat") == "step") == list(STEPS)


def test_overlap_selects_steps_by_their_numbers(numbered_db: Path) -> None:
    result = run_cli("overlap", numbered_db, "--steps", "4-5", "--format", "json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["time_window"] == "steps 4-5"
    per_layer_comm_us = 15  # layered_db.LAYER_SHAPE: one all-reduce of 15 µs per layer
    assert row["comm_us"] == pytest.approx(2 * layered_db.LAYERS * per_layer_comm_us)


@pytest.mark.parametrize("steps", ["0-2", "6", "9-12"])
def test_overlap_steps_selecting_nothing_is_an_error(numbered_db: Path, steps: str) -> None:
    assert_one_line_error(run_cli("overlap", numbered_db, "--steps", steps), f"--steps {steps}", "3-5")


def test_plot_step_is_the_step_number(numbered_db: Path, tmp_path: Path) -> None:
    result = run_cli("plot", numbered_db, "--step", "5", "-o", tmp_path / "t.png")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "t.png").stat().st_size > 0


@pytest.mark.parametrize("kind", ["timeline", "layers"])
def test_plot_step_selecting_nothing_is_an_error(numbered_db: Path, tmp_path: Path, kind: str) -> None:
    result = run_cli("plot", numbered_db, "--kind", kind, "--step", "0", "-o", tmp_path / "t.png")
    assert_one_line_error(result, "--step 0", "3-5")
    assert not (tmp_path / "t.png").exists()


def profiler_step_trace(path: Path, numbers: tuple[int, ...] = (7, 8, 9)) -> Path:
    """ProfilerStep#N ranges, each with two annotated layers of two kernels."""
    trace = KinetoTrace()
    for n in numbers:
        with trace.cpu_range(f"ProfilerStep#{n}"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}"):
                    trace.launch_kernel("gemm", dur_us=5)
                    trace.launch_kernel("norm", dur_us=2)
    return trace.write(path)


def test_ingest_steps_selecting_nothing_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    trace = profiler_step_trace(tmp_path / "t.json.gz")
    result = run_cli("ingest", trace, "-o", tmp_path / "run.db", "--steps", "2-3")
    assert_one_line_error(result, "--steps 2-3", "7-9")
    assert not (tmp_path / "run.db").exists()


def test_ingest_steps_keeps_the_chosen_step(tmp_path: Path) -> None:
    trace = profiler_step_trace(tmp_path / "t.json.gz")
    summary = traceview.ingest([trace], tmp_path / "run.db", traceview.IngestOptions(steps=(8,)))
    assert summary.kernels == 4


def test_profiler_step_numbers_are_the_step_numbers_everywhere(tmp_path: Path) -> None:
    trace = profiler_step_trace(tmp_path / "t.json.gz")
    traceview.ingest([trace], tmp_path / "run.db", traceview.IngestOptions(steps=(8, 9)))
    assert sorted({row["step"] for row in traceview.api.layers(tmp_path / "run.db").per_step}) == [8, 9]
    result = run_cli("overlap", tmp_path / "run.db", "--steps", "9", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["time_window"] == "step 9"
