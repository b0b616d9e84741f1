"""The long fuzz run: mutate real traces, ingest each mutant, count outcomes, keep every failing input.

    python bench/fuzz.py --cases 1000                # every format: Kineto JSON, nsys SQLite and Parquet,
                                                     # databases someone hands you, command lines
    python bench/fuzz.py --cases 2000 --backend nsys --jobs 2 --seed 7
    python bench/fuzz.py --salvage-sweep             # every truncation offset of a small trace
    python bench/fuzz.py --memory                    # peak RSS on ~1 GB of skipped events, one 200 MB event
    python bench/fuzz.py --text 200                  # hostile text through every command and format

Each case is made from `--seed` and its number, so `--only N` replays case N. Cases run in `--jobs`
worker processes, each with a per-case timeout; failures (any exception other than a one-line
TraceviewError, a hang, a partial or changed database) are written to `--failures DIR` as the input
file plus case.json (mutations, seed, what went wrong; `--only N` with the same --backend and --seed replays it).
The mutators live in tests/fuzzing.py and tests/fuzzing_formats.py.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzz_runner
import fuzzing
import fuzzing_formats


def nsys_available() -> bool:
    """True when this checkout has an nsys backend to fuzz."""
    try:
        import traceview.ingest.nsys  # noqa: F401
    except ImportError:
        return False
    return True


FORMATS = ("kineto", "nsys", "parquet", "database", "cli")


@functools.cache
def base_database() -> bytes:
    """The bytes of a database ingested from the base trace: what database cases attack."""
    from traceview import api

    with tempfile.TemporaryDirectory(prefix="traceview-fuzz-base-") as tmp:
        api.ingest([fuzzing_formats.DATABASE_SEED], Path(tmp) / "base.db")
        return (Path(tmp) / "base.db").read_bytes()


def make_case(backend: str, seed: int, number: int) -> fuzzing.Case:
    """Case `number` of the run seeded `seed` (deterministic)."""
    rng = random.Random(f"{seed}:{backend}:{number}")
    makers = {
        "kineto": lambda: fuzzing.kineto_case(rng),
        "nsys": lambda: fuzzing.nsys_case(rng),
        "parquet": lambda: fuzzing_formats.parquet_case(rng),
        "database": lambda: fuzzing_formats.database_case(rng, base_database()),
        "cli": lambda: fuzzing_formats.cli_case(rng),
    }
    return makers[backend]()


def summary_line(detail: str) -> str:
    """The exception line of a traceback (the last line that is not indented), else the first line."""
    lines = [line for line in detail.strip().splitlines() if line and not line[0].isspace()]
    return (lines[-1] if lines else detail.strip())[:200]


def save_failure(
    directory: Path, backend: str, number: int, seed: int, case: fuzzing.Case, outcome: fuzz_runner.Outcome
):
    target = directory / f"{backend}-{number:06d}"
    target.mkdir(parents=True, exist_ok=True)
    if case.file_name:
        (target / case.file_name).write_bytes(case.data)
    description = {
        "backend": backend,
        "case": number,
        "seed": seed,
        "replay": f"python bench/fuzz.py --backend {backend} --seed {seed} --only {number}",
        "salvage": case.salvage,
        "existing_db": case.existing_db,
        "mutations": case.mutations,
        "seed_file": case.seed_file,
        "kind": case.kind,
        "argv": case.argv,
        "sql": case.sql,
        "outcome": outcome.kind,
        "detail": outcome.detail,
    }
    (target / "case.json").write_text(json.dumps(description, indent=2))
    return target


def run(args: argparse.Namespace) -> int:
    backends = [b for b in args.backend.split(",") if b]
    if "nsys" in backends and not nsys_available():
        print("note: traceview.ingest.nsys is missing in this checkout; fuzzing kineto only", file=sys.stderr)
        backends = [b for b in backends if b != "nsys"]
    numbers = [args.only] if args.only is not None else list(range(args.cases))
    work = collections.deque((backends[n % len(backends)], n) for n in numbers)
    counts: collections.Counter[str] = collections.Counter()
    by_backend: collections.Counter[tuple[str, str]] = collections.Counter()
    problems: collections.Counter[str] = collections.Counter()
    mutations: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    lock = threading.Lock()
    started = time.monotonic()

    def drive() -> None:
        with fuzz_runner.CaseRunner(timeout_s=args.timeout) as runner:
            while True:
                with lock:
                    if not work:
                        return
                    backend, number = work.popleft()
                try:
                    case = make_case(backend, args.seed, number)
                except Exception as error:  # a mutator bug, not a traceview one: say so and go on
                    print(f"harness error in {backend} case {number}: {error!r}", file=sys.stderr, flush=True)
                    continue
                outcome = runner.run(case)
                with lock:
                    counts[outcome.kind] += 1
                    by_backend[(backend, outcome.kind)] += 1
                    mutations.update(m.split(" ")[0] for m in case.mutations)
                    if outcome.kind == "clean_error":
                        problems[f"{backend}: {outcome.detail}"] += 1
                    if outcome.kind in ("failure", "hang"):
                        saved = save_failure(args.failures, backend, number, args.seed, case, outcome)
                        failures.append(f"{saved}: {summary_line(outcome.detail)}")
                        print(f"FAIL {backend} case {number}: {failures[-1]}", file=sys.stderr, flush=True)
                    done = sum(counts.values())
                    if args.only is None and done % 500 == 0:
                        rate = done / (time.monotonic() - started)
                        print(f"{done}/{len(numbers)} cases, {rate:.1f}/s, {dict(counts)}", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=drive) for _ in range(max(1, min(args.jobs, len(numbers))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    report = {
        "cases": sum(counts.values()),
        "ingested_ok": counts["ok"],
        "clean_errors": counts["clean_error"],
        "failures": counts["failure"],
        "hangs": counts["hang"],
        "seconds": round(elapsed, 1),
        "by_backend": {f"{b}.{k}": n for (b, k), n in sorted(by_backend.items())},
        "clean_error_problems": dict(problems.most_common(25)),
        "mutations_applied": dict(sorted(mutations.items())),
        "failure_inputs": failures,
    }
    print(json.dumps(report, indent=2))
    return 1 if counts["failure"] or counts["hang"] else 0


def salvage_sweep(args: argparse.Namespace) -> int:
    """Every truncation offset of a small synthetic trace, with --salvage (see tests/test_fuzz_salvage.py)."""
    from test_fuzz_salvage import check_salvage_at, small_trace

    data = small_trace()
    bad = []
    counts: collections.Counter[str] = collections.Counter()
    for offset in range(1, len(data) + 1):
        kind, detail = check_salvage_at(data, offset)
        counts[kind] += 1
        if kind == "failure":
            bad.append(f"offset {offset}: {detail}")
            print(f"FAIL offset {offset}: {detail}", file=sys.stderr, flush=True)
    print(json.dumps({"offsets": len(data), **counts, "failures_at": bad[:50]}, indent=2))
    return 1 if bad else 0


def memory(args: argparse.Namespace) -> int:
    """Peak RSS of `traceview ingest` on the full-size hostile traces, written by streaming into --workdir."""
    from hostile_traces import peak_rss_mb, traceview_cmd, write_kineto

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    cases = {
        "baseline (1,000 kernels)": {"launches": 1000},
        "3,000,000 python_function events": {"launches": 1000, "skipped": 3_000_000},
        "one 200 MB name": {"launches": 1000, "huge_bytes": 200_000_000, "huge_in": "name"},
        "one 200 MB args string": {"launches": 1000, "huge_bytes": 200_000_000, "huge_in": "args"},
    }
    rows = []
    for i, (what, shape) in enumerate(cases.items()):
        trace = write_kineto(work / f"case{i}.pt.trace.json", **shape)  # type: ignore[arg-type]
        db = work / f"case{i}.db"
        db.unlink(missing_ok=True)
        started = time.monotonic()
        peak, done = peak_rss_mb(traceview_cmd("ingest", trace, "-o", db))
        rows.append(
            {
                "trace": what,
                "json_mb": round(trace.stat().st_size / 1e6, 1),
                "exit": done.returncode,
                "seconds": round(time.monotonic() - started, 1),
                "peak_rss_mib": round(peak),
                "error": done.stderr.strip().splitlines()[-1] if done.returncode else "",
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        trace.unlink()
        db.unlink(missing_ok=True)
    print(json.dumps(rows, indent=2))
    return 0 if all(r["exit"] in (0, 2) for r in rows) else 1


def hostile_text(args: argparse.Namespace) -> int:
    """The property test of tests/test_hostile_property.py with --text random examples per backend."""
    import os
    import subprocess

    test = Path(__file__).resolve().parent.parent / "tests" / "test_hostile_property.py"
    env = {**os.environ, "TRACEVIEW_TEXT_EXAMPLES": str(args.text)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", str(test)]
    return subprocess.run(command, env=env, check=False).returncode


def replay(args: argparse.Namespace) -> int:
    """Run the saved failing inputs under --replay DIR again (e.g. after a fix); print each one's outcome now."""
    still = 0
    with fuzz_runner.CaseRunner(timeout_s=args.timeout) as runner:
        for saved in sorted(p.parent for p in args.replay.glob("*/case.json")):
            meta = json.loads((saved / "case.json").read_text())
            outcome = runner.run(make_case(meta["backend"], meta["seed"], meta["case"]))  # made again from its seed
            still += outcome.kind in ("failure", "hang")
            print(f"{saved.name}: {outcome.kind} {summary_line(outcome.detail)}")
    return 1 if still else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10000, help="number of cases (default 10000)")
    parser.add_argument("--backend", default=",".join(FORMATS), help=f"comma-separated: {', '.join(FORMATS)}")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run (default 0)")
    parser.add_argument("--only", type=int, help="replay just this case number")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case before it counts as a hang")
    parser.add_argument(
        "--failures", type=Path, default=Path("/tmp/traceview-fuzz-failures"), help="where failing inputs go"
    )
    parser.add_argument("--salvage-sweep", action="store_true", help="truncate a small trace at every offset")
    parser.add_argument("--memory", action="store_true", help="peak RSS on 3M skipped events and one 200 MB event")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-memory"), help="where --memory writes")
    parser.add_argument("--replay", type=Path, help="run the failing inputs saved in this folder again")
    parser.add_argument("--text", type=int, help="hostile text through every command: this many random examples")
    args = parser.parse_args()
    if args.replay:
        return replay(args)
    if args.text:
        return hostile_text(args)
    if args.memory:
        return memory(args)
    return salvage_sweep(args) if args.salvage_sweep else run(args)


if __name__ == "__main__":
    sys.exit(main())
