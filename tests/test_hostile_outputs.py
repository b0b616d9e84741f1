"""Outputs over inputs and over each other (issue 25, item 4): `-o` never replaces a database the command reads,
two writers of one `-o` never share a temporary file, `--parquet DIR` follows no symbolic link out of the dataset,
and `ingest --parquet` changes the database and the dataset together or neither.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import HTA
from hostile_traces import assert_one_line_error, traceview, traceview_cmd

import traceview as tv
from traceview import db, parquet, scratch
from traceview.errors import DatabaseError

SMALL = HTA / "trace_compare" / "base" / "base.json.gz"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dataset_files(root: Path) -> dict[str, str]:
    """Every file of a dataset (not the staging folders of a writer) -> its digest."""
    return {str(p.relative_to(root)): digest(p) for p in root.rglob("*") if p.is_file() and ".staging" not in str(p)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("outputs") / "run.db"
    assert traceview("ingest", SMALL, "-o", path).returncode == 0
    return path


@pytest.fixture
def run_db(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copyfile(built, tmp_path / "run.db"))


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{db}", "-o", "{db}"],
        ["export", "{db}", "-o", "{db}"],
        ["plot", "{db}", "-o", "{link}.png", "--kind", "layers"],
        ["report", "{db}", "{other}", "-o", "{other}"],
        ["export", "{db}", "-o", "{hardlink}"],
    ],
)
def test_an_output_over_an_input_database_is_refused(run_db: Path, tmp_path: Path, command: list[str]) -> None:
    other = Path(shutil.copyfile(run_db, tmp_path / "other.db"))
    (tmp_path / "link.png").symlink_to(run_db)
    os.link(run_db, tmp_path / "hardlink.db")
    names = {"db": run_db, "other": other, "link": tmp_path / "link", "hardlink": tmp_path / "hardlink.db"}
    before = {path: digest(path) for path in (run_db, other)}
    args = [part.format(**names) for part in command]
    assert_one_line_error(traceview(*args), args[args.index("-o") + 1], "which the command reads")
    assert {path: digest(path) for path in before} == before


def test_each_writer_has_its_own_temporary_file(tmp_path: Path) -> None:
    """Each renames a whole file of its own over the target: the last to finish wins."""
    target = tmp_path / "out.json"
    with scratch.replacing(target) as first, scratch.replacing(target) as second:
        assert first != second and first.parent == second.parent == tmp_path
        first.write_text("[1]")
        second.write_text("[2]")
    assert target.read_text() == "[1]"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert (target.stat().st_mode & 0o777) == 0o666 & ~scratch._umask()


@pytest.mark.heavy  # concurrent exports, repeated
def test_two_exports_to_one_output_at_once_leave_valid_json(run_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    for _ in range(3):
        writers = [subprocess.Popen(traceview_cmd("export", run_db, "-o", out), stderr=subprocess.PIPE) for _ in "ab"]
        assert [w.wait(timeout=120) for w in writers] == [0, 0]
        assert json.loads(out.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.db", "trace.json"]


def test_a_symbolic_link_inside_the_dataset_is_not_followed(tmp_path: Path) -> None:
    """The issue's dataset had `gpu_activity` link elsewhere, where the export removed the run's predictable
    `run_id=` folder before moving its own in."""
    dataset, elsewhere = tmp_path / "dataset", tmp_path / "elsewhere"
    first = tmp_path / "first.db"
    assert traceview("ingest", SMALL, "-o", first, "--parquet", dataset).returncode == 0
    (run_folder,) = (dataset / "gpu_activity").iterdir()
    shutil.move(dataset / "gpu_activity", elsewhere)
    (elsewhere / run_folder.name / "keep.txt").write_text("not the dataset's")
    (dataset / "gpu_activity").symlink_to(elsewhere)
    before = dataset_files(elsewhere)
    result = traceview("ingest", SMALL, "-o", tmp_path / "second.db", "--parquet", dataset)
    assert_one_line_error(result, dataset / "gpu_activity", "symbolic link")
    assert dataset_files(elsewhere) == before
    assert not (tmp_path / "second.db").exists()


def test_a_dataset_that_cannot_be_written_leaves_no_database(tmp_path: Path) -> None:
    """`runs` is a file where the dataset needs a folder: the export fails, after the database had been committed."""
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "runs").write_text("not a folder")
    result = traceview("ingest", SMALL, "-o", tmp_path / "run.db", "--parquet", dataset)
    assert_one_line_error(result, None)
    assert not (tmp_path / "run.db").exists()
    assert sorted(p.name for p in dataset.iterdir()) == ["runs"]


def test_a_database_that_fails_to_commit_takes_its_dataset_partitions_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run replaces its own partitions in the dataset, then the database's commit fails (a full disk): the
    dataset holds the partitions it held before, byte for byte."""
    dataset = tmp_path / "dataset"
    tv.ingest([SMALL], tmp_path / "first.db", parquet=dataset)
    before = dataset_files(dataset)

    def full_disk(tmp: Path, path: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(db, "_move_into_place", full_disk)
    with pytest.raises(DatabaseError, match="no space left"):
        tv.ingest([SMALL], tmp_path / "second.db", parquet=dataset)
    assert dataset_files(dataset) == before
    assert not (tmp_path / "second.db").exists()
    assert [p.name for p in dataset.iterdir() if p.name.startswith(".")] == []
    with parquet.connect(dataset) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]


def test_a_stdout_without_unicode_gets_escapes(run_db: Path) -> None:
    """PYTHONIOENCODING=latin-1: the table's box-drawing lines were a UnicodeEncodeError traceback."""
    result = traceview("layers", run_db, env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert result.returncode == 0, result.stderr
    assert "\\u2503" in result.stdout and "Traceback" not in result.stderr


def test_a_closed_stderr_changes_nothing_but_the_messages(tmp_path: Path) -> None:
    """`2>&-`: the ingest exited 1 with no message and no database; a file opened then could take descriptor 2."""
    database = tmp_path / "run.db"
    done = subprocess.run(traceview_cmd("ingest", SMALL, "-o", database), preexec_fn=lambda: os.close(2), check=False)
    assert done.returncode == 0 and traceview("info", database).returncode == 0
    failed = subprocess.run(traceview_cmd("info", tmp_path / "none.db"), preexec_fn=lambda: os.close(2), check=False)
    assert failed.returncode == 2


def test_an_export_to_dev_stdout_through_a_pipe(run_db: Path) -> None:
    """/dev/stdout names /proc/self/fd/1, which resolves to `pipe:[…]`: the temporary file was made there."""
    result = subprocess.run(
        [*traceview_cmd("export", run_db, "-o", "/dev/stdout")], stdout=subprocess.PIPE, check=False, timeout=120
    )
    assert result.returncode == 0
    assert json.loads(result.stdout)["traceEvents"]
