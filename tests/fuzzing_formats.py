"""Fuzz cases beyond trace JSON and SQLite exports: nsys Parquet directories, traceview databases someone hands you,
and command lines (issue 25). tests/fuzzing.py makes the trace cases; tests/fuzz_runner.py runs and judges them all.

- `parquet_case`: the sample `nsys export --type parquetdir` directory with its files dropped, cut, flipped, emptied,
  retyped, renamed like traceview's tables, or replaced by a small file of many identical rows;
- `database_case`: a database ingested from a real trace, changed as an attacker would (bytes flipped or cut, tables
  or columns dropped, hostile values, views and macros under the library's names, another schema version), then
  read by `info`, `layers` and `diff`;
- `cli_case`: a command with arguments drawn from valid ones, hostile text, odd numbers and paths.
"""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from fuzzing import HOSTILE_STRINGS, SAMPLES, Case, b_flip_bytes, b_truncate

PARQUET_SEED = SAMPLES / "graph.parquet.tar.gz"
DATABASE_SEED = SAMPLES / "graph.pt.trace.json.gz"  # small, with steps and layers: what database cases start from
READ_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds")

# ---------------------------------------------------------------------------------------------------------
# nsys Parquet directories

Files = dict[str, bytes]


@cache
def parquet_seed() -> tuple[tuple[str, bytes], ...]:
    """The files of the sample Parquet export, by name."""
    with tarfile.open(PARQUET_SEED) as tar:
        return tuple(
            (Path(m.name).name, tar.extractfile(m).read())  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and m.name.endswith(".parquet")
        )


def _table(files: Files, name: str) -> pa.Table:
    return pq.read_table(io.BytesIO(files[name]))


def _written(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _pick(rng: random.Random, files: Files) -> str:
    read = [f"{t}.parquet" for t in READ_TABLES if f"{t}.parquet" in files]
    return rng.choice(read if read and rng.random() < 0.7 else sorted(files))


def p_drop_file(rng: random.Random, files: Files) -> None:
    del files[_pick(rng, files)]


def p_cut_file(rng: random.Random, files: Files) -> None:
    name = _pick(rng, files)
    files[name] = b_truncate(rng, files[name])


def p_flip_file(rng: random.Random, files: Files) -> None:
    name = _pick(rng, files)
    files[name] = b_flip_bytes(rng, files[name])


def p_empty_file(rng: random.Random, files: Files) -> None:
    files[_pick(rng, files)] = b""


def p_retype_column(rng: random.Random, files: Files) -> None:
    """One column of a table as text (`12`, or a hostile string)."""
    name = _pick(rng, files)
    table = _table(files, name)
    index = rng.randrange(table.num_columns)
    texts = [rng.choice([None, "12", *HOSTILE_STRINGS[:8]]) for _ in range(table.num_rows)]
    files[name] = _written(table.set_column(index, table.field(index).name, pa.array(texts, pa.string())))


def p_drop_column(rng: random.Random, files: Files) -> None:
    name = _pick(rng, files)
    table = _table(files, name)
    files[name] = _written(table.remove_column(rng.randrange(table.num_columns)))


def p_many_rows(rng: random.Random, files: Files) -> None:
    """A table of one row repeated 2-50 million times: a few hundred KB."""
    name = _pick(rng, files)
    table = _table(files, name)
    if table.num_rows == 0:
        return
    block = table.take(pa.array([0] * 1_000_000))
    out = io.BytesIO()
    with pq.ParquetWriter(out, table.schema, compression="zstd") as writer:
        for _ in range(rng.randint(2, 50)):
            writer.write_table(block, row_group_size=1_000_000)
    files[name] = out.getvalue()


def p_internal_name(rng: random.Random, files: Files) -> None:
    """A copy of a table under a name traceview keeps (a schema table, a staging table)."""
    files[f"{rng.choice(['gpu_activity', 'runs', '_ngpu', '_nnvtx', 'layer_metrics'])}.parquet"] = files[
        _pick(rng, files)
    ]


PARQUET_MUTATIONS: dict[str, Callable[[random.Random, Files], None]] = {
    f.__name__: f
    for f in (
        p_drop_file,
        p_cut_file,
        p_flip_file,
        p_empty_file,
        p_retype_column,
        p_drop_column,
        p_many_rows,
        p_internal_name,
    )
}


def parquet_case(rng: random.Random) -> Case:
    files = dict(parquet_seed())
    applied = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        name = rng.choice(sorted(PARQUET_MUTATIONS))
        try:
            PARQUET_MUTATIONS[name](rng, files)
        except (pa.ArrowException, OSError, IndexError, ValueError) as error:  # an earlier mutation broke the file
            name += f" (skipped: {type(error).__name__})"
        applied.append(name)
    return Case(
        b"",
        "export.parquet",
        existing_db=rng.random() < 0.25,
        mutations=tuple(applied),
        seed_file=str(PARQUET_SEED),
        kind="parquet",
        files=tuple(sorted(files.items())),
    )


# ---------------------------------------------------------------------------------------------------------
# Databases someone hands you

# (what it does, DuckDB statements run on the copy, by an attacker's plain DuckDB)
DB_SQL: dict[str, Callable[[random.Random], list[str]]] = {
    "d_drop_table": lambda rng: [f"DROP TABLE {rng.choice(['layers', 'steps', 'ranks', 'kernel_busy', 'runs'])}"],
    "d_drop_column": lambda rng: [
        f"ALTER TABLE {rng.choice(['layers', 'gpu_activity', 'steps'])} DROP COLUMN "
        f"{rng.choice(['start_ns', 'end_ns', 'step', 'name', 'layer'])}"
    ],
    "d_extreme_times": lambda rng: [
        f"UPDATE {rng.choice(['layers', 'gpu_activity', 'steps'])} SET "
        f"{rng.choice(['start_ns', 'end_ns'])} = {rng.choice([-(2**63), 2**63 - 1, 0, -1])}"
    ],
    "d_hostile_names": lambda rng: [
        "UPDATE gpu_activity SET name = " + _sql_text(rng.choice(HOSTILE_STRINGS)),
        "UPDATE runs SET label = " + _sql_text(rng.choice(HOSTILE_STRINGS)),
    ],
    "d_stored_view": lambda rng: [
        "CREATE OR REPLACE VIEW layer_metrics AS SELECT * FROM read_text('/proc/self/environ')",
        "CREATE OR REPLACE MACRO round(x, n := 0) AS 25.0",
    ],
    "d_recursive_view": lambda rng: [
        "CREATE OR REPLACE VIEW layer_metrics AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
        "SELECT * FROM r"
    ],
    "d_schema_version": lambda rng: [
        f"UPDATE traceview_meta SET value = '{rng.choice(['0', '999', 'x', ''])}' WHERE key = 'schema_version'"
    ],
    "d_delete_rows": lambda rng: [f"DELETE FROM {rng.choice(['runs', 'ranks', 'steps', 'layers', 'gpu_activity'])}"],
    "d_duplicate_rows": lambda rng: ["INSERT INTO steps SELECT * FROM steps"],
}


def _sql_text(text: str) -> str:
    return "'" + text.encode("utf-8", "replace").decode().replace("'", "''").replace("\x00", "") + "'"


def database_case(rng: random.Random, base_db: bytes) -> Case:
    """`base_db` (a database's bytes) changed by 1-2 attacks, read by every reading command."""
    statements: list[str] = []
    applied = []
    for _ in range(rng.choice([1, 1, 2])):
        name = rng.choice(sorted(DB_SQL))
        statements += DB_SQL[name](rng)
        applied.append(name)
    flip = rng.random() < 0.3
    if flip:
        applied.append(rng.choice(["b_flip_bytes", "b_truncate"]))
    return Case(
        base_db,
        "shared.db",
        mutations=tuple(applied),
        seed_file=str(DATABASE_SEED),
        kind="database",
        sql=tuple(statements),
        byte_seed=rng.randrange(2**32) if flip else None,
    )


def damaged_bytes(case: Case, data: bytes) -> bytes:
    """The byte mutation of a database case, drawn from its own seed."""
    rng = random.Random(case.byte_seed)
    return b_flip_bytes(rng, data) if "b_flip_bytes" in case.mutations else b_truncate(rng, data)


# ---------------------------------------------------------------------------------------------------------
# Command lines

DB, TRACE, OUT = "{db}", "{trace}", "{out}"  # placeholders the runner fills with paths in the case's folder
COMMANDS = {
    "ingest": [TRACE, "-o", OUT],
    "info": [DB],
    "sql": [DB, "SELECT count(*) FROM gpu_activity"],
    "layers": [DB],
    "segment": [DB],
    "queries": [],
    "query": [DB, "layers.summary"],
    "overlap": [DB],
    "diff": [DB, DB],
    "export": [DB, "-o", OUT],
    "report": [DB, "-o", OUT],
    "plot": [DB, "-o", OUT],
}


def command_options(command: str) -> dict[str, bool]:
    """`command`'s options (its long names), each with whether it is a flag (takes no value), read from the CLI
    itself: a table written by hand offered `layers` a --layer-pattern it does not have."""
    import typer.main

    from traceview.cli import app

    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    return {
        name: bool(param.is_flag)
        for param in params
        if param.param_type_name == "option"
        for name in param.opts
        if name.startswith("--") and name != "--help"
    }


VALUES = ["", "0", "-1", "1", "2", "3-5,8", "0-99999999999", "1e400", "nan", "inf", "-inf", "100ms:250ms", "@1:@0"]
VALUES += ["none", "auto", "0.5b", "4GB", "json", "csv", "table", "bogus", "k=v", "=", "(", "a|", ".*", "\\"]
VALUES += [DB, TRACE, OUT, "/dev/null", "/", "-", "base", "layers.summary"]
# Hostile text a command line can carry: no NUL, nothing that is not Unicode.

ARG_TEXTS = [t for t in HOSTILE_STRINGS[:12] if "\x00" not in t and not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]


def cli_case(rng: random.Random) -> Case:
    """A command with its usual arguments, some replaced or dropped, and 0-3 options with drawn values."""
    command = rng.choice(sorted(COMMANDS))
    args = [rng.choice([*VALUES, *ARG_TEXTS]) if rng.random() < 0.2 else a for a in COMMANDS[command]]
    if args and rng.random() < 0.1:
        del args[rng.randrange(len(args))]
    options = command_options(command)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        option = rng.choice(sorted(options))
        args += [option] if options[option] else [option, rng.choice([*VALUES, *ARG_TEXTS])]
    return Case(b"", "", mutations=(command, *args), seed_file=str(DATABASE_SEED), kind="cli", argv=(command, *args))
