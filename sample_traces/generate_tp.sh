#!/usr/bin/env bash
# Record the tensor-parallel sample traces on a machine with 2 GPUs: the PyTorch profiler (one process per
# rank, both paths), then Nsight Systems (one report per path, both ranks' processes in it), then
# import (.qdstrm -> .nsys-rep, if nsys did not) and export to SQLite.
#
# Usage:  NSYS=/path/to/nsys sample_traces/generate_tp.sh OUTDIR
# Optional environment:
#   PYTHON          python with torch (default python3)
#   STEPS, WARMUP   measured / warm-up decode steps (default 4 / 2)
#   PATHS           default "tp_default tp_overlap"
#   STEP_TIMEOUT    seconds per profiled run (default 200)
set -uo pipefail

OUT=${1:?usage: NSYS=/path/to/nsys $0 OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
STEPS=${STEPS:-4}
WARMUP=${WARMUP:-2}
PATHS=${PATHS:-tp_default tp_overlap}
STEP_TIMEOUT=${STEP_TIMEOUT:-200}
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-VERSION}
# NVLink multicast (NVLS) stays off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
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
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,pci.bus_id --format=csv
    echo "# nvidia-smi"
    nvidia-smi | head -n 4
    echo "# nvidia-smi topo -m"
    nvidia-smi topo -m
    echo "# python / torch / nccl"
    $PY - <<'EOF'
import sys, torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
for i in range(torch.cuda.device_count()):
    print("device", i, torch.cuda.get_device_name(i), "capability", torch.cuda.get_device_capability(i))
EOF
    echo "# environment"
    env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort
    echo "# nsys --version"
    if [ -n "${NSYS:-}" ]; then "$NSYS" --version; echo "nsys path: $NSYS"; fi
    echo "QdstrmImporter: ${QDSTRM_IMPORTER:-none}"
} >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

# --- 1. PyTorch profiler (Kineto): both paths, one process per rank -----------
# shellcheck disable=SC2086
timeout "$STEP_TIMEOUT" $PY "$HERE/generate_tp.py" --out "$OUT" --profiler torch --check-single \
    --paths "$(echo $PATHS | tr ' ' ,)" --steps "$STEPS" --warmup "$WARMUP" --port 29517 \
    || echo "!! torch-profiler run failed"

# --- 2. Nsight Systems: one report per path, holding both ranks' processes -----
if [ -z "${NSYS:-}" ]; then echo "no NSYS given: skipping nsys"; exit 0; fi
port=29518
for p in $PATHS; do
    rm -f "$OUT/$p.qdstrm" "$OUT/$p.nsys-rep" "$OUT/$p.sqlite"
    timeout "$STEP_TIMEOUT" "$NSYS" profile -s none --cpuctxsw none -t cuda,nvtx \
        --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite true -o "$OUT/$p" \
        $PY "$HERE/generate_tp.py" --out "$OUT" --profiler nsys --paths "$p" \
        --steps "$STEPS" --warmup "$WARMUP" --port $port \
        || echo "!! nsys profile $p failed"
    port=$((port + 1))
    if [ ! -f "$OUT/$p.nsys-rep" ] && [ -f "$OUT/$p.qdstrm" ]; then
        echo "importing $p.qdstrm with $QDSTRM_IMPORTER"
        "$QDSTRM_IMPORTER" -i "$OUT/$p.qdstrm" -o "$OUT/$p.nsys-rep" || echo "!! import $p failed"
    fi
    if [ -f "$OUT/$p.nsys-rep" ]; then
        rm -f "$OUT/$p.qdstrm"
        "$NSYS" export --type sqlite --force-overwrite true --output "$OUT/$p.sqlite" \
            "$OUT/$p.nsys-rep" || echo "!! sqlite export $p failed"
    fi
done
ls -laR "$OUT"
