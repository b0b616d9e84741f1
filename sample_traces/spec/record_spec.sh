#!/usr/bin/env bash
# Record speculative-decoding scenarios under Nsight Systems (one process per recording: nsys captures the first
# cudaProfilerStart/Stop range), export each to SQLite, and label the bare export from its twin.
#
# Usage:  NSYS=/path/to/nsys record_spec.sh OUTDIR SCENARIO [SCENARIO ...]
set -uo pipefail
OUT=${1:?usage: NSYS=... $0 OUTDIR SCENARIO ...}; shift
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT/nsys"
for scenario in "$@"; do
    for variant in bare twin; do
        name=${scenario}_${variant}
        "$NSYS" profile -s none --cpuctxsw none -t cuda,nvtx --cuda-graph-trace=node \
            --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite true -o "$OUT/nsys/$name" \
            $PY "$HERE/record_spec.py" --out "$OUT" --scenarios "$scenario" --profiler nsys --variant "$variant" \
            >>"$OUT/nsys.log" 2>&1 || echo "!! nsys profile $name failed"
        "$NSYS" export --type sqlite --force-overwrite true --output "$OUT/nsys/$name.sqlite" "$OUT/nsys/$name.nsys-rep" \
            >/dev/null 2>&1 || echo "!! export $name failed"
        rm -f "$OUT/nsys/$name.qdstrm" "$OUT/nsys/$name.nsys-rep"
    done
    $PY "$HERE/record_spec.py" --out "$OUT" --label "$scenario" || echo "!! label $scenario failed"
done
