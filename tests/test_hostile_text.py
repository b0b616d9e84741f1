"""Text from a trace or the command line printed as text: never read as rich markup, never acted on by the terminal.

Kernel names, device names and labels are data. `[/b]` in one must print as `[/b]` (rich would read it as a
closing tag and crash, or `[link=…]` would hide text); an escape sequence in one (set the window title, clear
the screen) must print as a visible escape, on stdout and in one-line errors alike.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hostile_traces import traceview
from kineto_builder import KinetoTrace

MARKUP_LABEL = "[link=https://example.com]click[/link][reverse]X"
MARKUP_KERNEL = "gemm[/b]<float>"
MARKUP_DEVICE = "NVIDIA [/x] H200"
SET_TITLE = "\x1b]0;owned\x07"
CLEAR_SCREEN = "\x1b[2J"
C1_CSI = "\x9b2J"
# What the terminal must never receive raw: every C0 control but the newline that ends a line, DEL, C1 controls.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


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


def test_escape_sequences_in_kernel_names_are_shown_not_sent(tmp_path: Path) -> None:
    kernel = f"gemm{SET_TITLE}{CLEAR_SCREEN}{C1_CSI}\u202eevil"
    db = tmp_path / "escapes.db"
    assert_ok(traceview("ingest", layered_trace(tmp_path / "escapes.json", kernel), "-o", db))
    for args in (
        ["diff", db, db],
        ["info", db],
        ["layers", db],
        ["query", db, "kernel_top"],
        *[["sql", db, "SELECT DISTINCT name FROM gpu_activity", "-f", f] for f in ("table", "csv", "markdown")],
    ):
        result = traceview(*args)
        assert_ok(result)
        assert_printable(result)
    shown = traceview("sql", db, "SELECT name FROM gpu_activity WHERE name LIKE 'gemm%' LIMIT 1", "-f", "csv").stdout
    assert shown.splitlines()[1] == "gemm\\x1b]0;owned\\x07\\x1b[2J\\x9b2J\\u202eevil"


def test_a_stored_label_in_an_error_message_is_shown_not_sent(tmp_path: Path) -> None:
    db = tmp_path / "label.db"
    label = f"{CLEAR_SCREEN}run\nerror: forged"
    assert_ok(traceview("ingest", layered_trace(tmp_path / "t.json", "gemm"), "-o", db, "--label", label))
    result = traceview("diff", db, "--a", "missing", "--b", "other")
    assert result.returncode == 2
    assert_printable(result)
    assert result.stderr.count("\n") == 1 and "\\x1b[2Jrun\\nerror: forged" in result.stderr, result.stderr


@pytest.mark.parametrize("content", [None, b"not a trace"], ids=["missing", "not-a-trace"])
def test_a_newline_in_a_file_name_cannot_forge_a_second_error_line(tmp_path: Path, content: bytes | None) -> None:
    trace = tmp_path / f"x.json\nerror: {CLEAR_SCREEN}forged"
    if content is not None:
        trace.write_bytes(content)
    result = traceview("ingest", trace, "-o", tmp_path / "out.db")
    assert result.returncode == 2
    assert_printable(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "x.json\\nerror: \\x1b[2Jforged" in lines[0], lines
