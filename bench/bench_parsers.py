"""The JSON parsers that could read Kineto traces, measured on the realistic trace: CPU seconds to turn its events
into the typed columns traceview stages (issue 18: "measure the candidates before choosing").

Input: the real H200 trace replicated to --size (bench/replicate_trace.py, as bench_ingest's `real` input), written
twice without header or trailer: as a JSON array in PyTorch's pretty-printed layout (what the fast path feeds
DuckDB) and as newline-delimited JSON (the layout pyarrow and polars read). Each candidate reads one of them in its
own child process into columns ph, cat, name, pid, tid, ts, dur and the ten args fields traceview keeps
(kineto.FAST_EVENT_COLUMNS); a row gives the CPU seconds of the parse alone (user + system of the child, all its
threads, after its imports), CPU-s per GB of the file it read, its wall time and the child's peak RSS. Only the
parse is timed: no table of traceview's is written.

    python bench/bench_parsers.py --size 100MB [--extra-python .venv-parsers/bin/python]

Candidates missing from this interpreter are run with --extra-python when it has them (polars and msgspec are
not traceview dependencies; bench/README.md shows the venv), else skipped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_ingest  # noqa: E402
import replicate_trace  # noqa: E402
from gen_traces import parse_size  # noqa: E402

EXTRA_PYTHON = HERE.parent / ".venv-parsers" / "bin" / "python"

# Around each candidate's code: START() after its imports, then the parse's CPU-s, wall s and the peak RSS on stdout.
TIMED = """
import resource, sys, time
def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def START():
    global _start
    _start = (_cpu(), time.perf_counter())
{code}
print(_cpu() - _start[0], time.perf_counter() - _start[1], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

# The args fields traceview keeps, by the name each parser's schema gives them.
ARGS = {
    "correlation": "int",
    "device": "int",
    "stream": "int",
    "grid": "ints",
    "block": "ints",
    "bytes": "int",
    "Collective name": "str",
    "graph id": "int",
    "graph node id": "int",
    "name": "str",
}

DUCKDB = """
import sys, duckdb
from traceview.ingest.kineto import FAST_EVENT_COLUMNS
spec = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in FAST_EVENT_COLUMNS.items()) + "}"
fmt = "array" if sys.argv[1].endswith(".json") else "newline_delimited"
con = duckdb.connect()
START()
con.execute(
    f"CREATE TEMP TABLE ev AS SELECT * FROM read_json(?, format = '{fmt}', columns = {spec})", [sys.argv[1]])
"""
# pid and tid are left out: pyarrow refuses a column whose values are numbers in some events and strings in
# others ("pid": "Traces" in PyTorch's own events), whichever type the schema gives it.
PYARROW = """
import sys, pyarrow as pa, pyarrow.json as pj
kinds = {"int": pa.int64(), "ints": pa.list_(pa.int32()), "str": pa.string()}
args = pa.struct([(k, kinds[v]) for k, v in ARGS.items()])
schema = pa.schema([("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
                    ("ts", pa.decimal128(38, 18)), ("dur", pa.decimal128(38, 18)), ("args", args)])
START()
pj.read_json(sys.argv[1], parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
"""
POLARS = """
import sys, polars as pl
kinds = {"int": pl.Int64, "ints": pl.List(pl.Int32), "str": pl.String}
schema = {"ph": pl.String, "cat": pl.String, "name": pl.String, "pid": pl.String, "tid": pl.String,
          "ts": pl.String, "dur": pl.String, "args": pl.Struct({k: kinds[v] for k, v in ARGS.items()})}
START()
pl.read_ndjson(sys.argv[1], schema=schema)
"""
MSGSPEC = """
import sys, msgspec
kinds = {"int": int | None, "ints": list[int] | None, "str": str | None}
Args = msgspec.defstruct("Args", [(k.replace(" ", "_"), kinds[v], msgspec.field(default=None, name=k))
                                  for k, v in ARGS.items()])
Event = msgspec.defstruct("Event", [(k, int | str | float | None, None) for k in ("ph", "cat", "name", "pid", "tid",
                                                                                     "ts", "dur")]
                          + [("args", Args | None, None)])
START()
with open(sys.argv[1], "rb") as handle:
    events = msgspec.json.Decoder(list[Event]).decode(handle.read())
"""

# simdjson's DOM is the fastest parse here (~1 CPU-s/GB alone); the columns then come from Python, event by event.
SIMDJSON = """
import sys, simdjson
with open(sys.argv[1], "rb") as handle:
    data = handle.read()
START()
columns = {k: [] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur", *ARGS)}
top = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
for event in simdjson.Parser().parse(data):
    for key in top:
        columns[key].append(event.get(key))
    args = event.get("args") or {}
    for key in ARGS:
        columns[key].append(args.get(key))
"""


@dataclass(frozen=True)
class Candidate:
    name: str
    module: str
    layout: str  # "array" or "ndjson": the file it reads
    code: str


CANDIDATES = (
    Candidate("DuckDB read_json (traceview's)", "duckdb", "array", DUCKDB),
    Candidate("DuckDB read_json", "duckdb", "ndjson", DUCKDB),
    Candidate("pyarrow.json (no pid/tid)", "pyarrow", "ndjson", PYARROW),
    Candidate("polars.read_ndjson", "polars", "ndjson", POLARS),
    Candidate("msgspec, typed structs", "msgspec", "array", MSGSPEC),
    Candidate("pysimdjson DOM, columns in Python", "simdjson", "array", SIMDJSON),
)


def write_inputs(size: int, folder: Path) -> dict[str, Path]:
    """The replicated events as a JSON array (PyTorch's layout) and as newline-delimited JSON; made once."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"array": folder / "events.json", "ndjson": folder / "events.ndjson"}
    if all(p.exists() for p in paths.values()):
        return paths
    pretty = replicate_trace.Replicator(replicate_trace.SAMPLE, "pytorch", long_fractions=False)
    lines = replicate_trace.Replicator(replicate_trace.SAMPLE, "lines", long_fractions=False)
    with open(paths["array"], "wb") as array, open(paths["ndjson"], "wb") as ndjson:
        array.write(b"[\n  ")
        written, copy = 0, 0
        while written < size:
            text = pretty.copy(copy)
            array.write((pretty.separator if copy else b"") + text)
            ndjson.write(lines.copy(copy).replace(lines.separator, b"\n") + b"\n")  # one event per line
            written += len(text)
            copy += 1
        array.write(b"\n]\n")
    return paths


def python_for(module: str, extra: Path) -> str | None:
    """An interpreter that can import `module`: this one, else `extra`, else None."""
    for python in (sys.executable, str(extra)):
        found = subprocess.run([python, "-c", f"import {module}"], stderr=subprocess.DEVNULL, check=False)
        if Path(python).exists() and found.returncode == 0:
            return python
    return None


def parse_once(python: str, candidate: Candidate, path: Path) -> tuple[float, float, float] | str:
    """(CPU-s, wall s, peak RSS MB) of one parse of `path` by `candidate`, or its error's last line."""
    code = TIMED.format(code=f"ARGS = {ARGS!r}\n{candidate.code}")
    done = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:80]
    cpu, wall, rss = map(float, done.stdout.split())
    return cpu, wall, rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100MB", help="size of the array file")
    parser.add_argument("--data", type=Path, default=bench_ingest.DEFAULT_DATA)
    parser.add_argument("--repeat", type=int, default=2, help="runs per candidate; the one with the least CPU")
    parser.add_argument("--extra-python", type=Path, default=EXTRA_PYTHON)
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    paths = write_inputs(size, args.data / f"parsers-{size // 10**6}MB")
    print(f"{bench_ingest.machine()}; events of the realistic trace, {args.size}")
    print("| parser | layout | CPU-s | CPU-s/GB | wall s | peak RSS MB | load |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for candidate in CANDIDATES:
        python = python_for(candidate.module, args.extra_python)
        if python is None:
            print(f"| {candidate.name} | {candidate.layout} | skipped: no {candidate.module} | | | | |")
            continue
        path = paths[candidate.layout]
        runs = [parse_once(python, candidate, path) for _ in range(args.repeat)]
        failed = next((run for run in runs if isinstance(run, str)), None)
        if failed is None:
            cpu, wall, rss = min(runs, key=lambda run: run[0])  # type: ignore[index]
            cells = f"{cpu:.2f} | {cpu / (path.stat().st_size / 1e9):.1f} | {wall:.2f} | {rss:.0f}"
        else:
            cells = f"failed: {failed} | | |"
        print(f"| {candidate.name} | {candidate.layout} | {cells} | {os.getloadavg()[0]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
