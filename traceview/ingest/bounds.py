"""The cost model of ingest: the work a file may ask for, against its size on disk, checked before the work.

Reads: an input's size and what it says of its own contents (SQLite's schema, Parquet's footer). Writes: nothing;
raises BadInputError naming the file, what is out of proportion, and the option that lifts the bound.

An input of S bytes may make ingest handle at most `limit(S)` = max(FLOOR, ratio x S) bytes of data, ratio 64 unless
`--max-expansion RATIO` (or `none`, no bound) says otherwise, whatever its format:
- JSON (.json, .json.gz): the decompressed bytes, counted as they stream (kineto_array, jsonstream). A real trace
  compresses 10-20x; a gzip bomb of whitespace 1000x.
- nsys SQLite export: counted per table that ingest reads (`sqlite_cost`): its rows x columns x CELL_BYTES, and the
  strings its rows yield that are not stored in them: a column's DEFAULT (a column added by ALTER TABLE, which every
  older row yields: 46,080 NVTX rows of a 1 MB `text` in a 3.5 MB file) and the StringIds values its id columns
  name (138,240 kernels naming one 2 MB string in 13 MB: 540 GB of names once joined). What the file stores as code,
  which SQLite runs at every read, has no bound in S at all: a generated column (a `StringIds.value` of
  printf('%.*c', 20000000, 'x') per row in a 487 KB file) or a virtual table is refused among the tables
  (`check_sqlite`), unless the bound is lifted.
- nsys Parquet export: Parquet writes a run of equal values in a few bytes (100 M identical rows in 565 KB), so each
  file's rows x columns x CELL_BYTES (what DuckDB holds of them), from its footer, counts against the file's own size
  (`check_parquet`), before any row is read; so do its pages once decompressed (a zstd page of 1 GB of one byte is
  kilobytes), and its strings once their dictionary is expanded (one 10 MB string that a million rows point to).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInputError

if TYPE_CHECKING:
    import sqlite3

    import pyarrow.parquet as pq

RATIO = 64.0  # default: data may be this multiple of the file
FLOOR = 1 << 28  # 256 MiB: below this, any input is allowed (a small file's ratio means nothing)
CELL_BYTES = 8  # a Parquet value as DuckDB holds it (a BIGINT, a string's pointer)
OPTION = "--max-expansion"
# SQLite's pragma_table_xinfo: `hidden` of a virtual (2) or stored (3) generated column.
GENERATED = (2, 3)
STRING_IDS = ("demangledName", "shortName", "nameId", "textId")  # nsys columns that hold a StringIds id
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
    """Refuse a Parquet file whose cells (rows x columns, from its footer), pages once decompressed, or strings once
    their dictionary is expanded exceed `limit` of its size."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    size = path.stat().st_size
    bound = limit(size, ratio)
    if bound is None:
        return
    try:
        meta = pq.read_metadata(path)
        cells = meta.num_rows * max(meta.num_columns, 1) * CELL_BYTES
        if cells > bound:
            problem = (
                f"{meta.num_rows:,} rows of {meta.num_columns} columns in {size:,} bytes: ~{cells >> 20:,} MiB to read"
            )
            raise refusal(path, f"{problem}, {beyond(ratio)}")
        pages = sum(chunk.total_uncompressed_size for chunk in _chunks(meta))
        if pages > bound:
            raise refusal(path, f"pages of ~{pages >> 20:,} MiB once decompressed in {size:,} bytes, {beyond(ratio)}")
        strings = _string_bytes(path, meta, bound - cells)
    except (OSError, pa.ArrowException):
        return  # not Parquet at all, or a damaged one: DuckDB's read words it (nsys_export._damaged)
    if cells + strings > bound:
        problem = f"strings of ~{strings >> 20:,} MiB once their dictionary is expanded, in {size:,} bytes"
        raise refusal(path, f"{problem}, {beyond(ratio)}")


def _chunks(meta: pq.FileMetaData) -> Iterator[pq.ColumnChunkMetaData]:
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for column in range(row_group.num_columns):
            yield row_group.column(column)


def _string_bytes(path: Path, meta: pq.FileMetaData, room: int) -> int:
    """The bytes of a Parquet file's strings (its BYTE_ARRAY values) as a reader holds them, or more.

    A plain-encoded chunk holds its strings: its decompressed size. A dictionary-encoded one holds each distinct
    string once and a small index per row, which a reader expands: one 10 MB string under a million rows costs
    10 TB in a file of kilobytes. Its bound is its rows x its decompressed size; where those bounds add up beyond
    `room`, each top-level column's strings are counted from its indices (read without expanding them), and a
    nested one keeps its bound."""
    plain = 0
    worst: dict[str, int] = {}
    for chunk in _chunks(meta):
        if chunk.physical_type != "BYTE_ARRAY":
            continue
        if chunk.has_dictionary_page:
            worst[chunk.path_in_schema] = (
                worst.get(chunk.path_in_schema, 0) + chunk.num_values * chunk.total_uncompressed_size
            )
        else:
            plain += chunk.total_uncompressed_size
    if plain + sum(worst.values()) <= room:
        return plain + sum(worst.values())
    counted = [name for name in worst if name in meta.schema.to_arrow_schema().names]
    return plain + sum(v for k, v in worst.items() if k not in counted) + _expanded(path, counted)


def _expanded(path: Path, columns: list[str]) -> int:
    """The bytes of `columns`' strings once expanded, summed from their dictionaries' lengths taken at each index,
    one row group at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not columns:
        return 0
    total = 0
    with pq.ParquetFile(path, read_dictionary=columns) as file:
        for group in range(file.num_row_groups):
            for column in file.read_row_group(group, columns=columns, use_threads=False).columns:
                for chunk in column.chunks:
                    if isinstance(chunk, pa.DictionaryArray):
                        chunk = pc.take(pc.binary_length(chunk.dictionary), chunk.indices)
                    else:
                        chunk = pc.binary_length(chunk)
                    total += pc.sum(chunk).as_py() or 0
    return total


def check_sqlite(path: Path, ratio: float | None, tables: Sequence[str]) -> None:
    """Refuse an SQLite file with a virtual table or a generated column (nsys writes neither): code whose cost the
    file's size does not bound; or whose `tables` (those ingest reads) cost more than `limit` of its size
    (sqlite_cost). Read with the standard library's SQLite, read-only and immutable."""
    import sqlite3

    size = path.stat().st_size
    bound = limit(size, ratio)
    if ratio is None or bound is None:
        return
    con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        _refuse_stored_code(con, path)
        costs = sqlite_cost(con, tables, bound)
    except sqlite3.Error:
        return  # a damaged file: the export's own reader words it
    finally:
        con.close()
    total = sum(cost.total for cost in costs)
    if total > bound:
        worst = max(costs, key=lambda cost: cost.total)
        problem = (
            f"its tables ask for ~{total >> 20:,} MiB in {size:,} bytes, ~{worst.total >> 20:,} MiB of it "
            f"{worst.table}'s {worst.rows:,} rows ({worst.strings >> 20:,} MiB of strings they name or default to)"
        )
        raise refusal(path, f"{problem}, {beyond(ratio)}")


def _refuse_stored_code(con: sqlite3.Connection, path: Path) -> None:
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


@dataclass(frozen=True)
class TableCost:
    """What ingest may hold of one SQLite table: its rows, CELL_BYTES a cell, and the bytes of its strings that are
    not stored in its rows (`strings`)."""

    table: str
    rows: int
    cells: int
    strings: int

    @property
    def total(self) -> int:
        return self.cells + self.strings


def sqlite_cost(con: sqlite3.Connection, tables: Sequence[str], room: int) -> list[TableCost]:
    """The cost of each of `tables` that the file has, counted per table.

    Stored rows and strings lie in the file, but two kinds of string do not lie in the rows that yield them:
    - a column added by ALTER TABLE with a DEFAULT: every row written before yields the default, stored once in
      the schema (a million NVTX rows, each read with a 1 MB `text`, from a 4 MB file);
    - an id naming a StringIds entry (STRING_IDS columns): a million kernels naming one 2 MB string are 2 TB of
      names once joined.
    Each row is counted with its columns' defaults and, per id column, the longest StringIds value; where that
    bound exceeds `room`, the ids' strings are counted exactly (each distinct id's length times its rows)."""
    present = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    longest = 0
    if "StringIds" in present:
        longest = con.execute("SELECT coalesce(max(length(CAST(value AS BLOB))), 0) FROM StringIds").fetchone()[0]
    shapes = {table: _shape(con, table) for table in tables if table in present}
    bound = [
        TableCost(t, rows, rows * cells, rows * (defaults + len(ids) * longest))
        for t, (rows, cells, defaults, ids) in shapes.items()
    ]
    if sum(cost.total for cost in bound) <= room:
        return bound
    return [
        TableCost(t, rows, rows * cells, rows * defaults + sum(_named_bytes(con, t, column) for column in ids))
        for t, (rows, cells, defaults, ids) in shapes.items()
    ]


def _shape(con: sqlite3.Connection, table: str) -> tuple[int, int, int, list[str]]:
    """A table's rows, bytes a row's cells take, bytes of its columns' defaults, and its STRING_IDS columns."""
    columns = con.execute("SELECT name, dflt_value FROM pragma_table_xinfo(?)", [table]).fetchall()
    rows = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    defaults = sum(len(str(default).encode()) for _, default in columns if default is not None)
    return rows, CELL_BYTES * len(columns), defaults, [name for name, _ in columns if name in STRING_IDS]


def _named_bytes(con: sqlite3.Connection, table: str, column: str) -> int:
    """The bytes of the StringIds values that `table.column` names, each counted once per row naming it."""
    return con.execute(
        f"""SELECT coalesce(sum(length(CAST(s.value AS BLOB)) * n.rows), 0)
            FROM (SELECT "{column}" AS id, count(*) AS rows FROM "{table}" GROUP BY 1) n
            JOIN StringIds s ON s.id = n.id"""
    ).fetchone()[0]
