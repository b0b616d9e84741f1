"""Text from a trace or the command line printed as text: never read as rich markup, never acted on by the terminal.

Kernel names, device names and labels are data. `[/b]` in one must print as `[/b]` (rich would read it as a
closing tag and crash, or `[link=…]` would hide text); an escape sequence in one (set the window title, clear
the screen) must print as a visible escape, on stdout and in one-line errors alike.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from hostile_traces import traceview_cmd
from kineto_builder import KinetoTrace

MARKUP_LABEL = "[link=https://example.com]click[/link][reverse]X"
MARKUP_KERNEL = "gemm[/b]<float>"
MARKUP_DEVICE = "NVIDIA [/x] H200"
SET_TITLE = "\x1b]0;owned\x07"
CLEAR_SCREEN = "\x1b[2J"
C1_CSI = "\x9b2J"
# What the terminal must never receive raw: every C0 control but the newline that ends a line, DEL, C1 controls.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def traceview(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(traceview_cmd(*args), capture_output=True, text=True, timeout=300, check=False)


def layered_trace(path: Path, kernel: str, device: str = "NVIDIA H200") -> Path:
    """Three ProfilerSteps of two layers, each layer one `kernel` and one all-reduce, on `device`."""
    trace = KinetoTrace()
    trace.metadata["deviceProperties"] = [{"id": 0, "name": device}]
    for step in range(3):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}"):
                    trace.launch_kernel(kernel)
                    trace.launch_kernel("ncclKernel_AllReduce_RING_LL_Sum_float")
    return trace.write(path)


def assert_ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def assert_printable(result: subprocess.CompletedProcess[str]) -> None:
    for stream in (result.stdout, result.stderr):
        assert not RAW_CONTROL.search(stream), repr(stream[:2000])


def test_markup_in_a_label_a_device_name_and_a_kernel_name_prints_as_text(tmp_path: Path) -> None:
    trace = layered_trace(tmp_path / "markup.json", MARKUP_KERNEL, MARKUP_DEVICE)
    db = tmp_path / "markup.db"
    assert MARKUP_LABEL in assert_ok(traceview("ingest", trace, "-o", db, "--label", MARKUP_LABEL))
    info = assert_ok(traceview("info", db))
    assert MARKUP_LABEL in info and MARKUP_DEVICE in info
    assert "gemm[/b]" in assert_ok(traceview("diff", db, db))  # the short name: templates cut off
    for fmt in ("table", "csv", "markdown"):
        assert MARKUP_KERNEL in assert_ok(traceview("sql", db, "SELECT DISTINCT name FROM gpu_activity", "-f", fmt))
    assert MARKUP_LABEL in assert_ok(traceview("layers", db))
