"""A traceview database as a hive-partitioned Parquet dataset, and that dataset queried in place.

Writes: DIR/<table>/run_id=<run>/rank=<rank>/data_0.parquet for the tables with a rank (gpu_activity,
launches, cpu_ranges, gpu_ranges, threads, steps, layers, ranks), DIR/<table>/run_id=<run>/data_0.parquet
for runs and ingest_stats. The partition keys are the schema's own column names, so a reader that
understands hive partitioning (DuckDB, Spark, Trino, Polars, pyarrow) sees the same columns as the
database and the SQL library runs unchanged. Reads: such a directory (`connect`).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from . import db
from .errors import BadInputError

RANKED = ("gpu_activity", "launches", "cpu_ranges", "gpu_ranges", "threads", "steps", "layers", "ranks")
BY_RUN = ("runs", "ingest_stats")


def export(con: duckdb.DuckDBPyConnection, directory: str | Path, run_ids: list[int] | None = None) -> Path:
    """Write the runs `run_ids` (default all) of `con`'s database under `directory`; return the directory.

    A run already in the directory is replaced (its partitions are rewritten).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    runs = run_ids or [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    where = f"run_id IN ({', '.join(str(int(r)) for r in runs)})"
    for table in RANKED + BY_RUN:
        keys = "run_id, rank" if table in RANKED else "run_id"
        target = str(out / table).replace("'", "''")
        con.execute(
            f"""COPY (SELECT * FROM {table} WHERE {where} ORDER BY {keys})
                TO '{target}' (FORMAT parquet, PARTITION_BY ({keys}), OVERWRITE_OR_IGNORE, COMPRESSION zstd)"""
        )
    return out


def connect(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose tables are views over the dataset in `directory`.

    Columns come in the schema's order and types, so the SQL library (installed as TEMP objects) and any
    query written for a database run unchanged.
    """
    root = Path(directory)
    if not (root / "runs").is_dir():
        raise BadInputError(root, "not a traceview Parquet dataset (no runs/)", "write one with ingest --parquet DIR")
    con = db.duckdb_connect()
    con.execute(db.schema_sql())  # the tables' columns and types, then replaced by views of the same shape
    for table in RANKED + BY_RUN:
        columns = con.execute(f"SELECT name, type FROM pragma_table_info('{table}') ORDER BY cid").fetchall()
        con.execute(f"DROP TABLE {table}")
        files = str(root / table / "**" / "*.parquet").replace("'", "''")
        select = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in columns)
        if not any((root / table).rglob("*.parquet")):
            con.execute(f"CREATE VIEW {table} AS SELECT {select} FROM (SELECT {_nulls(columns)}) WHERE FALSE")
            continue
        hive_types = "{'run_id': INTEGER, 'rank': INTEGER}" if table in RANKED else "{'run_id': INTEGER}"
        con.execute(
            f"""CREATE VIEW {table} AS SELECT {select}
                FROM read_parquet('{files}', hive_partitioning = true, hive_types = {hive_types},
                                  union_by_name = true)"""
        )
    from . import sqllib

    sqllib.install(con, temporary=True)
    return con


def _nulls(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f'NULL::{kind} AS "{name}"' for name, kind in columns)
