"""Segmentation accuracy: traceview's steps and layers against the truth, on every trace we have.

    python bench/accuracy.py [--only SUBSTRING] [--format table|markdown|json]
    python bench/accuracy.py --zoo [DIR] [--hint]      (the zoo, kernel by kernel: bench/zoo_accuracy.py)
    python bench/accuracy.py --spec [DIR]              (speculative decoding: bench/spec_accuracy.py)

Traces: `sample_traces/` (our decoder, and the corpus of transformers models in `sample_traces/corpus/`),
`tests/data/` and `../shared/external/`. The truth never comes from traceview (sample_traces/corpus/truth.py,
standard library only):
- a bare corpus trace: its annotated twin (same model, inputs and kernels; layer hooks and step ranges);
- an annotated trace (a twin, our own samples, vLLM's `nn.Module: TransformerBlock_N` scopes): its annotations;
- our CUDA-graph sample: the annotated torch.compile sample it replays kernel for kernel;
- SGLang's Qwen3 decode: the model's structure (two hidden-size RMSNorms per layer, one final norm);
- other traces: the `ProfilerStep#N` ranges give the steps; their layers are unknown (`-`).

Per trace: steps true/found, layers per step true/found, the share of true layer instances whose kernel count
traceview found exactly (the i-th layer of the i-th step against the i-th found), and the methods used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "sample_traces" / "corpus"
EXTERNAL = ROOT.parent / "shared" / "external"
sys.path.insert(0, str(CORPUS))

import spec_accuracy  # noqa: E402 - bench/spec_accuracy.py
import truth  # noqa: E402 - sample_traces/corpus/truth.py
import zoo_accuracy  # noqa: E402 - bench/zoo_accuracy.py

from traceview import api  # noqa: E402

Steps = list[dict]


@dataclass(frozen=True)
class Case:
    """One trace to check: where it is, what it is, and how its truth is found (None: layers unknown)."""

    path: Path
    what: str
    mode: str
    truth: Callable[[], Steps | None] | None
    layers_known: bool = True


@dataclass(frozen=True)
class Row:
    trace: str
    what: str
    mode: str
    steps_true: int | None
    steps_found: int
    layers_true: str
    layers_found: str
    exact_pct: float | None
    methods: str
    seconds: float


def annotated(path: Path) -> Callable[[], Steps]:
    return lambda: truth.per_step(truth.kernels_of(path))


def steps_only(path: Path) -> Callable[[], Steps | None]:
    """The `ProfilerStep#N` ranges of a trace as its steps (None when it has none: its steps are unknown too)."""

    def count() -> Steps | None:
        names = {
            e["name"]
            for e in truth.kineto_events(path)
            if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
        }
        return [{"step": n, "layers": [], "outside": 0} for n in sorted(names)] or None

    return count


def cases() -> list[Case]:
    found = corpus_cases() + sample_cases() + data_cases(ROOT / "tests" / "data") + external_cases()
    seen: set[str] = set()
    unique = []
    for case in found:  # ../shared/external/hta holds the same files as tests/data/hta
        digest = hashlib.sha256(case.path.read_bytes()).hexdigest() if case.path.is_file() else str(case.path)
        if digest not in seen:
            seen.add(digest)
            unique.append(case)
    return unique


def corpus_cases() -> list[Case]:
    meta = {(r["name"], r["profiler"]): r for r in json.loads((CORPUS / "meta.json").read_text())}
    out = []
    for path in sorted((CORPUS / "torch").glob("*.gz")) + sorted((CORPUS / "nsys").glob("*.xz")):
        name = path.name.split(".")[0]
        row = meta[(name, "nsys" if path.suffix == ".xz" else "torch")]
        bare = row["variant"] == "bare"
        fn = (lambda p=path: truth.truth(p)) if bare else annotated(path)
        out.append(Case(path, f"transformers {row['model']}", f"{row['mode']} ({row['variant']})", fn))
    return out


def sample_cases() -> list[Case]:
    s = ROOT / "sample_traces"
    out = []
    for ext in (".pt.trace.json.gz", ".sqlite"):
        for mode in ("eager", "compiled"):
            out.append(
                Case(
                    s / f"{mode}{ext}", "traceview decoder (MoE)", f"{mode} (annotated)", annotated(s / f"{mode}{ext}")
                )
            )
        graph, twin = s / f"graph{ext}", s / f"compiled{ext}"
        out.append(
            Case(
                graph,
                "traceview decoder (MoE)",
                "graph replay",
                lambda g=graph, t=twin: truth.per_step(truth.transfer(truth.kernels_of(g), truth.kernels_of(t))),
            )
        )
    out.append(
        Case(
            s / "capture_graph.pt.trace.json.gz",
            "traceview decoder (MoE)",
            "graph, captured in trace",
            annotated(s / "capture_graph.pt.trace.json.gz"),
        )
    )
    for tp in ("tp_default", "tp_overlap"):
        out.append(
            Case(
                s / "tp" / tp,
                "traceview decoder TP=2 (rank 0)",
                tp,
                annotated(s / "tp" / tp / "rank-0.pt.trace.json.gz"),
            )
        )
    return out


def data_cases(root: Path) -> list[Case]:
    out = []
    for path in sorted(root.rglob("*.json.gz")) + sorted(root.rglob("*.json")):
        out.append(
            Case(
                path,
                "HTA test data" if "hta" in str(path) else "test data",
                "training",
                steps_only(path),
                layers_known=False,
            )
        )
    for path in sorted(root.rglob("*.sqlite")):
        out.append(Case(path, "nsys export", "-", None, layers_known=False))
    return out


def external_cases() -> list[Case]:
    lens = EXTERNAL / "tracelens"
    vllm = lens / "vllm_gptoss_b200_tp8_prefill_rank0.json.gz"
    sglang = lens / "sglang_qwen3_8b_decode_bs32_mi300x.json.gz"
    out = []
    if vllm.exists():
        out.append(
            Case(
                vllm,
                "vLLM gpt-oss B200 TP8",
                "eager prefill",
                lambda: truth.per_step(truth.one_step(truth.kineto_kernels(vllm))),
            )
        )
    if sglang.exists():
        out.append(Case(sglang, "SGLang Qwen3-8B MI300X", "graph decode", lambda: truth.qwen3_norm_truth(sglang)))
    return out + (data_cases(EXTERNAL) if EXTERNAL.exists() else [])


def found_steps(database: Path) -> tuple[list[list[int]], list[str]]:
    """Rank 0's steps in order, each the kernel counts of its layers in layer order; and the methods used."""
    con = api.connect(database)
    try:
        rows = con.execute(
            """SELECT s.step, list(l.kernels ORDER BY l.layer) FILTER (l.layer IS NOT NULL)
               FROM steps s LEFT JOIN layers l USING (run_id, rank, step)
               WHERE s.rank = (SELECT min(rank) FROM steps) GROUP BY s.step, s.start_ns ORDER BY s.start_ns, s.step"""
        ).fetchall()
        methods = [r[0] for r in con.execute("SELECT DISTINCT method FROM layers ORDER BY 1").fetchall()]
    finally:
        con.close()
    return [list(r[1] or []) for r in rows], methods


def exact_share(true: Steps, found: list[list[int]]) -> float | None:
    total = sum(len(s["layers"]) for s in true)
    if not total:
        return None
    exact = 0
    for i, step in enumerate(true):
        got = found[i] if i < len(found) else []
        exact += sum(1 for j, n in enumerate(step["layers"]) if j < len(got) and got[j] == n)
    return 100.0 * exact / total


def spread(counts: list[int]) -> str:
    values = sorted(set(counts))
    if not values:
        return "0"
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def shown(path: Path) -> str:
    """A trace's path as the table shows it: from the repository root (../shared for the shared material)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else "../" + str(path.relative_to(ROOT.parent))


def check(case: Case, workdir: Path) -> Row:
    began = time.perf_counter()
    database = workdir / (hashlib.sha1(str(case.path).encode()).hexdigest() + ".db")
    api.ingest([truth.plain(case.path, workdir)], database)
    found, methods = found_steps(database)
    seconds = time.perf_counter() - began
    true = case.truth() if case.truth else None
    layers_known = case.layers_known and true is not None
    return Row(
        trace=shown(case.path),
        what=case.what,
        mode=case.mode,
        steps_true=len(true) if true is not None else None,
        steps_found=len(found),
        layers_true=spread([len(s["layers"]) for s in true]) if layers_known else "-",
        layers_found=spread([len(f) for f in found]),
        exact_pct=exact_share(true, found) if layers_known else None,
        methods=", ".join(methods) or "-",
        seconds=round(seconds, 1),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="only traces whose path contains this")
    parser.add_argument("--format", choices=("table", "markdown", "json"), default="markdown")
    parser.add_argument("--zoo", nargs="?", const=ROOT / "sample_traces" / "zoo", type=Path, help="the zoo instead")
    parser.add_argument("--hint", action="store_true", help="zoo: give the true layer count, as --layers N")
    parser.add_argument("--spec", nargs="?", const=ROOT / "sample_traces" / "spec", type=Path, help="speculative runs")
    args = parser.parse_args()
    if args.spec:
        spec_rows = spec_accuracy.run_spec(args.spec, args.only)
        if args.format == "json":
            print(json.dumps([r.__dict__ for r in spec_rows], indent=1))
        else:
            spec_accuracy.print_spec(spec_rows)
        return
    if args.zoo:
        zoo_rows = zoo_accuracy.run_zoo(args.zoo, args.only, args.hint)
        if args.format == "json":
            print(json.dumps([r.__dict__ for r in zoo_rows], indent=1))
        else:
            zoo_accuracy.print_zoo(zoo_rows)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            if args.only in str(case.path):
                rows.append(check(case, Path(tmp)))
                print(f"{rows[-1].trace}: {rows[-1].steps_found} steps, {rows[-1].exact_pct}", file=sys.stderr)
    print_rows(rows, args.format)


def print_rows(rows: list[Row], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([r.__dict__ for r in rows], indent=1))
        return
    head = (
        "trace",
        "engine / model",
        "mode",
        "steps true",
        "found",
        "layers/step true",
        "found",
        "exact kernels %",
        "method",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        pct = "-" if r.exact_pct is None else f"{r.exact_pct:.1f}"
        cells = (
            r.trace,
            r.what,
            r.mode,
            "-" if r.steps_true is None else str(r.steps_true),
            str(r.steps_found),
            r.layers_true,
            r.layers_found,
            pct,
            r.methods,
        )
        print("| " + " | ".join(cells) + " |")
    known = [r for r in rows if r.exact_pct is not None]
    ok = [r for r in known if r.exact_pct >= 95 and r.steps_true == r.steps_found and r.layers_true == r.layers_found]
    print(
        f"\n{len(ok)} of {len(known)} traces with known layers: steps and layers per step exact and >= 95% of layer "
        f"instances with the true kernel count"
    )


if __name__ == "__main__":
    main()
