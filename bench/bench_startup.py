"""Start-up of short commands: CPU seconds of `traceview --help`, `info` and `layers` on a small database (issue 18:
<= 0.2 s), each run in a fresh child process.

The database is the bundled eager sample (`sample_traces/eager.pt.trace.json.gz`) ingested once into a temp dir.
Commands run through the `traceview` script beside this interpreter (what users run). A row gives the least and
the median CPU seconds (user + system of the child, os.wait4) and the least wall seconds of --runs runs, and the
load average after them; the machine may be shared, so read the least CPU.

    python bench/bench_startup.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_ingest  # noqa: E402

SAMPLE = HERE.parent / "sample_traces" / "eager.pt.trace.json.gz"
# The console script users run (`python -m traceview.cli` runs the CLI module a second time, as __main__).
TRACEVIEW = [str(Path(sys.executable).with_name("traceview"))]
COMMANDS = (("--help",), ("info", "{db}"), ("layers", "{db}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "eager.db"
        subprocess.run(
            [*bench_ingest.TRACEVIEW, "ingest", str(SAMPLE), "-o", str(database)], check=True, capture_output=True
        )
        print(f"{bench_ingest.machine()}; database of {SAMPLE.name}")
        print("| command | least CPU-s | median CPU-s | least wall s | load |")
        print("|---|---:|---:|---:|---:|")
        for command in COMMANDS:
            argv_ = [part.format(db=database) for part in command]
            runs = [bench_ingest.measure([*TRACEVIEW, *argv_]) for _ in range(args.runs)]
            failed = next((run[3] for run in runs if run[3]), "")
            cpu = [run[1] for run in runs]
            shown = " ".join(command).replace("{db}", "RUN.db")
            cells = f"{min(cpu):.2f} | {statistics.median(cpu):.2f} | {min(run[0] for run in runs):.2f}"
            print(f"| `traceview {shown}` | {failed or cells} | {os.getloadavg()[0]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
