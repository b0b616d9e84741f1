#!/bin/bash
# DuckDB's thread count against ingest time: `traceview ingest TRACE --threads N` for each N, alternated ROUNDS
# times, one /usr/bin/time line per ingest (wall s, user and sys CPU s, peak RSS kB) and the load average after
# each round. "default" is the ingest without --threads (one thread per core).
#     PYTHON=.venv/bin/python bash bench/bench_threads.sh TRACE "16 default 8" [ROUNDS]   (on the device: run from
#     outside the repo root, so that `python3 -m traceview.cli` finds the installed package)
set -u
trace=$1 counts=$2 rounds=${3:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  for n in $counts; do
    args=(); [ "$n" != default ] && args=(--threads "$n")
    rm -f "$out/run.db"
    /usr/bin/time -f "threads $n: wall %e s, user %U s, sys %S s, peak RSS %M kB" \
      "${PYTHON:-python3}" -m traceview.cli ingest "$trace" -o "$out/run.db" "${args[@]}" >/dev/null 2>"$out/err" \
      || { echo "threads $n: failed"; cat "$out/err"; continue; }
    tail -1 "$out/err"
  done
  echo "round $round: load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
