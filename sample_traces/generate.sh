#!/usr/bin/env bash
# Record all sample traces on a GPU machine: the PyTorch profiler (Kineto) for
# the three paths in one process, then Nsight Systems, one process per path,
# then import (.qdstrm -> .nsys-rep, if nsys did not) and export to SQLite.
#
# Usage:  NSYS=/path/to/nsys sample_traces/generate.sh OUTDIR
# Optional environment:
#   PYTHON            python with torch + triton (default python3)
#   STEPS, WARMUP     measured / warm-up decode steps (default 5 / 2)
#   PATHS             default "eager compiled graph"
#   QDSTRM_IMPORTER   default: found next to $NSYS (../*/QdstrmImporter)
#   PARQUET=1         also `nsys export --type parquetdir` (tarred) for graph
#   STEP_TIMEOUT      seconds per profiled process (default 300)
set -uo pipefail

OUT=${1:?usage: NSYS=/path/to/nsys $0 OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
PATHS=${PATHS:-eager compiled graph}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -z "${NSYS:-}" ] && command -v nsys >/dev/null; then NSYS=$(command -v nsys); fi
if [ -z "${QDSTRM_IMPORTER:-}" ] && [ -n "${NSYS:-}" ]; then
    QDSTRM_IMPORTER=$(find "$(dirname "$NSYS")/.." -name QdstrmImporter -type f 2>/dev/null | head -n 1)
fi

# --- versions ---------------------------------------------------------------
{
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# nvidia-smi --query-gpu"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    echo "# nvidia-smi"
    nvidia-smi | head -n 4
    echo "# python / torch / triton"
    $PY - <<'EOF'
import sys, torch, triton
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("triton", triton.__version__)
print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
EOF
    echo "# nsys --version"
    if [ -n "${NSYS:-}" ]; then "$NSYS" --version; echo "nsys path: $NSYS"; fi
    echo "QdstrmImporter: ${QDSTRM_IMPORTER:-none}"
} >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

# --- 1. PyTorch profiler (Kineto), all paths in one process -------------------
# shellcheck disable=SC2086
timeout "$STEP_TIMEOUT" $PY "$HERE/generate.py" --out "$OUT" --profiler torch \
    --paths "$(echo $PATHS | tr ' ' ,)" --steps "$STEPS" --warmup "$WARMUP" \
    || echo "!! torch-profiler run failed"

# --- 2. Nsight Systems, one process per path ----------------------------------
if [ -z "${NSYS:-}" ]; then echo "no NSYS given: skipping nsys"; exit 0; fi
for p in $PATHS; do
    rm -f "$OUT/$p.qdstrm" "$OUT/$p.nsys-rep" "$OUT/$p.sqlite"
    timeout "$STEP_TIMEOUT" "$NSYS" profile -s none --cpuctxsw none -t cuda,nvtx \
        --cuda-graph-trace=node --capture-range=cudaProfilerApi --capture-range-end=stop \
        --force-overwrite true -o "$OUT/$p" \
        $PY "$HERE/generate.py" --out "$OUT" --profiler nsys --paths "$p" \
        --steps "$STEPS" --warmup "$WARMUP" \
        || echo "!! nsys profile $p failed"
    if [ ! -f "$OUT/$p.nsys-rep" ] && [ -f "$OUT/$p.qdstrm" ]; then
        echo "importing $p.qdstrm with $QDSTRM_IMPORTER"
        "$QDSTRM_IMPORTER" -i "$OUT/$p.qdstrm" -o "$OUT/$p.nsys-rep" || echo "!! import $p failed"
    fi
    if [ -f "$OUT/$p.nsys-rep" ]; then
        rm -f "$OUT/$p.qdstrm"
        "$NSYS" export --type sqlite --force-overwrite true --output "$OUT/$p.sqlite" \
            "$OUT/$p.nsys-rep" || echo "!! sqlite export $p failed"
        if [ "${PARQUET:-0}" = 1 ] && [ "$p" = graph ]; then
            "$NSYS" export --type parquetdir --force-overwrite true \
                --output "$OUT/$p.parquet" "$OUT/$p.nsys-rep" \
                && tar -C "$OUT" -czf "$OUT/$p.parquet.tar.gz" "$p.parquet" \
                && rm -rf "$OUT/$p.parquet" || echo "!! parquet export $p failed"
        fi
    fi
done
ls -la "$OUT"
