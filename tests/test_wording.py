"""What the commands say around the numbers (issue 26): every selection or method that finds nothing says why, two
runs that share a label are told apart, and the same thing is worded the same way in every command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import HTA, SAMPLES
from hostile_traces import assert_one_line_error, traceview
from kineto_builder import KinetoTrace

from traceview import api as traceview_api

CPU_ONLY = HTA / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _layered(tmp_path: Path, name: str, annotated: bool = True) -> Path:
    """A database of 3 eager steps of 2 layers (model.layers.N ranges unless not `annotated`), labelled `name`."""
    trace = KinetoTrace()
    for step in range(3):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}" if annotated else "forward"):
                    for kernel in ("gemm", "norm", "act"):
                        trace.launch_kernel(kernel)
    folder = tmp_path / name
    folder.mkdir(parents=True)
    db = folder / "run.db"
    result = traceview("ingest", trace.write(folder / f"{name}.json"), "-o", db)
    assert result.returncode == 0, result.stderr
    return db


@pytest.mark.parametrize(
    ("annotated", "reason"),
    [
        (True, "no CUDA graph was replayed"),
        (False, "the trace has no layer ranges (model.layers.N, or --layer-pattern)"),
    ],
)
def test_segment_by_graph_says_why_it_found_no_layers(tmp_path: Path, annotated: bool, reason: str) -> None:
    db = _layered(tmp_path, "eager", annotated)
    result = traceview("segment", db, "--method", "graph")
    assert result.returncode == 2, result.stderr
    # One line with the reason; the run is named by its label, as every other command names it.
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {db}: --method graph found no layers in run eager (no layers found: {reason}"), line
    assert "run 1" not in result.stderr


def test_a_cpu_only_trace_says_what_is_missing_not_ingest_again(tmp_path: Path) -> None:
    db = tmp_path / "cpu.db"
    assert traceview("ingest", CPU_ONLY, "-o", db).returncode == 0
    layers = traceview("layers", db)
    assert layers.stdout.splitlines()[:2] == [
        "rank-34.Jul_15_10_52_41.1074: no layers",
        "note: no steps found: the trace holds no GPU kernels",
    ]
    assert "by nothing" not in layers.stdout and "no method" not in layers.stdout
    plot = traceview("plot", db, "-o", tmp_path / "cpu.png")
    line = assert_one_line_error(plot, "rank-34.Jul_15_10_52_41.1074", "no GPU activity", "CPU-only")
    assert "again" not in line


def test_info_shows_the_warning_texts_once(tmp_path: Path) -> None:
    db = tmp_path / "cpu.db"
    assert traceview("ingest", CPU_ONLY, "-o", db).returncode == 0
    result = traceview("info", db)
    tables = result.stdout.split("\n\n") if "\n\n" in result.stdout else [result.stdout]
    text = "\n".join(tables)
    assert "\nwarnings\n" in text and "CPU-only trace (no GPU kernels)" in text
    assert text.count("CPU-only trace (no GPU kernels)") == 1  # not again under "data loss"


def test_two_runs_sharing_a_label_are_told_apart(tmp_path: Path) -> None:
    a, b = _layered(tmp_path / "a", "eager"), _layered(tmp_path / "b", "eager")
    before, after = a.rename(a.with_name("before.db")), b.rename(b.with_name("after.db"))
    result = traceview("diff", before, after)
    assert result.returncode == 0, result.stderr
    headline = result.stdout.splitlines()[0]
    assert headline.startswith("eager (before.db) → eager (after.db) (steady steps): per layer:"), headline
    summary = json.loads(traceview("diff", before, after, "-f", "json").stdout)["summary"]
    assert (summary["a"], summary["b"]) == ("eager (before.db)", "eager (after.db)")


def test_steps_without_a_phase_are_steady_steps_everywhere(tmp_path: Path) -> None:
    db = _layered(tmp_path, "eager")
    diff = traceview("diff", db, db, "--a", "eager", "--b", "eager")
    assert "(unknown steps)" not in diff.stdout and "eager (run 1) → eager (run 1) (steady steps)" in diff.stdout
    report = tmp_path / "report.html"
    assert traceview("report", db, "-o", report).returncode == 0
    assert "unknown steps" not in report.read_text() and "steady steps" in report.read_text()


def test_the_report_leads_with_the_speedup_and_hides_where_the_trace_was(tmp_path: Path) -> None:
    a, b = (_layered(tmp_path, name) for name in ("eager", "fused"))
    page = tmp_path / "report.html"
    assert traceview("report", a, b, "-o", page).returncode == 0
    text = page.read_text()
    assert str(tmp_path) not in text and "eager.json" in text
    layers = text[text.index("<caption>per layer (medians across steps and ranks") :]
    heads = re.findall(r"<th>([^<]+)</th>", layers[: layers.index("</thead>")])
    assert heads[:2] == ["layer", "speedup"] and "comm_us_a" not in heads  # the rest are folded away
    assert "<summary>every column</summary>" in text
    run = text.split("per layer index")[1]  # one vocabulary: the columns of `traceview layers`
    heads = re.findall(r"<th>([^<]+)</th>", run[: run.index("</thead>")])
    assert {"busy_us", "comm_us", "exposed_comm_us"} <= set(heads) and "compute_only_us" not in heads
    assert traceview("report", a, b, "-o", page, "--full-paths").returncode == 0
    assert str(tmp_path) in page.read_text()


@pytest.mark.parametrize("name", ["graph.parquet.tar.gz", "graph.json.gz"])
def test_a_tar_of_a_parquet_export_says_untar_it(tmp_path: Path, name: str) -> None:
    """Named as an archive, or not (its first block says it is a tar): one line that says to untar it."""
    archive = tmp_path / name
    archive.write_bytes((SAMPLES / "graph.parquet.tar.gz").read_bytes())
    result = traceview("ingest", archive, "-o", tmp_path / "run.db")
    assert_one_line_error(result, archive, "an archive, not a trace", f"untar it (tar -xf {name})")
    assert not (tmp_path / "run.db").exists()


def test_devices_come_from_device_properties_when_the_ids_differ(tmp_path: Path) -> None:
    """A ROCm trace lists its one visible device as id 0 while its kernels run on device 9: still the MI300X."""
    trace = KinetoTrace()
    trace.metadata["deviceProperties"] = [{"id": 0, "name": "AMD Instinct MI300X"}]
    with trace.cpu_range("ProfilerStep#1"):
        trace.launch_kernel("gemm", device=9)
    summary = traceview_api.ingest([trace.write(tmp_path / "t.json")], tmp_path / "run.db")
    assert summary.device_names == ("AMD Instinct MI300X",)
