"""Ingest progress moves forward and names its stage; `traceview --version` says the version."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from conftest import SAMPLES
from rich.console import Console
from rich.progress import Progress

import traceview
from traceview.progress import StageProgress
from traceview.version import __version__


def test_ingest_reports_its_stages_in_order(tmp_path: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    options = traceview.IngestOptions(progress=lambda what, done, total: calls.append((what, done, total)))
    traceview.ingest([SAMPLES / "eager.pt.trace.json.gz"], tmp_path / "run.db", options)
    stages = list(dict.fromkeys(what for what, _, _ in calls))
    assert stages == ["reading eager.pt.trace.json.gz", "tables", "nesting", "segmentation", "commit"]


def test_the_display_never_moves_backwards_and_names_the_running_stage() -> None:
    bar = Progress(console=Console(file=io.StringIO()))
    progress = StageProgress(bar)
    mb = 1 << 20
    furthest = 0
    for done in (10 * mb, 71 * mb, 34 * mb, 80 * mb, 300 * mb, 290 * mb):  # two readers of one file, in turn
        progress("reading big.json", done, 300 * mb)
        furthest = max(furthest, done)
        assert bar.tasks[0].completed == furthest
    completed = [bar.tasks[0].completed]
    progress("tables", 0, 0)
    progress("segmentation", 0, 0)
    assert [t.description for t in bar.tasks] == [
        "reading big.json",
        "tables: building the schema's tables",
        "segmentation: steps, layers, busy time",
    ]
    assert completed == [300 * mb] and bar.tasks[0].finished and bar.tasks[1].finished
    assert not bar.tasks[2].finished


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"traceview {__version__}"
