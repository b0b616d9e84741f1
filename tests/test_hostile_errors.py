"""Odd inputs and odd places that once ended in a traceback: each is one line `error: FILE: problem — remedy`,
exit 2, and leaves no database behind (or the database as it was).

Metadata nested 900 and 5,000 levels deep; a symbolic-link loop and an unreadable file in an input directory; an
output directory that is read-only or holds '?', an output that is a dangling link; a file given as a database that
is an SQLite export, a trace or empty; a database whose schema_version is text, or that lost a table or a column by
hand; a regular expression that does not compile.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from conftest import HTA, SAMPLES
from fuzz_runner import db_fingerprint
from hostile_traces import assert_one_line_error, traceview, traceview_cmd

from traceview.errors import BadInputError

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"
# Without the capabilities that let root read and write whatever it likes, file permissions apply to root too.
UNPRIVILEGED = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def unprivileged(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [*UNPRIVILEGED, *traceview_cmd(*args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def needs_unprivileged() -> None:
    if UNPRIVILEGED and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")


# ---------------------------------------------------------------------------------------------------------
# Inputs


def deep_trace(tmp_path: Path, depth: int, where: str) -> Path:
    """The small trace with a member `[[[...]]]` `depth` levels deep before (head) or after (tail) traceEvents."""
    text = gzip.decompress(SMALL.read_bytes()).decode().strip()
    deep = "[" * depth + "]" * depth
    body = '{"deep": ' + deep + ", " + text[1:] if where == "head" else text[:-1] + ', "deep": ' + deep + "}"
    trace = tmp_path / f"deep_{where}_{depth}.json"
    trace.write_text(body)
    return trace


@pytest.mark.parametrize("where", ["head", "tail"])
def test_metadata_nested_900_deep_is_read_and_5000_deep_is_one_line(tmp_path: Path, where: str) -> None:
    assert traceview("ingest", deep_trace(tmp_path, 900, where), "-o", tmp_path / "900.db").returncode == 0
    trace = deep_trace(tmp_path, 5000, where)
    assert_one_line_error(traceview("ingest", trace, "-o", tmp_path / "5000.db"), trace, "nested too deep")
    assert not (tmp_path / "5000.db").exists()


def test_gzip_data_damaged_at_its_start_is_one_line(tmp_path: Path) -> None:
    """The deflate stream broken in its first block (found by the fuzzer: the check for a small file that can be
    read in a batch decompressed the head and let zlib's error out as a traceback)."""
    damaged = bytearray(SMALL.read_bytes())
    damaged[20:40] = b"\xff" * 20
    trace = tmp_path / "damaged.json.gz"
    trace.write_bytes(bytes(damaged))
    assert_one_line_error(traceview("ingest", trace, "-o", tmp_path / "out.db"), trace, "truncated or corrupt")
    assert not (tmp_path / "out.db").exists()


def test_a_symbolic_link_loop_in_an_input_directory_is_one_line(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copyfile(SMALL, ranks / "rank0.json.gz")
    (ranks / "a.json").symlink_to(ranks / "b.json")
    (ranks / "b.json").symlink_to(ranks / "a.json")
    assert_one_line_error(traceview("ingest", ranks, "-o", tmp_path / "out.db"), ranks / "a.json", "symbolic links")
    assert not (tmp_path / "out.db").exists()


def test_an_unreadable_file_in_an_input_directory_is_one_line(tmp_path: Path) -> None:
    needs_unprivileged()
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copyfile(SMALL, ranks / "rank0.json.gz")
    locked = Path(shutil.copyfile(SMALL, ranks / "rank1.json.gz"))
    locked.chmod(0)
    result = unprivileged("ingest", ranks, "-o", tmp_path / "out.db")
    assert_one_line_error(result, locked, "permission denied")
    assert not (tmp_path / "out.db").exists()


# ---------------------------------------------------------------------------------------------------------
# Outputs


def test_an_output_in_a_read_only_directory_is_one_line(tmp_path: Path) -> None:
    needs_unprivileged()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    result = unprivileged("ingest", SMALL, "-o", locked / "out.db")
    assert_one_line_error(result, locked / "out.db", "Permission denied")
    assert list(locked.iterdir()) == []


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A read-only file system (a tmpfs mounted read-only): needs root and a kernel that lets it mount."""
    target = tmp_path / "ro"
    target.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None
    mounted = mounted and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", target]).returncode == 0
    if not mounted:
        pytest.skip("cannot mount a read-only file system here")
    yield target
    subprocess.run(["umount", target], check=True)


@pytest.mark.parametrize("command", ["ingest", "export"])
def test_an_output_on_a_read_only_file_system_is_one_line(read_only_mount: Path, ingested: Path, command: str) -> None:
    target = read_only_mount / "out"
    args = ["ingest", SMALL, "-o", target] if command == "ingest" else ["export", ingested, "-o", target]
    assert_one_line_error(traceview(*args), target, "read-only")


def test_a_question_mark_in_the_output_directory_is_one_line(tmp_path: Path) -> None:
    odd = tmp_path / "what?"
    odd.mkdir()
    assert_one_line_error(traceview("ingest", SMALL, "-o", odd / "out.db"), odd / "out.db", "'?'")
    assert list(odd.iterdir()) == []


def test_an_output_that_is_a_dangling_symbolic_link_creates_its_target(tmp_path: Path) -> None:
    """Like a shell redirection: the link's target is created, then written to; the link stays a link."""
    link, target = tmp_path / "link.db", tmp_path / "real.db"
    link.symlink_to(target.name)
    assert traceview("ingest", SMALL, "-o", link).returncode == 0
    assert link.is_symlink() and target.is_file()
    assert traceview("ingest", SMALL, "-o", link, "--label", "again").returncode == 0
    with duckdb.connect(str(target), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(2,)]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "an SQLite database"),
        (gzip.compress(b'{"traceEvents": []}'), "gzip-compressed data"),
        (b'{"traceEvents": []}', "JSON"),
        (b"", "an empty file"),
    ],
    ids=["sqlite", "gzip", "json", "empty"],
)
def test_a_file_that_is_not_a_database_is_named_for_what_it_is(
    tmp_path: Path, content: bytes | None, words: str
) -> None:
    db = tmp_path / "given.db"
    if content is None:
        shutil.copyfile(SAMPLES / "compiled.sqlite", db)
    else:
        db.write_bytes(content)
    for args in (["info", db], ["ingest", SMALL, "-o", db]):
        line = assert_one_line_error(traceview(*args), db, f"this is {words}", "not a traceview database")
        assert "extension" not in line.lower()


# ---------------------------------------------------------------------------------------------------------
# Databases changed by hand


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("db") / "run.db"
    assert traceview("ingest", SMALL, "-o", db).returncode == 0
    return db


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("UPDATE traceview_meta SET value = 'two' WHERE key = 'schema_version'", "schema version two"),
        ("DROP TABLE layers", "lacks table layers"),
        ("ALTER TABLE gpu_activity DROP COLUMN short_name", "lacks column gpu_activity.short_name"),
        ("ALTER TABLE ranks ALTER COLUMN hostname TYPE INTEGER USING 0", "lacks column ranks.hostname VARCHAR"),
    ],
    ids=["version-text", "table-dropped", "column-dropped", "column-retyped"],
)
def test_a_database_changed_by_hand_is_refused_in_one_line(
    ingested: Path, tmp_path: Path, change: str, words: str
) -> None:
    db = Path(shutil.copyfile(ingested, tmp_path / "changed.db"))
    with duckdb.connect(str(db)) as con:
        con.execute(change)
    before = db_fingerprint(db)
    for args in (["info", db], ["layers", db], ["diff", db, db], ["ingest", SMALL, "-o", db, "--label", "again"]):
        assert_one_line_error(traceview(*args), db, words)
    assert db_fingerprint(db) == before


# ---------------------------------------------------------------------------------------------------------
# The command line


@pytest.mark.parametrize(
    ("option", "pattern"),
    [("--comm-pattern", "(?=nccl)"), ("--layer-pattern", "layers.(\\d+"), ("--step-pattern", "[Step")],
)
def test_a_regular_expression_that_does_not_compile_is_one_line(tmp_path: Path, option: str, pattern: str) -> None:
    result = traceview("ingest", SMALL, "-o", tmp_path / "out.db", option, pattern)
    assert_one_line_error(result, None, f"bad {option} {pattern!r}")
    assert not (tmp_path / "out.db").exists()


def test_an_error_crosses_a_process_boundary_as_itself(tmp_path: Path) -> None:
    """A library user ingesting in worker processes gets the worker's error back whole (it used to break the pool:
    an exception is unpickled by calling its class with its args)."""
    error = pickle.loads(pickle.dumps(BadInputError(tmp_path / "t.json", "is truncated", "record it again")))
    assert type(error) is BadInputError and str(error) == f"{tmp_path / 't.json'}: is truncated — record it again"
