"""Ingest throughput and peak memory of traceview against its peers, on generated traces of several sizes.

For each size: a Kineto JSON trace (plain and .json.gz) and an nsys-like SQLite export are generated once
(bench/gen_traces.py, cached in --data) and then loaded, each load in its own child process:

    traceview ingest FILE -o NEW.db      (Kineto .json, .json.gz and nsys .sqlite; through to a committed db)
    HTA      TraceAnalysis(trace_dir=...) (holistictraceanalysis' loader; capped at --hta-max)
    nsys-ai  parquet_cache.build_cache()  (the cache nsys-ai builds from an nsys SQLite before any analysis)

Each row gives wall time (min of --repeat runs, whole process), MB/s of uncompressed JSON (of the SQLite
file for nsys), events/s, the child's peak RSS (os.wait4) and that as a multiple of the input size, and the
peer's time as a multiple of traceview's on the same file. The machine is shared and noisy: read ratios.

    python bench/bench_ingest.py --sizes 10MB,100MB,1GB
Peers live in their own virtual environments (see bench/README.md); a missing one is skipped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_traces  # noqa: E402

DEFAULT_DATA = Path(tempfile.gettempdir()) / "traceview-bench"
HTA_PYTHON = Path("/tmp/htavenv/bin/python")
NSYS_AI_PYTHON = Path("/tmp/nsysaivenv/bin/python")
TRACEVIEW = [sys.executable, "-m", "traceview.cli"]

HTA_LOAD = """
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""
NSYS_AI_BUILD = """
import sys
from nsys_ai import parquet_cache
parquet_cache.build_cache(sys.argv[1])
"""


@dataclass(frozen=True)
class Input:
    """One generated trace and what it holds."""

    kind: str  # kineto | kineto-gz | nsys
    path: Path
    json_bytes: int  # uncompressed JSON (Kineto) or file size (nsys)
    events: int


@dataclass(frozen=True)
class Result:
    tool: str
    input: Input
    wall_s: float | None
    rss_mb: float | None
    note: str = ""


# ---------------------------------------------------------------------------------------------------------
# Inputs


def inputs_for(size: int, data: Path, ranks: int, layers: int) -> list[Input]:
    """Generate (once) the three inputs of one size; cached by name in `data`."""
    data.mkdir(parents=True, exist_ok=True)
    name = f"{size // 10**6}MB"
    plain = data / f"kineto-{name}" / "rank-0.pt.trace.json"
    meta = plain.with_suffix(".meta.json")
    if not meta.exists():
        plain.parent.mkdir(parents=True, exist_ok=True)
        counts = gen_traces.write_kineto(plain, size, rank=0, world=max(ranks, 2), layers=layers)
        meta.write_text(json.dumps(counts))
    counts = json.loads(meta.read_text())
    gz = data / f"kineto-{name}-gz" / "rank-0.pt.trace.json.gz"
    if not gz.exists():
        gz.parent.mkdir(parents=True, exist_ok=True)
        _gzip_copy(plain, gz)
    sqlite = data / f"nsys-{name}.sqlite"
    sqlite_meta = sqlite.with_suffix(".meta.json")
    if not sqlite_meta.exists():
        sqlite_meta.write_text(json.dumps(gen_traces.write_nsys(sqlite, size, ranks=max(ranks, 2), layers=layers)))
    nsys_counts = json.loads(sqlite_meta.read_text())
    return [
        Input("kineto", plain, counts["bytes"], counts["events"]),
        Input("kineto-gz", gz, counts["bytes"], counts["events"]),
        Input("nsys", sqlite, sqlite.stat().st_size, nsys_counts["events"]),
    ]


def _gzip_copy(src: Path, dst: Path) -> None:
    try:
        from isal import igzip as gz_module
    except ImportError:  # pragma: no cover
        import gzip as gz_module  # type: ignore[no-redef]
    tmp = dst.with_name(dst.name + ".part")
    with open(src, "rb") as fin, gz_module.open(tmp, "wb", compresslevel=3) as fout:
        shutil.copyfileobj(fin, fout, 1 << 22)
    tmp.rename(dst)


# ---------------------------------------------------------------------------------------------------------
# Running one load in a child process


def measure(cmd: list[str], cwd: Path | None = None, timeout: float | None = None) -> tuple[float, float, str]:
    """Run `cmd`; its wall time, peak RSS in MB (the child and the children it waited for), and an error."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = None if timeout is None else start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline is not None and time.perf_counter() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            return time.perf_counter() - start, usage.ru_maxrss / 1024, f"timed out after {timeout:.0f} s"
        time.sleep(0.01)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    note = "" if proc.returncode == 0 else f"exit {proc.returncode}: {err.strip().splitlines()[-1] if err else ''}"
    return wall, usage.ru_maxrss / 1024, note


def best_of(runs: int, run_once: callable) -> tuple[float | None, float | None, str]:  # type: ignore[valid-type]
    walls, rss, note = [], 0.0, ""
    for _ in range(runs):
        wall, peak, note = run_once()
        if note:
            return wall, peak, note
        walls.append(wall)
        rss = max(rss, peak)
    return min(walls), rss, ""


def run_traceview(item: Input, repeat: int, work: Path) -> Result:
    def once() -> tuple[float, float, str]:
        out = work / "bench.db"
        for leftover in work.glob("bench.db*"):
            leftover.unlink()
        return measure([*TRACEVIEW, "ingest", str(item.path), "-o", str(out)])

    wall, rss, note = best_of(repeat, once)
    return Result("traceview", item, wall, rss, note)


def run_hta(item: Input, repeat: int, work: Path, python: Path, timeout: float) -> Result:
    trace_dir = work / "hta"
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir()
    (trace_dir / item.path.name).symlink_to(item.path)
    wall, rss, note = best_of(repeat, lambda: measure([str(python), "-c", HTA_LOAD, str(trace_dir)], timeout=timeout))
    return Result("HTA", item, wall, rss, note)


def run_nsys_ai(item: Input, repeat: int, work: Path, python: Path, timeout: float) -> Result:
    def once() -> tuple[float, float, str]:
        place = work / "nsys-ai"
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir()
        target = place / item.path.name
        os.link(item.path, target) if _same_device(item.path, place) else shutil.copy(item.path, target)
        return measure([str(python), "-c", NSYS_AI_BUILD, str(target)], timeout=timeout)

    wall, rss, note = best_of(repeat, once)
    return Result("nsys-ai", item, wall, rss, note)


def _same_device(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


# ---------------------------------------------------------------------------------------------------------
# Report


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") if Path("/proc/cpuinfo").exists() else open(os.devnull) as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()[0]
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, load {load:.1f}"


def table(results: list[Result]) -> str:
    ours = {r.input.path: r.wall_s for r in results if r.tool == "traceview" and r.wall_s and not r.note}
    rows = [
        "| input | size (MB) | events | tool | wall (s) | MB/s | events/s | peak RSS (MB) | RSS / size | x traceview |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        mb = r.input.json_bytes / 1e6
        if r.note or r.wall_s is None:
            rows.append(
                f"| {r.input.kind} | {mb:,.0f} | {r.input.events:,} | {r.tool} | – | – | – | – | – | {r.note} |"
            )
            continue
        base = ours.get(r.input.path)
        ratio = f"{r.wall_s / base:.1f}x" if base and r.tool != "traceview" else ""
        rss = r.rss_mb or 0.0
        rows.append(
            f"| {r.input.kind} | {mb:,.0f} | {r.input.events:,} | {r.tool} | {r.wall_s:.2f} | {mb / r.wall_s:,.0f} "
            f"| {r.input.events / r.wall_s:,.0f} | {rss:,.0f} | {rss / mb:.2f} | {ratio} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10MB,100MB,1GB", help="comma-separated sizes of uncompressed JSON")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="where generated traces are cached")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the fastest is kept)")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--ranks", type=int, default=2, help="ranks in the nsys export (Kineto: one file, rank 0)")
    parser.add_argument("--hta-python", type=Path, default=HTA_PYTHON)
    parser.add_argument("--hta-max", default="100MB", help="largest input given to HTA (it needs minutes above)")
    parser.add_argument("--nsys-ai-python", type=Path, default=NSYS_AI_PYTHON)
    parser.add_argument("--peer-timeout", type=float, default=600.0, help="seconds before a peer run is stopped")
    parser.add_argument("--only", default="", help="comma-separated tools to run: traceview,hta,nsys-ai")
    args = parser.parse_args(argv)
    only = {t.strip().lower() for t in args.only.split(",") if t.strip()}
    hta_max = gen_traces.parse_size(args.hta_max)
    results: list[Result] = []
    print(f"# {dt.date.today().isoformat()} — {machine()}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="traceview-bench-") as tmp:
        work = Path(tmp)
        for size in [gen_traces.parse_size(s) for s in args.sizes.split(",")]:
            for item in inputs_for(size, args.data, args.ranks, args.layers):
                if not only or "traceview" in only:
                    results.append(run_traceview(item, args.repeat, work))
                    _progress(results[-1])
                if item.kind == "kineto" and (not only or "hta" in only):
                    if not args.hta_python.exists():
                        results.append(Result("HTA", item, None, None, f"skipped: no {args.hta_python}"))
                    elif size > hta_max:
                        results.append(Result("HTA", item, None, None, f"skipped: above --hta-max {args.hta_max}"))
                    else:
                        results.append(run_hta(item, args.repeat, work, args.hta_python, args.peer_timeout))
                    _progress(results[-1])
                if item.kind == "nsys" and (not only or "nsys-ai" in only):
                    if not args.nsys_ai_python.exists():
                        results.append(Result("nsys-ai", item, None, None, f"skipped: no {args.nsys_ai_python}"))
                    else:
                        results.append(run_nsys_ai(item, args.repeat, work, args.nsys_ai_python, args.peer_timeout))
                    _progress(results[-1])
    print(f"{dt.date.today().isoformat()} — {machine()}\n")
    print(table(results))
    return 0


def _progress(result: Result) -> None:
    what = result.note or f"{result.wall_s:.2f} s, {result.rss_mb:.0f} MB"
    print(f"  {result.tool:9} {result.input.kind:9} {result.input.path.name}: {what}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
