#!/usr/bin/env bash
# Record the tensor-parallel transformers traces (record_tp.py) on a machine with NPROC GPUs: the PyTorch profiler
# (one torchrun for every model, mode and variant; one Kineto file per rank), then Nsight Systems (one torchrun per
# recording under nsys, every rank's process in one report), exported to SQLite and compressed with xz.
#
# Usage:  NSYS=/path/to/nsys sample_traces/tp_hf/record_tp.sh OUTDIR
# Optional environment:
#   PYTHON      python with torch and transformers, and accelerate when NPROC > 1 (default python3)
#   NPROC       processes, one per GPU: the tensor-parallel size (default 2; 1 for a dry run)
#   DEVICE      cuda or cpu (default: cuda when nvidia-smi is there)
#   MODELS      default "llama qwen3moe"
#   MODES       modes under the PyTorch profiler (default "eager compiled graph sp asynctp")
#   NSYS_RUNS   MODEL_MODE pairs under nsys (default "llama_eager qwen3moe_eager llama_graph qwen3moe_graph llama_sp")
#   STAGES      "torch nsys" (default); name one to split the work over two commands
#   DEADLINE    seconds for all recording (default 540); what is done by then is kept
# Output: OUTDIR/torch/MODEL_MODE_VARIANT/rank-R.pt.trace.json.gz, OUTDIR/nsys/MODEL_MODE_VARIANT.sqlite.xz,
# OUTDIR/{torch,nsys}/meta.*.jsonl, OUTDIR/{torch,nsys}.log, OUTDIR/versions.txt.
set -uo pipefail

OUT=${1:?usage: NSYS=/path/to/nsys $0 OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
NPROC=${NPROC:-2}
if [ -z "${DEVICE:-}" ]; then if command -v nvidia-smi >/dev/null; then DEVICE=cuda; else DEVICE=cpu; fi; fi
MODELS=${MODELS:-llama qwen3moe}
MODES=${MODES:-eager compiled graph sp asynctp}
NSYS_RUNS=${NSYS_RUNS:-llama_eager qwen3moe_eager llama_graph qwen3moe_graph llama_sp}
STAGES=${STAGES:-torch nsys}
DEADLINE=${DEADLINE:-540}
# NVLink multicast (NVLS) stays off on these machines, in NCCL, PyTorch's symmetric memory and NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_PROGRESS_BARS=1 NCCL_DEBUG=${NCCL_DEBUG:-VERSION}
mkdir -p "$OUT/torch" "$OUT/nsys"
OUT=$(cd "$OUT" && pwd)
END=$(($(date +%s) + DEADLINE))
RUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "$HERE/record_tp.py" --device "$DEVICE"
    --weights "$OUT/weights")

{
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [ "$DEVICE" = cuda ]; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv
        nvidia-smi topo -m
    fi
    $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None); print("transformers", transformers.__version__)'
    $PY -c 'import accelerate; print("accelerate", accelerate.__version__)' 2>/dev/null || echo "accelerate: not installed (needed for NPROC > 1)"
    env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort
    if [ -n "${NSYS:-}" ]; then "$NSYS" --version; fi
    echo "NPROC=$NPROC DEVICE=$DEVICE MODELS=$MODELS MODES=$MODES NSYS_RUNS=$NSYS_RUNS STAGES=$STAGES"
} >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

left() { local s=$((END - $(date +%s))); echo $((s > 1 ? s : 1)); }

# --- PyTorch profiler (Kineto): everything in one torchrun (compiled code is reused across variants) ------------
if [[ " $STAGES " == *" torch "* ]]; then
    timeout "$(left)" "${RUN[@]}" --out "$OUT/torch" --profiler torch --models "$(echo $MODELS | tr ' ' ,)" \
        --modes "$(echo $MODES | tr ' ' ,)" >"$OUT/torch.log" 2>&1
    echo "torchrun exit: $?" >>"$OUT/torch.log"
fi

# --- nsys: one torchrun per recording (a process captures only its first cudaProfilerStart/Stop range) ---------
if [[ " $STAGES " == *" nsys "* ]] && [ -n "${NSYS:-}" ]; then
    for run in $NSYS_RUNS; do
        for variant in bare twin; do
            name=${run}_${variant}
            budget=$(($(left) - 20))
            if [ "$budget" -le 40 ]; then echo "!! no time left for $name"; continue; fi
            timeout "$budget" "$NSYS" profile -s none --cpuctxsw none -t cuda,nvtx --cuda-graph-trace=node \
                --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite true -o "$OUT/nsys/$name" \
                "${RUN[@]}" --out "$OUT/nsys" --profiler nsys --models "${run%%_*}" --modes "${run#*_}" \
                --variant "$variant" || echo "!! nsys profile $name failed"
            if [ -f "$OUT/nsys/$name.nsys-rep" ]; then
                "$NSYS" export --type sqlite --force-overwrite true --output "$OUT/nsys/$name.sqlite" \
                    "$OUT/nsys/$name.nsys-rep" >/dev/null && xz -9 -f "$OUT/nsys/$name.sqlite" \
                    || echo "!! export $name failed"
            fi
        done
    done >"$OUT/nsys.log" 2>&1
fi
rm -rf "$OUT/weights"
ls -la "$OUT" "$OUT/torch" "$OUT/nsys"
