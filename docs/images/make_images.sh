#!/usr/bin/env bash
# Draws the README pictures from the sample traces (and one real multi-stream trace with NCCL kernels):
#   bash docs/images/make_images.sh      (from any folder, with traceview installed)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=docs/images
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for run in eager compiled graph; do
    traceview ingest "sample_traces/$run.pt.trace.json.gz" -o "$tmp/$run.db" >/dev/null
done
traceview ingest tests/data/hta/nccl_parser_config/nccl_data.json.gz -o "$tmp/nccl.db" >/dev/null

traceview plot "$tmp/eager.db" -o "$out/timeline-eager.png"
traceview plot "$tmp/compiled.db" -o "$out/timeline-compiled-layers-2-3.png" --layers 2-3
traceview plot "$tmp/graph.db" -o "$out/timeline-graph.png"
traceview plot "$tmp/nccl.db" -o "$out/timeline-nccl.png"
traceview plot "$tmp/graph.db" -o "$out/layers-graph.png" --kind layers
traceview plot "$tmp/eager.db" "$tmp/compiled.db" -o "$out/diff-eager-compiled.png" --kind diff
