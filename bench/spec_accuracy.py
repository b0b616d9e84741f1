"""Speculative decoding at kernel level: traceview's steps, target layers and drafter against the twin's labels.

    python bench/accuracy.py --spec [DIR] [--only SUBSTRING] [--format markdown|json]

DIR holds `labels/NAME.json` (`NAME.nsys.json`) with [step, layer, draft_pass, count] runs and the bare traces, as
sample_traces/spec/record_spec.py writes them: the committed traces by default. Each trace is ingested into a
temporary database. A run is exact when every kernel is in its true step and true target layer (a drafter's kernel
in no layer: truth.wrong_kernels), every kernel of a layer has its true role (draft or target), and every step has
its true number of drafter passes.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import truth  # sample_traces/corpus/truth.py (on the path: bench/accuracy.py puts it there)
import zoo_accuracy  # bench/zoo_accuracy.py: the same layout of labels and traces

from traceview import api


@dataclass(frozen=True)
class SpecRow:
    name: str
    profiler: str
    exact: bool
    steps_true: int
    steps_found: int
    wrong_layer_kernels: int
    wrong_role_kernels: int
    kernels: int
    drafts_true: tuple[int, ...]
    drafts_found: tuple[int | None, ...]


Label = tuple[int | None, int | None, int | None]


def spec_labels(path: Path) -> tuple[list[Label], str]:
    """(step, target layer or the drafter's layer, drafter pass) of every kernel, and the digest of their names."""
    data = json.loads(path.read_text())
    labels: list[Label] = []
    for step, layer, draft, count in data["runs"]:
        labels += [(step, layer, draft)] * count
    return labels, data["names_sha256"]


def check_spec(labels: Path, trace: Path) -> SpecRow:
    true, digest = spec_labels(labels)
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "run.db"
        api.ingest([truth.plain(trace, Path(tmp))], database)
        with api.connect(database) as con:
            found = con.execute(
                "SELECT step, layer, role, name FROM gpu_activity WHERE kind = 'kernel' "
                "ORDER BY start_ns, correlation_id"
            ).fetchall()
            steps = con.execute("SELECT draft_passes FROM steps ORDER BY start_ns").fetchall()
            drafts_found = tuple(d for (d,) in steps)
    target = [(step, layer if draft is None else None) for step, layer, draft in true]
    wrong_layers = truth.wrong_kernels([(s, layer) for s, layer, _, _ in found], target)
    if hashlib.sha256("\n".join(r[3] for r in found).encode()).hexdigest() != digest:
        wrong_layers = max(wrong_layers, 1)  # not the kernels the labels are for
    wrong_roles = sum(
        1 for (_, layer, draft), (_, _, role, _) in zip(true, found, strict=False)
        if layer is not None and (draft is not None) != (role == "draft")
    )  # fmt: skip
    drafts_true = _true_drafts(true)
    exact = not wrong_layers and not wrong_roles and tuple(drafts_true) == tuple(d or 0 for d in drafts_found)
    name = labels.name.removesuffix(".json")
    return SpecRow(
        name=name.removesuffix(".nsys"),
        profiler="nsys" if name.endswith(".nsys") else "torch",
        exact=exact,
        steps_true=len(drafts_true),
        steps_found=len(drafts_found),
        wrong_layer_kernels=wrong_layers,
        wrong_role_kernels=wrong_roles,
        kernels=len(true),
        drafts_true=tuple(drafts_true),
        drafts_found=drafts_found,
    )


def _true_drafts(labels: list[Label]) -> list[int]:
    """Per step that holds a target layer, in order, the number of the drafter's passes."""
    passes: dict[int, set[int]] = {}
    for step, layer, draft in labels:
        if step is not None and (layer is not None or draft is not None):
            passes.setdefault(step, set())
            if draft is not None:
                passes[step].add(draft)
    return [len(passes[s]) for s in sorted(passes)]


def run_spec(root: Path, only: str, jobs: int = 2) -> list[SpecRow]:
    cases = [(labels, trace) for labels, trace in zoo_accuracy.zoo_cases(root) if only in labels.name]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(check_spec, *zip(*cases, strict=True)))


HEAD = ("run", "profiler", "exact", "steps true", "found", "wrong layer kernels", "wrong roles", "drafts/step true",
        "found")  # fmt: skip


def print_spec(rows: list[SpecRow]) -> None:
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for r in rows:
        found = " ".join("-" if d is None else str(d) for d in r.drafts_found)
        cells = (r.name, r.profiler, "yes" if r.exact else "no", str(r.steps_true), str(r.steps_found),
                 f"{r.wrong_layer_kernels} of {r.kernels}", str(r.wrong_role_kernels),
                 " ".join(map(str, r.drafts_true)), found)  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    exact = sum(r.exact for r in rows)
    print(f"\n{exact} of {len(rows)} speculative runs exact (steps, target layers, roles, drafter passes per step)")
