#!/usr/bin/env bash
# Record the truth corpus on a GPU machine (see record.py): the PyTorch profiler (Kineto) for every model, mode and
# variant in one process, and, beside it, Nsight Systems, one process per (model, mode, variant), exported to SQLite.
#
# Usage:  NSYS=/path/to/nsys sample_traces/corpus/record.sh OUTDIR
# Optional environment:
#   PYTHON         python with torch + transformers (default python3)
#   MODELS         default "llama qwen3moe deepseekv3 gptoss mixtral"
#   NSYS_MODES     modes recorded under nsys (default "eager graph")
#   DEADLINE       seconds for all recording (default 500); what is done by then is kept
set -uo pipefail

OUT=${1:?usage: NSYS=/path/to/nsys $0 OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
MODELS=${MODELS:-llama qwen3moe deepseekv3 gptoss mixtral}
NSYS_MODES=${NSYS_MODES:-eager graph}
DEADLINE=${DEADLINE:-500}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false CUBLAS_WORKSPACE_CONFIG=:4096:8
mkdir -p "$OUT/torch" "$OUT/nsys"
OUT=$(cd "$OUT" && pwd)
END=$(($(date +%s) + DEADLINE))

{
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    $PY -c 'import sys, torch, triton, transformers; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("triton", triton.__version__); print("transformers", transformers.__version__)'
    if [ -n "${NSYS:-}" ]; then "$NSYS" --version; fi
} >"$OUT/versions.txt" 2>&1

# --- Kineto: everything in one process (compiled code is reused across variants) ------------------------------
timeout $((END - $(date +%s))) $PY "$HERE/record.py" --out "$OUT/torch" --profiler torch \
    --models "$(echo $MODELS | tr ' ' ,)" >"$OUT/torch.log" 2>&1 &
TORCH_PID=$!

# --- nsys: one process per recording (only the first cudaProfilerStart/Stop range is captured) ----------------
if [ -n "${NSYS:-}" ]; then
    for mode in $NSYS_MODES; do
        for model in $MODELS; do
            for variant in bare twin; do
                left=$((END - $(date +%s) - 20))
                if [ "$left" -le 30 ]; then echo "!! no time left for $model $mode $variant"; continue; fi
                name=${model}_${mode}_${variant}
                timeout "$left" "$NSYS" profile -s none --cpuctxsw none -t cuda,nvtx --cuda-graph-trace=node \
                    --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite true \
                    -o "$OUT/nsys/$name" \
                    $PY "$HERE/record.py" --out "$OUT/nsys" --profiler nsys --models "$model" --modes "$mode" \
                    --variant "$variant" || echo "!! nsys profile $name failed"
                if [ -f "$OUT/nsys/$name.nsys-rep" ]; then
                    "$NSYS" export --type sqlite --force-overwrite true --output "$OUT/nsys/$name.sqlite" \
                        "$OUT/nsys/$name.nsys-rep" >/dev/null || echo "!! export $name failed"
                fi
                rm -f "$OUT/nsys/$name.qdstrm"
            done
        done
    done >"$OUT/nsys.log" 2>&1
fi
wait $TORCH_PID
echo "torch profiler process exit: $?" >>"$OUT/torch.log"
ls -la "$OUT/torch" "$OUT/nsys"
