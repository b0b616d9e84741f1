#!/usr/bin/env bash
# Record zoo variants under Nsight Systems (one process per recording: nsys captures the first cudaProfilerStart/Stop
# range), export each to SQLite, and label the bare export from its twin (record_zoo.py --label-nsys).
#
# Usage:  NSYS=/path/to/nsys [QDSTRM_IMPORTER=/path/to/QdstrmImporter] record_nsys.sh OUTDIR SLUG:MODE [SLUG:MODE ...]
set -uo pipefail
OUT=${1:?usage: NSYS=... $0 OUTDIR SLUG:MODE ...}; shift
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT/nsys"
for item in "$@"; do
    slug=${item%%:*}; mode=${item##*:}; arch=$($PY -c "import sys; sys.path.insert(0, '$HERE'); import zoo; print(next(a for a in sorted(zoo.architectures(), key=len, reverse=True) if '$slug'.startswith(a + '_')))")
    for variant in bare twin; do
        name=${slug}_${mode}_${variant}
        "$NSYS" profile -s none --cpuctxsw none -t cuda,nvtx --cuda-graph-trace=node \
            --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite true -o "$OUT/nsys/$name" \
            $PY "$HERE/record_zoo.py" --out "$OUT" --worker "$arch" --variants "$slug" --modes "$mode" \
            --profiler nsys --variant-only "$variant" >>"$OUT/nsys.log" 2>&1 || echo "!! nsys profile $name failed"
        # An nsys whose importer could not run leaves the raw .qdstrm: import it with QDSTRM_IMPORTER when given.
        if [ ! -f "$OUT/nsys/$name.nsys-rep" ] && [ -f "$OUT/nsys/$name.qdstrm" ] && [ -n "${QDSTRM_IMPORTER:-}" ]; then
            "$QDSTRM_IMPORTER" -i "$OUT/nsys/$name.qdstrm" -o "$OUT/nsys/$name.nsys-rep" >>"$OUT/nsys.log" 2>&1 \
                || echo "!! import $name failed"
        fi
        "$NSYS" export --type sqlite --force-overwrite true --output "$OUT/nsys/$name.sqlite" "$OUT/nsys/$name.nsys-rep" \
            >/dev/null 2>&1 || echo "!! export $name failed"
        rm -f "$OUT/nsys/$name.qdstrm" "$OUT/nsys/$name.nsys-rep"
    done
    $PY "$HERE/record_zoo.py" --out "$OUT" --label-nsys "${slug}_${mode}" || echo "!! label ${slug}_${mode} failed"
done
