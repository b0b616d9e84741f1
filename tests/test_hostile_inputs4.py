"""Issue 25, attacks of the fourth round (not the issue's own): each got through before its fix.

- A link to /dev/zero among a directory's rank files, or a FIFO or such a link among a Parquet export's tables:
  ingest read the device without end, or waited for ever on the FIFO (killed at 60 s, with and without --jobs).
- JSON written with a byte-order mark (UTF-8 with BOM, UTF-16) was "not JSON (the file does not start with { or [)",
  which it does, after the mark.
- `query --param` with a negative, NaN or out-of-range number gave an empty table (or a number DuckDB bound as
  HUGEINT) with exit 0.
"""

from __future__ import annotations

import codecs
import gzip
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import SAMPLES
from hostile_traces import assert_one_line_error, traceview

TRACE = SAMPLES / "eager.pt.trace.json.gz"
SPECIAL = "not a regular file (a FIFO, a device or a link to one)"


def special(path: Path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_rank_directory_holding_a_device_is_refused(tmp_path: Path, jobs: str) -> None:
    """(A FIFO there is a rank's stream: tests/test_ingest_streams.py.)"""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copyfile(TRACE, ranks / "rank0.json.gz")
    member = special(ranks / "rank1.json", "device")
    done = traceview("ingest", ranks, "-o", tmp_path / "run.db", "--jobs", jobs, timeout=60)
    assert_one_line_error(done, member, "not a regular file (a device or a socket)")
    assert not (tmp_path / "run.db").exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_parquet_export_holding_a_fifo_or_a_device_is_refused(tmp_path: Path, kind: str) -> None:
    with tarfile.open(SAMPLES / "graph.parquet.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    member = special(tmp_path / "graph.parquet" / "ZZZ.parquet", kind)
    done = traceview("ingest", tmp_path / "graph.parquet", "-o", tmp_path / "run.db", timeout=60)
    assert_one_line_error(done, member, SPECIAL)


@pytest.mark.parametrize(
    ("mark", "encoding", "remedy"),
    [(codecs.BOM_UTF8, "utf-8", "remove the mark"), (codecs.BOM_UTF16_LE, "utf-16-le", "iconv -f UTF-16")],
)
def test_json_with_a_byte_order_mark_says_so(tmp_path: Path, mark: bytes, encoding: str, remedy: str) -> None:
    text = gzip.decompress(TRACE.read_bytes()).decode()[:100_000]
    trace = tmp_path / "trace.json"
    trace.write_bytes(mark + text.encode(encoding))
    done = traceview("ingest", trace, "-o", tmp_path / "run.db")
    assert_one_line_error(done, trace, "byte-order mark" if encoding == "utf-8" else "UTF-16", remedy)


@pytest.mark.parametrize(
    ("query", "param"), [("kernel_top", "n=-5"), ("layer_idle_gaps", "min_us=nan"), ("kernel_top", "n=1" + "0" * 20)]
)
def test_a_query_parameter_out_of_range_is_one_line(ingested: object, tmp_path: Path, query: str, param: str) -> None:
    db = ingested(TRACE)  # type: ignore[operator]
    done = traceview("query", db, query, "--param", param)
    assert_one_line_error(done, db, "out of range", "finite and not negative")
