"""Every table of old code's databases against new code's, both ways with EXCEPT ALL: the same rows, or which differ.

Each input (a trace file, or a directory of per-rank files) is ingested by both trees, each in one process of its own
Python (`api.ingest` in a loop over the inputs: one start-up per tree, not per input), into WORK/old/N.db and
WORK/new/N.db. Then every table of the two databases is compared both ways, `old EXCEPT ALL new` and `new EXCEPT ALL
old` (duplicates count), over the columns both have, less the ones that say when or by which version a run was
written (VOLATILE). An input that fails must fail the same way in both (its error line). Prints one line per input
that differs and a summary; exits 1 when any does.

    python bench/compare_tables.py --old ../wt-base                  # the corpus: sample_traces/, ../shared/external/
    python bench/compare_tables.py --old ../wt-base --only-bench --bench-data /tmp/traceview-bench
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep")
NOT_TRACES = ("meta.", "truth.")
VOLATILE = {"runs": ("ingested_at", "traceview_version")}
# Runs in the other tree's Python: ingest each (input, database, jobs) of the JSON list in argv[1], write each
# outcome ("" or the error's first line) to the JSON file in argv[2].
INGEST_ALL = """
import json, sys
from traceview import api
from traceview.ingest import IngestOptions
outcomes = []
for source, database, jobs in json.load(open(sys.argv[1])):
    try:
        api.ingest([source], database, IngestOptions(jobs=jobs))
        outcomes.append("")
    except Exception as error:
        outcomes.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
json.dump(outcomes, open(sys.argv[2], "w"))
"""


def corpus_inputs() -> list[Path]:
    """Every trace file under sample_traces/ and ../shared/external/, and each directory of several rank files."""
    found: list[Path] = []
    for top in (ROOT / "sample_traces", ROOT.parent / "shared" / "external"):
        files = sorted(p for p in top.rglob("*") if p.is_file() and _a_trace(p))
        found += files
        folders = sorted({p.parent for p in files if p.name.endswith((".json", ".json.gz"))})
        found += [d for d in folders if sum(1 for p in files if p.parent == d) > 1 and d.name.startswith("tp_")]
    return found


def _a_trace(path: Path) -> bool:
    """A trace file by its name: not the truth labels and run descriptions that lie beside the corpus's traces."""
    return path.name.endswith(TRACE_SUFFIXES) and path.parent.name != "labels" and not path.name.startswith(NOT_TRACES)


def bench_inputs(data: Path) -> list[Path]:
    """The bench's cached inputs (bench_ingest.py, --data): every trace file, and each directory of rank files."""
    files = sorted(
        p for p in data.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and ".meta." not in p.name
    )
    folders = sorted({p.parent for p in files if p.parent.name.startswith("ranks-")})
    return [p for p in files if not p.parent.name.startswith("ranks-")] + folders


def ingest_all(tree: Path, python: Path, inputs: list[Path], out: Path, jobs: int) -> list[str]:
    """Ingest `inputs` with the code of `tree` into out/N.db; the outcome of each ("" when it went in)."""
    out.mkdir(parents=True, exist_ok=True)
    plan = [(str(p), str(out / f"{n}.db"), jobs if p.is_dir() else 1) for n, p in enumerate(inputs)]
    todo, done = out / "plan.json", out / "outcomes.json"
    todo.write_text(json.dumps(plan))
    subprocess.run([str(python), "-c", INGEST_ALL, str(todo), str(done)], cwd=tree, check=True)
    return json.loads(done.read_text())


def differences(old: Path, new: Path) -> list[str]:
    """Per table, how many rows one database has that the other lacks (EXCEPT ALL both ways); [] when equal."""
    con = duckdb.connect(str(new), read_only=True)
    try:
        con.execute(f"ATTACH '{old}' AS old (READ_ONLY)")
        tables = {db: _tables(con, db) for db in (_name(con), "old")}
        mine, theirs = tables.values()
        found = [f"table {t} only in one" for t in sorted(set(mine) ^ set(theirs))]
        for table in sorted(set(mine) & set(theirs)):
            columns = [c for c in mine[table] if c in theirs[table] and c not in VOLATILE.get(table, ())]
            select = ", ".join(f'"{c}"' for c in columns)
            new_only = _rows_only_in(con, _name(con), "old", table, select)
            old_only = _rows_only_in(con, "old", _name(con), table, select)
            if new_only or old_only or mine[table] != theirs[table]:
                found.append(f"{table}: {new_only} rows only in new, {old_only} only in old")
        return found
    finally:
        con.close()


def _rows_only_in(con: duckdb.DuckDBPyConnection, a: str, b: str, table: str, select: str) -> int:
    """Rows of database a's `table` that b's lacks, duplicates counted (EXCEPT ALL), over the columns `select`."""
    query = f'SELECT {select} FROM "{a}".{table} EXCEPT ALL SELECT {select} FROM "{b}".{table}'
    return con.execute(f"SELECT count(*) FROM ({query})").fetchall()[0][0]


def _name(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("SELECT current_database()").fetchall()[0][0]


def _tables(con: duckdb.DuckDBPyConnection, database: str) -> dict[str, list[str]]:
    rows = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main' "
        "AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE database_name = ?) ORDER BY column_index",
        [database, database],
    ).fetchall()
    tables: dict[str, list[str]] = {}
    for table, column in rows:
        tables.setdefault(table, []).append(column)
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the old code's tree (a git worktree)")
    parser.add_argument("--old-python", type=Path, help="its Python (default: OLD/.venv/bin/python)")
    parser.add_argument("--new", type=Path, default=ROOT, help="the new code's tree (default: this one)")
    parser.add_argument("--new-python", type=Path, default=Path(sys.executable))
    parser.add_argument("--bench-data", type=Path, help="also the bench's cached inputs in this directory")
    parser.add_argument("--only-bench", action="store_true", help="the bench's inputs alone, not the corpus")
    parser.add_argument("--jobs", type=int, default=4, help="--jobs for directories of rank files")
    parser.add_argument("--work", type=Path, help="where the databases go (default: a temporary directory)")
    args = parser.parse_args(argv)
    inputs = [] if args.only_bench else corpus_inputs()
    inputs += bench_inputs(args.bench_data) if args.bench_data else []
    old_python = args.old_python or args.old / ".venv" / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="traceview-compare-") as tmp:
        work = args.work or Path(tmp)
        outcomes = {
            side: ingest_all(tree.resolve(), python, inputs, work / side, args.jobs)
            for side, tree, python in (("old", args.old, old_python), ("new", args.new, args.new_python))
        }
        failed = 0
        for n, source in enumerate(inputs):
            old_error, new_error = outcomes["old"][n], outcomes["new"][n]
            if old_error or new_error:
                found = [] if old_error == new_error else [f"old: {old_error or 'ok'}; new: {new_error or 'ok'}"]
            else:
                found = differences(work / "old" / f"{n}.db", work / "new" / f"{n}.db")
            if found:
                failed += 1
                print(f"DIFFERS {source}: {'; '.join(found)}")
        errors = sum(1 for e in outcomes["new"] if e)
        print(f"{len(inputs)} inputs ({errors} refused by both alike), {failed} differ; every table compared both ways")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
