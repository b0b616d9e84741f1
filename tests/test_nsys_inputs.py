""".nsys-rep reports through the user's nsys, bad input, and what never leaves an export (its environment)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import traceview
from traceview.errors import BadInputError, ToolMissingError
from traceview.ingest import IngestOptions
from traceview.ingest.nsys_export import report_writer_version

NSYS_DATA = Path(__file__).parent / "data" / "nsys"
TWO_GPU = NSYS_DATA / "nsysai_mfu_2gpu_before.sqlite"
REPORT = NSYS_DATA / "nvtx_demo_2022.4.nsys-rep"  # written by nsys 2022.4.2.1
REPORT_EXPORT = NSYS_DATA / "nvtx_demo_2022.4.sqlite"  # what that nsys exported from it

STAND_IN = """#!{python}
# A stand-in for nsys: `--version`, and `export ... --output OUT REPORT` copying a prepared export to OUT.
import shutil, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA Nsight Systems version {version}")
elif args[:1] == ["export"] and {fails}:
    print("FATAL ERROR: the report is damaged", file=sys.stderr)
    sys.exit(3)
elif args[:1] == ["export"]:
    shutil.copy({export!r}, args[args.index("--output") + 1])
else:
    sys.exit(2)
"""


def stand_in_nsys(folder: Path, version: str = "2026.2.1.210-1234abc", fails: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nsys"
    script.write_text(STAND_IN.format(python=sys.executable, version=version, fails=fails, export=str(REPORT_EXPORT)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def no_nsys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No nsys anywhere: not on PATH, no $NSYS."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NSYS", raising=False)


def nvtx_count(db: Path) -> int:
    with traceview.connect(db) as con:
        return con.execute("SELECT count(*) FROM cpu_ranges").fetchall()[0][0]


def test_the_report_names_the_nsys_that_wrote_it() -> None:
    """Not in its first bytes (`NVIDIA Tegra Profiler Report N.`) but in its section directory, near the end."""
    assert report_writer_version(REPORT) == "2022.4.2.1"  # stored as 2022.4.2.1-df9881f
    assert REPORT.read_bytes().startswith(b"NVIDIA Tegra Profiler Report")
    h200 = Path(__file__).parent.parent / "sample_traces" / "graph.nsys-rep"
    if h200.exists():
        assert report_writer_version(h200) == "2025.3.1.0"  # stored without a build hash


@pytest.mark.parametrize("how", ["option", "env", "path"])
def test_report_is_exported_by_the_users_nsys(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_nsys: None
) -> None:
    nsys = stand_in_nsys(tmp_path / "bin")
    options = IngestOptions()
    if how == "option":
        options = IngestOptions(nsys=str(nsys))
    elif how == "env":
        monkeypatch.setenv("NSYS", str(nsys))
    else:
        monkeypatch.setenv("PATH", f"{nsys.parent}{os.pathsep}{os.environ['PATH']}")
    summary = traceview.ingest([REPORT], tmp_path / "run.db", options)
    assert summary.backend == "nsys" and summary.label == "nvtx_demo_2022.4"
    assert nvtx_count(tmp_path / "run.db") == 29
    with traceview.connect(tmp_path / "run.db") as con:
        assert con.execute("SELECT source_path, source_file FROM runs, ranks").fetchall() == [(str(REPORT),) * 2]
    assert not list(tmp_path.glob("**/*.sqlite"))  # the export went to a temporary directory, now gone


def test_a_real_nsys_exports_the_report(tmp_path: Path) -> None:
    """With a real nsys (NSYS=... or on PATH, e.g. Debian's nsight-systems 2022.4): the committed export's rows."""
    nsys = os.environ.get("NSYS") or shutil.which("nsys")
    if not nsys:
        pytest.skip("no nsys installed")
    traceview.ingest([REPORT], tmp_path / "report.db", IngestOptions(nsys=nsys))
    traceview.ingest([REPORT_EXPORT], tmp_path / "export.db")
    query = "SELECT name, kind, domain, closed, start_ns, end_ns FROM cpu_ranges ORDER BY range_id"
    with traceview.connect(tmp_path / "report.db") as report, traceview.connect(tmp_path / "export.db") as export:
        assert report.execute(query).fetchall() == export.execute(query).fetchall()


def _one_line(error: Exception, path: Path) -> str:
    text = str(error)
    assert "\n" not in text and text.startswith(f"{path}: ") and " — " in text, text
    return text


def test_no_nsys_gives_the_command_to_run_elsewhere(tmp_path: Path, no_nsys: None) -> None:
    with pytest.raises(ToolMissingError) as raised:
        traceview.ingest([REPORT], tmp_path / "run.db")
    text = _one_line(raised.value, REPORT)
    assert f"nsys export --type sqlite --output {REPORT.with_suffix('.sqlite')} {REPORT}" in text
    assert "2022.4.2.1 or newer" in text
    assert not list(tmp_path.glob("run.db*"))


def test_an_nsys_older_than_the_report_is_refused(tmp_path: Path, no_nsys: None) -> None:
    old = stand_in_nsys(tmp_path / "bin", version="2021.3.1.54-ee9c30a")
    with pytest.raises(ToolMissingError) as raised:
        traceview.ingest([REPORT], tmp_path / "run.db", IngestOptions(nsys=str(old)))
    text = _one_line(raised.value, REPORT)
    assert "written by nsys 2022.4.2.1" in text and "version 2021.3.1.54" in text
    assert "nsys export --type sqlite --output" in text
    assert not list(tmp_path.glob("run.db*"))


def test_a_failing_export_and_a_missing_nsys_path_are_one_line(tmp_path: Path, no_nsys: None) -> None:
    failing = stand_in_nsys(tmp_path / "bin", fails=True)
    with pytest.raises(ToolMissingError) as raised:
        traceview.ingest([REPORT], tmp_path / "run.db", IngestOptions(nsys=str(failing)))
    assert "the report is damaged" in _one_line(raised.value, REPORT)
    with pytest.raises(ToolMissingError) as raised:
        traceview.ingest([REPORT], tmp_path / "run.db", IngestOptions(nsys=str(tmp_path / "nowhere" / "nsys")))
    assert "nsys export --type sqlite" in _one_line(raised.value, REPORT)
    assert not list(tmp_path.glob("run.db*"))


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    files = {}
    unrelated = tmp / "unrelated.sqlite"
    with sqlite3.connect(unrelated) as con:
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO notes VALUES (1, 'not a profile')")
    files["unrelated.sqlite"] = unrelated
    no_tables = tmp / "no_tables.sqlite"
    with sqlite3.connect(no_tables) as con:
        con.execute("PRAGMA user_version = 1")  # writes the header page, no table
    files["no_tables.sqlite"] = no_tables
    data = TWO_GPU.read_bytes()
    files["truncated.sqlite"] = tmp / "truncated.sqlite"
    files["truncated.sqlite"].write_bytes(data[: len(data) // 2])
    files["header_only.sqlite"] = tmp / "header_only.sqlite"
    files["header_only.sqlite"].write_bytes(data[:60])
    damaged = bytearray(data)
    damaged[4096 : 4096 * 200] = b"\xa5" * (4096 * 199)  # pages overwritten in the middle, length intact
    files["damaged.sqlite"] = tmp / "damaged.sqlite"
    files["damaged.sqlite"].write_bytes(bytes(damaged))
    files["not_sqlite.sqlite"] = tmp / "not_sqlite.sqlite"
    files["not_sqlite.sqlite"].write_bytes(b"hello, not a database\n")
    files["empty_dir"] = tmp / "empty.parquet"
    files["empty_dir"].mkdir()
    (files["empty_dir"] / "notes.parquet").write_bytes(b"PAR1 not really")
    return files


BAD = ["unrelated.sqlite", "no_tables.sqlite", "truncated.sqlite", "header_only.sqlite", "damaged.sqlite"]
BAD += ["not_sqlite.sqlite", "empty_dir"]


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_one_line_and_leaves_no_database(name: str, tmp_path: Path) -> None:
    path = _bad_inputs(tmp_path)[name]
    with pytest.raises(BadInputError) as raised:
        traceview.ingest([path], tmp_path / "out.db")
    _one_line(raised.value, path)
    assert not list(tmp_path.glob("out.db*"))


def test_the_cli_prints_one_error_line_for_a_report_without_nsys(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "NSYS": ""}
    result = subprocess.run(
        [sys.executable, "-m", "traceview.cli", "ingest", str(REPORT), "-o", str(tmp_path / "out.db")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {REPORT}: ") and "nsys export --type sqlite --output" in lines[0]
    assert not list(tmp_path.glob("out.db*"))


def test_the_profiled_environment_never_reaches_the_database(tmp_path: Path) -> None:
    """Exports keep the profiled processes' environment (META_DATA_CAPTURE, TARGET_INFO_SYSTEM_ENV, StringIds).
    A planted token must appear nowhere in the database: not in any table, not in the file's bytes."""
    token = "hf_fakeTOKENdo_not_copy_1234567890"
    export = tmp_path / "with_token.sqlite"
    shutil.copy(TWO_GPU, export)
    export.chmod(0o644)
    with sqlite3.connect(export) as con:
        con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)", [f"HF_TOKEN={token}"])
        con.execute(
            "UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ? WHERE name = 'DeviceEnvironment'",
            [f";HF_TOKEN={token}"],
        )
        con.execute("INSERT INTO StringIds VALUES ((SELECT max(id) + 1 FROM StringIds), ?)", [f"HF_TOKEN={token}"])
    db = tmp_path / "run.db"
    traceview.ingest([export], db)
    assert token.encode() not in db.read_bytes()
    with traceview.connect(db) as con:
        columns = con.execute(
            """SELECT table_name, column_name FROM information_schema.columns
               WHERE data_type LIKE 'VARCHAR%' AND table_schema = 'main'"""
        ).fetchall()
        assert columns
        for table, column in columns:
            hits = con.execute(
                f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ?', [f"%{token}%"]
            )
            assert hits.fetchall() == [(0,)], (table, column)


def test_bad_input_leaves_an_existing_database_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    traceview.ingest([REPORT_EXPORT], db)
    with traceview.connect(db) as con:
        before = con.execute("SELECT count(*) FROM cpu_ranges").fetchall()
    bad = _bad_inputs(tmp_path)
    for name in ("damaged.sqlite", "unrelated.sqlite"):
        with pytest.raises(BadInputError):
            traceview.ingest([bad[name]], db)
    with traceview.connect(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
        assert con.execute("SELECT count(*) FROM cpu_ranges").fetchall() == before
