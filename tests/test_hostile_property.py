"""Property: whatever text a trace or the command line carries, no command prints a traceback, exits with another
code than 0 or 2, or sends a raw control character (or invalid Unicode) to the terminal.

Generated text (rich markup, escape sequences, C0/C1 controls, quotes, newlines, bidi overrides, lone surrogates,
very long strings) goes into every string a trace can carry (kernel, range, thread, device, metadata names, as JSON
escapes or as raw invalid bytes) and the command line can (the label, the trace's file name, run labels asked
for), then through every command in every output format. Commands run in this process (`cli.main`, as the console
script does) with stdout and stderr encoded as a terminal's UTF-8 would encode them: strictly.

`TRACEVIEW_TEXT_EXAMPLES=N` sets the number of generated examples (default 4, derandomized; two fixed ones always
run); `python bench/fuzz.py --text N` runs N random ones.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SAMPLES
from fuzzing import cut_down_sqlite
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from kineto_builder import KinetoTrace

from traceview import cli

EXAMPLES = int(os.environ.get("TRACEVIEW_TEXT_EXAMPLES", "4"))
RANDOM = "TRACEVIEW_TEXT_EXAMPLES" in os.environ
FORMATS = ("table", "csv", "json", "markdown")
# Raw on a terminal: every C0 control but the newline that ends a line, DEL, C1 controls, and lone surrogates.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")

ATOMS = ["[/b]", "[link=https://example.com]click[/link]", "[reverse]X", "[bold red]", ":smile:", "\\[", "\\"]
ATOMS += ["\x1b]0;owned\x07", "\x1b[2J", "\x1b[31m", "\x9b2J", "\x9d0;t\x9c", "\r", "\n", "\t", "\x00", "\x07"]
ATOMS += ["\x7f", "\x85", '"', "'", "%s%n", "{0}", "|", ",", ";", "\u202e", "\u2028", "\ufeff", "名前", "🔥"]
ATOMS += ["\ud800", "\udcff", "\nerror: forged", "<script>", "&amp;", "--", "nccl", "ProfilerStep#1"]
HOSTILE = st.one_of(
    st.lists(st.one_of(st.sampled_from(ATOMS), st.sampled_from(ATOMS), st.text(max_size=6)), max_size=6).map("".join),
    st.tuples(st.sampled_from(ATOMS), st.integers(1_000, 60_000)).map(lambda t: t[0] + "y" * t[1] + t[0]),
)


@dataclass(frozen=True)
class Texts:
    """One generated text per place a trace or the command line carries one."""

    kernel: str
    layer: str
    thread: str
    device: str
    label: str
    file: str
    asked: str
    raw_bytes: bool


TEXTS = st.builds(Texts, *[HOSTILE] * 7, st.booleans())


# ---------------------------------------------------------------------------------------------------------
# Running the command line in this process


@dataclass(frozen=True)
class Outcome:
    args: tuple[str, ...]
    code: object
    stdout: str
    stderr: str
    failure: str = ""


def run(*args: str | Path) -> Outcome:
    """`traceview ARGS` through cli.main, as the console script runs it; stdout/stderr encoded strictly."""
    out, err = io.BytesIO(), io.BytesIO()
    streams = [io.TextIOWrapper(b, encoding="utf-8", errors="strict", newline="\n") for b in (out, err)]
    argv = ["traceview", *map(str, args)]
    failure, code = "", None
    with _argv(argv), contextlib.redirect_stdout(streams[0]), contextlib.redirect_stderr(streams[1]):
        try:
            cli.main()
            code = 0
        except SystemExit as done:
            code = done.code or 0
        except BaseException:  # a traceback: what the property forbids
            failure = traceback.format_exc()
        for stream in streams:
            try:
                stream.flush()
            except UnicodeEncodeError:
                failure = failure or traceback.format_exc()
    text = [b.getvalue().decode("utf-8", "backslashreplace") for b in (out, err)]
    return Outcome(tuple(argv[1:]), code, text[0], text[1], failure)


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def check(outcome: Outcome) -> None:
    where = f"traceview {' '.join(map(repr, outcome.args))[:400]}"
    assert not outcome.failure, f"{where}\n{outcome.failure}"
    assert outcome.code in (0, 2), f"{where}: exit {outcome.code}\n{outcome.stderr[-2000:]}"
    assert "Traceback" not in outcome.stderr, f"{where}\n{outcome.stderr[-2000:]}"
    for name, stream in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
        raw = RAW.search(stream)
        assert raw is None, f"{where}: raw {raw.group()!r} on {name}: {stream[max(raw.start() - 80, 0) :][:200]!r}"
    if outcome.code == 2:
        lines = outcome.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{where}: {outcome.stderr[-2000:]!r}"


# ---------------------------------------------------------------------------------------------------------
# Traces that carry the texts


def safe_file_name(text: str, suffix: str) -> str:
    """`text` as a file name Linux accepts: no '/' or NUL, surrogates only as undecodable bytes (U+DC80-U+DCFF),
    at most 200 bytes, not starting with '-' (an option)."""
    text = text.replace("/", "_").replace("\x00", "_")
    text = "".join(c if not 0xD800 <= ord(c) < 0xE000 or 0xDC80 <= ord(c) <= 0xDCFF else "_" for c in text)
    while len(os.fsencode(text)) > 200:
        text = text[: len(text) // 2]
    return "t" + text + suffix


def kineto_trace(directory: Path, texts: Texts) -> Path:
    """Three steps of two layers; the texts in a kernel name, the layer ranges, a thread, the device and metadata."""
    trace = KinetoTrace()
    trace.metadata.update({"deviceProperties": [{"id": 0, "name": texts.device}], "traceName": texts.thread})
    trace.metadata["distributedInfo"] = {"rank": 0, "world_size": 1, "backend": texts.asked}
    trace.events.append({"ph": "M", "name": "thread_name", "pid": 1000, "tid": 1001, "args": {"name": texts.thread}})
    for step in range(3):
        with trace.cpu_range(f"ProfilerStep#{step}"):
            for layer in range(2):
                with trace.cpu_range(f"model.layers.{layer}{texts.layer}"):
                    trace.launch_kernel(texts.kernel)
                    trace.launch_kernel(f"ncclKernel_AllReduce_{texts.kernel}")
    path = directory / safe_file_name(texts.file, ".json")
    data = json.dumps(trace.document(), ensure_ascii=not texts.raw_bytes)
    path.write_bytes(data.encode("utf-8", "surrogatepass"))  # raw_bytes: lone surrogates as invalid UTF-8
    return path


def nsys_export(directory: Path, texts: Texts) -> Path:
    """The sample export cut down, with the texts as a kernel name, an NVTX range's text and the GPU's name."""
    path = cut_down_sqlite(SAMPLES / "compiled.sqlite", directory / safe_file_name(texts.file, ".sqlite"), 800)
    with sqlite3.connect(path) as con:
        con.text_factory = str
        kernel_name = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchall()[0][0]
        for value, where in ((texts.kernel, f"id = {int(kernel_name)}"), (texts.layer, "value LIKE '%layers%'")):
            con.execute(f"UPDATE StringIds SET value = value || ? WHERE {where}", [_sqlite_text(value)])
        con.execute("UPDATE NVTX_EVENTS SET text = text || ? WHERE text IS NOT NULL", [_sqlite_text(texts.thread)])
        con.execute("UPDATE TARGET_INFO_GPU SET name = ?", [_sqlite_text(texts.device)])
    return path


def _sqlite_text(text: str) -> str | bytes:
    """SQLite stores what it is given; lone surrogates go in as invalid UTF-8 bytes, as a damaged export holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


# ---------------------------------------------------------------------------------------------------------
# Every command, every format


# Every column that carries text from the trace or the command line, in one result.
TEXT_COLUMNS = " UNION ALL ".join(
    f"SELECT '{table}.{column}' AS source, CAST({column} AS VARCHAR) AS text FROM {table}"
    for table, column in (
        ("runs", "label"),
        ("runs", "source_path"),
        ("runs", "device_names"),
        ("ranks", "source_file"),
        ("ranks", "hostname"),
        ("ranks", "device_name"),
        ("gpu_activity", "name"),
        ("gpu_activity", "short_name"),
        ("cpu_ranges", "name"),
        ("threads", "process_name"),
        ("threads", "thread_name"),
        ("layers", "name"),
        ("ingest_stats", "description"),
    )
)


def every_command(db: Path, out: Path, texts: Texts) -> Iterator[tuple[str | Path, ...]]:
    for fmt in FORMATS:
        yield ("info", db, "-f", fmt)
        yield ("layers", db, "-f", fmt)
        yield ("diff", db, db, "-f", fmt)
        yield ("overlap", db, "-f", fmt)
        yield ("query", db, "kernel_top", "-f", fmt)
        yield ("sql", db, TEXT_COLUMNS, "-f", fmt)
    yield ("segment", db)
    yield ("export", db, "-o", out / safe_file_name(texts.file, ".json"))
    yield ("report", db, "-o", out / safe_file_name(texts.file, ".html"))
    # Errors that quote what the user asked for, or what the database holds:
    yield ("diff", db, f"--a={texts.asked}", "--b=x")
    yield ("layers", db, f"--run={texts.asked}")
    yield ("info", out / safe_file_name(texts.asked, ".db"))
    yield ("query", db, "kernel_top", f"--param=run={texts.asked}")


def check_everything(trace: Path, texts: Texts, tmp: Path) -> None:
    check(run("ingest", trace, "-o", tmp / safe_file_name(texts.file, ".db")))  # the database's name, too
    db = tmp / "run.db"
    ingested = None
    for fmt in FORMATS:  # the first ingest reads the trace; the others find it ingested already
        ingested = run("ingest", trace, "-o", db, f"--label={texts.label}", "--keep-host", "-f", fmt)
        check(ingested)
    assert ingested is not None
    if ingested.code != 0:
        return  # refused in one line (checked): nothing to read
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    for args in every_command(db, out, texts):
        check(run(*args))


# Always run: lone surrogates everywhere (undecodable bytes of a file name or an argument), and the attacks that
# once got through (markup that crashed rich or hid text, a window title set, a screen cleared, a forged line).
SURROGATES = Texts("k\ud800", "\udcff", "t\ud800", "d\ud800", "l\udcff", "f\udcff", "a\ud800", raw_bytes=False)
ATTACKS = Texts(
    "gemm[/b]<float>\x1b]0;owned\x07",
    "[reverse]X\x1b[2J",
    "\nerror: forged",
    "NVIDIA [/x] H200",
    "[link=https://example.com]click[/link][reverse]X",
    "x.json\nerror: \x1b[2Jforged",
    "\x9b2J\u202e",
    raw_bytes=True,
)

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking takes many minutes of whole CLI runs
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@pytest.mark.heavy
@SETTINGS
@given(texts=TEXTS)
@example(texts=SURROGATES)
@example(texts=ATTACKS)
def test_hostile_text_in_a_kineto_trace_and_on_the_command_line(
    texts: Texts, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("kineto")
    check_everything(kineto_trace(tmp, texts), texts, tmp)


@pytest.mark.heavy
@SETTINGS
@given(texts=TEXTS)
@example(texts=SURROGATES)
@example(texts=ATTACKS)
def test_hostile_text_in_an_nsys_export(texts: Texts, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("nsys")
    check_everything(nsys_export(tmp, texts), texts, tmp)
