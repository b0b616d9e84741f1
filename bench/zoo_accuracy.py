"""The zoo at kernel level: traceview's layer of every kernel against the twin's labels (sample_traces/zoo).

    python bench/accuracy.py --zoo [DIR] [--hint] [--only SUBSTRING] [--format markdown|json]

DIR holds `labels/NAME.json` (and `NAME.nsys.json`) and the bare traces `torch/NAME_bare.pt.trace.json[.xz|.gz]`,
`nsys/NAME_bare.sqlite.xz`: the committed subset by default, or a whole recording of record_zoo.py. Each trace is
ingested into a temporary database; a run is exact when every kernel is in its true layer and step
(truth.wrong_kernels). `--hint` gives segmentation the true layer count per forward pass, as `--layers N` would.
Per run: exact or the wrong kernels, layers per step true and found, the method, and whether a warning fired; the
summary gives the share exact per mode and how many misses and exact runs the warnings flag.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import truth  # sample_traces/corpus/truth.py (on the path: bench/accuracy.py puts it there)

from traceview import api
from traceview.segment import SegmentOptions


@dataclass(frozen=True)
class ZooRow:
    name: str
    profiler: str
    mode: str
    exact: bool
    wrong: int
    kernels: int
    layers_true: str
    layers_found: str
    method: str
    warnings: tuple[str, ...]
    drafter: bool = False  # a speculative drafter was found (none of the zoo has one)
    labelled: bool = True  # the trace's kernel names are those the labels were made for (their digest matches)


def zoo_cases(root: Path) -> list[tuple[Path, Path]]:
    """(labels, bare trace) of every labelled run whose trace is in `root`."""
    out = []
    for labels in sorted((root / "labels").glob("*.json")):
        name = labels.name.removesuffix(".json")
        if name.endswith(".nsys"):
            traces = [root / "nsys" / f"{name.removesuffix('.nsys')}_bare.sqlite{ext}" for ext in (".xz", "")]
        else:
            traces = [root / "torch" / f"{name}_bare.pt.trace.json{ext}" for ext in (".xz", ".gz", "")]
        found = [t for t in traces if t.exists()]
        if found:
            out.append((labels, found[0]))
    return out


def check_zoo(labels: Path, trace: Path, hint: bool) -> ZooRow:
    true, digest = truth.zoo_labels(labels)
    layers = _true_layers(true)
    with tempfile.TemporaryDirectory() as tmp:
        source = truth.plain(trace, Path(tmp))
        database = Path(tmp) / "run.db"
        summary = api.ingest([source], database, segment_options=SegmentOptions(layers=max(layers) if hint else None))
        found, names, methods, drafter = _found(database)
    wrong = truth.wrong_kernels(found, true)
    labelled = hashlib.sha256("\n".join(names).encode()).hexdigest() == digest
    if not labelled:
        wrong = max(wrong, 1)  # not the kernels the labels are for
    name = labels.name.removesuffix(".json").removesuffix(".nsys")
    return ZooRow(
        name=name,
        profiler="nsys" if labels.name.endswith(".nsys.json") else "torch",
        mode=name.rsplit("_", 1)[1],
        exact=wrong == 0,
        wrong=wrong,
        kernels=len(true),
        layers_true=_spread(layers),
        layers_found=_spread(_true_layers(found)),
        method=", ".join(methods) or "-",
        warnings=tuple(summary.warnings),
        drafter=drafter,
        labelled=labelled,
    )


def _found(database: Path) -> tuple[list[tuple[int | None, int | None]], list[str], list[str], bool]:
    """Per kernel (step, layer), the kernel names, the layer methods, and whether a step holds a drafter."""
    with api.connect(database) as con:
        rows = con.execute(
            "SELECT step, layer, name FROM gpu_activity WHERE kind = 'kernel' ORDER BY start_ns, correlation_id"
        ).fetchall()
        methods = [m for (m,) in con.execute("SELECT DISTINCT method FROM layers ORDER BY 1").fetchall()]
        drafter = bool(con.execute("SELECT count(*) FROM steps WHERE draft_passes > 0").fetchall()[0][0])
    return [(s, layer) for s, layer, _ in rows], [n for _, _, n in rows], methods, drafter


def _true_layers(labels: list[tuple[int | None, int | None]]) -> list[int]:
    per_step: dict[int, set[int]] = {}
    for step, layer in labels:
        if step is not None and layer is not None:
            per_step.setdefault(step, set()).add(layer)
    return [len(v) for v in per_step.values()] or [0]


def _spread(counts: list[int]) -> str:
    low, high = min(counts), max(counts)
    return str(low) if low == high else f"{low}-{high}"


def run_zoo(root: Path, only: str, hint: bool, jobs: int = 2) -> list[ZooRow]:
    cases = [(labels, trace) for labels, trace in zoo_cases(root) if only in labels.name]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(check_zoo, *zip(*cases, strict=True), [hint] * len(cases)))


def print_zoo(rows: list[ZooRow]) -> None:
    print("| run | profiler | mode | exact | wrong kernels | layers/step true | found | method | warned |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = (r.name, r.profiler, r.mode, _verdict(r), f"{r.wrong} of {r.kernels}",
                 r.layers_true, r.layers_found, r.method, "yes" if r.warnings else "")  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    print()
    print(summary(rows))


def _verdict(row: ZooRow) -> str:
    return "yes" if row.exact else "no" if row.labelled else "labels differ"


def summary(rows: list[ZooRow]) -> str:
    """Share exact per mode, and what the warnings flag, over the runs whose trace is the one their labels were made
    for (a recording whose kernels came out otherwise - another cuBLAS or Inductor kernel - cannot be judged)."""
    unlabelled = [r.name for r in rows if not r.labelled]
    rows = [r for r in rows if r.labelled]
    variants = {r.name.rsplit("_", 1)[0] for r in rows}  # the name without its mode
    modes = Counter(r.mode for r in rows)
    exact = Counter(r.mode for r in rows if r.exact)
    per_mode = ", ".join(f"{m} {exact[m]}/{n}" for m, n in sorted(modes.items()))
    misses = [r for r in rows if not r.exact]
    good = [r for r in rows if r.exact]
    return (
        f"{sum(exact.values())} of {len(rows)} runs exact kernel by kernel ({len(variants)} architecture variants; "
        f"{per_mode}). Warnings flag {sum(bool(r.warnings) for r in misses)} of {len(misses)} misses and "
        f"{sum(bool(r.warnings) for r in good)} of {len(good)} exact runs. A speculative drafter was found in "
        f"{sum(r.drafter for r in rows)} runs."
        + (
            f" Not judged ({len(unlabelled)}: kernels other than their labels'): {', '.join(unlabelled)}."
            if unlabelled
            else ""
        )
    )
