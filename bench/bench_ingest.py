"""Ingest throughput and peak memory of traceview against its peers, on generated traces of several sizes.

For each size, the inputs are made once (cached in --data) and then loaded, each load in its own child process.
Inputs (--inputs):
    real        a real H200 trace (sample_traces/eager) repeated with shifted times and ids to the size, in
                PyTorch's own layout (bench/replicate_trace.py); real-gz the same gzipped
    real-lines  the same events one per line;  real-long  durations with 16-17 significant digits
    real-ranks  --rank-files copies of `real` of the size each, as the per-rank files of one run (rank-N.pt.trace.json),
                ingested with --jobs one worker per rank
    generated   the modelled decode trace of bench/gen_traces.py (and generated-gz)
    nsys        an nsys-like SQLite export (bench/gen_traces.py)
Tools:

    traceview ingest FILE -o NEW.db      (Kineto .json, .json.gz and nsys .sqlite; through to a committed db)
    HTA      TraceAnalysis(trace_dir=...) (holistictraceanalysis' loader; capped at --hta-max)
    nsys-ai  parquet_cache.build_cache()  (the cache nsys-ai builds from an nsys SQLite before any analysis)

Each row gives wall time and CPU seconds (user + system of the child and its threads, os.wait4) of the
fastest of --repeat runs, MB/s of uncompressed JSON (of the SQLite file for nsys), CPU-s per GB, the child's
peak RSS and that as a multiple of the input size, the peer's wall and CPU time as multiples of traceview's on
the same file, and the load average when the row was measured. The machine may be shared: read CPU seconds
and same-run ratios. The table printed on stdout is the one the README shows.

`--cores 1,2,4,8,16` runs each traceview load once per count, on that many cores (the child's CPU affinity, which
traceview's DuckDB threads follow), and the peers on the largest; the `cores` column says which. The loads run with
the current directory's `traceview` package (`python -m traceview.cli`): run the script from another tree to time
that tree's code in the same minute.

    python bench/bench_ingest.py --sizes 100MB,1GB
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
import replicate_trace  # noqa: E402

DEFAULT_DATA = Path(tempfile.gettempdir()) / "traceview-bench"
HTA_PYTHON = HERE.parent / ".venv-hta" / "bin" / "python"  # bench/README.md: how to make the peers' venvs
NSYS_AI_PYTHON = HERE.parent / ".venv-nsysai" / "bin" / "python"
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

    kind: str  # one of INPUTS
    path: Path
    json_bytes: int  # uncompressed JSON (Kineto) or file size (nsys)
    events: int
    files: int = 1


@dataclass(frozen=True)
class Result:
    tool: str
    input: Input
    wall_s: float | None
    rss_mb: float | None
    note: str = ""
    cpu_s: float | None = None
    load: float = 0.0
    cores: int = 0


INPUTS = ("real", "real-gz", "real-lines", "real-long", "real-ranks", "generated", "generated-gz", "nsys")


# ---------------------------------------------------------------------------------------------------------
# Inputs


def inputs_for(
    size: int, data: Path, ranks: int, layers: int, kinds: tuple[str, ...], rank_files: int = 8
) -> list[Input]:
    """Make (once) the inputs of one size; cached by name in `data`."""
    data.mkdir(parents=True, exist_ok=True)
    name = f"{size // 10**6}MB"
    made = []
    for kind in kinds:
        if kind == "real-ranks":
            made.append(
                _rank_files(
                    _real_input("real", size, data / f"real-{name}"), data / f"ranks-{rank_files}x{name}", rank_files
                )
            )
        elif kind.startswith("real"):
            made.append(_real_input(kind, size, data / f"{kind.removesuffix('-gz')}-{name}"))
        elif kind.startswith("generated"):
            made.append(_generated_input(kind, size, data / f"kineto-{name}", ranks, layers))
        else:
            sqlite = data / f"nsys-{name}.sqlite"
            meta = sqlite.with_suffix(".meta.json")
            if not meta.exists():
                meta.write_text(json.dumps(gen_traces.write_nsys(sqlite, size, ranks=max(ranks, 2), layers=layers)))
            made.append(Input(kind, sqlite, sqlite.stat().st_size, json.loads(meta.read_text())["events"]))
    return made


def _real_input(kind: str, size: int, folder: Path) -> Input:
    """The sample trace replicated to `size` (replicate_trace.py), plain; `-gz`: gzipped from the plain one."""
    plain = folder / "rank-0.pt.trace.json"
    meta = plain.with_suffix(".meta.json")
    if not meta.exists():
        folder.mkdir(parents=True, exist_ok=True)
        layout = "lines" if kind == "real-lines" else "pytorch"
        counts = replicate_trace.write(replicate_trace.SAMPLE, plain, size, layout, kind == "real-long")
        meta.write_text(json.dumps(counts))
    counts = json.loads(meta.read_text())
    path = plain if not kind.endswith("-gz") else _gzipped(plain, folder.with_name(folder.name + "-gz"))
    return Input(kind, path, counts["bytes"], counts["events"])


def _rank_files(one: Input, folder: Path, count: int) -> Input:
    """`count` copies of the input `one` as the rank files of one run (copies: a link would be the same file)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(count):
        target = folder / f"rank-{rank}.pt.trace.json"
        if not target.exists():
            shutil.copyfile(one.path, folder / "copy.part")
            (folder / "copy.part").rename(target)
    return Input("real-ranks", folder, one.json_bytes * count, one.events * count, count)


def _generated_input(kind: str, size: int, folder: Path, ranks: int, layers: int) -> Input:
    plain = folder / "rank-0.pt.trace.json"
    meta = plain.with_suffix(".meta.json")
    if not meta.exists():
        folder.mkdir(parents=True, exist_ok=True)
        counts = gen_traces.write_kineto(plain, size, rank=0, world=max(ranks, 2), layers=layers)
        meta.write_text(json.dumps(counts))
    counts = json.loads(meta.read_text())
    path = plain if not kind.endswith("-gz") else _gzipped(plain, folder.with_name(folder.name + "-gz"))
    return Input(kind, path, counts["bytes"], counts["events"])


def _gzipped(plain: Path, folder: Path) -> Path:
    gz = folder / (plain.name + ".gz")
    if not gz.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _gzip_copy(plain, gz)
    return gz


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


Measured = tuple[float, float, float, str]  # wall s, CPU s, peak RSS MB, error


def measure(cmd: list[str], cwd: Path | None = None, timeout: float | None = None, cores: int = 0) -> Measured:
    """Run `cmd` (on the first `cores` cores this process may use; 0: all); its wall time, CPU time, peak RSS in MB
    (the largest of the child and the children it waited for), an error."""
    start = time.perf_counter()
    allowed = sorted(os.sched_getaffinity(0))[:cores] if cores else None
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=(lambda: os.sched_setaffinity(0, allowed)) if allowed else None,
    )
    deadline = None if timeout is None else start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline is not None and time.perf_counter() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            cpu = usage.ru_utime + usage.ru_stime
            return time.perf_counter() - start, cpu, usage.ru_maxrss / 1024, f"timed out after {timeout:.0f} s"
        time.sleep(0.01)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    note = "" if proc.returncode == 0 else f"exit {proc.returncode}: {err.strip().splitlines()[-1] if err else ''}"
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, note


def best_of(tool: str, item: Input, runs: int, run_once: callable, cores: int = 0) -> Result:  # type: ignore[valid-type]
    """The run with the least CPU time of `runs` (its wall time and the load average then), the largest RSS."""
    best: tuple[float, float, float] | None = None
    rss = 0.0
    for _ in range(runs):
        wall, cpu, peak, note = run_once()
        load = os.getloadavg()[0]
        if note:
            return Result(tool, item, wall, peak, note, cpu, load, cores)
        rss = max(rss, peak)
        if best is None or cpu < best[1]:
            best = (wall, cpu, load)
    assert best is not None
    return Result(tool, item, best[0], rss, "", best[1], best[2], cores)


def run_traceview(item: Input, repeat: int, work: Path, cores: int = 0) -> Result:
    jobs = ["--jobs", str(item.files)] if item.files > 1 else []

    def once() -> Measured:
        out = work / "bench.db"
        for leftover in work.glob("bench.db*"):
            leftover.unlink()
        return measure([*TRACEVIEW, "ingest", str(item.path), "-o", str(out), *jobs], cores=cores)

    return best_of("traceview", item, repeat, once, cores)


def run_hta(item: Input, repeat: int, work: Path, python: Path, timeout: float, cores: int = 0) -> Result:
    trace_dir = work / "hta"
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir()
    (trace_dir / item.path.name).symlink_to(item.path)
    cmd = [str(python), "-c", HTA_LOAD, str(trace_dir)]
    return best_of("HTA", item, repeat, lambda: measure(cmd, timeout=timeout, cores=cores), cores)


def run_nsys_ai(item: Input, repeat: int, work: Path, python: Path, timeout: float, cores: int = 0) -> Result:
    def once() -> Measured:
        place = work / "nsys-ai"
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir()
        target = place / item.path.name
        os.link(item.path, target) if _same_device(item.path, place) else shutil.copy(item.path, target)
        return measure([str(python), "-c", NSYS_AI_BUILD, str(target)], timeout=timeout, cores=cores)

    return best_of("nsys-ai", item, repeat, once, cores)


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
    ours = {(r.input.path, r.cores): r for r in results if r.tool == "traceview" and r.wall_s and not r.note}
    rows = [
        "| input | MB | events | tool | cores | wall (s) | CPU (s) | MB/s | CPU-s/GB | peak RSS (MB) | RSS / size "
        "| x traceview (wall / CPU) | load |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        mb = r.input.json_bytes / 1e6
        head = f"| {r.input.kind} | {mb:,.0f} | {r.input.events:,} | {r.tool} | {r.cores or os.cpu_count()}"
        if r.note or r.wall_s is None or r.cpu_s is None:
            rows.append(f"{head} | – | – | – | – | – | – | {r.note} | {r.load:.1f} |")
            continue
        base = ours.get((r.input.path, r.cores))
        ratio = ""
        if base and base.wall_s and base.cpu_s and r.tool != "traceview":
            ratio = f"{r.wall_s / base.wall_s:.1f}x / {r.cpu_s / base.cpu_s:.1f}x"
        rss = r.rss_mb or 0.0
        rows.append(
            f"{head} | {r.wall_s:.2f} | {r.cpu_s:.2f} | {mb / r.wall_s:,.0f} | {r.cpu_s / mb * 1000:.1f} "
            f"| {rss:,.0f} | {rss / mb:.2f} | {ratio} | {r.load:.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100MB,1GB", help="comma-separated sizes of uncompressed JSON")
    parser.add_argument(
        "--inputs", default="real,real-gz,real-lines,real-long,nsys", help="comma-separated: " + ", ".join(INPUTS)
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="where generated traces are cached")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the fastest is kept)")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--ranks", type=int, default=2, help="ranks in the nsys export (Kineto: one file, rank 0)")
    parser.add_argument("--hta-python", type=Path, default=HTA_PYTHON)
    parser.add_argument(
        "--peer-repeat", type=int, default=1, help="runs per peer measurement (HTA takes minutes at 1GB)"
    )
    parser.add_argument("--hta-max", default="1GB", help="largest input given to HTA (about 8 minutes at 1GB)")
    parser.add_argument("--nsys-ai-python", type=Path, default=NSYS_AI_PYTHON)
    parser.add_argument("--peer-timeout", type=float, default=1200.0, help="seconds before a peer run is stopped")
    parser.add_argument("--only", default="", help="comma-separated tools to run: traceview,hta,nsys-ai")
    parser.add_argument("--cores", default="", help="comma-separated core counts to run traceview on (peers: the last)")
    parser.add_argument("--rank-files", type=int, default=8, help="files of the real-ranks input (each of the size)")
    args = parser.parse_args(argv)
    sweep = [int(c) for c in args.cores.split(",") if c.strip()] or [0]
    only = {t.strip().lower() for t in args.only.split(",") if t.strip()}
    kinds = tuple(k.strip() for k in args.inputs.split(",") if k.strip())
    if unknown := set(kinds) - set(INPUTS):
        parser.error(f"unknown --inputs {', '.join(sorted(unknown))}")
    hta_max = gen_traces.parse_size(args.hta_max)
    results: list[Result] = []
    print(f"# {dt.date.today().isoformat()} — {machine()}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="traceview-bench-") as tmp:
        work = Path(tmp)
        for size in [gen_traces.parse_size(s) for s in args.sizes.split(",")]:
            for item in inputs_for(size, args.data, args.ranks, args.layers, kinds, args.rank_files):
                for cores in sweep if not only or "traceview" in only else []:
                    results.append(run_traceview(item, args.repeat, work, cores))
                    _progress(results[-1])
                if item.kind == "real" and (not only or "hta" in only):
                    if not args.hta_python.exists():
                        results.append(Result("HTA", item, None, None, f"skipped: no {args.hta_python}"))
                    elif size > hta_max:
                        results.append(Result("HTA", item, None, None, f"skipped: above --hta-max {args.hta_max}"))
                    else:
                        results.append(
                            run_hta(item, args.peer_repeat, work, args.hta_python, args.peer_timeout, sweep[-1])
                        )
                    _progress(results[-1])
                if item.kind == "nsys" and (not only or "nsys-ai" in only):
                    if not args.nsys_ai_python.exists():
                        results.append(Result("nsys-ai", item, None, None, f"skipped: no {args.nsys_ai_python}"))
                    else:
                        results.append(
                            run_nsys_ai(item, args.peer_repeat, work, args.nsys_ai_python, args.peer_timeout, sweep[-1])
                        )
                    _progress(results[-1])
    print(f"{dt.datetime.now().isoformat(timespec='minutes')} — {machine()}\n")
    print(table(results))
    return 0


def _progress(result: Result) -> None:
    what = result.note or f"{result.wall_s:.2f} s, {result.cpu_s:.2f} CPU-s, {result.rss_mb:.0f} MB"
    where = f"{result.input.path.name} on {result.cores or os.cpu_count()} cores"
    print(f"  {result.tool:9} {result.input.kind:10} {where}: {what}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
