"""A traceview database as a hive-partitioned Parquet dataset, and that dataset queried in place.

Writes: DIR/<table>/run_id=<run>/rank=<rank>/data_0.parquet for the tables with a rank (RANKED: the trace's
tables, the segmentation and the interval figures segmentation precomputes, kernel_busy and kernel_gaps, that
the SQL library's layer/step/overlap queries read), DIR/<table>/run_id=<run>/data_0.parquet for runs and
ingest_stats. The partition keys are the schema's own column names, so a reader that understands hive
partitioning (DuckDB, Spark, Trino, Polars, pyarrow) sees the same columns as the database and the SQL library
runs unchanged. Each file carries the schema's comments on its table and columns as Parquet key-value metadata
(key `traceview.comments`, JSON).

Run ids: a run's id in the dataset is derived from its source's SHA-256 and its label (`dataset_run_id`), not
the database's own numbering (which restarts at 1 in every database), so many databases export into one
directory without replacing each other's runs; exporting the same run again replaces it.

Writing goes through a folder of the process inside the dataset (`staged`, `Staging`): the runs are written
there, then moved into place partition by partition, and moved back out when the write they came with fails
(ingest --parquet: the database's commit), so the dataset and the database change together or not at all. No
symbolic link inside the dataset directory is followed.

Reads: such a directory (`connect`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from . import db
from .errors import BadInputError, DatabaseError, OutputError, os_problem

RANKED = (
    "gpu_activity",
    "launches",
    "cpu_ranges",
    "gpu_ranges",
    "graph_nodes",
    "threads",
    "steps",
    "layers",
    "ranks",
    "kernel_busy",
    "kernel_gaps",
)
BY_RUN = ("runs", "ingest_stats")
TABLES = RANKED + BY_RUN
COMMENTS_KEY = "traceview.comments"


def dataset_run_id(label: str, source_sha256: str) -> int:
    """The run's id in a dataset: from 1 to 2^31 - 1, the same for the same source and label in any database."""
    digest = hashlib.sha256(f"{source_sha256}\0{label}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1) + 1


@contextlib.contextmanager
def staged(directory: str | Path) -> Iterator[Staging]:
    """A Staging for `directory` (created if need be): write runs, publish them, and have them taken back out when
    the block fails (also after publishing: the database they came with was not committed). The partitions they
    replaced are deleted when the block ends well."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
        out = out.resolve()  # DuckDB may write there (db.Access): name it as the file system does
        staging = Staging(out, Path(tempfile.mkdtemp(dir=out, prefix=".staging-")))
    except OSError as error:
        raise _output_error(directory, error) from error
    try:
        yield staging
    except BaseException:
        staging.roll_back()
        raise
    finally:
        shutil.rmtree(staging.work, ignore_errors=True)


@dataclass
class Staging:
    """Runs of a database on their way into the dataset at `root`, through `work`, a folder of this process.

    `write` copies the runs into work/new; `publish` moves each of their run_id= partitions into place, the one
    it replaces into work/old; `roll_back` undoes the moves. The dataset's own folders are checked first: a
    symbolic link among them would have the moves (and the deletion of replaced partitions) happen elsewhere.
    """

    root: Path
    work: Path
    partitions: list[str] = field(default_factory=list)  # table/run_id=N, written into work/new
    published: list[tuple[str, bool]] = field(default_factory=list)  # (partition, replaced one), in order
    created: list[Path] = field(default_factory=list)  # table folders publish made

    def write(self, con: duckdb.DuckDBPyConnection, run_ids: list[int] | None = None) -> None:
        """Copy the runs `run_ids` (default all) of `con`'s database into the work folder."""
        runs = con.execute("SELECT run_id, label, source_sha256 FROM runs ORDER BY run_id").fetchall()
        chosen = {run_id: dataset_run_id(label, sha) for run_id, label, sha in runs if not run_ids or run_id in run_ids}
        self.partitions = [f"{table}/run_id={new}" for table in TABLES for new in chosen.values()]
        self._refuse_links()
        try:
            (self.work / "new").mkdir()
            _refuse_clashes(self.root, con, chosen)
            for table in TABLES:
                _copy_table(con, table, chosen, self.work / "new" / table)
        except (OSError, duckdb.IOException) as error:
            raise _output_error(self.root, error) from error

    def publish(self) -> None:
        """Move the written partitions into place, each replaced one aside (a rename each)."""
        try:
            for partition in self.partitions:
                source, target = self.work / "new" / partition, self.root / partition
                replaced = target.exists()
                if replaced:
                    _moved(target, self.work / "old" / partition)
                elif not target.parent.exists():
                    target.parent.mkdir()
                    self.created.append(target.parent)
                self.published.append((partition, replaced))
                _moved(source, target)
        except OSError as error:
            raise _output_error(self.root, error) from error

    def roll_back(self) -> None:
        """Take the published partitions back out and put the replaced ones back, latest first."""
        for partition, replaced in reversed(self.published):
            shutil.rmtree(self.root / partition, ignore_errors=True)  # the error being raised is the one that matters
            if replaced:
                with contextlib.suppress(OSError):
                    _moved(self.work / "old" / partition, self.root / partition)
        for folder in reversed(self.created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self.published.clear()
        self.created.clear()

    def _refuse_links(self) -> None:
        for folder in [*TABLES, *self.partitions]:
            if (self.root / folder).is_symlink():
                raise OutputError(
                    self.root / folder,
                    "a symbolic link inside the dataset directory: writing there would write elsewhere",
                    "remove the link, or export into another directory",
                )


def _moved(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    source.rename(target)


def _output_error(directory: str | Path, error: BaseException) -> OutputError:
    problem, remedy = os_problem(error) or ("cannot write the dataset", "check the path")
    return OutputError(directory, f"cannot write the dataset: {problem}", remedy)


def _copy_table(con: duckdb.DuckDBPyConnection, table: str, ids: dict[int, int], target: Path) -> None:
    """COPY the rows of `table` of the runs `ids` (database id -> dataset id) to hive partitions under `target`."""
    keys = "run_id, rank" if table in RANKED else "run_id"
    renumber = " ".join(f"WHEN {int(old)} THEN {int(new)}" for old, new in ids.items())
    comments = json.dumps(table_comments(con, table), ensure_ascii=False).replace("'", "''")
    location = str(target).replace("'", "''")
    con.execute(
        f"""COPY (SELECT * REPLACE ((CASE run_id {renumber} END)::INTEGER AS run_id) FROM {table}
                  WHERE run_id IN ({", ".join(str(int(r)) for r in ids)}) ORDER BY {keys})
            TO '{location}' (FORMAT parquet, PARTITION_BY ({keys}), OVERWRITE_OR_IGNORE, COMPRESSION zstd,
                             KV_METADATA {{'{COMMENTS_KEY}': '{comments}'}})"""
    )
    for old, new in ids.items():  # a table without rows still gets a file: readers (Spark) need its columns
        if not (target / f"run_id={new}").is_dir():
            empty = target / f"run_id={new}" / (f"rank={_first_rank(con, old)}" if table in RANKED else "")
            empty.mkdir(parents=True)
            con.execute(
                f"""COPY (SELECT * EXCLUDE ({keys}) FROM {table} WHERE FALSE)
                    TO '{str(empty / "data_0.parquet").replace("'", "''")}'
                    (FORMAT parquet, COMPRESSION zstd, KV_METADATA {{'{COMMENTS_KEY}': '{comments}'}})"""
            )


def _first_rank(con: duckdb.DuckDBPyConnection, run_id: int) -> int:
    rows = con.execute("SELECT coalesce(min(rank), 0) FROM ranks WHERE run_id = ?", [run_id]).fetchall()
    return int(rows[0][0])


def _refuse_clashes(out: Path, con: duckdb.DuckDBPyConnection, ids: dict[int, int]) -> None:
    """A dataset id already taken by another run (another source or label) would be overwritten: refuse."""
    if not any((out / "runs").rglob("*.parquet")):
        return
    existing = dict(
        ((r[0]), (r[1], r[2]))
        for r in con.execute(
            "SELECT run_id, label, source_sha256 FROM read_parquet(?, hive_partitioning = true)",
            [str(out / "runs" / "**" / "*.parquet")],
        ).fetchall()
    )
    for old, new in ids.items():
        label, sha = con.execute("SELECT label, source_sha256 FROM runs WHERE run_id = ?", [old]).fetchall()[0]
        if new in existing and existing[new] != (label, sha):
            raise DatabaseError(
                out,
                f"run id {new} of {label!r} is taken by run {existing[new][0]!r} of another source",
                "export into another directory, or remove that run's run_id= folders",
            )


def table_comments(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, object]:
    """{'table': comment, 'columns': {column: comment}}: the schema's comments on `table`."""
    (comment,) = con.execute("SELECT comment FROM duckdb_tables() WHERE table_name = ?", [table]).fetchall()[0]
    columns = con.execute(
        "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [table]
    ).fetchall()
    return {"table": comment, "columns": dict(columns)}


def connect(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose tables are views over the dataset in `directory`.

    Columns come in the schema's order and types, with the schema's comments, so the SQL library (installed as
    TEMP objects) and any query written for a database run unchanged.
    """
    root = Path(directory)
    if not (root / "runs").is_dir():
        raise BadInputError(root, "not a traceview Parquet dataset (no runs/)", "write one with ingest --parquet DIR")
    con = db.duckdb_connect(access=db.Access((root,)))
    with db.defining(con):
        con.execute(db.schema_sql())  # the tables' columns and types, then replaced by views of the same shape
        for table in TABLES:
            comments = table_comments(con, table)
            columns = con.execute(f"SELECT name, type FROM pragma_table_info('{table}') ORDER BY cid").fetchall()
            con.execute(f"DROP TABLE {table}")
            select = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in columns)
            con.execute(f"CREATE VIEW {table} AS SELECT {select} FROM {_source(root, table, columns)}")
            _comment_view(con, table, comments)
    from . import sqllib

    sqllib.install(con, temporary=True)
    return con


def _source(root: Path, table: str, columns: list[tuple[str, str]]) -> str:
    """The FROM of a table's view: its Parquet files, or no rows of the right shape when it has none."""
    if not any((root / table).rglob("*.parquet")):
        nulls = ", ".join(f'NULL::{kind} AS "{name}"' for name, kind in columns)
        return f"(SELECT {nulls}) WHERE FALSE"
    files = str(root / table / "**" / "*.parquet").replace("'", "''")
    hive_types = "{'run_id': INTEGER, 'rank': INTEGER}" if table in RANKED else "{'run_id': INTEGER}"
    return f"read_parquet('{files}', hive_partitioning = true, hive_types = {hive_types}, union_by_name = true)"


def _comment_view(con: duckdb.DuckDBPyConnection, view: str, comments: dict[str, object]) -> None:
    con.execute(f"COMMENT ON VIEW {view} IS {_literal(comments['table'])}")
    columns = comments["columns"]
    assert isinstance(columns, dict)
    for column, comment in columns.items():
        con.execute(f'COMMENT ON COLUMN {view}."{column}" IS {_literal(comment)}')


def _literal(value: object) -> str:
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"
