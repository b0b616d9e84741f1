"""Kilobyte inputs that asked for gigabytes (issue 25, item 2): refused by the cost model (traceview/ingest/bounds.py)
in one line, quickly, in little memory, leaving nothing behind; `--max-expansion none` lifts the bound.

Before the cost model: the SQLite bomb (StringIds.value a generated column of 20 MB per row, in the 487 KB sample
export) was OOM-killed, or under `ulimit -v` called the file damaged; the Parquet bomb (10 M identical kernel rows in
0.9 MB) was ingested in 73 s at 2.4 GB of RSS.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tarfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES
from hostile_traces import assert_one_line_error, peak_rss_mb, traceview_cmd
from test_hostile_errors import UNPRIVILEGED, needs_unprivileged

PARQUET_ROWS = 5_000_000  # 28 columns: ~1 GiB to read, from ~0.5 MB
BLOCK_ROWS = 1_000_000
SECONDS = 20  # the refusal comes before any row is read: ~1 s
MIB = 400  # peak RSS of the refusing process: Python, DuckDB, pyarrow (~150-200 MiB measured)


def sqlite_with_generated_strings(target: Path, expression: str) -> Path:
    """The sample export with StringIds.value a virtual generated column: `expression` of the stored text `v`."""
    shutil.copyfile(SAMPLES / "compiled.sqlite", target)
    with sqlite3.connect(target) as con:
        con.executescript(
            f"""ALTER TABLE StringIds RENAME TO _old;
                CREATE TABLE StringIds (id INTEGER PRIMARY KEY, v TEXT, value TEXT GENERATED ALWAYS AS ({expression}));
                INSERT INTO StringIds (id, v) SELECT id, value FROM _old;
                DROP TABLE _old;"""
        )
    with sqlite3.connect(target) as con:
        con.execute("VACUUM")
    return target


def sqlite_of_kernels_naming_one_long_string(target: Path) -> Path:
    """The sample export with every kernel named by one 2 MiB StringIds value, its 1,080 kernels copied to 138,240."""
    shutil.copyfile(SAMPLES / "compiled.sqlite", target)
    with sqlite3.connect(target) as con:
        con.execute("INSERT INTO StringIds VALUES (999999, ?)", ["x" * (2 << 20)])
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999999, shortName = 999999")
        for _ in range(7):
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    return target


def sqlite_of_nvtx_rows_defaulting_to_a_long_text(target: Path) -> Path:
    """The sample export's 45 NVTX rows copied to 46,080, then `text` added by ALTER TABLE with a 1 MiB default."""
    shutil.copyfile(SAMPLES / "compiled.sqlite", target)
    with sqlite3.connect(target) as con:
        kept = ", ".join(r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)") if r[1] != "text")
        con.executescript(
            f"""CREATE TABLE n AS SELECT {kept} FROM NVTX_EVENTS; DROP TABLE NVTX_EVENTS;
                ALTER TABLE n RENAME TO NVTX_EVENTS;"""
        )
        for _ in range(10):
            con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS")
        con.execute(f"ALTER TABLE NVTX_EVENTS ADD COLUMN text TEXT DEFAULT '{'y' * (1 << 20)}'")
    return target


def sample_parquet_export(target: Path) -> Path:
    with tarfile.open(SAMPLES / "graph.parquet.tar.gz") as tar:
        tar.extractall(target, filter="data")
    return target / "graph.parquet"


def parquet_of_identical_kernels(target: Path, rows: int = PARQUET_ROWS) -> Path:
    """The sample Parquet export with its kernel table replaced by `rows` copies of its first kernel."""
    export = sample_parquet_export(target)
    kernels = export / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    table = pq.read_table(kernels)
    block = table.take(pa.array([0] * BLOCK_ROWS))
    with pq.ParquetWriter(kernels, table.schema, compression="zstd") as writer:
        for _ in range(rows // BLOCK_ROWS):
            writer.write_table(block, row_group_size=BLOCK_ROWS)
    return export


def refused_quickly(tmp_path: Path, trace: Path, named: Path, *words: str) -> None:
    """`traceview ingest trace` fails in one line naming `named` and holding `words`, within SECONDS and MIB, leaving
    no file."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out" / "run.db"
    out.parent.mkdir()
    started = time.monotonic()
    peak, done = peak_rss_mb(traceview_cmd("ingest", trace, "-o", out), env={**os.environ, "TMPDIR": str(scratch)})
    elapsed = time.monotonic() - started
    assert_one_line_error(done, named, "--max-expansion none", *words)
    assert elapsed < SECONDS and peak < MIB, (elapsed, peak)
    assert list(scratch.iterdir()) == [] and list(out.parent.iterdir()) == []


def test_an_sqlite_export_with_a_generated_string_column_is_refused(tmp_path: Path) -> None:
    bomb = sqlite_with_generated_strings(tmp_path / "bomb.sqlite", "v || printf('%.*c', 20000000, 'x')")
    assert bomb.stat().st_size < 600_000
    refused_quickly(tmp_path, bomb, bomb, "StringIds.value is a generated column")


def test_a_parquet_export_of_millions_of_identical_rows_is_refused(tmp_path: Path) -> None:
    export = parquet_of_identical_kernels(tmp_path / "in")
    kernels = export / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    assert kernels.stat().st_size < 1_000_000
    refused_quickly(tmp_path, export, kernels, f"{PARQUET_ROWS:,} rows of 28 columns", "more than 64x")


def test_a_parquet_export_whose_strings_share_one_huge_dictionary_entry_is_refused(tmp_path: Path) -> None:
    """Every StringIds row points to one 10 MiB dictionary string: 312 rows, 3 GiB once expanded, in 2 KB. Before:
    read (the cells and the file's size were in proportion), 117 s and 20 GB of RSS, then out of memory."""
    export = sample_parquet_export(tmp_path / "in")
    strings = export / "StringIds.parquet"
    ids = pq.read_table(strings)["id"]
    huge = pa.DictionaryArray.from_arrays(pa.array([0] * len(ids), pa.int32()), pa.array(["x" * (10 << 20)]))
    pq.write_table(pa.table({"id": ids, "value": huge}), strings, compression="zstd")
    assert strings.stat().st_size < 4_000
    refused_quickly(tmp_path, export, strings, "strings of ~3,120 MiB once their dictionary is expanded")


@pytest.mark.heavy  # a decompression bomb, written and read
def test_a_parquet_export_whose_pages_decompress_hugely_is_refused(tmp_path: Path) -> None:
    """One plain-encoded string of 300 MiB of one byte: a zstd page of kilobytes. Before: read."""
    export = sample_parquet_export(tmp_path / "in")
    details = export / "ANALYSIS_DETAILS.parquet"
    table = pq.read_table(details)
    text = pa.array(["y" * (300 << 20)] * table.num_rows)
    pq.write_table(table.append_column("note", text), details, compression="zstd", use_dictionary=False)
    assert details.stat().st_size < 100_000
    refused_quickly(tmp_path, export, details, "pages of ~300 MiB once decompressed")


def test_a_genuine_dictionary_with_one_long_string_is_counted_not_refused(tmp_path: Path) -> None:
    """Rows x decompressed size bounds a dictionary chunk at 200,000 x 2 MB; its strings are counted (2 MB + 200,000
    short ones), not refused for that bound."""
    from traceview.ingest import bounds

    names = pa.array(["k" * (2 << 20)] + [f"kernel_{i}" for i in range(199_999)]).dictionary_encode()
    path = tmp_path / "names.parquet"
    pq.write_table(pa.table({"value": names}), path, compression="zstd")
    bounds.check_parquet(path, bounds.RATIO)
    assert bounds._string_bytes(path, pq.read_metadata(path), 0) == (2 << 20) + sum(
        len(f"kernel_{i}") for i in range(199_999)
    )


def test_an_sqlite_export_whose_kernels_name_one_long_string_is_refused(tmp_path: Path) -> None:
    """Before: read; the names joined to 138,240 kernels filled the disk with spill (64 s, then no space left)."""
    bomb = sqlite_of_kernels_naming_one_long_string(tmp_path / "names.sqlite")
    assert bomb.stat().st_size < 16 << 20
    refused_quickly(tmp_path, bomb, bomb, "CUPTI_ACTIVITY_KIND_KERNEL's 138,240 rows", "more than 64x")


def test_an_sqlite_export_whose_rows_default_to_a_long_text_is_refused(tmp_path: Path) -> None:
    """Before: read; killed at 138 s at 23 GB of RSS."""
    bomb = sqlite_of_nvtx_rows_defaulting_to_a_long_text(tmp_path / "defaults.sqlite")
    assert bomb.stat().st_size < 4 << 20
    refused_quickly(tmp_path, bomb, bomb, "NVTX_EVENTS's 46,080 rows (46,080 MiB of strings", "more than 64x")


def test_the_sqlite_cost_is_counted_per_table() -> None:
    """Each table its own rows (count(*)) and cells; the kernels' strings, counted exactly, are the lengths of the
    names each kernel's two id columns give it."""
    from traceview.ingest import bounds

    with sqlite3.connect(SAMPLES / "compiled.sqlite") as con:
        costs = {c.table: c for c in bounds.sqlite_cost(con, ["CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "NONE"], 0)}
        names = sum(
            con.execute(
                f"""SELECT sum(length(CAST(s.value AS BLOB))) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                    JOIN StringIds s ON s.id = k.{column}"""
            ).fetchone()[0]
            for column in ("demangledName", "shortName")
        )
    assert sorted(costs) == ["CUPTI_ACTIVITY_KIND_KERNEL", "StringIds"]
    assert costs["CUPTI_ACTIVITY_KIND_KERNEL"].rows == 1080 and costs["StringIds"].rows == 316
    assert costs["CUPTI_ACTIVITY_KIND_KERNEL"].cells == 1080 * 28 * bounds.CELL_BYTES
    assert costs["CUPTI_ACTIVITY_KIND_KERNEL"].strings == names and costs["StringIds"].strings == 0


def test_the_bound_names_its_override_and_the_override_lifts_it(tmp_path: Path) -> None:
    """A generated column that costs nothing is still refused by default (its cost cannot be known before reading),
    and read with --max-expansion none."""
    harmless = sqlite_with_generated_strings(tmp_path / "harmless.sqlite", "v")
    default = subprocess.run(traceview_cmd("ingest", harmless, "-o", tmp_path / "a.db"), capture_output=True, text=True)
    assert_one_line_error(default, harmless, "generated column", "--max-expansion none")
    lifted = traceview_cmd("ingest", harmless, "-o", tmp_path / "b.db", "--max-expansion", "none")
    assert subprocess.run(lifted, capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("ratio", ["0", "0.5", "nan", "inf", "-1", "lots"])
def test_a_bad_ratio_is_one_line(tmp_path: Path, ratio: str) -> None:
    done = subprocess.run(
        traceview_cmd("ingest", SAMPLES / "compiled.sqlite", "-o", tmp_path / "a.db", "--max-expansion", ratio),
        capture_output=True,
        text=True,
    )
    assert_one_line_error(done, None, "bad --max-expansion")


# ---------------------------------------------------------------------------------------------------------
# A WAL-mode export (issue 25, item 10): opened immutable, nothing written beside it


def wal_mode_export(folder: Path) -> Path:
    folder.mkdir()
    export = folder / "wal.sqlite"
    shutil.copyfile(SAMPLES / "compiled.sqlite", export)
    with sqlite3.connect(export) as con:
        assert con.execute("PRAGMA journal_mode = WAL").fetchall() == [("wal",)]
    return export


def test_a_wal_mode_export_in_a_read_only_directory_is_read_and_left_alone(tmp_path: Path) -> None:
    """Before: SQLite wrote wal.sqlite-shm and -wal beside it, and in a read-only directory called it damaged."""
    needs_unprivileged()
    export = wal_mode_export(tmp_path / "in")
    export.parent.chmod(0o555)
    try:
        done = subprocess.run(
            [*UNPRIVILEGED, *traceview_cmd("ingest", export, "-o", tmp_path / "run.db")], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in export.parent.iterdir()) == ["wal.sqlite"]
    finally:
        export.parent.chmod(0o755)


def test_a_wal_mode_export_still_being_written_is_refused(tmp_path: Path) -> None:
    export = wal_mode_export(tmp_path / "in")
    writer = sqlite3.connect(export)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        writer.commit()  # in wal.sqlite-wal only, while the writer lives
        command = traceview_cmd("ingest", export, "-o", tmp_path / "run.db")
        done = subprocess.run(command, capture_output=True, text=True)
        assert_one_line_error(done, export, "wal.sqlite-wal beside it")
    finally:
        writer.close()
