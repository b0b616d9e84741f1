"""The cost model of ingest: the work a file may ask for, against its size on disk, checked before the work.

Reads: an input's size and what it says of its own contents (SQLite's schema, Parquet's footer). Writes: nothing;
raises BadInputError naming the file, what is out of proportion, and the option that lifts the bound.

An input of S bytes may make ingest handle at most `limit(S)` = max(FLOOR, ratio x S) bytes of data, ratio 64 unless
`--max-expansion RATIO` (or `none`, no bound) says otherwise, whatever its format:
- JSON (.json, .json.gz): the decompressed bytes, counted as they stream (kineto_array, jsonstream). A real trace
  compresses 10-20x; a gzip bomb of whitespace 1000x.
- nsys SQLite export: every row and string of a stored table lies in the file, so the tables read cannot hold more
  than S bytes. What can is code the file stores, which SQLite runs at every read: a generated column (a
  `StringIds.value` of printf('%.*c', 20000000, 'x') per row in a 487 KB file) or a virtual table. Its cost has no
  bound in S: refused among the tables traceview reads (`check_sqlite`), unless the bound is lifted.
- nsys Parquet export: Parquet writes a run of equal values in a few bytes (100 M identical rows in 565 KB), so each
  file's rows x columns x CELL_BYTES (what DuckDB holds of them), from its footer, counts against the file's own size
  (`check_parquet`), before any row is read.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import BadInputError

RATIO = 64.0  # default: data may be this multiple of the file
FLOOR = 1 << 28  # 256 MiB: below this, any input is allowed (a small file's ratio means nothing)
CELL_BYTES = 8  # a Parquet value as DuckDB holds it (a BIGINT, a string's pointer)
OPTION = "--max-expansion"
# SQLite's pragma_table_xinfo: `hidden` of a virtual (2) or stored (3) generated column.
GENERATED = (2, 3)
UNBOUNDED = "computed at every read at a cost the file's size does not bound (nsys writes none)"


def parse_max_expansion(text: str) -> float | None:
    """`--max-expansion`: a ratio of at least 1 (data bytes per file byte), or `none` (None: no bound)."""
    if text.strip().lower() == "none":
        return None
    try:
        ratio = float(text)
    except ValueError:
        ratio = math.nan
    if not 1 <= ratio < math.inf:
        raise BadInputError(None, f"bad {OPTION} {text!r}", "give a ratio such as 64 or 1000, or none")
    return ratio


def limit(file_bytes: int, ratio: float | None) -> int | None:
    """The most data bytes a file of `file_bytes` may expand to under `ratio` (None: no bound)."""
    return None if ratio is None else max(FLOOR, int(ratio * file_bytes))


def refusal(path: Path, problem: str, lift: str = "none (or a larger ratio)") -> BadInputError:
    """The one-line refusal: `path`, what is out of proportion, and how to lift the bound."""
    return BadInputError(path, problem, f"check where the file came from, or pass {OPTION} {lift} if it is genuine")


def beyond(ratio: float) -> str:
    """What the bound allows, in words."""
    return f"more than {ratio:g}x the file's size (and {FLOOR >> 20} MiB)"


def check_parquet(path: Path, ratio: float | None) -> None:
    """Refuse a Parquet file whose rows x columns, from its footer, exceed `limit` of its size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bound = limit(path.stat().st_size, ratio)
    if bound is None:
        return
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return  # not Parquet at all: DuckDB's read words it (nsys_export._damaged)
    cells = meta.num_rows * max(meta.num_columns, 1)
    if cells * CELL_BYTES > bound:
        problem = (
            f"{meta.num_rows:,} rows of {meta.num_columns} columns in {path.stat().st_size:,} bytes: "
            f"~{cells * CELL_BYTES >> 20:,} MiB to read, {beyond(ratio)}"
        )
        raise refusal(path, problem)


def check_sqlite(path: Path, ratio: float | None) -> None:
    """Refuse an SQLite file with a virtual table or a generated column (nsys writes neither): code whose cost the
    file's size does not bound. Read with the standard library's SQLite, read-only and immutable."""
    import sqlite3

    if ratio is None:
        return
    con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        for table, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall():
            if str(sql).upper().startswith("CREATE VIRTUAL TABLE"):
                raise refusal(path, f"{table} is a virtual table, {UNBOUNDED}", "none")
            generated = [
                row[0]
                for row in con.execute("SELECT name, hidden FROM pragma_table_xinfo(?)", [table]).fetchall()
                if row[1] in GENERATED
            ]
            if generated:
                raise refusal(path, f"{table}.{generated[0]} is a generated column, {UNBOUNDED}", "none")
    except sqlite3.Error:
        return  # a damaged file: the export's own reader words it
    finally:
        con.close()
